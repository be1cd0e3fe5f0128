"""The fast lane against the Python path, on hostile batches: two fake sessions, one with the lane and one
without, get the same random mix of good and bad records (unbound and foreign handles, ranges outside or
across allocations, wrong parameter sizes, launch attributes the lane must leave to Python, missing NO_REPLY,
calls that may not be deferred), with allocations freed and streams destroyed and remade between batches. After
every step both must agree: the same deferred failures (status, operation, request), the same protocol errors,
the same operation counts, the same device memory to the byte."""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rgpu.backends.fake import FakeBackend
from rgpu.errors import ProtocolError
from rgpu.kernels import load
from rgpu.protocol import memops, ops
from rgpu.protocol.frames import FLAG_NO_REPLY, Frame, frame_bytes
from rgpu.serving.loop import next_action
from rgpu.session.state import Session

MAX_RECORD = 2 << 20  # (above the C loop's buffer: frames too big for it must still be legal)
BUFFER = 256
PDL = struct.pack("<I4x", 6) + b"\1".ljust(64, b"\0")  # PROGRAMMATIC_STREAM_SERIALIZATION: plain data
EVENT = struct.pack("<I4x", 7) + struct.pack("<Q", 0x8500_0000_0000_0001).ljust(64, b"\0")  # an unknown event
WRITE_BACK = struct.pack("<I4x", 13) + bytes(64)


class Side:
    """One session and the names the steps use for its objects (its handles differ from the other side's)."""

    def __init__(self, with_lane: bool):
        self.s = Session(1, FakeBackend())
        if not with_lane:
            self.s.lane.close()
            self.s.lane = None
        self.failures: list[tuple] = []
        self.driver_refusals: list[tuple] = []  # the lane's: a range the fake driver itself had to refuse
        self.s.defer_error = self._deferred
        self.ctx = self.call(ops.CTX_CREATE, 0, 0).ctx
        module = self.call(ops.MODULE_LOAD_DATA, bulk=load("demo.ptx")).module
        self.fn = self.call(ops.MODULE_GET_FUNCTION, module, bulk=b"fill").function
        self.streams = [self.call(ops.STREAM_CREATE, 0).stream]
        self.buffers = [self.call(ops.MEM_ALLOC, BUFFER).dptr for _ in range(3)]
        self.dnn = self.call(ops.DNN_CREATE).handle
        self.freed: set[int] = set()

    def _deferred(self, code, what, request_id, message=""):
        self.failures.append((code, what, request_id))
        if code == 1 and message.startswith("cu"):  # INVALID_VALUE from a driver call the lane made
            self.driver_refusals.append((what, request_id, message))

    def call(self, op, *fields, bulk=b""):
        status, values = self.try_call(op, *fields, bulk=bulk)
        assert not status, (op.name, status)
        return values

    def try_call(self, op, *fields, bulk=b""):
        """(status, decoded reply or None): a kernel fault earlier makes the context's later calls fail."""
        reply = next_action(self.s, Frame(op.code, 1, args=op.pack_request(*fields), bulk=bulk), MAX_RECORD).run()
        return reply.status, None if reply.status else op.decode_reply(reply.args)

    # symbolic operands -> this session's values
    def stream(self, which: int) -> int:
        return {0: 0, 1: self.streams[-1], 2: 0x0400_0000_0000_0099}[which]

    def pointer(self, buffer: int, offset: int) -> int:
        return self.buffers[buffer % len(self.buffers)] + offset

    def function(self, good: bool) -> int:
        return self.fn if good else self.fn ^ 1

    def memory(self) -> list[bytes | None]:
        view = self.s.backend._view
        return [None if ptr in self.freed else bytes(view(ptr, BUFFER)) for ptr in self.buffers]


# A record: (kind, operands); operands are symbolic, resolved per side.
_streams = st.sampled_from([0, 1, 1, 1, 2])
_offsets = st.sampled_from([0, 4, 128, BUFFER - 4, BUFFER - 2, BUFFER, BUFFER + 64])
_counts = st.sampled_from([0, 1, 2, 3, 16, 63, 64, 65, 200])
_buffers = st.integers(0, 5)
_mem_ops = st.tuples(st.sampled_from([memops.WRITE_VALUE_32, memops.WRITE_VALUE_64, memops.WAIT_VALUE_32,
                                      memops.WAIT_VALUE_64, memops.BARRIER]), st.sampled_from([0, 1, 2, 3]),
                     _buffers, _offsets, st.sampled_from([0, 1, 0x01010101, 1 << 40]))
records = st.one_of(
    st.tuples(st.just("launch"), st.booleans(), _streams, _buffers, _offsets, st.sampled_from([1, 8, 60, 64, 100]),
              st.sampled_from([0, 0, 0, -4, 4]), st.sampled_from([True] * 9 + [False])),  # False: no NO_REPLY
    st.tuples(st.just("launch_ex"), st.lists(st.sampled_from([PDL, PDL, EVENT, WRITE_BACK]), max_size=3), _streams,
              _buffers, _offsets, st.sampled_from([0, 0, 4])),
    st.tuples(st.just("memset8"), _buffers, _offsets, _counts, _streams, st.integers(0, 0x1FF)),
    st.tuples(st.just("memset32"), _buffers, _offsets, _counts, _streams, st.integers(0, 0xFFFFFFFF)),
    st.tuples(st.just("htod"), _buffers, _offsets, st.sampled_from([0, 1, 16, 100, 300]), _streams, st.binary(min_size=1, max_size=8)),
    st.tuples(st.just("sync"), _streams),
    st.tuples(st.just("set_ctx"), st.booleans()),
    st.tuples(st.just("not_deferrable"), _buffers),
    # a cuDNN batch norm: the right handle or not, x and y anywhere (y's range may run past its buffer), a shape
    # the lane may bind, the same with other bytes in the unused descriptor slots, doubles, or one Python refuses
    st.tuples(st.just("bn"), st.booleans(), _buffers, _buffers, _offsets, _streams,
              st.sampled_from(["float", "float", "padded", "double", "nine_dims"])),
    # stream memory operations (Python's, between the lane's records): writes and waits, wrong ones too (a wait
    # the fake cannot release, a misaligned or foreign address, a 32-bit value too wide); and batches of them
    st.tuples(st.just("mem_op"), st.lists(_mem_ops, min_size=1, max_size=1), _streams),
    st.tuples(st.just("mem_batch"), st.lists(_mem_ops, min_size=1, max_size=4), _streams),
)
steps = st.one_of(
    st.tuples(st.just("batch"), st.lists(records, min_size=1, max_size=12)),
    st.tuples(st.just("free"), st.integers(0, 2)),
    st.tuples(st.just("new_stream")),
    st.tuples(st.just("alloc")),
)


def encode(side: Side, record, request_id: int) -> bytes:
    kind, *a = record

    def frame(op, *fields, bulk=b"", flags=FLAG_NO_REPLY):
        return frame_bytes(Frame(op.code, request_id, flags, args=op.pack_request(*fields), bulk=bulk))

    if kind == "launch":
        good, stream, buf, off, n, size_delta, no_reply = a
        params = struct.pack("<QfI", side.pointer(buf, off), 1.5, n)
        params = params[:size_delta] if size_delta < 0 else params + bytes(size_delta)
        return frame(ops.LAUNCH_KERNEL, side.function(good), 1, 1, 1, 64, 1, 1, 0, side.stream(stream), bulk=params,
                     flags=FLAG_NO_REPLY if no_reply else 0)
    if kind == "launch_ex":
        attributes, stream, buf, off, extra = a
        params = struct.pack("<QfI", side.pointer(buf, off), 2.5, 8) + bytes(extra)
        return frame(ops.LAUNCH_KERNEL_EX, side.fn, 1, 1, 1, 8, 1, 1, 0, side.stream(stream), len(attributes),
                     bulk=b"".join(attributes) + params)
    if kind in ("memset8", "memset32"):
        buf, off, count, stream, value = a
        op = ops.MEMSET_D8_ASYNC if kind == "memset8" else ops.MEMSET_D32_ASYNC
        return frame(op, side.pointer(buf, off), value, count, side.stream(stream))
    if kind == "htod":
        buf, off, size, stream, pattern = a
        data = (pattern * (size // len(pattern) + 1))[:size]
        return frame(ops.MEMCPY_HTOD_ASYNC, side.pointer(buf, off), side.stream(stream), bulk=data)
    if kind == "sync":
        return frame(ops.STREAM_SYNCHRONIZE, side.stream(a[0]))
    if kind == "set_ctx":
        return frame(ops.CTX_SET_CURRENT, side.ctx if a[0] else 0)
    if kind in ("mem_op", "mem_batch"):
        operations, stream = a
        resolved = [(op, flags & 1 if op == memops.BARRIER else flags, 0 if op == memops.BARRIER else
                     side.pointer(buf, off), 0 if op == memops.BARRIER else value)
                    for op, flags, buf, off, value in operations]
        if kind == "mem_op":
            return frame(ops.STREAM_MEM_OP, side.stream(stream), *resolved[0])
        return frame(ops.STREAM_BATCH_MEM_OP, side.stream(stream), len(resolved), 0,
                     bulk=b"".join(ops.STREAM_BATCH_MEM_OP.request_item.pack(*r) for r in resolved))
    if kind == "bn":
        good, x_buf, y_buf, y_off, stream, shape = a
        stats = [side.pointer(0, BUFFER - 64 + 16 * i) for i in range(4)]  # (16 bytes: two doubles each)
        return frame(ops.DNN_BN_INFERENCE, side.dnn if good else side.dnn ^ 1, side.stream(stream), 1, 1.0, 0.25,
                     1e-5, side.pointer(x_buf, 0), side.pointer(y_buf, y_off), *stats, bulk=_bn_tensors(shape))
    return frame(ops.MEM_FREE, side.pointer(a[0], 0))  # not deferrable: refused, deferred


def _bn_tensors(shape: str) -> bytes:
    """x, y and the statistics' descriptors (NCHW 1x2x2x2, statistics 1x2x1x1) as on the wire."""
    dtype = 1 if shape == "double" else 0

    def tensor(dims, strides, pad=0):
        rest = [pad] * (8 - len(dims))
        n = 9 if shape == "nine_dims" else len(dims)
        return struct.pack("<II8i8i", dtype, n, *dims, *rest, *strides, *rest)

    x = tensor((1, 2, 2, 2), (8, 4, 2, 1), pad=7 if shape == "padded" else 0)
    return x + x + tensor((1, 2, 1, 1), (2, 1, 1, 1))


def run_step(side: Side, step) -> str:
    kind, *a = step
    if kind == "batch":
        bulk = b"".join(encode(side, r, 100 + i) for i, r in enumerate(a[0]))
        try:
            next_action(side.s, Frame(ops.BATCH.code, 2, bulk=bulk), MAX_RECORD).run()
        except ProtocolError as e:
            return f"protocol error: {e}"
        return "ok"
    if kind == "free":
        ptr = side.buffers[a[0]]
        if ptr in side.freed:
            return "ok"
        status, _ = side.try_call(ops.MEM_FREE, ptr)
        if not status:
            side.freed.add(ptr)
        return f"free: {status}"
    if kind == "new_stream":
        status, _ = side.try_call(ops.STREAM_DESTROY, side.streams[-1])
        created, reply = side.try_call(ops.STREAM_CREATE, 0)
        if not created:
            side.streams.append(reply.stream)
        return f"new stream: {status} {created}"
    status, reply = side.try_call(ops.MEM_ALLOC, BUFFER)
    if not status:
        side.buffers.append(reply.dptr)
    return f"alloc: {status}"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(steps, min_size=1, max_size=8))
def test_the_lane_and_the_python_path_agree_on_hostile_batches(plan):
    lane_side, python_side = Side(True), Side(False)
    assert lane_side.s.lane is not None and python_side.s.lane is None
    try:
        for step in plan:
            assert run_step(lane_side, step) == run_step(python_side, step), step
            assert lane_side.failures == python_side.failures, step
            assert lane_side.s.calls_by_op == python_side.s.calls_by_op, step
            assert lane_side.memory() == python_side.memory(), step
            # The fake driver checks ranges too; a GPU's does not: the lane must never hand it one to refuse.
            assert not lane_side.driver_refusals, step
            assert not lane_side.s.lane.fake_driver.dnn_refusals, step
    finally:
        lane_side.s.release_all()
        python_side.s.release_all()


def test_the_two_sides_do_differ_in_who_runs_the_records():
    """The comparison above means something only if the lane really ran records on its side."""
    side = Side(True)
    ran = []
    real_run = side.s.lane.run
    side.s.lane.run = lambda *a: ran.append(real_run(*a)) or ran[-1]
    record = ("memset8", 0, 0, 16, 1, 7)
    assert run_step(side, ("batch", [record, record, record])) == "ok"
    assert ran[-1].pos > 0  # the second and third ran in C
    assert side.memory()[0][:16] == b"\7" * 16
    side.s.release_all()


@pytest.mark.parametrize("record", [("htod", 0, 0, 16, 1, b"ab"), ("launch", True, 1, 0, 0, 8, 0, True),
                                    ("bn", True, 0, 1, 0, 1, "float"), ("bn", True, 1, 2, 64, 0, "double")])
def test_a_bound_record_runs_in_the_lane_on_the_second_batch(record):  # (copies through the fake's ring)
    side = Side(True)
    stops = []
    real_run = side.s.lane.run
    side.s.lane.run = lambda *a: stops.append(real_run(*a)) or stops[-1]
    run_step(side, ("batch", [record]))
    run_step(side, ("batch", [record]))
    assert stops[-1].pos > 0  # bound by the first batch's Python run: the second ran in C
    side.s.release_all()


@pytest.mark.parametrize("bad", [("bn", True, 0, 1, BUFFER - 4, 1, "float"), ("bn", False, 0, 1, 0, 1, "float"),
                                 ("bn", True, 0, 1, 0, 2, "float"), ("bn", True, 0, 1, 0, 0, "float"),
                                 ("bn", True, 0, 1, 0, 1, "padded"), ("bn", True, 0, 1, 0, 1, "nine_dims")])
def test_batch_norms_after_a_bound_one_agree_when_they_differ_from_it(bad):
    """The hypothesis plans above seldom bind a batch norm and then send one unlike it; here each way it can differ
    (y past its buffer, another handle, a foreign or unbound stream, other descriptor bytes, a shape Python
    refuses) follows a bound one, on both sides; then x and y in memory freed since."""
    good = ("bn", True, 0, 1, 0, 1, "float")
    lane_side, python_side = Side(True), Side(False)
    try:
        for side in (lane_side, python_side):
            run_step(side, ("batch", [good]))
        x_freed = ("bn", True, 1, 0, 0, 1, "float")  # (x in buffer 1, freed by then)
        for step in (("batch", [good, bad, good]), ("free", 1), ("batch", [good, x_freed, good])):
            assert run_step(lane_side, step) == run_step(python_side, step), step
            assert lane_side.failures == python_side.failures, step
            assert lane_side.memory() == python_side.memory(), step
            assert not lane_side.s.lane.fake_driver.dnn_refusals, step
    finally:
        lane_side.s.release_all()
        python_side.s.release_all()


def test_stream_memory_operations_see_the_lanes_copies_in_stream_order():
    """The lane leaves a stream memory operation to Python, and the copies it holds back (the fake's lagging device)
    land before Python runs anything: a wait sees the value copied up just before it, a write after a copy wins."""
    copy = ("htod", 0, 0, 16, 1, b"\1")
    wait = ("mem_op", [(memops.WAIT_VALUE_32, memops.WAIT_EQ, 0, 0, 0x01010101)], 1)
    write = ("mem_op", [(memops.WRITE_VALUE_32, 0, 0, 4, 7)], 1)
    lane_side, python_side = Side(True), Side(False)
    stops = []
    real_run = lane_side.s.lane.run
    lane_side.s.lane.run = lambda *a: stops.append(real_run(*a)) or stops[-1]
    try:
        for side in (lane_side, python_side):
            run_step(side, ("batch", [copy]))  # (binds the stream for the lane)
            run_step(side, ("batch", [copy, wait, write]))
            assert side.failures == []
            assert side.memory()[0][:8] == b"\1" * 4 + b"\7\0\0\0"
        assert stops[-1].pos > 0  # the second batch's copy ran in C, held by the lagging device
    finally:
        lane_side.s.release_all()
        python_side.s.release_all()
