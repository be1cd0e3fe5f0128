"""cuBLAS Level 2/3 routines (BLAS_ROUTINE): every matrix and vector checked over the span its dimensions and
leading dimension or increment give, device-mode scalars and the handle's workspace too, before cuBLAS runs."""

from __future__ import annotations

from rgpu.dispatch.registry import handles
from rgpu.errors import CudaError, Status
from rgpu.protocol import blas_routines, ops
from rgpu.session.handles import Kind
from rgpu.session.state import Session


@handles(ops.BLAS_ROUTINE)
def _routine(s: Session, args, bulk):
    ctx, entry = s.object(args.handle, Kind.BLAS)
    routine = blas_routines.Routine.from_request(args)
    for ptr, nbytes in routine.ranges():
        s.memory.check(ptr, nbytes)
    stream_ctx, strm = s.stream(args.stream)
    if stream_ctx is not ctx:
        raise CudaError(Status.INVALID_HANDLE, "cuBLAS handle and stream belong to different contexts")
    if routine.operand_ranges():  # else BLAS returns at once
        s.backend.blas_routine(ctx.obj, entry.obj, strm, routine)
