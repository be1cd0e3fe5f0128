"""cuSOLVER dense: handles, buffer-size queries and executions (rgpu.protocol.solver_wire decodes them).

An execution's workspace is checked against what the server's own library asks for with the same arguments,
so a workspace shorter than the routine will use is refused rather than overrun, whatever size the client
claims (cusolverDnSgetrf, for one, takes no size at all)."""

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


@handles(ops.SOLVER_RUN)
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
    s.backend.solver_run(ctx.obj, entry.obj, strm, solve)
