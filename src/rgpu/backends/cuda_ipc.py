"""Inter-process sharing on the real driver: the CudaBackend mixin (requests are checked in rgpu.dispatch.ipc).

Each session is a worker process of its own, so the driver's IPC handles work between them as between any two
processes of the machine; the payload a registry record keeps is the driver's 64-byte handle. Through cffi: the
handles are structures passed by value."""

from __future__ import annotations

import cffi
from cuda.bindings import driver as cu

from rgpu.backends.cuda_common import check_code, driver, handle

_ffi = cffi.FFI()
_ffi.cdef("""
    typedef struct { char reserved[64]; } CUipcMemHandle;
    typedef struct { char reserved[64]; } CUipcEventHandle;
    int cuIpcGetMemHandle(CUipcMemHandle *handle, unsigned long long dptr);
    int cuIpcOpenMemHandle_v2(unsigned long long *dptr, CUipcMemHandle handle, unsigned int flags);
    int cuIpcCloseMemHandle(unsigned long long dptr);
    int cuIpcGetEventHandle(CUipcEventHandle *handle, uintptr_t event);
    int cuIpcOpenEventHandle(uintptr_t *event, CUipcEventHandle handle);
    int cuMemGetAddressRange_v2(unsigned long long *base, size_t *size, unsigned long long dptr);
""")


def _handle(kind: str, payload: bytes):
    h = _ffi.new(f"{kind} *")
    _ffi.memmove(h.reserved, payload, min(len(payload), 64))
    return h


class CudaIpc:
    """Mixed into CudaBackend."""

    def ipc_export_memory(self, ctx, ptr: int, place) -> bytes:
        self._use(ctx)
        h = _ffi.new("CUipcMemHandle *")
        check_code(driver(_ffi).cuIpcGetMemHandle(h, ptr))
        return bytes(_ffi.buffer(h.reserved))

    def ipc_withdraw_memory(self, ctx, ptr: int) -> None:
        pass  # (the driver's handle stops opening when the memory is freed)

    def ipc_open_memory(self, ctx, payload: bytes, flags: int) -> tuple[int, int]:
        self._use(ctx)
        lib = driver(_ffi)
        ptr, base, size = _ffi.new("unsigned long long *"), _ffi.new("unsigned long long *"), _ffi.new("size_t *")
        check_code(lib.cuIpcOpenMemHandle_v2(ptr, _handle("CUipcMemHandle", payload)[0], flags))
        try:
            check_code(lib.cuMemGetAddressRange_v2(base, size, ptr[0]))
        except BaseException:
            lib.cuIpcCloseMemHandle(ptr[0])
            raise
        return int(ptr[0]), int(size[0])

    def ipc_close_memory(self, ctx, ptr: int) -> None:
        self._use(ctx)
        check_code(driver(_ffi).cuIpcCloseMemHandle(ptr))

    def ipc_export_event(self, ctx, event) -> bytes:
        self._use(ctx)
        h = _ffi.new("CUipcEventHandle *")
        check_code(driver(_ffi).cuIpcGetEventHandle(h, handle(event)))
        return bytes(_ffi.buffer(h.reserved))

    def ipc_open_event(self, ctx, payload: bytes):
        self._use(ctx)
        event = _ffi.new("uintptr_t *")
        check_code(driver(_ffi).cuIpcOpenEventHandle(event, _handle("CUipcEventHandle", payload)[0]))
        return cu.CUevent(int(event[0]))
