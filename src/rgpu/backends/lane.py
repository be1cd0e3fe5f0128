"""The worker's fast lane (native/src/lane/lane.h says what it does and what it promises): the C library that
runs a batch's launches, small copies, memsets, synchronizes and graph launches, loaded through cffi. This
module knows the library and the driver table it calls; which records it may run is the session's business (its bindings and regions), and
when it runs is the dispatcher's.

The server finds or builds the library (rgpu.shims.lane_library) and loads it here once per worker, before
the backend starts; without it (no compiler, or never loaded) every record takes the Python path."""

from __future__ import annotations

import ctypes
import functools
import logging
import os
import pathlib
from collections.abc import Callable, Iterable

import attrs
import cffi

from rgpu.protocol import ops, runs

log = logging.getLogger("rgpu.lane")

# Where the server put the library and its header (rgpu-server sets them; its workers inherit them).
LIBRARY_ENV = "RGPU_LANE_LIBRARY"
HEADER_ENV = "RGPU_LANE_HEADER"

_ffi = cffi.FFI()
_lib = None
_declared = False


def _declarations(header: str) -> str:
    return "\n".join(line for line in header.splitlines() if not line.lstrip().startswith("#"))


def load(library_path: pathlib.Path, header_path: pathlib.Path) -> None:
    """Load the fast lane (its header is its cffi declaration); raises OSError or cffi.CDefError."""
    global _lib, _declared
    if _lib is None:
        if not _declared:
            _ffi.cdef(_declarations(pathlib.Path(header_path).read_text()))
            _declared = True
        _lib = _ffi.dlopen(str(library_path))


def load_from_environment() -> None:
    """Load the library the server named (LIBRARY_ENV), if it named one; a failure is logged, not raised:
    the Python path still serves every call."""
    path, header = os.environ.get(LIBRARY_ENV), os.environ.get(HEADER_ENV)
    if not path or not header or _lib is not None:
        return
    try:
        load(pathlib.Path(path), pathlib.Path(header))
    except (OSError, cffi.CDefError) as e:
        log.warning("fast lane %s not loaded (%s): launches, small copies and memsets run in Python", path, e)


def library():
    """The loaded fast lane (cffi lib), or None."""
    return _lib


def wanted() -> bool:
    """False under RGPU_LANE=0, a benchmarking aid: sessions then run every record in Python (the copy rings,
    which live in the same library, stay)."""
    return os.environ.get("RGPU_LANE") != "0"


def fill_wanted() -> bool:
    """True under RGPU_RUNS_FILL=1: coded copies big enough are then filled on the device (rgpu.backends.runs_fill)
    rather than decoded on the CPU and copied. Off by default: its one A/B on a GPU (bench/results/
    gpu-2026-12-05f-levers) compared it against a decoder made slower by the same change, so whether it beats the
    committed decoder is not yet measured."""
    return os.environ.get("RGPU_RUNS_FILL") == "1"


def ffi() -> cffi.FFI:
    return _ffi


def decode_runs(coded, size: int) -> bytearray | None:
    """A coded copy's `size` bytes decoded in C (rgpu.protocol.runs' format), or None where the coding or the size
    is wrong; the fast lane must be loaded."""
    if not 0 < size <= runs.MAX_COPY_BYTES:  # (before the buffer: a size from the network)
        return None
    out = bytearray(size)
    if _lib.rgpu_lane_runs_decode(_ffi.from_buffer(coded), len(coded), _ffi.from_buffer(out), size):
        return None
    return out


def seal_for(cipher: int, recv_key: bytes, send_key: bytes):
    """A sealed session's keys for the C request loop (rgpu_lane_seal, freed with the object), or None where the
    lane is not loaded or cannot load libcrypto."""
    if _lib is None:
        return None
    seal = _lib.rgpu_lane_seal_new(cipher, recv_key, send_key)
    return None if seal == _ffi.NULL else _ffi.gc(seal, _lib.rgpu_lane_seal_free)


# The driver functions the lane calls, by rgpu_lane_driver's field: libcuda's exported names.
_LIBCUDA_NAMES = {
    "ctx_set_current": "cuCtxSetCurrent", "launch_kernel": "cuLaunchKernel",
    "memcpy_htod_async": "cuMemcpyHtoDAsync_v2", "memset_d8_async": "cuMemsetD8Async",
    "memset_d32_async": "cuMemsetD32Async", "event_record": "cuEventRecord",
    "event_synchronize": "cuEventSynchronize", "stream_synchronize": "cuStreamSynchronize",
    "launch_kernel_ex": "cuLaunchKernelEx", "graph_launch": "cuGraphLaunch",
    "memcpy_dtoh_async": "cuMemcpyDtoHAsync_v2", "mem_get_info": "cuMemGetInfo_v2",
    "ctx_synchronize": "cuCtxSynchronize",
}


@functools.cache
def libcuda_driver():
    """The rgpu_lane_driver of libcuda.so.1's own functions (the copy the process already loaded), made once:
    every lane and ring of the process reads the same table."""
    cuda = ctypes.CDLL("libcuda.so.1")
    table = _ffi.new("rgpu_lane_driver *")
    for field, name in _LIBCUDA_NAMES.items():
        address = ctypes.cast(getattr(cuda, name), ctypes.c_void_p).value
        setattr(table, field, _ffi.cast(_ffi.typeof(getattr(table, field)), address))
    return table


# A copy ring's slot (the cuda backend's, rgpu/backends/cuda_copyring.py). The C request loop streams larger
# copies, sent as frames of their own, from the socket through the slots in turn: a slot this size keeps its
# per-slot driver calls (a copy and an event, some microseconds) small beside receiving it (40 us at 6.5 GB/s).
RING_SLOT_BYTES = 256 << 10
# A sealed copy up's record the C request loop opens whole takes up to this many consecutive slots (the C stand-ins
# seal 1 MiB records); the cuda backend's ring has at least twice as many, since one copy takes at most half of a
# ring (lane/ring.c). (The fake's smaller ring takes them the slower way.)
SEALED_COPY_SLOTS = 4

# rgpu_lane_serve's outcomes (lane.h).
SERVE_IDLE, SERVE_PYTHON, SERVE_BATCH_STOPPED, SERVE_LIMIT, SERVE_FAILED = range(5)


@attrs.frozen(slots=True)
class Stop:
    """Where a run stopped (rgpu_lane_stop): `status` nonzero names the failed driver call of the record just
    before `pos`; otherwise the record at `pos`, if any, is Python's."""

    pos: int
    status: int
    opcode: int
    request_id: int
    what: str


def stop_from(stop) -> Stop:
    """An rgpu_lane_stop as a Stop."""
    what = _ffi.string(stop.what).decode() if stop.status else ""
    return Stop(stop.pos, stop.status, stop.opcode, stop.request_id, what)


class Lane:
    """One session's lane: its bindings, its view of the session's regions, its counts. Single-threaded, like
    the session. `ring_for(ctx_obj)` gives the rgpu_lane_ring * of a context (or NULL); `capturing()` says
    whether a stream capture may be under way."""

    def __init__(self, lib, driver, max_param_bytes: int, ring_for: Callable[[object], object],
                 capturing: Callable[[], bool], address: Callable[[object], int] | None = None,
                 batch_norm: Callable[[object, tuple], tuple | None] | None = None,
                 dnn_execute: Callable[[object, object, tuple], tuple | None] | None = None):
        self._lib = lib
        # batch_norm(handle_obj, tensors): (rgpu_lane_dnn *, handle, x, y and statistics descriptors as integers,
        # scaling factors as doubles, release() or None) for the lane to run batch norms of that shape, or None;
        # dnn_execute(handle_obj, plan_obj, attributes): (rgpu_lane_dnn *, handle, plan, variant pack as integers,
        # release() or None), or None. What they made lives until the lane forgets its bindings (or closes).
        self._batch_norm, self._dnn_execute = batch_norm, dnn_execute
        self._releases: list[Callable[[], None]] = []
        self._address = address or _address  # backend object -> the integer the driver takes
        self._driver = driver  # kept alive: the lane holds a copy of the table, callbacks included
        self._lane = lib.rgpu_lane_new(driver, max_param_bytes)
        if self._lane == _ffi.NULL:
            raise MemoryError("rgpu_lane_new")
        self._ring_for = ring_for
        self._capturing = capturing
        self._regions = ()  # the arrays the lane reads, kept alive here
        self._stop = _ffi.new("rgpu_lane_stop *")
        self._counts = _ffi.new("rgpu_lane_count[]", lib.RGPU_LANE_COUNTS)
        # Asking the lane about a record it always declines costs a run and a Stop each time (1.2 us of a batch
        # norm's 6.8 us serving on a 2-core CPU machine; not visible against the H200's noise): such records go
        # straight to Python.
        self.serves = frozenset(code for code in ops.OPS if lib.rgpu_lane_serves(code))

    def bind_launch(self, function: int, stream: int, ctx_obj, function_obj, stream_obj,
                    param_bytes: int | None) -> None:
        a = self._address
        self._lib.rgpu_lane_bind_launch(self._lane, function, stream, a(ctx_obj), a(function_obj), a(stream_obj),
                                        -1 if param_bytes is None else param_bytes)

    def bind_stream(self, stream: int, ctx_key: int, ctx_obj, stream_obj) -> None:
        a = self._address
        self._lib.rgpu_lane_bind_stream(self._lane, stream, ctx_key, a(ctx_obj), a(stream_obj), self._ring_for(ctx_obj))

    def bind_graph(self, exec_handle: int, stream: int, ctx_obj, exec_obj, stream_obj) -> None:
        a = self._address
        self._lib.rgpu_lane_bind_graph(self._lane, exec_handle, stream, a(ctx_obj), a(exec_obj), a(stream_obj))

    def bind_batch_norm(self, handle: int, tensors_bytes: bytes, ctx_obj, handle_obj, tensors,
                        sizes: tuple[int, int, int]) -> None:
        """Let the lane run DNN_BN_INFERENCE records of `handle` whose tensor descriptors are `tensors_bytes` (parsed:
        `tensors`, spanning `sizes` bytes each), on streams of `ctx_obj`, once Python has run one."""
        shape = self._batch_norm(handle_obj, tensors) if self._batch_norm is not None else None
        if shape is None:
            return
        table, handle_address, x_desc, y_desc, bn_desc, doubles, release = shape
        bound = self._lib.rgpu_lane_bind_batch_norm(self._lane, table, handle, tensors_bytes, len(tensors_bytes),
                                                    self._address(ctx_obj), handle_address, x_desc, y_desc, bn_desc,
                                                    *sizes, int(doubles)) == 0
        self._keep_or_release(bound, release)

    def bind_dnn_execute(self, handle: int, plan: int, pack_bytes: bytes, ctx_obj, handle_obj, plan_obj, attributes,
                         ranges: list[tuple[int, int]]) -> None:
        """Let the lane run DNN_EXECUTE records of (`handle`, `plan`) whose variant pack is `pack_bytes` (parsed:
        `attributes`) on streams of `ctx_obj`, each of `ranges` (start, size) checked at every run."""
        made = self._dnn_execute(handle_obj, plan_obj, attributes) if self._dnn_execute is not None else None
        if made is None:
            return
        table, handle_address, plan_address, pack_address, release = made
        starts = _ffi.new("uint64_t[]", [r[0] for r in ranges] or [0])
        sizes = _ffi.new("uint64_t[]", [r[1] for r in ranges] or [0])
        bound = self._lib.rgpu_lane_bind_dnn_execute(self._lane, table, handle, plan, pack_bytes, len(pack_bytes),
                                                     self._address(ctx_obj), handle_address, plan_address,
                                                     pack_address, starts, sizes, len(ranges)) == 0
        self._keep_or_release(bound, release)

    def _keep_or_release(self, bound: bool, release) -> None:
        if release is not None:
            if bound:
                self._releases.append(release)
            else:  # (no room: the call stays Python's)
                release()

    def forget(self) -> None:
        self._lib.rgpu_lane_forget(self._lane)
        self._release()

    def _release(self) -> None:
        releases, self._releases = self._releases, []
        for release in releases:
            release()

    def set_regions(self, regions: Iterable[tuple[int, int]], fill_contexts: Iterable[object] | None = None) -> None:
        """(start, size) of every device region the session may name, sorted by start; `fill_contexts`, beside them,
        the backend context of each allocation (None for any other region): the lane's own kernel writes coded
        copies only into an allocation of the copy's context."""
        pairs = list(regions)
        contexts = list(fill_contexts) if fill_contexts is not None else [None] * len(pairs)
        if len(contexts) != len(pairs):
            raise ValueError("a fill context for each region")
        starts = _ffi.new("uint64_t[]", [p[0] for p in pairs] or [0])
        sizes = _ffi.new("uint64_t[]", [p[1] for p in pairs] or [0])
        fill = _ffi.new("uint64_t[]", [self._address(c) for c in contexts] or [0])
        self._lib.rgpu_lane_set_regions(self._lane, starts, sizes, fill, len(pairs))
        self._regions = (starts, sizes, fill)

    def view(self, batch):
        """The batch's bytes as the lane reads them (no copy); valid while `batch` is."""
        return _ffi.from_buffer("uint8_t[]", batch)

    def check_batch(self, view, length: int, max_record: int) -> bool:
        return self._lib.rgpu_lane_check_batch(view, length, max_record) == 0

    def run(self, view, length: int, pos: int, current_ctx: int) -> Stop:
        stop = self._stop
        self._lib.rgpu_lane_run(self._lane, view, length, pos, current_ctx, self._capturing(), stop)
        return stop_from(stop)

    def capture_possible(self) -> bool:
        return bool(self._capturing())

    def serve(self, io_args, served) -> None:
        """rgpu_lane_serve: `io_args` an rgpu_lane_serve_io *, `served` the rgpu_lane_served * it fills."""
        self._lib.rgpu_lane_serve(self._lane, io_args, served)

    def take_counts(self) -> list[tuple[int, int, int, int]]:
        """(opcode, calls, ns, replies sent) of what ran since the last time asked."""
        n = self._lib.rgpu_lane_take_counts(self._lane, self._counts, len(self._counts))
        return [(c.opcode, c.calls, c.ns, c.replies) for c in self._counts[0:n]]

    def close(self) -> None:
        if self._lane is not None:
            self._lib.rgpu_lane_free(self._lane)
            self._lane = None
            self._release()


def _address(obj) -> int:
    """A backend object (cuda-bindings handle, int, None) as the integer the driver takes."""
    return 0 if obj is None else int(obj)

