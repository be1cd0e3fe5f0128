"""What the cuda backend and its mixins (cuda_vmm, cuda_pools, cuda_occupancy) share: turning cuda-bindings'
(CUresult, *values) into values or CudaError, and the NULL stream. cuda.py builds CudaBackend from the mixins, so
this module sits below all of them."""

from __future__ import annotations

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
