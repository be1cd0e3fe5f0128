"""The worker's fast lane (native/src/lane) without a GPU: its driver is a recorder of cffi callbacks, so what
reaches each driver call -- and what never does -- is checked exactly. Then the lane inside a fake session, where
it runs what the Python path would have run, with the same outcome."""

from __future__ import annotations

import struct

import pytest

from rgpu.backends import lane
from rgpu.backends.base import MAX_PARAM_BYTES
from rgpu.backends.fake import FakeBackend
from rgpu.errors import ProtocolError
from rgpu.kernels import load
from rgpu.protocol import ops
from rgpu.protocol.frames import FLAG_NO_REPLY, Frame, frame_bytes
from rgpu.serving.loop import next_action
from rgpu.session.state import Session

MAX_RECORD = 1 << 20
FUNC, STREAM, CTX_KEY = 0x8300_0000_0000_0001, 0x0400_0000_0000_0002, 0x0100_0000_0000_0003
ffi = lane.ffi()


class Recorder:
    """rgpu_lane_driver of callbacks that record their arguments; `fail` maps a call's name to the CUresult it
    returns."""

    def __init__(self):
        self.calls: list[tuple] = []
        self.fail: dict[str, int] = {}
        self.table = ffi.new("rgpu_lane_driver *")
        self._keep = []
        sigs = {
            "ctx_set_current": "int(uintptr_t)",
            "launch_kernel": "int(uintptr_t, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,"
                             " uintptr_t, void **, void **)",
            "memcpy_htod_async": "int(unsigned long long, void *, size_t, uintptr_t)",
            "memset_d8_async": "int(unsigned long long, unsigned char, size_t, uintptr_t)",
            "memset_d32_async": "int(unsigned long long, unsigned int, size_t, uintptr_t)",
            "event_record": "int(uintptr_t, uintptr_t)",
            "event_synchronize": "int(uintptr_t)",
            "stream_synchronize": "int(uintptr_t)",
            "launch_kernel_ex": "int(rgpu_lane_launch_config *, uintptr_t, void **, void **)",
            "graph_launch": "int(uintptr_t, uintptr_t)",
        }
        for name, sig in sigs.items():
            callback = ffi.callback(sig, self._recorder(name))
            self._keep.append(callback)
            setattr(self.table, name, callback)

    def _recorder(self, name):
        def record(*args):
            if name == "launch_kernel":
                extra = args[-1]
                size = ffi.cast("size_t *", extra[3])[0]
                tags = [int(ffi.cast("uintptr_t", extra[i])) for i in (0, 2, 4)]
                args = (*args[:9], args[9] == ffi.NULL, tags, bytes(ffi.buffer(ffi.cast("char *", extra[1]), size)))
            elif name == "launch_kernel_ex":
                config, f, params, extra = args
                size = ffi.cast("size_t *", extra[3])[0]
                attrs = bytes(ffi.buffer(ffi.cast("char *", config.attrs), 72 * config.count))
                shape = (config.gx, config.gy, config.gz, config.bx, config.by, config.bz, config.shmem, config.stream)
                args = (f, *shape, params == ffi.NULL, attrs, bytes(ffi.buffer(ffi.cast("char *", extra[1]), size)))
            elif name == "memcpy_htod_async":
                args = (args[0], bytes(ffi.buffer(ffi.cast("char *", args[1]), args[2])), args[2], args[3])
            self.calls.append((name, *args))
            return self.fail.get(name, 0)
        return record

    def named(self, name):
        return [c[1:] for c in self.calls if c[0] == name]


@pytest.fixture
def driver():
    return Recorder()


@pytest.fixture
def fast(driver):
    rings = {}

    def ring_for(ctx):
        return rings.get(ctx, ffi.NULL)

    capture = [False]
    the_lane = lane.Lane(lane.library(), driver.table, MAX_PARAM_BYTES, ring_for, lambda: capture[0])
    the_lane.rings, the_lane.capture = rings, capture
    yield the_lane
    the_lane.close()


def record(op, request_id, *fields, bulk=b"", flags=FLAG_NO_REPLY) -> bytes:
    return frame_bytes(Frame(op.code, request_id, flags, args=op.pack_request(*fields), bulk=bulk))


def launch(request_id=1, func=FUNC, stream=STREAM, params=b"abcd", grid=(2, 1, 1)):
    return record(ops.LAUNCH_KERNEL, request_id, func, *grid, 64, 1, 1, 0, stream, bulk=params)


def run(the_lane, batch: bytes, current_ctx=0, pos=0):
    view = the_lane.view(batch)
    return the_lane.run(view, len(batch), pos, current_ctx)


def test_launches_reach_the_driver_with_the_bound_objects_and_the_bytes_as_sent(fast, driver):
    fast.bind_launch(FUNC, STREAM, 0x10, 0x20, 0x30, 4)
    batch = launch(1, params=b"abcd") + launch(2, params=b"wxyz", grid=(3, 2, 1))
    stop = run(fast, batch)
    assert (stop.pos, stop.status) == (len(batch), 0)
    assert driver.named("ctx_set_current") == [(0x10,), (0x10,)]
    first, second = driver.named("launch_kernel")
    assert first == (0x20, 2, 1, 1, 64, 1, 1, 0, 0x30, True, [1, 2, 0], b"abcd")
    assert second[1:4] == (3, 2, 1) and second[-1] == b"wxyz"
    assert fast.take_counts()[0][:2] == (ops.LAUNCH_KERNEL.code, 2)
    assert fast.take_counts() == []  # taken


def test_what_is_not_bound_or_does_not_check_out_is_left_untouched_for_python(fast, driver):
    fast.bind_launch(FUNC, STREAM, 0x10, 0x20, 0x30, 4)
    cases = [launch(func=FUNC + 1), launch(stream=0), launch(params=b"abc"),  # unbound pair, wrong size
             record(ops.LAUNCH_KERNEL, 5, FUNC, 1, 1, 1, 1, 1, 1, 0, STREAM, bulk=b"abcd", flags=0),  # wants a reply
             record(ops.MEM_FREE, 6, 0x1000)]  # not the lane's
    for bad in cases:
        batch = launch(1) + bad + launch(2)
        stop = run(fast, batch)
        assert (stop.pos, stop.status) == (len(launch(1)), 0)
    assert len(driver.named("launch_kernel")) == len(cases)  # only each batch's first launch ran


def attribute(ident: int, value: bytes, pad: bytes = bytes(4)) -> bytes:
    return struct.pack("<I", ident) + pad + value.ljust(64, b"\0")


def launch_ex(attributes: list[bytes], params=b"abcd", request_id=1, count=None):
    return record(ops.LAUNCH_KERNEL_EX, request_id, FUNC, 4, 1, 1, 32, 1, 1, 16, STREAM,
                  len(attributes) if count is None else count, bulk=b"".join(attributes) + params)


def test_launches_with_plain_attributes_pass_them_on_as_sent(fast, driver):
    fast.bind_launch(FUNC, STREAM, 0x10, 0x20, 0x30, 4)
    pdl = attribute(6, b"\1", pad=b"\xff" * 4)  # PROGRAMMATIC_STREAM_SERIALIZATION; padding the driver ignores
    cluster = attribute(4, struct.pack("<3I", 2, 1, 1))
    batch = launch_ex([pdl, cluster]) + launch_ex([])
    assert run(fast, batch).pos == len(batch)
    (first, second) = driver.named("launch_kernel_ex")
    assert first == (0x20, 4, 1, 1, 32, 1, 1, 16, 0x30, True, attribute(6, b"\1") + cluster, b"abcd")
    assert second[-2:] == (b"", b"abcd")
    assert fast.take_counts()[0][:2] == (ops.LAUNCH_KERNEL_EX.code, 2)


@pytest.mark.parametrize("bad", [
    launch_ex([attribute(7, struct.pack("<Q", 0x8500_0000_0000_0001))]),  # an event: Python translates it
    launch_ex([attribute(13, b"")]),  # writes a node handle back: Python refuses it
    launch_ex([attribute(99, b"")]),  # unknown
    launch_ex([attribute(6, b"\1")] * 17),  # more than the driver takes
    launch_ex([attribute(6, b"\1")], count=2),  # claims more attributes than it carries
    launch_ex([attribute(6, b"\1")], params=b"abc"),  # the wrong parameter size
])
def test_launches_with_other_attributes_are_pythons(fast, driver, bad):
    fast.bind_launch(FUNC, STREAM, 0x10, 0x20, 0x30, 4)
    assert run(fast, bad).pos == 0 and not driver.calls


def test_synchronizes_and_graph_launches_of_bound_streams_and_graphs(fast, driver):
    fast.bind_stream(STREAM, 0, 0x10, 0x30)
    fast.bind_graph(0x9700_0000_0000_0001, STREAM, 0x10, 0x77, 0x30)
    batch = (record(ops.GRAPH_LAUNCH, 1, 0x9700_0000_0000_0001, STREAM) + record(ops.STREAM_SYNCHRONIZE, 2, STREAM))
    assert run(fast, batch).pos == len(batch)
    assert driver.named("graph_launch") == [(0x77, 0x30)] and driver.named("stream_synchronize") == [(0x30,)]
    for bad in (record(ops.GRAPH_LAUNCH, 3, 0x9700_0000_0000_0001, 0),  # not bound on that stream
                record(ops.STREAM_SYNCHRONIZE, 4, 0)):  # the NULL stream, no context
        assert run(fast, bad).pos == 0
    driver.fail["stream_synchronize"] = 700
    stop = run(fast, record(ops.STREAM_SYNCHRONIZE, 5, STREAM))
    assert (stop.status, stop.opcode, stop.request_id, stop.what) == \
        (700, ops.STREAM_SYNCHRONIZE.code, 5, "cuStreamSynchronize")


def test_unknown_layout_takes_any_size_up_to_the_limit(fast, driver):
    fast.bind_launch(FUNC, STREAM, 0x10, 0x20, 0x30, None)
    assert run(fast, launch(params=b"x" * 12)).pos == len(launch(params=b"x" * 12))
    too_big = launch(params=b"x" * (MAX_PARAM_BYTES + 1))
    assert run(fast, too_big).pos == 0


def test_a_failed_driver_call_stops_after_its_record_with_its_status(fast, driver):
    fast.bind_launch(FUNC, STREAM, 0x10, 0x20, 0x30, 4)
    driver.fail["launch_kernel"] = 719
    batch = launch(7) + launch(8)
    stop = run(fast, batch)
    assert (stop.pos, stop.status, stop.opcode, stop.request_id, stop.what) == \
        (len(launch(7)), 719, ops.LAUNCH_KERNEL.code, 7, "cuLaunchKernel")
    driver.fail = {"ctx_set_current": 201}
    stop = run(fast, batch, pos=stop.pos)
    assert (stop.pos, stop.status, stop.what) == (len(batch), 201, "cuCtxSetCurrent")


def test_forget_drops_every_binding(fast, driver):
    fast.bind_launch(FUNC, STREAM, 0x10, 0x20, 0x30, 4)
    fast.forget()
    assert run(fast, launch()).pos == 0 and not driver.calls


def test_a_full_table_refuses_more_bindings_and_keeps_serving_those_it_has(fast, driver):
    lib = lane.library()
    bound = [fast._lib.rgpu_lane_bind_launch(fast._lane, FUNC + i, STREAM, 0x10, 0x20 + i, 0x30, 4)
             for i in range(600)]
    assert bound.count(0) == 512 and set(bound[512:]) == {-1} and lib is fast._lib
    assert run(fast, launch(func=FUNC + 511)).status == 0
    assert driver.named("launch_kernel")[-1][0] == 0x20 + 511
    assert run(fast, launch(func=FUNC + 512)).pos == 0


def memset(op, dst, value, count, stream=STREAM, request_id=3):
    return record(op, request_id, dst, value, count, stream)


def test_memsets_check_the_range_against_the_regions(fast, driver):
    fast.bind_stream(STREAM, 0, 0x10, 0x30)
    fast.set_regions([(0x1000, 0x100), (0x2000, 0x40)])
    ok = memset(ops.MEMSET_D8_ASYNC, 0x1010, 0x1AB, 0xF0) + memset(ops.MEMSET_D32_ASYNC, 0x2000, 7, 0x10)
    assert run(fast, ok).pos == len(ok)
    assert driver.named("memset_d8_async") == [(0x1010, 0xAB, 0xF0, 0x30)]  # the byte value, as C converts it
    assert driver.named("memset_d32_async") == [(0x2000, 7, 0x10, 0x30)]
    outside = [memset(ops.MEMSET_D8_ASYNC, 0x1010, 0, 0xF1), memset(ops.MEMSET_D32_ASYNC, 0x2000, 0, 0x11),
               memset(ops.MEMSET_D8_ASYNC, 0xFFF, 0, 1), memset(ops.MEMSET_D8_ASYNC, 0x1800, 0, 1),
               memset(ops.MEMSET_D32_ASYNC, 0x1000, 0, 1 << 62), memset(ops.MEMSET_D8_ASYNC, 0x1000, 0, 1, stream=9)]
    for bad in outside:
        assert run(fast, bad).pos == 0
    assert len(driver.calls) == 4  # two set_current, two memsets


def test_the_null_stream_is_the_current_contexts(fast, driver):
    fast.set_regions([(0x1000, 0x100)])
    fast.bind_stream(0, CTX_KEY, 0x11, None)
    batch = memset(ops.MEMSET_D8_ASYNC, 0x1000, 1, 1, stream=0)
    assert run(fast, batch, current_ctx=0).pos == 0  # no current context: Python's INVALID_CONTEXT
    assert run(fast, batch, current_ctx=CTX_KEY + 1).pos == 0  # another context's NULL stream is not bound
    assert run(fast, batch, current_ctx=CTX_KEY).pos == len(batch)
    assert driver.named("memset_d8_async") == [(0x1000, 1, 1, 0)]


@pytest.fixture
def ring(fast):
    """A ring of 4 slots of 16 bytes in ordinary memory, bound to STREAM in context 0x10."""
    slots = ffi.new("char[]", 64)
    r = ffi.new("rgpu_lane_ring *")
    r.base, r.slot_bytes, r.slots = slots, 16, 4
    for i in range(4):
        r.events[i] = 0xE0 + i
    fast.rings[0x10] = r
    fast.bind_stream(STREAM, 0, 0x10, 0x30)
    fast.set_regions([(0x1000, 0x100)])
    fast.ring_memory = slots  # alive as long as the lane
    return r


def htod(dst, data, stream=STREAM, request_id=4):
    return record(ops.MEMCPY_HTOD_ASYNC, request_id, dst, stream, bulk=data)


def test_small_copies_go_through_the_slots_and_wait_only_for_a_slot_coming_round(fast, driver, ring):
    batch = b"".join(htod(0x1000 + 16 * i, bytes([i]) * 16) for i in range(6))
    assert run(fast, batch).pos == len(batch)
    copies = driver.named("memcpy_htod_async")
    assert [c[1] for c in copies] == [bytes([i]) * 16 for i in range(6)] and {c[3] for c in copies} == {0x30}
    assert driver.named("event_record") == [(0xE0 + i % 4, 0x30) for i in range(6)]
    assert driver.named("event_synchronize") == [(0xE0,), (0xE1,)]  # slots 0 and 1, reused
    assert ring.next == 2 and list(ring.pending[0:4]) == [1, 1, 1, 1]


def test_copies_the_lane_leaves_to_python(fast, driver, ring):
    for bad in (htod(0x1000, b"x" * 17),  # bigger than a slot
                htod(0x10F8, b"x" * 9),  # past the region
                htod(0x1000, b"x", stream=0)):  # a stream not bound
        assert run(fast, bad).pos == 0
    fast.capture[0] = True  # a capture may be under way: a captured copy would read the slot at every replay
    assert run(fast, htod(0x1000, b"x")).pos == 0
    assert not driver.calls


def test_a_copy_whose_event_cannot_be_recorded_waits_for_the_stream(fast, driver, ring):
    driver.fail["event_record"] = 2
    stop = run(fast, htod(0x1000, b"abc"))
    assert (stop.status, stop.what) == (2, "cuEventRecord (copy ring)")
    assert driver.named("stream_synchronize") == [(0x30,)] and ring.pending[0] == 0


@pytest.mark.parametrize("cut", [1, 3, 5, 23])
def test_a_record_cut_short_is_never_read_past_its_end(fast, driver, cut):
    fast.bind_launch(FUNC, STREAM, 0x10, 0x20, 0x30, 4)
    batch = launch()[:-cut]
    view = fast.view(batch)
    assert not fast.check_batch(view, len(batch), MAX_RECORD)
    assert run(fast, batch).pos == 0 and not driver.calls


def test_check_batch_wants_exact_tiling_and_the_record_limit(fast):
    ok = launch() + launch()
    assert fast.check_batch(fast.view(ok), len(ok), MAX_RECORD)
    assert not fast.check_batch(fast.view(ok), len(ok), len(launch()) - 5)
    lying = struct.pack("<I", 1 << 30) + ok[4:]
    assert not fast.check_batch(fast.view(lying), len(lying), 1 << 31)


def test_every_opcode_the_lane_does_not_claim_is_declined(fast, driver):
    # Python skips asking the lane about these (dispatcher._run_batch_from): the lane must indeed never run one.
    assert ops.LAUNCH_KERNEL.code in fast.serves and ops.MEM_FREE.code not in fast.serves
    fast.bind_launch(FUNC, STREAM, 0x10, 0x20, 0x30, 4)
    for op in ops.OPS.values():
        if op.code in fast.serves:
            continue
        one = frame_bytes(Frame(op.code, 1, FLAG_NO_REPLY, args=bytes(op.request.size), bulk=b"abcd"))
        stop = run(fast, one)
        assert (stop.pos, stop.status) == (0, 0), op.name
    assert driver.calls == []


# -- inside a session -----------------------------------------------------------------------------
def _call(s, op, *fields, bulk=b""):
    reply = next_action(s, Frame(op.code, 1, args=op.pack_request(*fields), bulk=bulk), MAX_RECORD).run()
    assert not reply.status, reply.bulk
    return op.decode_reply(reply.args)


@pytest.fixture
def fake_session():
    s = Session(1, FakeBackend())
    assert s.lane is not None  # conftest loaded the library
    ctx = _call(s, ops.CTX_CREATE, 0, 0).ctx
    module = _call(s, ops.MODULE_LOAD_DATA, bulk=load("demo.ptx")).module
    s.test_ctx, s.test_module = ctx, module
    yield s
    s.release_all()


def _batch(s, records: list[bytes]):
    return next_action(s, Frame(ops.BATCH.code, 2, bulk=b"".join(records)), MAX_RECORD).run()


def test_in_a_session_the_lane_runs_what_python_bound_with_the_same_effect(fake_session, monkeypatch):
    s = fake_session
    ran = []
    real = s.lane._lib

    class Spy:  # which records the C lane ran, told apart from those the Python path ran
        def __getattr__(self, name):
            return getattr(real, name)

        def rgpu_lane_run(self, the_lane, view, length, pos, ctx, capture, stop):
            real.rgpu_lane_run(the_lane, view, length, pos, ctx, capture, stop)
            ran.append((pos, stop.pos))

    monkeypatch.setattr(s.lane, "_lib", Spy())
    ptr = _call(s, ops.MEM_ALLOC, 64).dptr
    n = 16
    first = memset(ops.MEMSET_D32_ASYNC, ptr, 5, n, stream=0, request_id=10)
    _batch(s, [first])  # Python runs it and binds the NULL stream
    again = memset(ops.MEMSET_D32_ASYNC, ptr, 9, n, stream=0, request_id=11)
    _batch(s, [again, again])
    assert ran[-1] == (0, 2 * len(again))  # both in C
    reply = next_action(s, Frame(ops.MEMCPY_DTOH.code, 3, args=ops.MEMCPY_DTOH.pack_request(ptr, 4 * n)),
                        MAX_RECORD).run()
    assert bytes(reply.bulk) == struct.pack("<16I", *[9] * 16)
    assert s.calls_by_op[ops.MEMSET_D32_ASYNC.code] == 3 and not s.take_deferred_error()
    outside = memset(ops.MEMSET_D32_ASYNC, ptr + 4, 1, n, stream=0, request_id=12)
    _batch(s, [again, outside])
    assert s.take_deferred_error()  # Python ran the one outside the allocation, and failed it
    _call(s, ops.MEM_FREE, ptr)  # gone from the lane's regions before its next run
    _batch(s, [again])
    assert ran[-1] == (0, 0) and s.take_deferred_error()


def test_in_a_session_a_malformed_batch_fails_before_anything_runs(fake_session):
    s = fake_session
    ptr = _call(s, ops.MEM_ALLOC, 64).dptr
    good = memset(ops.MEMSET_D8_ASYNC, ptr, 7, 64, stream=0)
    _batch(s, [good])
    with pytest.raises(ProtocolError):
        _batch(s, [memset(ops.MEMSET_D8_ASYNC, ptr, 1, 64, stream=0), good[:-1]])
    reply = next_action(s, Frame(ops.MEMCPY_DTOH.code, 3, args=ops.MEMCPY_DTOH.pack_request(ptr, 64)),
                        MAX_RECORD).run()
    assert bytes(reply.bulk) == b"\x07" * 64


def test_in_a_session_records_the_lane_never_runs_go_straight_to_python(fake_session, monkeypatch):
    s = fake_session
    ptr = _call(s, ops.MEM_ALLOC, 64).dptr
    tried = []
    real_run = s.lane.run
    monkeypatch.setattr(s.lane, "run", lambda view, end, pos, ctx: tried.append(pos) or real_run(view, end, pos, ctx))
    event = _call(s, ops.EVENT_CREATE, 0).event
    records = [memset(ops.MEMSET_D8_ASYNC, ptr, 3, 64, stream=0, request_id=20)]
    records += [record(ops.EVENT_RECORD, 21 + i, event, 0) for i in range(3)]  # Python's, one after another
    records += [memset(ops.MEMSET_D8_ASYNC, ptr, 4, 64, stream=0, request_id=30)]
    _batch(s, records)
    starts = [sum(map(len, records[:i])) for i in range(len(records))]
    assert tried == [0, starts[4]]  # never about the event records, which follow a record Python ran
    assert s.calls_by_op[ops.EVENT_RECORD.code] == 3 and not s.take_deferred_error()
    reply = next_action(s, Frame(ops.MEMCPY_DTOH.code, 3, args=ops.MEMCPY_DTOH.pack_request(ptr, 64)),
                        MAX_RECORD).run()
    assert bytes(reply.bulk) == b"\x04" * 64  # in order: the last memset ran after Python's records
