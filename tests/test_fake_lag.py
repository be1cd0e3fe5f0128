"""The fake lane's lagging device (rgpu.backends.fake_lag): which held copies each wait runs, and in what order.
Its schedules must be ones a GPU could take, or tests of the C loop would fail code that is right; and it must
hold what CUDA lets a GPU hold, or they would pass code that is wrong."""

from __future__ import annotations

import attrs
import pytest

from rgpu.backends import lane
from rgpu.backends.fake import FakeBackend, FakeContext, FakeStream
from rgpu.backends.fake_lag import NON_BLOCKING, LaggingDevice
from rgpu.backends.fake_lane import FakeLaneDriver
from rgpu.errors import CudaError, Status


@attrs.define(eq=False)
class Stream:
    flags: int


CTX, OTHER_CTX = object(), object()
BLOCKING, ALSO_BLOCKING, NON_BLOCKING_STREAM = Stream(0), Stream(0), Stream(NON_BLOCKING)


def device_with(*copies) -> tuple[LaggingDevice, list[str]]:
    """A device holding a copy named n on each (context, stream) given in order; the list gets each name as it
    runs."""
    device, ran = LaggingDevice(), []
    for name, (ctx, stream) in copies:
        device.hold(ctx, stream, lambda name=name: ran.append(name))
    return device, ran


def test_nothing_runs_until_something_waits_for_it():
    device, ran = device_with(("a", (CTX, None)), ("b", (CTX, NON_BLOCKING_STREAM)))
    assert ran == [] and device.held == 2


def test_the_null_stream_and_blocking_streams_wait_for_each_other_but_not_for_a_non_blocking_one():
    copies = [("null", (CTX, None)), ("blocking", (CTX, BLOCKING)), ("non", (CTX, NON_BLOCKING_STREAM)),
              ("also", (CTX, ALSO_BLOCKING))]
    device, ran = device_with(*copies)
    device.before(CTX, BLOCKING)
    # (legacy NULL stream: work on a blocking stream waits for the NULL stream's before it, not for another
    # blocking stream's with no NULL-stream work between)
    assert ran == ["null", "blocking"] and device.held == 2
    device.before(CTX, None)  # (the NULL stream's work waits for every blocking stream's)
    assert ran == ["null", "blocking", "also"] and device.held == 1
    device.before(CTX, NON_BLOCKING_STREAM)
    assert ran[-1] == "non" and device.held == 0


def test_two_blocking_streams_are_ordered_only_through_null_stream_work_between_them():
    device, ran = device_with(("first", (CTX, BLOCKING)), ("null", (CTX, None)), ("after", (CTX, BLOCKING)))
    device.before(CTX, ALSO_BLOCKING)
    assert ran == ["first", "null"] and device.held == 1  # (the NULL copy came between: not the one after it)
    device, ran = device_with(("first", (CTX, BLOCKING)), ("other", (CTX, ALSO_BLOCKING)))
    device.before(CTX, ALSO_BLOCKING)
    assert ran == ["other"]
    device.hold(CTX, None, lambda: ran.append("null"))
    device.record(5, CTX, ALSO_BLOCKING)
    device.reach(5)  # (an event on the other stream after the NULL copy: it waits for the first copy now)
    assert ran == ["other", "first", "null"]


def test_a_non_blocking_stream_waits_only_for_its_own():
    device, ran = device_with(("null", (CTX, None)), ("non", (CTX, NON_BLOCKING_STREAM)))
    device.before(CTX, NON_BLOCKING_STREAM)
    assert ran == ["non"]
    device.before(CTX, None)
    assert ran == ["non", "null"]


def test_contexts_do_not_wait_for_each_other():
    device, ran = device_with(("other", (OTHER_CTX, None)), ("mine", (CTX, None)))
    device.before(CTX, None)
    assert ran == ["mine"]
    device.before_context(OTHER_CTX)
    assert ran == ["mine", "other"]


def test_an_event_runs_only_what_its_stream_held_when_it_was_recorded():
    # (before it: a copy on a stream it does not order, and one in another context)
    device, ran = device_with(("non", (CTX, NON_BLOCKING_STREAM)), ("other", (OTHER_CTX, None)),
                              ("first", (CTX, None)))
    device.record(7, CTX, None)
    device.hold(CTX, None, lambda: ran.append("after"))
    device.reach(7)
    assert ran == ["first"] and device.held == 3
    device.reach(8)  # (never recorded: nothing to wait for)
    assert ran == ["first"]


def test_copies_one_stream_orders_run_in_order_and_unordered_ones_latest_first():
    device, ran = device_with(("null 1", (CTX, None)), ("non 1", (CTX, NON_BLOCKING_STREAM)),
                              ("null 2", (CTX, None)), ("non 2", (CTX, NON_BLOCKING_STREAM)))
    device.catch_up()
    assert ran.index("null 1") < ran.index("null 2") and ran.index("non 1") < ran.index("non 2")
    # (a GPU may run streams the NULL stream does not order in either order: the later queued goes first here)
    assert ran[0] == "non 1", ran


def test_eager_non_blocking_copies_run_at_once_unless_their_stream_holds_one(monkeypatch):
    device, ran = device_with(("held", (CTX, NON_BLOCKING_STREAM)))
    monkeypatch.setattr(LaggingDevice, "eager_non_blocking", True)
    device.hold(CTX, NON_BLOCKING_STREAM, lambda: ran.append("behind it"))
    assert ran == [] and device.held == 2
    device.hold(CTX, None, lambda: ran.append("null"))
    device.hold(CTX, Stream(NON_BLOCKING), lambda: ran.append("non"))
    assert ran == ["non"] and device.held == 3  # (the NULL stream's held copy does not order it)
    device.hold(CTX, BLOCKING, lambda: ran.append("blocking"))
    assert ran == ["non"] and device.held == 4  # (only non-blocking streams run ahead)


def test_a_copy_that_fails_raises_to_the_wait_and_leaves_the_rest_held():
    device, ran = LaggingDevice(), []

    def fails():
        raise CudaError(Status.ILLEGAL_ADDRESS, "the context broke")

    device.hold(CTX, None, fails)
    device.hold(CTX, None, lambda: ran.append("second"))
    with pytest.raises(CudaError):
        device.before(CTX, None)
    assert ran == [] and device.held == 1
    device.before(CTX, None)
    assert ran == ["second"]


class _RecordingBackend:
    """What FakeLaneDriver calls of the fake backend for graph launches, cuDNN executes and context synchronizes,
    noting each as the work."""

    def __init__(self, ran: list):
        self.ran = ran

    def graph_launch(self, ctx, exe, stream):
        self.ran.append("work")

    def dnn_execute(self, ctx, handle, plan, pack, stream, by_value):
        self.ran.append("work")

    def ctx_synchronize(self, ctx):
        self.ran.append("work")


@pytest.mark.parametrize("call", ["graph_launch", "dnn_execute", "ctx_synchronize"])
def test_the_lane_driver_s_calls_run_what_their_stream_waits_for_first(call):
    """(Calls whose work tests/test_native_loop.py cannot see in device memory: the fake's graphs and cuDNN
    executes there write nothing a copy up reaches.)"""
    if lane.library() is None:
        pytest.skip("the lane library is not built")
    ffi, ran = lane.ffi(), []
    driver = FakeLaneDriver(_RecordingBackend(ran))
    ctx = FakeContext(0, 0)
    stream = FakeStream(ctx, 0)
    driver._set_current(driver.address(ctx))
    driver.device.hold(ctx, stream, lambda: ran.append("copy"))

    def pointer(obj):
        return ffi.cast("void *", driver.address(obj))

    if call == "graph_launch":
        assert driver._graph_launch(driver.address(object()), driver.address(stream)) == 0
    elif call == "dnn_execute":
        handle = object()
        driver._dnn_set_stream(pointer(handle), pointer(stream))
        assert driver._dnn_execute(pointer(handle), pointer(object()), pointer(object())) == 0
    else:
        assert driver._ctx_synchronize() == 0
    assert ran == ["copy", "work"]


def _session_memory():
    """A lane driver on a real fake backend with a current context and 64 bytes of its memory."""
    if lane.library() is None:
        pytest.skip("the lane library is not built")
    backend = FakeBackend()
    ctx = backend.ctx_create(0, 0)
    driver = FakeLaneDriver(backend)
    driver._set_current(driver.address(ctx))
    return driver, ctx, backend.mem_alloc(ctx, 64)


def test_a_slot_written_while_its_copy_is_held_is_the_loop_s_mistake_whatever_it_then_holds():
    driver, ctx, ptr = _session_memory()
    slot = lane.ffi().new("char[]", b"a" * 64)
    assert driver._htod(ptr, slot, 64, 0) == 0 and driver.device.held == 1
    slot[0] = b"b"  # (a GPU may have read the slot already, or not yet)
    with pytest.raises(RuntimeError, match="written while its copy"):
        driver.device.catch_up()


def test_a_copy_back_s_slot_holds_no_device_bytes_until_it_lands():
    driver, ctx, ptr = _session_memory()
    driver.backend.memcpy_htod(ctx, ptr, bytes(range(64)))
    slot = lane.ffi().new("char[]", 64)
    assert driver._dtoh(slot, ptr, 64, 0) == 0
    assert bytes(lane.ffi().buffer(slot)) == b"\xa5" * 64
    driver.device.catch_up()
    assert bytes(lane.ffi().buffer(slot)) == bytes(range(64))


def test_a_held_copy_fails_as_the_program_s_error_only_in_a_broken_context(monkeypatch):
    driver, ctx, ptr = _session_memory()

    def fails(*args, **kwargs):
        raise CudaError(Status.ILLEGAL_ADDRESS, "the context broke")

    monkeypatch.setattr(driver.backend, "memcpy_htod", fails)
    slot = lane.ffi().new("char[]", 64)
    driver._htod(ptr, slot, 64, 0)
    with pytest.raises(RuntimeError, match="working context"):  # (a mistake of the fake's or the lane's)
        driver.device.catch_up()
    driver._htod(ptr, slot, 64, 0)
    ctx.sticky = Status.ILLEGAL_ADDRESS
    with pytest.raises(CudaError):
        driver.device.catch_up()
    for _ in range(2):
        driver.device.hold(ctx, None, lambda: fails())
    driver.caught_up()  # (Python takes over: what a broken context held is lost, as on a GPU)
    assert driver.device.held == 0
