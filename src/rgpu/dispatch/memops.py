"""Stream memory operations (protocol 1.8): cuStreamWaitValue32/64, cuStreamWriteValue32/64 (STREAM_MEM_OP) and
cuStreamBatchMemOp (STREAM_BATCH_MEM_OP), deferred like launches.

Every operation of a call is checked before any is queued: well-formed (rgpu.protocol.memops: a known operation
and flags, its address aligned to its width, its value within its width) and, where it names memory, its bytes
inside memory this session owns -- so no wait reads, and no write changes, another session's memory. The program's
host memory is on the client's machine: the C stand-ins refuse it before anything is sent.
"""

from __future__ import annotations

from rgpu.dispatch.registry import handles
from rgpu.errors import CudaError, Status
from rgpu.protocol import memops, ops
from rgpu.session.state import Session


def _queue(s: Session, stream: int, operations: list[memops.MemOp], batch: bool) -> None:
    for op in operations:
        if op.width:
            s.memory.check(op.address, op.width)
    ctx, strm = s.stream(stream)
    s.backend.stream_mem_ops(ctx.obj, strm, operations, batch)


@handles(ops.STREAM_MEM_OP)
def _stream_mem_op(s: Session, args, bulk):
    if len(bulk):
        raise CudaError(Status.INVALID_VALUE, f"{len(bulk)} bytes of bulk with one stream memory operation")
    _queue(s, args.stream, [memops.single(args.operation, args.flags, args.address, args.value)], False)


@handles(ops.STREAM_BATCH_MEM_OP)
def _stream_batch_mem_op(s: Session, args, bulk):
    _queue(s, args.stream, memops.batch(args.count, args.flags, bulk), True)
