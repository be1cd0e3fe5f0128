"""What the cuda backend and its mixins (cuda_vmm, cuda_pools, cuda_occupancy) share: turning cuda-bindings'
(CUresult, *values) into values or CudaError, and the NULL stream. cuda.py builds CudaBackend from the mixins, so
this module sits below all of them."""

from __future__ import annotations

import cffi

from rgpu.backends.base import BackendUnavailable
from rgpu.errors import CudaError

try:
    from cuda.bindings import driver as cu
except ImportError as e:  # pragma: no cover - depends on the install
    raise BackendUnavailable(f"cuda-bindings is not installed ({e}); pip install 'rgpu[cuda]'") from e

_SUCCESS = cu.CUresult.CUDA_SUCCESS


def check(result):
    """cuda-bindings returns (CUresult, *values); raise on failure, else return the value(s)."""
    err = result[0]
    if err != _SUCCESS:
        _, name = cu.cuGetErrorName(err)
        _, text = cu.cuGetErrorString(err)
        raise CudaError(int(err), f"{name.decode() if name else err}: {text.decode() if text else ''}")
    if len(result) == 1:
        return None
    return result[1] if len(result) == 2 else result[1:]


def access_descriptors(descriptors) -> list:
    """(location type, id, flags) records as the driver's CUmemAccessDesc (cuMemSetAccess, cuMemPoolSetAccess)."""
    out = []
    for ltype, lid, flags in descriptors:
        d = cu.CUmemAccessDesc()
        d.location.type = cu.CUmemLocationType(ltype)
        d.location.id = lid
        d.flags = cu.CUmemAccess_flags(flags)
        out.append(d)
    return out


def stream(s):
    return cu.CUstream(0) if s is None else s


_drivers: dict[int, object] = {}


def driver(ffi):
    """libcuda.so.1 (the copy cuda-bindings loaded) opened through `ffi`, once per FFI: each module calls
    the few driver functions of its hot path through its own cdefs, where cuda-bindings' argument conversion
    would cost more than the call."""
    lib = _drivers.get(id(ffi))
    if lib is None:
        lib = _drivers[id(ffi)] = ffi.dlopen("libcuda.so.1")
    return lib


# The calls on a session's per-operation path (synchronizes, small copies, records, graph launches), through cffi:
# cuda-bindings builds a result tuple and converts every argument, which costs more than these calls themselves.
# Handles travel as uintptr_t, which the x86-64 and AArch64 ABIs pass exactly like pointers.
_hot_ffi = cffi.FFI()
_hot_ffi.cdef("""
    int cuCtxSetCurrent(uintptr_t ctx);
    int cuStreamSynchronize(uintptr_t stream);
    int cuEventRecord(uintptr_t event, uintptr_t stream);
    int cuStreamWaitEvent(uintptr_t stream, uintptr_t event, unsigned flags);
    int cuGraphLaunch(uintptr_t exec, uintptr_t stream);
    int cuMemcpyDtoHAsync_v2(uintptr_t dst, unsigned long long src, size_t n, uintptr_t stream);
    int cuMemcpyDtoH_v2(uintptr_t dst, unsigned long long src, size_t n);
    int cuMemcpyDtoDAsync_v2(unsigned long long dst, unsigned long long src, size_t n, uintptr_t stream);
    int cuMemsetD8Async(unsigned long long dst, unsigned char value, size_t n, uintptr_t stream);
    int cuMemsetD32Async(unsigned long long dst, unsigned int value, size_t n, uintptr_t stream);
""")


def hot():
    """The driver's per-operation calls (see _hot_ffi); each returns the CUresult as an int."""
    return driver(_hot_ffi)


def check_code(code: int) -> None:
    """Raise CudaError, named as check() names it, for a nonzero CUresult from hot()."""
    if code:
        check((cu.CUresult(code),))


def handle(obj) -> int:
    """A cuda-bindings handle (stream, event, context, graph exec, device pointer) as the integer the driver
    takes; None is the NULL stream."""
    return 0 if obj is None else int(obj)
