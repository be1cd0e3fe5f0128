"""cuSPARSE's generic API: handles, buffer-size queries and executions (rgpu.protocol.sparse_wire decodes them).

As for cuSOLVER, an execution's external buffer must be at least what the server's own library asks for with
the same operands, and every operand range must lie in the session's memory."""

from __future__ import annotations

from rgpu.dispatch import library_calls
from rgpu.dispatch.registry import handles
from rgpu.errors import CudaError, Status
from rgpu.protocol import ops, sparse_wire
from rgpu.session.handles import Kind
from rgpu.session.state import Session


@handles(ops.SPARSE_CREATE)
def _create(s: Session, args, bulk):
    return library_calls.create(s, Kind.SPARSE, s.backend.sparse_create)


@handles(ops.SPARSE_DESTROY, blocking=True)
def _destroy(s: Session, args, bulk):
    library_calls.destroy(s, args.handle, Kind.SPARSE, s.backend.sparse_destroy)


@handles(ops.SPARSE_BUFFER_SIZE, blocking=True)
def _buffer_size(s: Session, args, bulk):
    ctx, entry = s.object(args.handle, Kind.SPARSE)
    op = sparse_wire.SparseOp.from_request(args)
    if op.function == sparse_wire.Function.XCOO2CSR:
        raise CudaError(Status.INVALID_VALUE, "coo2csr has no buffer")
    return s.backend.sparse_buffer_size(ctx.obj, entry.obj, op)


@handles(ops.SPARSE_RUN)
def _run(s: Session, args, bulk):
    ctx, entry, strm = library_calls.on_stream(s, args.handle, Kind.SPARSE, args.stream)
    op = sparse_wire.SparseOp.from_request(args)
    required = 0
    if op.function != sparse_wire.Function.XCOO2CSR:
        status, required = s.backend.sparse_buffer_size(ctx.obj, entry.obj, op)
        if status:
            raise CudaError(Status.INVALID_VALUE, f"{op.function.name}: the buffer query failed ({status})")
    for ptr, nbytes in op.ranges(required):
        s.memory.check(ptr, nbytes)
    s.backend.sparse_run(ctx.obj, entry.obj, strm, op)


@handles(ops.SPARSE_SPGEMM_CREATE)
def _spgemm_create(s: Session, args, bulk):
    return library_calls.create(s, Kind.SPARSE_SPGEMM, s.backend.spgemm_create)


@handles(ops.SPARSE_SPGEMM_DESTROY, blocking=True)
def _spgemm_destroy(s: Session, args, bulk):
    library_calls.destroy(s, args.descriptor, Kind.SPARSE_SPGEMM, s.backend.spgemm_destroy)


@handles(ops.SPARSE_SPGEMM, blocking=True)
def _spgemm(s: Session, args, bulk):
    """A phase without a buffer is the size query; with one (and always for the copy) it runs, once A, B, the
    buffer (as large as the library needs) and, for the copy, C's arrays for its non-zeros are the session's."""
    ctx, entry, strm = library_calls.on_stream(s, args.handle, Kind.SPARSE, args.stream)
    desc_ctx, desc = s.object(args.descriptor, Kind.SPARSE_SPGEMM)
    if desc_ctx is not ctx:
        raise CudaError(Status.INVALID_HANDLE, "SpGEMM descriptor and cuSPARSE handle of different contexts")
    g = sparse_wire.SpGemm.from_request(args)
    status, required, c_nnz = s.backend.spgemm_need(ctx.obj, entry.obj, desc.obj, g)
    if status or (not g.buffer and g.phase != sparse_wire.Phase.COPY):
        return (status, required, c_nnz)
    for ptr, nbytes in g.ranges(required, c_nnz):
        s.memory.check(ptr, nbytes)
    status, c_nnz = s.backend.spgemm_run(ctx.obj, entry.obj, strm, desc.obj, g)
    return (status, required, c_nnz)
