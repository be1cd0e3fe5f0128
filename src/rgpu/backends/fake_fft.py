"""cuFFT for the fake backend, in numpy: cuFFT's conventions (forward is exp(-2 pi i jk/n), the inverse is not
normalized, a real transform's complex side holds n_last // 2 + 1 elements), operands gathered from and scattered
to emulated device memory by the layouts rgpu.protocol.fft_wire computes (the same ones the server checks),
computed in double precision and stored in each side's type.

Its work area is real: the gathered input is staged there as the execution type's complex numbers, so a plan
needs as much work area as its transforms have elements -- which also bounds what one execution makes the
server compute by memory the session itself allocated."""

from __future__ import annotations

import numpy as np

from rgpu.protocol import fft_wire
from rgpu.protocol.fft_wire import FftStatus, Layout, Plan

_REAL = {2: np.float16, 4: np.float32, 8: np.float64}


def work_size(plan: Plan) -> int:
    return plan.batch * int(np.prod(plan.n)) * 2 * plan.precision


def refusal(plan: Plan) -> int:
    """The cuFFT status for a plan the fake does not make, or 0. Half precision: powers of two only, as cuFFT's;
    bfloat16 (which numpy has no type for) not at all."""
    if plan.component == "bf16" or (plan.precision == 2 and any(d & (d - 1) for d in plan.n)):
        return FftStatus.NOT_SUPPORTED
    return 0


def _offsets(layout: Layout) -> np.ndarray:
    """Element offsets of the side's elements, shaped (batch, *dims)."""
    shape = (layout.batch, *layout.dims)
    out = np.zeros(shape, dtype=np.int64)
    for axis, (size, pitch) in enumerate(zip(shape, layout.pitches())):
        index = [1] * len(shape)
        index[axis] = size
        out += (np.arange(size, dtype=np.int64) * pitch).reshape(index)
    return out


def _components(view, ptr: int, layout: Layout, data_type: int) -> np.ndarray:
    """The side's memory as real components (complex numbers are two of them)."""
    is_complex, component, _ = fft_wire.DATA_TYPES[data_type]
    width = 2 if is_complex else 1
    return view(ptr, layout.extent() * width * component).view(_REAL[component]), width


def _gather(view, ptr: int, layout: Layout, data_type: int) -> np.ndarray:
    flat, width = _components(view, ptr, layout, data_type)
    at = _offsets(layout) * width
    if width == 1:
        return flat[at].astype(np.float64)
    return flat[at].astype(np.float64) + 1j * flat[at + 1].astype(np.float64)


def _scatter(view, ptr: int, layout: Layout, data_type: int, values: np.ndarray) -> None:
    flat, width = _components(view, ptr, layout, data_type)
    at = _offsets(layout) * width
    if width == 1:
        flat[at] = values.real
    else:
        flat[at], flat[at + 1] = values.real, values.imag


def _stage(view, work: int, plan: Plan, x: np.ndarray) -> None:
    """The gathered input, as the execution type's complex numbers, at the start of the work area."""
    staged = np.stack([x.real, np.imag(x)], axis=-1).astype(_REAL[plan.precision]).ravel()
    view(work, work_size(plan))[: staged.nbytes] = staged.view(np.uint8)


def execute(view, plan: Plan, input_ptr: int, output_ptr: int, work: int, direction: int) -> None:
    """One execution of `plan` (its kind and direction already checked by the server)."""
    layout_in, layout_out = plan.layouts(input_ptr == output_ptr)
    x = _gather(view, input_ptr, layout_in, plan.input_type)
    _stage(view, work, plan, x)
    axes = tuple(range(1, plan.rank + 1))
    if plan.kind == "R2C":
        y = np.fft.rfftn(x, axes=axes)
    elif plan.kind == "C2R":
        y = np.fft.irfftn(x, s=plan.n, axes=axes, norm="forward")
    elif direction == fft_wire.FORWARD:
        y = np.fft.fftn(x, axes=axes)
    else:
        y = np.fft.ifftn(x, axes=axes, norm="forward")
    _scatter(view, output_ptr, layout_out, plan.output_type, y)


class FakeFft:
    """Mixed into FakeBackend (which provides `_blas_view`, its view of library operands). The backend's plan is
    the checked description itself."""

    def fft_plan(self, ctx, plan: Plan):
        ctx.check()
        status = refusal(plan)
        return (None, 0, status) if status else (plan, work_size(plan), 0)

    def fft_estimate(self, ctx, plan: Plan):
        ctx.check()
        status = refusal(plan)
        return (0, status) if status else (work_size(plan), 0)

    def fft_exec(self, ctx, obj: Plan, stream, kind: int, input_ptr: int, output_ptr: int, work: int,
                 direction: int) -> None:
        ctx.check()
        execute(self._blas_view, obj, input_ptr, output_ptr, work, direction)

    def fft_destroy(self, ctx, obj) -> None:
        pass
