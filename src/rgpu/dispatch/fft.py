"""cuFFT plans and executions. A plan is made once, with its description (rgpu.protocol.fft_wire); the server
keeps that description beside the backend's plan, so every execution's input, output and work area are checked
against the session's memory over the extents the description gives -- whatever the client says at execution
time. A plan that cuFFT (or the fake) refuses is an answer: its cuFFT status goes back in the reply.

Plans belong to the context current when they were made and go with it.
"""

from __future__ import annotations

import attrs

from rgpu.dispatch.registry import handles
from rgpu.errors import CudaError, Status
from rgpu.protocol import fft_wire, ops
from rgpu.session.handles import Kind
from rgpu.session.state import Session

# Plans one session may hold (PyTorch caches up to 4096 per device). Past it, making one is CUFFT_ALLOC_FAILED.
MAX_PLANS = 8192


@attrs.frozen(slots=True)
class PlanInfo:
    plan: fft_wire.Plan
    work_size: int


class FftState:
    """Registered on a session's first plan, so that a context's teardown destroys its plans."""

    def release_context(self, s: Session, ctx: int) -> None:
        for handle in s.handles.owned_by(ctx=ctx, kind=Kind.FFT_PLAN):
            entry = s.remove_handle(handle)
            try:
                s.backend.fft_destroy(s.context(ctx).obj, entry.obj)
            except CudaError as e:
                s.log.debug("fft teardown: destroying a plan failed (%s)", e)


def _refused(s: Session, what: str, status: int, why: str) -> int:
    s.log.info("%s refused with cuFFT status %d: %s", what, status, why)
    return status


def _make(s: Session, args, backend_call):
    """(plan description, backend result) or (None, cuFFT status) for an FFT_PLAN / FFT_ESTIMATE request."""
    try:
        plan = fft_wire.Plan.from_request(args)
    except fft_wire.Refused as e:
        return None, _refused(s, "cuFFT plan", e.status, str(e))
    return plan, backend_call(s.context().obj, plan)


@handles(ops.FFT_PLAN, blocking=True)
def _plan(s: Session, args, bulk):
    if len(s.handles.owned_by(kind=Kind.FFT_PLAN)) >= MAX_PLANS:
        return (0, 0, _refused(s, "cuFFT plan", fft_wire.FftStatus.ALLOC_FAILED,
                               f"the session already holds {MAX_PLANS} plans"))
    plan, made = _make(s, args, s.backend.fft_plan)
    if plan is None:
        return (0, 0, made)
    obj, work_size, status = made
    if status:
        return (0, 0, _refused(s, "cuFFT plan", status, f"{plan.kind} of sizes {plan.n}, batch {plan.batch}"))
    s.extensions.setdefault("fft", FftState())
    return (s.handles.add(Kind.FFT_PLAN, obj, ctx=s.current_ctx, info=PlanInfo(plan, work_size)), work_size, 0)


@handles(ops.FFT_ESTIMATE, blocking=True)
def _estimate(s: Session, args, bulk):
    plan, estimated = _make(s, args, s.backend.fft_estimate)
    return (0, estimated) if plan is None else estimated


@handles(ops.FFT_EXEC)
def _exec(s: Session, args, bulk):
    ctx, entry = s.object(args.plan, Kind.FFT_PLAN)
    info: PlanInfo = entry.info
    try:
        info.plan.check_exec(args.kind, args.direction)
    except fft_wire.Refused as e:
        raise CudaError(Status.INVALID_VALUE, f"cuFFT execution refused ({e.status.name}): {e}") from None
    for ptr, nbytes in info.plan.ranges(args.input, args.output):
        s.memory.check(ptr, nbytes)
    if info.work_size:
        if not args.work:
            raise CudaError(Status.INVALID_VALUE, f"the plan needs a work area of {info.work_size} bytes and has none")
        s.memory.check(args.work, info.work_size)
    strm = None
    if args.stream:
        stream_ctx, strm = s.stream(args.stream)
        if stream_ctx is not ctx:
            raise CudaError(Status.INVALID_HANDLE, "cuFFT plan and stream belong to different contexts")
    s.backend.fft_exec(ctx.obj, entry.obj, strm, args.kind, args.input, args.output, args.work, args.direction)


@handles(ops.FFT_DESTROY, blocking=True)
def _destroy(s: Session, args, bulk):
    ctx, entry = s.object(args.plan, Kind.FFT_PLAN)
    s.remove_handle(args.plan, Kind.FFT_PLAN)
    s.backend.fft_destroy(ctx.obj, entry.obj)
