"""cuSOLVER dense: handles, buffer-size queries and executions (rgpu.protocol.solver_wire decodes them).

An execution's workspace is checked against what the server's own library asks for with the same arguments,
so a workspace shorter than the routine will use is refused rather than overrun, whatever size the client
claims (cusolverDnSgetrf, for one, takes no size at all).

Batches given as arrays of device pointers (potrfBatched, potrsBatched) are read once the stream has reached the
call and every matrix they name is checked, as for cublasGemmBatchedEx (rgpu.dispatch.blas_batched, whose note
on arrays rewritten in between applies here too); on a capturing stream only the arrays themselves are checked
and the work reads them when it runs."""

from __future__ import annotations

from rgpu.dispatch import library_calls
from rgpu.dispatch.registry import handles
from rgpu.errors import CudaError, Status
from rgpu.protocol import ops, solver_wire
from rgpu.session.handles import Kind
from rgpu.session.state import Session


@handles(ops.SOLVER_CREATE)
def _create(s: Session, args, bulk):
    return library_calls.create(s, Kind.SOLVER, s.backend.solver_create)


@handles(ops.SOLVER_DESTROY, blocking=True)
def _destroy(s: Session, args, bulk):
    library_calls.destroy(s, args.handle, Kind.SOLVER, s.backend.solver_destroy)


@handles(ops.SOLVER_BUFFER_SIZE, blocking=True)
def _buffer_size(s: Session, args, bulk):
    ctx, entry = s.object(args.handle, Kind.SOLVER)
    return s.backend.solver_buffer_size(ctx.obj, entry.obj, solver_wire.Solve.from_request(args))


@handles(ops.SOLVER_RUN, blocking=True)  # blocking: pointer arrays are read where the stream reaches the call
def _run(s: Session, args, bulk):
    ctx, entry, strm = library_calls.on_stream(s, args.handle, Kind.SOLVER, args.stream)
    solve = solver_wire.Solve.from_request(args)
    required = 0
    if solve.function not in solver_wire.NO_WORKSPACE:
        status, required, _ = s.backend.solver_buffer_size(ctx.obj, entry.obj, solve)
        if status:
            raise CudaError(Status.INVALID_VALUE, f"{solve.function.name}: the workspace query failed ({status})")
    for ptr, nbytes in solve.ranges(required):
        s.memory.check(ptr, nbytes)
    arrays = None
    if solve.function in solver_wire.POINTER_ARRAYS and not s.backend.stream_is_capturing(ctx.obj, strm):
        arrays = tuple(library_calls.read_pointers(s, ctx, strm, p, solve.batch) if p else ()
                       for p in (solve.a, solve.b if solve.function == solver_wire.Function.POTRS_BATCHED else 0))
        for ptr, nbytes in solve.array_ranges(*arrays):
            s.memory.check(ptr, nbytes)
    s.backend.solver_run(ctx.obj, entry.obj, strm, solve, arrays)
