"""The fake lane's lagging device (rgpu.backends.fake_lag): which held copies each wait runs, and in what order.
Its schedules must be ones a GPU could take, or tests of the C loop would fail code that is right; and it must
hold what CUDA lets a GPU hold, or they would pass code that is wrong."""

from __future__ import annotations

import attrs
import pytest

from rgpu.backends.fake_lag import NON_BLOCKING, LaggingDevice
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
    # (legacy NULL stream: work on a blocking stream waits for it, and so for every blocking stream before that)
    assert sorted(ran) == ["also", "blocking", "null"] and device.held == 1
    device.before(CTX, NON_BLOCKING_STREAM)
    assert ran[-1] == "non" and device.held == 0


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
    device, ran = device_with(("first", (CTX, None)))
    device.record(7, CTX, None)
    device.hold(CTX, None, lambda: ran.append("after"))
    device.hold(CTX, NON_BLOCKING_STREAM, lambda: ran.append("non"))
    device.reach(7)
    assert ran == ["first"] and device.held == 2
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
