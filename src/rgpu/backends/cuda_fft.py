"""cuFFT on the GPU, called through cffi (ABI mode: no headers needed on the server).

The library: $RGPU_CUFFT names it; otherwise the nvidia-cufft wheel on sys.path (nvidia/cu13/lib, as PyTorch
installs it), then the loader's own search for libcufft.so.12, then CUDA 12's (nvidia/cufft/lib of
nvidia-cufft-cu12, libcufft.so.11: the functions used here are the same). Plans are made with auto-allocation
off: the work area is always the client's memory, range-checked like every other operand, and set before each
execution -- as is the stream, so one plan serves whatever stream each execution names. A plan of a cufftType
is made with the legacy API (cufftMakePlanMany64), any other with cufftXtMakePlanMany, and each execution runs
the exec function the program called.
"""

from __future__ import annotations

import cffi

from rgpu.backends.cuda_common import stream as _stream
from rgpu.backends.nvlibs import LazyLibrary
from rgpu.errors import CudaError, Status
from rgpu.protocol import fft_wire

_ffi = cffi.FFI()
_ffi.cdef("""
    int cufftCreate(int *plan);
    int cufftDestroy(int plan);
    int cufftSetAutoAllocation(int plan, int autoAllocate);
    int cufftSetStream(int plan, void *stream);
    int cufftSetWorkArea(int plan, void *workArea);
    int cufftMakePlanMany64(int plan, int rank, long long *n, long long *inembed, long long istride, long long idist,
        long long *onembed, long long ostride, long long odist, int type, long long batch, size_t *workSize);
    int cufftGetSizeMany64(int plan, int rank, long long *n, long long *inembed, long long istride, long long idist,
        long long *onembed, long long ostride, long long odist, int type, long long batch, size_t *workSize);
    int cufftXtMakePlanMany(int plan, int rank, long long *n, long long *inembed, long long istride, long long idist,
        int inputtype, long long *onembed, long long ostride, long long odist, int outputtype, long long batch,
        size_t *workSize, int executiontype);
    int cufftXtGetSizeMany(int plan, int rank, long long *n, long long *inembed, long long istride, long long idist,
        int inputtype, long long *onembed, long long ostride, long long odist, int outputtype, long long batch,
        size_t *workSize, int executiontype);
    int cufftExecC2C(int plan, void *idata, void *odata, int direction);
    int cufftExecZ2Z(int plan, void *idata, void *odata, int direction);
    int cufftExecR2C(int plan, void *idata, void *odata);
    int cufftExecD2Z(int plan, void *idata, void *odata);
    int cufftExecC2R(int plan, void *idata, void *odata);
    int cufftExecZ2D(int plan, void *idata, void *odata);
    int cufftXtExec(int plan, void *input, void *output, int direction);
""")

# cufftResult -> the CUresult a failed deferred execution reports.
_STATUS = {1: Status.INVALID_HANDLE, 2: Status.OUT_OF_MEMORY, 3: Status.INVALID_VALUE, 4: Status.INVALID_VALUE,
           8: Status.INVALID_VALUE, 16: Status.NOT_SUPPORTED}
_EXEC = {fft_wire.C2C: "cufftExecC2C", fft_wire.Z2Z: "cufftExecZ2Z", fft_wire.R2C: "cufftExecR2C",
         fft_wire.D2Z: "cufftExecD2Z", fft_wire.C2R: "cufftExecC2R", fft_wire.Z2D: "cufftExecZ2D"}
library = LazyLibrary(_ffi, "RGPU_CUFFT", ("cu13", "libcufft.so.12"), ("cufft", "libcufft.so.11"))


def check(status: int, what: str) -> None:
    if status:
        raise CudaError(_STATUS.get(status, Status.LAUNCH_FAILED), f"{what}: cuFFT status {status}")


def _ptr(value: int):
    return _ffi.cast("void *", value)


def _dims(values):
    return _ffi.new("long long[]", list(values)) if values is not None else _ffi.NULL


def _describe(lib, handle: int, plan: fft_wire.Plan, legacy: str, xt: str) -> tuple[int, int]:
    """(work size, cuFFT status) of `legacy` (for a plan made with a cufftType) or `xt` on the plan."""
    size = _ffi.new("size_t *")
    layout = (plan.rank, _dims(plan.n), _dims(plan.inembed), plan.istride, plan.idist)
    out = (_dims(plan.onembed), plan.ostride, plan.odist)
    if plan.plan_type:
        status = getattr(lib, legacy)(handle, *layout, *out, plan.plan_type, plan.batch, size)
    else:
        status = getattr(lib, xt)(handle, *layout, plan.input_type, *out, plan.output_type, plan.batch, size,
                                  plan.exec_type)
    return int(size[0]), status


def _create(lib) -> int:
    out = _ffi.new("int *")
    check(lib.cufftCreate(out), "cufftCreate")
    return out[0]


def make(plan: fft_wire.Plan):
    """(plan handle, work size, 0), or (None, 0, the status cuFFT refused the plan with)."""
    lib = library()
    handle = _create(lib)
    status = lib.cufftSetAutoAllocation(handle, 0)
    work = 0
    if not status:
        work, status = _describe(lib, handle, plan, "cufftMakePlanMany64", "cufftXtMakePlanMany")
    if status:
        lib.cufftDestroy(handle)
        return None, 0, status
    return handle, work, 0


def estimate(plan: fft_wire.Plan) -> tuple[int, int]:
    lib = library()
    handle = _create(lib)
    try:
        return _describe(lib, handle, plan, "cufftGetSizeMany64", "cufftXtGetSizeMany")
    finally:
        lib.cufftDestroy(handle)


def execute(handle: int, stream: int, kind: int, input_ptr: int, output_ptr: int, work: int, direction: int) -> None:
    lib = library()
    check(lib.cufftSetStream(handle, _ptr(stream)), "cufftSetStream")
    check(lib.cufftSetWorkArea(handle, _ptr(work)), "cufftSetWorkArea")
    if kind == fft_wire.XT_EXEC:
        check(lib.cufftXtExec(handle, _ptr(input_ptr), _ptr(output_ptr), direction), "cufftXtExec")
    elif kind in (fft_wire.C2C, fft_wire.Z2Z):
        check(getattr(lib, _EXEC[kind])(handle, _ptr(input_ptr), _ptr(output_ptr), direction), _EXEC[kind])
    else:
        check(getattr(lib, _EXEC[kind])(handle, _ptr(input_ptr), _ptr(output_ptr)), _EXEC[kind])


def destroy(handle: int) -> None:
    check(library().cufftDestroy(handle), "cufftDestroy")


class CudaFft:
    """Mixed into CudaBackend (which provides `_use`). Plans belong to the context current when they are made."""

    def fft_plan(self, ctx, plan):
        self._use(ctx)
        return make(plan)

    def fft_estimate(self, ctx, plan):
        self._use(ctx)
        return estimate(plan)

    def fft_exec(self, ctx, obj, stream, kind, input_ptr, output_ptr, work, direction) -> None:
        self._use(ctx)
        execute(obj, int(_stream(stream)), kind, input_ptr, output_ptr, work, direction)

    def fft_destroy(self, ctx, obj) -> None:
        self._use(ctx)
        destroy(obj)
