"""A device that runs the copy ring's device copies as late as CUDA lets it, for the fake backend's lane.

The fake runs every call at once, so on it a copy from a ring slot reads the slot before the C loop can reuse it,
and a copy up is in device memory before the next call, however the loop orders its waits. A GPU reads the slot
whenever its stream gets to the copy: a slot reused before its event said so, a copy back sent before its slot
landed, or a synchronous copy whose owed synchronize (lane_owe_sync) is skipped before work on another stream
passes CI here and corrupts data there. So the fake's lane driver hands its copies either way to this device,
which holds them and runs them only when CUDA's ordering makes them due:

- before anything else runs on their stream (in stream order), or on a stream the legacy NULL stream orders them
  with: within one context, work on the NULL stream waits for all work before it on blocking streams, and work on
  a blocking stream for all NULL-stream work before it -- so two blocking streams are ordered only through NULL-
  stream work between them -- while a non-blocking stream (CU_STREAM_NON_BLOCKING) orders only its own work;
- at a synchronize of their stream (or the context), or of an event recorded after them;
- when the C loop hands the socket back to Python, whose calls run on the fake at once (the device caught up then:
  a GPU may always run ahead, never behind).

Copies that become due together, on streams that do not order them, run the last queued first (a GPU may run
unordered streams in any order); with `eager_non_blocking`, a copy on a non-blocking stream with nothing held
ahead of it runs at once instead (a GPU may also run ahead): together they show a copy that should have waited
for a held one on another stream. Every schedule here is one a GPU could take.
"""

from __future__ import annotations

from collections.abc import Callable

import attrs

from rgpu.backends.fake_graphs import NON_BLOCKING


@attrs.define(slots=True)
class HeldCopy:
    """A device copy queued on `stream` (None: the context's NULL stream) of `ctx`, the `seq`-th held;
    `null_after`: the seq of the first copy on that context's NULL stream queued after it (on a blocking stream,
    what orders it before later work on other blocking streams)."""

    seq: int
    ctx: object
    stream: object
    run: Callable[[], None]
    null_after: int | None = None


def _non_blocking(stream) -> bool:
    return stream is not None and bool(stream.flags & NON_BLOCKING)


def _blocking(stream) -> bool:
    return stream is not None and not _non_blocking(stream)


def _ordered_after(held: HeldCopy, ctx, stream, issued: int) -> bool:
    """Whether work on `stream` of `ctx`, queued after the `issued`-th copy, runs after `held` in CUDA's stream
    order (legacy NULL stream semantics)."""
    if held.ctx is not ctx:
        return False
    if held.stream is stream:
        return True
    if _non_blocking(stream):
        return False
    if held.stream is None:  # (work on a blocking stream waits for the NULL stream's before it)
        return True
    if not _blocking(held.stream):
        return False
    if stream is None:  # (the NULL stream's work waits for every blocking stream's before it)
        return True
    return held.null_after is not None and held.null_after <= issued


class LaggingDevice:
    eager_non_blocking = False

    def __init__(self) -> None:
        self._held: list[HeldCopy] = []
        self._seq = 0
        self._events: dict[int, tuple[object, object, int]] = {}  # event -> (ctx, stream, last seq before it)

    @property
    def held(self) -> int:
        return len(self._held)

    def hold(self, ctx, stream, run: Callable[[], None]) -> None:
        self._seq += 1
        if self.eager_non_blocking and _non_blocking(stream) and not any(
                _ordered_after(h, ctx, stream, self._seq) for h in self._held):
            run()  # (nothing ahead of it on its stream)
            return
        if stream is None:
            for h in self._held:
                if h.ctx is ctx and _blocking(h.stream) and h.null_after is None:
                    h.null_after = self._seq
        self._held.append(HeldCopy(self._seq, ctx, stream, run))

    def record(self, event: int, ctx, stream) -> None:
        self._events[event] = (ctx, stream, self._seq)

    def reach(self, event: int) -> None:
        """An event's synchronize: what its stream held when it was recorded runs."""
        if event in self._events:
            ctx, stream, upto = self._events[event]
            self._run(lambda held: held.seq <= upto and _ordered_after(held, ctx, stream, upto))

    def before(self, ctx, stream) -> None:
        """Work on `stream` of `ctx` is about to run, or the stream is synchronized: what it waits for runs."""
        issued = self._seq
        self._run(lambda held: _ordered_after(held, ctx, stream, issued))

    def before_context(self, ctx) -> None:
        self._run(lambda held: held.ctx is ctx)

    def catch_up(self) -> None:
        self._run(lambda held: True)

    def forget_events(self) -> None:
        """The lane forgot its bindings (their contexts and streams may be gone): no mark of theirs is reached."""
        self._events.clear()

    def _run(self, due: Callable[[HeldCopy], bool]) -> None:
        # One at a time, each taken out before it runs, the latest whose stream lets it run first: one that fails
        # (its context broke) raises to the call that made it due, as the driver reports a failed copy at the next
        # wait, and leaves the rest held.
        while due_now := [h for h in self._held if due(h)]:
            ready = [h for h in due_now if not any(e.seq < h.seq and _ordered_after(e, h.ctx, h.stream, h.seq)
                                                   for e in self._held)]
            if not ready:  # (what is due is closed under stream order, so the earliest due is always ready)
                raise RuntimeError(f"held copies due out of stream order: {due_now}")
            held = max(ready, key=lambda h: h.seq)
            self._held.remove(held)
            held.run()
