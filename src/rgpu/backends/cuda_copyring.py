"""Small host-to-device copies through page-locked slots (the cuda backend's MEMCPY_HTOD_ASYNC).

A copy's bytes arrive in the session's receive buffer, which is pageable and reused for the next frame at once.
From pageable memory the driver may still be reading when cuMemcpyHtoDAsync returns ("might be synchronous",
its API synchronization notes), so such a copy has to be followed by a stream synchronize -- which also waits
for every kernel queued before it. Copied first into a page-locked slot, the copy is truly asynchronous; the
slot's event says when the GPU has read it, and is waited for only when the ring comes round to that slot again.
llama.cpp copies six small inputs per generated token; each cost the server a stream synchronize.

The ring's state and its one copy routine live in the fast lane (native/src/lane/ring.c), which runs most of
these copies by itself; this class makes and frees a ring, and copies through it for the Python path."""

from __future__ import annotations

import logging

import cffi

from rgpu.backends import lane, runs_fill
from rgpu.backends.cuda_common import driver
from rgpu.errors import CudaError, Status

SLOT_BYTES = lane.RING_SLOT_BYTES  # copies up to this size go through the ring in one slot
SLOTS = 16
# The fill kernel writes coded copies from this size on (lane.h, fill_min): it saves the worker's decoding and the
# GPU's copy of the decoded bytes, which for llama.cpp's 1 MiB of V row indices a prompt step is ~20 us of CPU and a
# 1 MiB copy; for its 64-128 KiB masks decoding takes 2-4 us and the copy little, which a launch does not beat.
FILL_MIN_BYTES = 256 << 10
assert SLOTS >= 2 * lane.SEALED_COPY_SLOTS  # (else the C stand-ins' sealed 1 MiB records take the slower path)

_ffi = cffi.FFI()
_ffi.cdef("""
    int cuEventCreate(uintptr_t *event, unsigned flags);
    int cuEventDestroy_v2(uintptr_t event);
    int cuEventSynchronize(uintptr_t event);
    int cuStreamIsCapturing(uintptr_t stream, int *status);
    int cuMemHostAlloc(void **p, size_t size, unsigned flags);
    int cuMemFreeHost(void *p);
    int cuModuleLoadData(uintptr_t *module, const void *image);
    int cuModuleGetFunction(uintptr_t *function, uintptr_t module, const char *name);
    int cuModuleUnload(uintptr_t module);
    int cuFuncGetAttribute(int *value, int attribute, uintptr_t function);
""")
_FUNC_MAX_THREADS_PER_BLOCK = 0
log = logging.getLogger("rgpu.cuda")
_fill_refused: list[int] = []  # the driver's answer when it would not load the fill kernel (logged once)
_EVENT_DISABLE_TIMING = 2
_STREAM_CAPTURE_STATUS_NONE = 0


def _check(code: int, what: str) -> None:
    if code:
        raise CudaError(code, what)


def available() -> bool:
    """Whether rings can be made: they need the fast lane's library."""
    return lane.library() is not None


class CopyRing:
    """SLOTS page-locked slots of SLOT_BYTES in one context, used in turn. Made and used with that context
    current; one thread at a time (a session's calls run one by one). `ring` is the rgpu_lane_ring * the
    fast lane copies through. `fill`: load the fill kernel (rgpu.backends.runs_fill) for the lane's coded copies.
    """

    def __init__(self, fill: bool = True) -> None:
        self._cuda = driver(_ffi)
        self._lib = lane.library()
        self._driver = lane.libcuda_driver()
        lffi = lane.ffi()
        self.ring = lffi.new("rgpu_lane_ring *")
        self.ring.slot_bytes, self.ring.slots, self.ring.fill_min = SLOT_BYTES, SLOTS, FILL_MIN_BYTES
        self._what = lffi.new("char **")
        self._capturing = _ffi.new("int *")  # cuStreamIsCapturing's answer, made once: copy() is a hot path
        p = _ffi.new("void **")
        _check(self._cuda.cuMemHostAlloc(p, SLOT_BYTES * SLOTS, 0), "cuMemHostAlloc (copy ring)")
        self.ring.base = lffi.cast("char *", int(_ffi.cast("uintptr_t", p[0])))
        self._events = self._module = 0
        event = _ffi.new("uintptr_t *")
        try:
            for i in range(SLOTS):
                _check(self._cuda.cuEventCreate(event, _EVENT_DISABLE_TIMING), "cuEventCreate (copy ring)")
                self.ring.events[i] = int(event[0])
                self._events += 1
        except CudaError:
            self.close()
            raise
        self._module = self._fill_kernel() if fill and lane.fill_wanted() else 0

    def _fill_kernel(self) -> int:
        """rgpu_runs_fill loaded in this context, its function in the ring; its module, or 0 where the driver would
        not (coded copies are then decoded on the CPU, as before)."""
        module, function, threads = _ffi.new("uintptr_t *"), _ffi.new("uintptr_t *"), _ffi.new("int *")
        code = self._cuda.cuModuleLoadData(module, runs_fill.PTX)
        if code == 0:
            code = self._cuda.cuModuleGetFunction(function, module[0], runs_fill.NAME)
            # (asking an attribute loads the function now, where CUDA_MODULE_LOADING=LAZY would load it at its
            # first launch, in the middle of a program's stream; and the lane launches blocks of that many)
            if code == 0:
                code = self._cuda.cuFuncGetAttribute(threads, _FUNC_MAX_THREADS_PER_BLOCK, function[0])
            if code == 0 and threads[0] >= self._lib.RGPU_LANE_FILL_THREADS:
                self.ring.runs_fill = function[0]
                return module[0]
            self._cuda.cuModuleUnload(module[0])
        if not _fill_refused:
            _fill_refused.append(code)
            why = f"CUresult {code}" if code else f"blocks of at most {threads[0]} threads"
            log.warning("the driver would not load rgpu's fill kernel (%s): coded copies are decoded on the CPU "
                        "instead", why)
        return 0

    def copy(self, dst: int, data, stream: int, capture_possible: bool = True) -> None:
        """cuMemcpyHtoDAsync(dst, data, stream) from a slot; len(data) <= SLOT_BYTES (stream 0: the NULL stream).
        `capture_possible` False (no capture begun in this process) skips asking whether the stream captures."""
        if capture_possible:
            _check(self._cuda.cuStreamIsCapturing(stream, self._capturing), "cuStreamIsCapturing")
            if self._capturing[0] != _STREAM_CAPTURE_STATUS_NONE:
                # A captured copy would read the slot whenever the graph replays: not the program's bytes.
                raise CudaError(Status.STREAM_CAPTURE_UNSUPPORTED,
                                "a host-to-device copy cannot be captured through rgpu")
        lffi = lane.ffi()
        code = self._lib.rgpu_lane_ring_copy(self._driver, self.ring, dst, lffi.from_buffer(data), len(data), stream,
                                             self._what)
        if code:
            raise CudaError(code, lffi.string(self._what[0]).decode())

    def close(self) -> None:
        """Frees the slots once the GPU has read them (the context still current)."""
        cuda, ring = self._cuda, self.ring
        ring.runs_fill = 0
        for i in range(self._events):  # (pending: 1 + the slot whose event a copy over several slots recorded)
            if ring.pending[i]:
                cuda.cuEventSynchronize(ring.events[ring.pending[i] - 1])
        for i in range(self._events):
            cuda.cuEventDestroy_v2(ring.events[i])
        self._events = 0
        if ring.base != lane.ffi().NULL:
            cuda.cuMemFreeHost(_ffi.cast("void *", int(lane.ffi().cast("uintptr_t", ring.base))))
            ring.base = lane.ffi().NULL
        if self._module:  # (after the events: a fill still queued has finished)
            cuda.cuModuleUnload(self._module)
            self._module = 0
