"""Small host-to-device copies through page-locked slots (the cuda backend's MEMCPY_HTOD_ASYNC).

A copy's bytes arrive in the session's receive buffer, which is pageable and reused for the next frame at once.
From pageable memory the driver may still be reading when cuMemcpyHtoDAsync returns ("might be synchronous",
its API synchronization notes), so such a copy has to be followed by a stream synchronize -- which also waits
for every kernel queued before it. Copied first into a page-locked slot, the copy is truly asynchronous; the
slot's event says when the GPU has read it, and is waited for only when the ring comes round to that slot again.
llama.cpp copies six small inputs per generated token; each cost the server a stream synchronize."""

from __future__ import annotations

import cffi

from rgpu.backends.cuda_common import driver
from rgpu.errors import CudaError, Status

SLOT_BYTES = 64 << 10  # copies up to this size go through the ring; larger ones are not worth a second memcpy
SLOTS = 32

_ffi = cffi.FFI()
_ffi.cdef("""
    int cuMemcpyHtoDAsync_v2(unsigned long long dst, const void *src, size_t n, uintptr_t stream);
    int cuEventCreate(uintptr_t *event, unsigned flags);
    int cuEventDestroy_v2(uintptr_t event);
    int cuEventRecord(uintptr_t event, uintptr_t stream);
    int cuEventSynchronize(uintptr_t event);
    int cuStreamIsCapturing(uintptr_t stream, int *status);
    int cuStreamSynchronize(uintptr_t stream);
    int cuMemHostAlloc(void **p, size_t size, unsigned flags);
    int cuMemFreeHost(void *p);
""")
_EVENT_DISABLE_TIMING = 2
_STREAM_CAPTURE_STATUS_NONE = 0


def _lib():
    return driver(_ffi)


def _check(code: int, what: str) -> None:
    if code:
        raise CudaError(code, what)


class CopyRing:
    """SLOTS page-locked slots of SLOT_BYTES in one context, used in turn. Made and used with that context
    current; one thread at a time (a session's calls run one by one)."""

    def __init__(self) -> None:
        lib = _lib()
        p = _ffi.new("void **")
        _check(lib.cuMemHostAlloc(p, SLOT_BYTES * SLOTS, 0), "cuMemHostAlloc (copy ring)")
        self._lib = lib
        self._base = int(_ffi.cast("uintptr_t", p[0]))
        self._slots = [_ffi.cast("char *", self._base + i * SLOT_BYTES) for i in range(SLOTS)]
        self._events: list[int] = []
        self._pending = [False] * SLOTS  # a copy from the slot was queued and not yet seen read
        self._next = 0
        self._capturing = _ffi.new("int *")  # cuStreamIsCapturing's answer, made once: copy() is a hot path
        event = _ffi.new("uintptr_t *")
        try:
            for _ in range(SLOTS):
                _check(lib.cuEventCreate(event, _EVENT_DISABLE_TIMING), "cuEventCreate (copy ring)")
                self._events.append(int(event[0]))
        except CudaError:
            self.close()
            raise

    def copy(self, dst: int, data, stream: int, capture_possible: bool = True) -> None:
        """cuMemcpyHtoDAsync(dst, data, stream) from a slot; len(data) <= SLOT_BYTES (stream 0: the NULL stream).
        `capture_possible` False (no capture begun in this process) skips asking whether the stream captures."""
        lib = self._lib
        if capture_possible:
            _check(lib.cuStreamIsCapturing(stream, self._capturing), "cuStreamIsCapturing")
            if self._capturing[0] != _STREAM_CAPTURE_STATUS_NONE:
                # A captured copy would read the slot whenever the graph replays: not the program's bytes.
                raise CudaError(Status.STREAM_CAPTURE_UNSUPPORTED,
                                "a host-to-device copy cannot be captured through rgpu")
        i = self._next
        self._next = (i + 1) % SLOTS
        event = self._events[i]
        if self._pending[i]:
            _check(lib.cuEventSynchronize(event), "cuEventSynchronize (copy ring)")
            self._pending[i] = False
        n = len(data)
        slot = self._slots[i]
        _ffi.memmove(slot, data, n)
        _check(lib.cuMemcpyHtoDAsync_v2(dst, slot, n, stream), "cuMemcpyHtoDAsync")
        code = lib.cuEventRecord(event, stream)
        if code:  # without its event the slot's reuse cannot be timed: wait for the copy here instead
            lib.cuStreamSynchronize(stream)
            raise CudaError(code, "cuEventRecord (copy ring)")
        self._pending[i] = True

    def close(self) -> None:
        """Frees the slots once the GPU has read them (the context still current)."""
        lib = self._lib
        for event, pending in zip(self._events, self._pending):
            if pending:
                lib.cuEventSynchronize(event)
            lib.cuEventDestroy_v2(event)
        self._events = []
        if self._base:
            lib.cuMemFreeHost(_ffi.cast("void *", self._base))
            self._base = 0
