"""The fake backend's fast lane: the real C lane (rgpu.backends.lane), its driver calls made cffi callbacks into
the fake backend. Every fake session that has the library loaded runs its launches, memsets, synchronizes and
graph launches through the C code that serves GPU sessions, so CI exercises its parsing, bindings and checks on every program it runs.

Copies go through a ring of ordinary memory per context, as through the cuda backend's page-locked one. Their
device copies, either way, run on a LaggingDevice (rgpu.backends.fake_lag): as late as CUDA's stream order lets
a GPU run them, so that a slot the loop reuses too soon, or a wait it skips, shows here as wrong data."""

from __future__ import annotations

import contextlib
import logging
import struct
from collections.abc import Callable

import attrs

from rgpu.backends import lane
from rgpu.backends.fake_lag import LaggingDevice
from rgpu.errors import CudaError, Status
from rgpu.protocol import ops

log = logging.getLogger("rgpu.fake")
_ATTRIBUTE_SIZE = ops.LAUNCH_ATTRIBUTE_SIZE  # CUlaunchAttribute: id, padding, 64-byte value
_NOT_LANDED = 0xA5  # a copy back's slot until the device writes it
_FILL_ENTRY = struct.Struct("<QQQII")  # rgpu_runs_fill's plan entry (rgpu.backends.runs_fill)
_FILL_WORDS = 4096  # the most words of one entry (copy_runs.h, RGPU_RUNS_FILL_WORDS)


class _RunsFill:
    """The fake's rgpu_runs_fill: the function a fake ring names, which FakeLaneDriver runs as the kernel would."""


RUNS_FILL = _RunsFill()


@attrs.frozen(slots=True)
class _Attribute:
    """A plain launch attribute as FakeBackend.launch_ex reads one (the lane passes no event attributes)."""

    id: int
    value: bytes
    event: object = None


class FakeLaneDriver:
    """An rgpu_lane_driver whose calls land in `backend` (a FakeBackend). Backend objects travel through C as
    their id(); `address` registers them, and every object bound stays alive here until `forget`."""

    def __init__(self, backend) -> None:
        self.backend = backend
        self.device = LaggingDevice()  # the ring's device copies, held until due
        self._objects: dict[int, object] = {}
        self._current = None
        ffi = lane.ffi()
        self.table = ffi.new("rgpu_lane_driver *")
        self._callbacks = {
            "ctx_set_current": ffi.callback("int(uintptr_t)", self._set_current, onerror=self._failed),
            "launch_kernel": ffi.callback(
                "int(uintptr_t, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, uintptr_t, "
                "void **, void **)", self._launch, onerror=self._failed),
            "memcpy_htod_async": ffi.callback("int(unsigned long long, void *, size_t, uintptr_t)", self._htod,
                                              onerror=self._failed),
            "memset_d8_async": ffi.callback("int(unsigned long long, unsigned char, size_t, uintptr_t)",
                                            self._memset_d8, onerror=self._failed),
            "memset_d32_async": ffi.callback("int(unsigned long long, unsigned int, size_t, uintptr_t)",
                                             self._memset_d32, onerror=self._failed),
            "event_record": ffi.callback("int(uintptr_t, uintptr_t)", self._event_record, onerror=self._failed),
            "event_synchronize": ffi.callback("int(uintptr_t)", self._event_reached, onerror=self._failed),
            "stream_synchronize": ffi.callback("int(uintptr_t)", self._stream_reached, onerror=self._failed),
            "launch_kernel_ex": ffi.callback("int(rgpu_lane_launch_config *, uintptr_t, void **, void **)",
                                             self._launch_ex, onerror=self._failed),
            "graph_launch": ffi.callback("int(uintptr_t, uintptr_t)", self._graph_launch, onerror=self._failed),
            "memcpy_dtoh_async": ffi.callback("int(void *, unsigned long long, size_t, uintptr_t)", self._dtoh,
                                              onerror=self._failed),
            "mem_get_info": ffi.callback("int(size_t *, size_t *)", self._mem_get_info, onerror=self._failed),
            "ctx_synchronize": ffi.callback("int(void)", self._ctx_synchronize, onerror=self._failed),
        }
        for field, callback in self._callbacks.items():
            setattr(self.table, field, callback)
        # cuDNN's calls (rgpu_lane_dnn): the fake's batch norm, its handle's stream as the lane last set it
        self.dnn = ffi.new("rgpu_lane_dnn *")
        self._dnn_callbacks = {
            "set_stream": ffi.callback("int(void *, void *)", self._dnn_set_stream, onerror=self._failed),
            "bn_inference": ffi.callback(
                "int(void *, int, const void *, const void *, void *, const void *, void *, void *, void *, "
                "const void *, const void *, const void *, const void *, double)", self._bn_inference,
                onerror=self._failed),
            "execute": ffi.callback("int(void *, void *, void *)", self._dnn_execute, onerror=self._failed),
        }
        for field, callback in self._dnn_callbacks.items():
            setattr(self.dnn, field, callback)
        self._dnn_streams: dict[int, int] = {}
        # cuDNN calls the fake refused (a range outside the session, say): the lane must check before calling, as
        # a real cuDNN would not refuse them but run them (tests assert this stays empty)
        self.dnn_refusals: list[str] = []

    def address(self, obj) -> int:
        if obj is None:
            return 0
        self._objects[id(obj)] = obj
        return id(obj)

    def forget(self) -> None:
        self._objects.clear()
        self._dnn_streams.clear()
        assert not self.device.held, "the lane forgot its bindings while the device held copies"  # (between runs)
        self.device.forget_events()  # (their contexts and streams may be gone)

    def caught_up(self) -> None:
        """Python takes the socket: every held copy runs (one whose context broke meanwhile is lost, as on a GPU)."""
        while self.device.held:
            try:
                self.device.catch_up()
            except CudaError as e:
                log.debug("a held ring copy failed in a broken context: %s", e)

    def _ctx_of(self, stream):
        return stream.ctx if stream is not None else self._current

    def _due(self, stream) -> None:
        """Work on `stream` (an object, None for the current context's NULL stream) runs next: so does all it waits
        for that the device holds."""
        self.device.before(self._ctx_of(stream), stream)

    def batch_norm(self, handle, tensors) -> tuple:
        """lane.Lane's batch_norm: the fake's handle and tensors travel as registered objects."""
        return (self.dnn, self.address(handle), *(self.address(t) for t in tensors), tensors[0].type == 1, None)

    def execution(self, handle, plan, attributes) -> tuple:
        """lane.Lane's dnn_execute: the pack is its attributes, registered like any object."""
        return (self.dnn, self.address(handle), self.address(plan), self.address(attributes), None)

    def _dnn_execute(self, handle, plan, pack) -> int:
        stream = self._object(self._dnn_streams[self._int(handle)])
        self._due(stream)
        with self._refusals_noted("cudnnBackendExecute"):
            self.backend.dnn_execute(self._current, self._object(self._int(handle)), self._object(self._int(plan)),
                                     self._object(self._int(pack)), stream, {})
        return 0

    @staticmethod
    def _int(pointer) -> int:
        return int(lane.ffi().cast("uintptr_t", pointer))

    def _dnn_set_stream(self, handle, stream) -> int:
        self._dnn_streams[self._int(handle)] = self._int(stream)
        return 0

    def _bn_inference(self, handle, mode, alpha, beta, xd, x, yd, y, bnd, scale, bias, mean, var, epsilon) -> int:
        ffi = lane.ffi()
        tensors = tuple(self._object(self._int(d)) for d in (xd, yd, bnd))
        kind = "double *" if tensors[0].type == 1 else "float *"
        stream = self._object(self._dnn_streams[self._int(handle)])
        self._due(stream)
        with self._refusals_noted("cudnnBatchNormalizationForwardInference"):
            self.backend.dnn_bn_inference(self._current, self._object(self._int(handle)), stream, mode,
                                          ffi.cast(kind, alpha)[0], ffi.cast(kind, beta)[0], epsilon, tensors,
                                          tuple(self._int(p) for p in (x, y, scale, bias, mean, var)))
        return 0

    @contextlib.contextmanager
    def _refusals_noted(self, what: str):
        try:
            yield
        except CudaError as e:
            # (a context a kernel fault broke fails every call, a real cuDNN's too: no check of the lane's misses that)
            if not (self._current is not None and self._current.sticky):
                self.dnn_refusals.append(f"{what}: {e}")
            raise

    def _object(self, address: int):
        return self._objects[address] if address else None

    @staticmethod
    def _failed(exc_type, exc, tb) -> int:
        if isinstance(exc, CudaError):
            return int(exc.code)
        log.error("fake lane callback failed", exc_info=(exc_type, exc, tb))
        return 999  # CUDA_ERROR_UNKNOWN

    def _set_current(self, ctx: int) -> int:
        self._current = self._object(ctx)
        return 0

    def _launch(self, f, gx, gy, gz, bx, by, bz, shmem, stream, params, extra) -> int:
        ffi = lane.ffi()
        if f == id(RUNS_FILL):  # (not among the bound objects: a ring outlives `forget`)
            return self._runs_fill(gx, stream, ffi.cast("uint64_t *", params[0])[0],
                                   ffi.cast("uint64_t *", params[1])[0])
        size = ffi.cast("size_t *", extra[3])[0]
        data = bytes(ffi.buffer(ffi.cast("char *", extra[1]), size))
        self._due(self._object(stream))
        self.backend.launch(self._current, self._object(f), (gx, gy, gz), (bx, by, bz), shmem, self._object(stream),
                            data)
        return 0

    def _launch_ex(self, config, f, params, extra) -> int:
        ffi = lane.ffi()
        size = ffi.cast("size_t *", extra[3])[0]
        data = bytes(ffi.buffer(ffi.cast("char *", extra[1]), size))
        raw = bytes(ffi.buffer(ffi.cast("char *", config.attrs), config.count * _ATTRIBUTE_SIZE))
        attributes = [_Attribute(int.from_bytes(raw[i:i + 4], "little"), raw[i + 8:i + _ATTRIBUTE_SIZE])
                      for i in range(0, len(raw), _ATTRIBUTE_SIZE)]
        self._due(self._object(config.stream))
        self.backend.launch_ex(self._current, self._object(f), (config.gx, config.gy, config.gz),
                               (config.bx, config.by, config.bz), config.shmem, self._object(config.stream), data,
                               attributes)
        return 0

    def _stream_reached(self, stream) -> int:
        self._due(self._object(stream))
        return self._synchronize(stream)

    def _synchronize(self, stream) -> int:
        self.backend.stream_synchronize(self._current, self._object(stream))
        return 0

    def _event_record(self, event, stream) -> int:
        stream = self._object(stream)
        self.device.record(event, self._ctx_of(stream), stream)
        return 0

    def _event_reached(self, event) -> int:
        self.device.reach(event)
        return self._event_synchronize(event)

    def _event_synchronize(self, event) -> int:
        # (The ring's events are the device's marks, but a broken context fails the wait, as the driver's does.)
        if self._current is not None:
            self._current.check()
        return 0

    def _graph_launch(self, exe, stream) -> int:
        self._due(self._object(stream))
        self.backend.graph_launch(self._current, self._object(exe), self._object(stream))
        return 0

    def _held_copy(self, device_ptr, n, stream):
        """The context and stream object of a copy the device will hold, checked now as the driver checks its
        arguments when the copy is queued."""
        ctx, stream = self._current, self._object(stream)
        if ctx is None:
            raise CudaError(Status.INVALID_CONTEXT, "no current context")
        ctx.check()
        self.backend._checked_view(device_ptr, n)  # (the fake's own range check, as its other calls make it)
        return ctx, stream

    @staticmethod
    def _failing_only_when_broken(ctx, copy: Callable[[], None]) -> Callable[[], None]:
        """A held copy fails only as the driver's would: because its context broke meanwhile (a kernel fault).
        Any other failure is the fake's or the lane's mistake, and must not pass as the program's error."""
        def run() -> None:
            try:
                copy()
            except CudaError:
                if not ctx.sticky:
                    raise RuntimeError("a held ring copy failed in a working context") from None
                raise
        return run

    def _htod(self, dst, src, n, stream) -> int:
        ctx, stream = self._held_copy(dst, n, stream)
        source = lane.ffi().buffer(lane.ffi().cast("char *", src), n)
        queued = bytes(source)

        def copy() -> None:
            # A GPU may read the slot any time until the copy is due: one written meanwhile is the loop's mistake,
            # whatever bytes it then holds.
            if bytes(source) != queued:
                raise RuntimeError(f"a ring slot was written while its copy to 0x{dst:x} was queued")
            self.backend.memcpy_htod(ctx, dst, queued, stream, asynchronous=True)

        self.device.hold(ctx, stream, self._failing_only_when_broken(ctx, copy))
        return 0

    def _runs_fill(self, entries: int, stream, plan: int, dst: int) -> int:
        """rgpu_runs_fill<<<entries>>>(plan, dst), held like a ring copy: the plan and the literal words it names are
        read from the slots when the device runs it, and must not have changed since it was queued."""
        ffi = lane.ffi()
        table = ffi.buffer(ffi.cast("char *", plan), entries * _FILL_ENTRY.size)
        rows = list(_FILL_ENTRY.iter_unpack(bytes(table)))
        # (what would fault or go astray on a GPU is the lane's mistake: an unaligned store or load, an entry over
        # the kernel's stride, a literal outside the plan's tail)
        tail = plan + entries * _FILL_ENTRY.size
        if dst % 8 or plan % 8 or any(words > _FILL_WORDS or source % 8 or (source and source < tail)
                                      for _, _, source, _, words in rows):
            raise RuntimeError(f"a fill plan the kernel cannot run (to 0x{dst:x})")
        end = max(word + words for _, _, _, word, words in rows)
        ctx, stream = self._held_copy(dst, 8 * end, stream)
        sources = [ffi.buffer(ffi.cast("char *", source), 8 * words) if source else None
                   for _, _, source, _, words in rows]
        queued = bytes(table), [bytes(s) if s is not None else None for s in sources]

        def fill() -> None:
            if (bytes(table), [bytes(s) if s is not None else None for s in sources]) != queued:
                raise RuntimeError(f"a ring slot was written while its fill of 0x{dst:x} was queued")
            for (first, step, _, word, words), source in zip(rows, queued[1]):
                data = source if source is not None else b"".join(
                    ((first + k * step) % 2**64).to_bytes(8, "little") for k in range(words))
                self.backend.memcpy_htod(ctx, dst + 8 * word, data, stream, asynchronous=True)

        self.device.hold(ctx, stream, self._failing_only_when_broken(ctx, fill))
        return 0

    def _dtoh(self, dst, src, n, stream) -> int:
        ctx, stream = self._held_copy(src, n, stream)
        target = lane.ffi().buffer(lane.ffi().cast("char *", dst), n)
        target[:] = bytes([_NOT_LANDED]) * n  # (what a slot holds before the GPU writes it is anyone's guess)

        def land() -> None:
            target[:] = self.backend.memcpy_dtoh(ctx, src, n, stream)

        self.device.hold(ctx, stream, self._failing_only_when_broken(ctx, land))
        return 0

    def _ctx_synchronize(self) -> int:
        self.device.before_context(self._current)
        self.backend.ctx_synchronize(self._current)
        return 0

    def _mem_get_info(self, free, total) -> int:
        free[0], total[0] = self.backend.mem_get_info(self._current)
        return 0

    def _memset_d8(self, dst, value, n, stream) -> int:
        self._due(self._object(stream))
        self.backend.memset(self._current, dst, value, n, 1, self._object(stream), asynchronous=True)
        return 0

    def _memset_d32(self, dst, value, n, stream) -> int:
        self._due(self._object(stream))
        self.backend.memset(self._current, dst, value, n, 4, self._object(stream), asynchronous=True)
        return 0


def make_lane(backend, max_param_bytes: int):
    """A Lane for a fake session, or None while the library is not loaded."""
    lib = lane.library()
    if lib is None or not lane.wanted():
        return None
    driver = FakeLaneDriver(backend)
    return _FakeLane(driver, lib, max_param_bytes)


# Smaller slots than the cuda backend's (cuda_copyring.SLOT_BYTES), and fewer: the tests' copies cross more of
# them, and come round to a slot in use sooner.
RING_SLOTS, RING_SLOT_BYTES = 4, 64 << 10


class _FakeLane(lane.Lane):
    def __init__(self, driver: FakeLaneDriver, lib, max_param_bytes: int):
        super().__init__(lib, driver.table, max_param_bytes, self._ring_for,
                         lambda: driver.backend._live_captures > 0, address=driver.address,
                         batch_norm=driver.batch_norm, dnn_execute=driver.execution)
        self.fake_driver = driver  # keeps the callbacks alive as long as the lane
        self._rings: dict[int, tuple] = {}  # id(context) -> (ring, its slots), alive as long as the lane

    def _ring_for(self, ctx):
        ffi = lane.ffi()
        kept = self._rings.get(id(ctx))
        if kept is None:
            slots = ffi.new("char[]", RING_SLOTS * RING_SLOT_BYTES)
            ring = ffi.new("rgpu_lane_ring *")
            ring.base, ring.slot_bytes, ring.slots = slots, RING_SLOT_BYTES, RING_SLOTS
            ring.runs_fill = id(RUNS_FILL) if lane.fill_wanted() else 0
            first = len(self._rings) * RING_SLOTS  # (each ring's own: the device tells them apart)
            for i in range(RING_SLOTS):
                ring.events[i] = first + i + 1
            kept = self._rings[id(ctx)] = (ring, slots, ctx)
        return kept[0]

    def run(self, view, length: int, pos: int, current_ctx: int):
        with self._catching_up():
            return super().run(view, length, pos, current_ctx)

    def serve(self, io_args, served) -> None:
        with self._catching_up():
            super().serve(io_args, served)

    @contextlib.contextmanager
    def _catching_up(self):
        """The device catches up as Python takes over (its calls run on the fake at once), however C's run ended;
        a failure of that after one of C's is logged, not raised over it."""
        try:
            yield
        except BaseException:
            try:
                self.fake_driver.caught_up()
            except Exception:
                log.exception("the lagging device could not catch up after the lane failed")
            raise
        self.fake_driver.caught_up()

    def forget(self) -> None:
        super().forget()
        self.fake_driver.forget()
