"""cuBLAS Level 1 (S, D): vectors checked over the span their increments give, device-mode scalars and results
checked too. A reduction in host pointer mode answers with its result, so it waits for its stream."""

from __future__ import annotations

from rgpu.dispatch.registry import handles
from rgpu.errors import CudaError, Status
from rgpu.protocol import blas_wire, ops
from rgpu.session.handles import Kind
from rgpu.session.state import Session


def _prepare(s: Session, args, *, host_result: bool):
    ctx, entry = s.object(args.handle, Kind.BLAS)
    call = blas_wire.Level1.from_request(args)
    if host_result != (call.reduction and call.pointer_mode != blas_wire.POINTER_MODE_DEVICE):
        raise CudaError(Status.INVALID_VALUE, f"{call.name} in this pointer mode goes by "
                                              f"{'BLAS_LEVEL1' if host_result else 'BLAS_LEVEL1_RESULT'}")
    for ptr, nbytes in call.ranges():
        s.memory.check(ptr, nbytes)
    stream_ctx, strm = s.stream(args.stream)
    if stream_ctx is not ctx:
        raise CudaError(Status.INVALID_HANDLE, "cuBLAS handle and stream belong to different contexts")
    return ctx, entry, strm, call


@handles(ops.BLAS_LEVEL1)
def _level1(s: Session, args, bulk):
    ctx, entry, strm, call = _prepare(s, args, host_result=False)
    s.backend.blas_level1(ctx.obj, entry.obj, strm, call)


@handles(ops.BLAS_LEVEL1_RESULT, blocking=True)
def _level1_result(s: Session, args, bulk):
    ctx, entry, strm, call = _prepare(s, args, host_result=True)
    return (s.backend.blas_level1(ctx.obj, entry.obj, strm, call).ljust(16, b"\0"),)
