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
from rgpu.protocol import ops, runs
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
            if name == "launch_kernel" and args[-1] == ffi.NULL:  # (the lane's own fill: its plan and dst)
                params = args[9]
                plan, dst = (ffi.cast("unsigned long long *", params[i])[0] for i in (0, 1))
                args = (*args[:9], plan, dst)
            elif name == "launch_kernel":
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
    assert ring.next == 2 and list(ring.pending[0:4]) == [1, 2, 3, 4]  # (each on its own event: 1 + its slot)


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


def lane_runs(s, monkeypatch) -> list[tuple[int, int]]:
    """(from, to) of each run of the session's C lane from now on: which records it ran, told apart from those the
    Python path ran."""
    ran = []
    real = s.lane._lib

    class Spy:
        def __getattr__(self, name):
            return getattr(real, name)

        def rgpu_lane_run(self, the_lane, view, length, pos, ctx, capture, stop):
            real.rgpu_lane_run(the_lane, view, length, pos, ctx, capture, stop)
            ran.append((pos, stop.pos))

    monkeypatch.setattr(s.lane, "_lib", Spy())
    return ran


def test_in_a_session_the_lane_runs_what_python_bound_with_the_same_effect(fake_session, monkeypatch):
    s = fake_session
    ran = lane_runs(s, monkeypatch)
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


def test_in_a_session_only_removing_a_handle_the_lane_was_bound_with_makes_it_forget(fake_session, monkeypatch):
    """An event made and destroyed between steps (timing code) leaves the lane's bindings be; destroying the stream
    one was made for drops them, and a record naming it is Python's again (which fails it)."""
    s = fake_session
    ran = lane_runs(s, monkeypatch)
    forgets = []
    real_forget = s.lane.forget
    monkeypatch.setattr(s.lane, "forget", lambda: (forgets.append(1), real_forget()))
    ptr = _call(s, ops.MEM_ALLOC, 64).dptr
    stream = _call(s, ops.STREAM_CREATE, 0).stream
    fill = memset(ops.MEMSET_D32_ASYNC, ptr, 5, 16, stream=stream, request_id=10)
    _batch(s, [fill])  # Python runs it and binds the stream
    for _ in range(3):
        event = _call(s, ops.EVENT_CREATE, 0).event
        _call(s, ops.EVENT_DESTROY, event)
        _batch(s, [fill])
        assert ran[-1] == (0, len(fill))  # still in C
    assert not forgets and not s.take_deferred_error()
    _call(s, ops.STREAM_DESTROY, stream)
    _batch(s, [fill])
    assert forgets and ran[-1] == (0, 0) and s.take_deferred_error()


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


# -- cuDNN's batch norm in inference (native/src/lane/dnn.c) -------------------------------------------------
DNN_HANDLE = 0x0B00_0000_0000_0007


def tensor(dtype: int, dims: tuple, pad: int = 0) -> bytes:
    """A tensor descriptor as on the wire (72 bytes), packed strides; `pad` fills the unused slots."""
    strides = [1] * len(dims)
    for i in range(len(dims) - 2, -1, -1):
        strides[i] = strides[i + 1] * dims[i + 1]
    rest = [pad] * (8 - len(dims))
    return struct.pack("<II8i8i", dtype, len(dims), *dims, *rest, *strides, *rest)


X32 = tensor(0, (1, 2, 2, 2))  # 8 floats, 32 bytes
STATS = tensor(0, (1, 2, 1, 1))  # 2 floats, 8 bytes
BN_SHAPE = X32 + X32 + STATS


class DnnRecorder:
    """rgpu_lane_dnn of callbacks that record what reaches cuDNN (scaling factors read as `doubles` says);
    `fail`: the status cudnnBatchNormalizationForwardInference returns."""

    def __init__(self, doubles: bool = False):
        self.calls: list[tuple] = []
        self.fail = 0
        kind = "double *" if doubles else "float *"

        def set_stream(handle, stream):
            self.calls.append(("set_stream", _int(handle), _int(stream)))
            return 0

        def bn(handle, mode, alpha, beta, xd, x, yd, y, bnd, scale, bias, mean, var, epsilon):
            factors = (ffi.cast(kind, alpha)[0], ffi.cast(kind, beta)[0])
            self.calls.append(("bn", _int(handle), mode, *factors,
                               *(_int(p) for p in (xd, x, yd, y, bnd, scale, bias, mean, var)), epsilon))
            return self.fail

        def execute(handle, plan, pack):
            self.calls.append(("execute", _int(handle), _int(plan), _int(pack)))
            return self.fail

        self.table = ffi.new("rgpu_lane_dnn *")
        self._keep = [ffi.callback("int(void *, void *)", set_stream),
                      ffi.callback("int(void *, int, const void *, const void *, void *, const void *, void *, void *,"
                                   " void *, const void *, const void *, const void *, const void *, double)", bn),
                      ffi.callback("int(void *, void *, void *)", execute)]
        self.table.set_stream, self.table.bn_inference, self.table.execute = self._keep


def _int(pointer) -> int:
    return int(ffi.cast("uintptr_t", pointer))


def bn_record(request_id=5, handle=DNN_HANDLE, stream=STREAM, y=0x1020, bulk=BN_SHAPE, alpha=1.0, beta=0.5):
    return record(ops.DNN_BN_INFERENCE, request_id, handle, stream, 1, alpha, beta, 1e-5, 0x1000, y, 0x1040, 0x1048,
                  0x1050, 0x1058, bulk=bulk)


def bind_bn(fast, dnn, shape=BN_SHAPE, ctx=0x10, doubles=0, sizes=(32, 32, 8)):
    return fast._lib.rgpu_lane_bind_batch_norm(fast._lane, dnn.table, DNN_HANDLE, shape, len(shape), ctx, 0xAA,
                                               0xB1, 0xB2, 0xB3, *sizes, doubles)


def test_batch_norms_of_a_bound_shape_reach_cudnn_with_its_descriptors_on_the_records_stream(fast, driver):
    dnn = DnnRecorder()
    fast.set_regions([(0x1000, 0x100)])
    fast.bind_stream(STREAM, 0, 0x10, 0x30)
    assert bind_bn(fast, dnn) == 0
    batch = bn_record() + bn_record(6, alpha=2.0, beta=0.0)
    assert run(fast, batch).pos == len(batch)
    one = (0xAA, 1, 1.0, 0.5, 0xB1, 0x1000, 0xB2, 0x1020, 0xB3, 0x1040, 0x1048, 0x1050, 0x1058, 1e-5)
    assert dnn.calls == [("set_stream", 0xAA, 0x30), ("bn", *one), ("set_stream", 0xAA, 0x30),
                         ("bn", 0xAA, 1, 2.0, 0.0, *one[4:])]
    assert driver.named("ctx_set_current") == [(0x10,), (0x10,)]


def test_batch_norms_the_lane_leaves_to_python_untouched(fast, driver):
    """Another shape (its unused descriptor slots differ: bytes, not meaning, decide), another handle, a range
    past the session's memory, an unbound stream or one of another context, a record cut short: declined before
    cuDNN sees anything. So is a call cuDNN refuses, after it: Python runs it again and reports cuDNN's error."""
    dnn = DnnRecorder()
    fast.set_regions([(0x1000, 0x100)])
    fast.bind_stream(STREAM, 0, 0x10, 0x30)
    fast.bind_stream(STREAM + 1, 0, 0x11, 0x31)
    bind_bn(fast, dnn)
    for batch in (bn_record(bulk=X32 + tensor(0, (1, 2, 2, 2), pad=1) + STATS), bn_record(handle=DNN_HANDLE + 1),
                  bn_record(y=0x10F0), bn_record(stream=STREAM + 2), bn_record(stream=STREAM + 1),
                  bn_record(bulk=BN_SHAPE[:-1])):
        stop = run(fast, batch)
        assert (stop.pos, stop.status) == (0, 0), batch
    assert dnn.calls == []
    dnn.fail = 3000  # CUDNN_STATUS_NOT_SUPPORTED
    stop = run(fast, bn_record())
    assert (stop.pos, stop.status) == (0, 0) and [c[0] for c in dnn.calls] == ["set_stream", "bn"]
    fast.forget()
    dnn.fail, dnn.calls = 0, []
    fast.bind_stream(STREAM, 0, 0x10, 0x30)
    assert run(fast, bn_record()).pos == 0 and dnn.calls == []  # forgotten with every other binding


def test_doubles_take_double_scaling_factors(fast, driver):
    dnn = DnnRecorder(doubles=True)
    fast.set_regions([(0x1000, 0x100)])
    fast.bind_stream(STREAM, 0, 0x10, 0x30)
    x64 = tensor(1, (1, 2, 1, 2))  # 4 doubles
    shape = x64 + x64 + tensor(1, (1, 2, 1, 1))
    bind_bn(fast, dnn, shape, doubles=1, sizes=(32, 32, 16))
    assert run(fast, bn_record(bulk=shape, alpha=0.1, beta=0.7)).pos > 0
    assert dnn.calls[1][3:5] == (0.1, 0.7)  # (as floats they would have been rounded)


PLAN = 0x0C00_0000_0000_0009
PACK = (struct.pack("<H", 2) + struct.pack("<III2Q", 1001, 6, 2, 0x1000, 0x1080)  # data pointers, a workspace
        + struct.pack("<IIIQ", 1002, 6, 1, 0x10C0))


def execute_record(request_id=7, handle=DNN_HANDLE, plan=PLAN, stream=STREAM, pack=PACK):
    return record(ops.DNN_EXECUTE, request_id, handle, plan, stream, bulk=pack)


def bind_execute(fast, dnn, pack=PACK, ranges=((0x1000, 1), (0x1080, 1), (0x10C0, 0x40)), ctx=0x10):
    starts, sizes = ffi.new("uint64_t[]", [r[0] for r in ranges]), ffi.new("uint64_t[]", [r[1] for r in ranges])
    return fast._lib.rgpu_lane_bind_dnn_execute(fast._lane, dnn.table, DNN_HANDLE, PLAN, pack, len(pack), ctx, 0xAA,
                                                0xC1, 0xD1, starts, sizes, len(ranges))


def test_executions_of_a_bound_pack_reach_cudnn_with_the_lanes_own_pack(fast, driver):
    dnn = DnnRecorder()
    fast.set_regions([(0x1000, 0x100)])
    fast.bind_stream(STREAM, 0, 0x10, 0x30)
    assert bind_execute(fast, dnn) == 0
    batch = execute_record() + execute_record(8)
    assert run(fast, batch).pos == len(batch)
    assert dnn.calls == [("set_stream", 0xAA, 0x30), ("execute", 0xAA, 0xC1, 0xD1)] * 2


def test_executions_the_lane_leaves_to_python_untouched(fast, driver):
    """Another pack (one byte), plan or handle; a range it names gone from the session's memory; an unbound stream
    or one of another context: declined before cuDNN sees anything; a call cuDNN refuses, after it."""
    dnn = DnnRecorder()
    fast.set_regions([(0x1000, 0x100)])
    fast.bind_stream(STREAM, 0, 0x10, 0x30)
    fast.bind_stream(STREAM + 1, 0, 0x11, 0x31)
    bind_execute(fast, dnn)
    other = bytearray(PACK)
    other[-1] ^= 1
    for batch in (execute_record(pack=bytes(other)), execute_record(plan=PLAN + 1),
                  execute_record(handle=DNN_HANDLE + 1), execute_record(stream=STREAM + 2),
                  execute_record(stream=STREAM + 1), execute_record(pack=PACK[:-1])):
        stop = run(fast, batch)
        assert (stop.pos, stop.status) == (0, 0), batch
    fast.set_regions([(0x1000, 0x80)])  # (the workspace at 0x10C0 freed)
    assert run(fast, execute_record()).pos == 0
    assert dnn.calls == []
    fast.set_regions([(0x1000, 0x100)])
    dnn.fail = 3000
    stop = run(fast, execute_record())
    assert (stop.pos, stop.status) == (0, 0) and [c[0] for c in dnn.calls] == ["set_stream", "execute"]
    fast.forget()
    dnn.calls = []
    fast.bind_stream(STREAM, 0, 0x10, 0x30)
    assert run(fast, execute_record()).pos == 0 and dnn.calls == []


def test_a_pack_too_long_or_naming_too_many_ranges_is_not_bound(fast, driver):
    dnn = DnnRecorder()
    assert bind_execute(fast, dnn, pack=bytes(2049)) == -1
    assert bind_execute(fast, dnn, ranges=[(0x1000, 1)] * 33) == -1
    assert bind_execute(fast, dnn, ranges=[(0x1000, 1)] * 32) == 0
    assert all(bind_execute(fast, dnn, pack=PACK + bytes([i])) == 0 for i in range(255))  # 256 in all
    assert bind_execute(fast, dnn, pack=PACK + b"full") == -1


def test_in_a_session_batch_norms_run_in_the_lane_once_python_ran_one(fake_session, monkeypatch):
    """The first batch norm of a shape is Python's and binds it; the next run in C with the same result; one whose
    output range runs past its allocation C leaves to Python, which refuses it."""
    s = fake_session
    ran = lane_runs(s, monkeypatch)
    handle = _call(s, ops.DNN_CREATE).handle
    x, y, z, scale, bias, mean, var = (_call(s, ops.MEM_ALLOC, 64).dptr for _ in range(7))
    values = {x: struct.pack("<8f", *range(8)), scale: struct.pack("<2f", 2.0, 3.0), bias: struct.pack("<2f", 1, -1),
              mean: struct.pack("<2f", 1.0, 2.0), var: struct.pack("<2f", 4.0, 9.0)}
    for ptr, data in values.items():
        _call(s, ops.MEMCPY_HTOD, ptr, bulk=data)

    def bn(request_id, out):
        return record(ops.DNN_BN_INFERENCE, request_id, handle, 0, 1, 1.0, 0.0, 1e-5, x, out, scale, bias, mean, var,
                      bulk=BN_SHAPE)

    def read(ptr):
        reply = next_action(s, Frame(ops.MEMCPY_DTOH.code, 3, args=ops.MEMCPY_DTOH.pack_request(ptr, 32)),
                            MAX_RECORD).run()
        return struct.unpack("<8f", reply.bulk)

    _batch(s, [bn(10, y)])  # Python's (nothing bound yet): it binds the shape and the NULL stream
    assert ran[-1] == (0, 0)
    _batch(s, [bn(11, z), bn(12, z)])
    assert ran[-1] == (0, 2 * len(bn(11, z)))  # both in C
    assert read(z) == read(y) == pytest.approx(
        [(v - m) / (vv + 1e-5) ** 0.5 * sc + b for v, m, vv, sc, b in
         zip(range(8), [1.0] * 4 + [2.0] * 4, [4.0] * 4 + [9.0] * 4, [2.0] * 4 + [3.0] * 4, [1.0] * 4 + [-1.0] * 4)])
    assert s.calls_by_op[ops.DNN_BN_INFERENCE.code] == 3 and not s.take_deferred_error()
    _batch(s, [bn(13, z + 48)])  # 16 bytes left of z's 64: C leaves it, Python refuses it
    assert ran[-1] == (0, 0) and s.take_deferred_error()


def runs_record(dst, size, coded, stream=STREAM, request_id=7):
    return record(ops.MEMCPY_HTOD_RUNS, request_id, dst, stream, size, bulk=coded)


def test_a_coded_copy_is_filled_by_the_rings_kernel_only_into_an_allocation_of_its_context(fast, driver, ring):
    """A plan in the slots, the kernel launched on the bound stream and the slots marked -- where the ring has the
    kernel, the copy is of whole words to an aligned place, and the region is an allocation of the stream's
    context; decoded into the slots and copied otherwise."""
    one_run = runs.SEGMENT.pack(0, 4) + runs.RUN.pack(5, 2)  # 4 words: 5, 7, 9, 11
    decoded = b"".join(v.to_bytes(8, "little") for v in (5, 7, 9, 11))
    ring.runs_fill = 0xF1
    fast.set_regions([(0x1000, 0x100)], [0x10])
    assert run(fast, runs_record(0x1000, 32, one_run)).status == 0
    (fill,) = driver.named("launch_kernel")
    plan_at = fill[9]
    assert fill[:9] == (0xF1, 1, 1, 1, 256, 1, 1, 0, 0x30) and fill[10] == 0x1000
    assert bytes(ffi.buffer(ffi.cast("char *", plan_at), 32)) == struct.pack("<QQQII", 5, 2, 0, 0, 4)
    assert driver.named("memcpy_htod_async") == [] and driver.named("event_record")
    for regions, fills, dst in [([(0x1000, 0x100)], [0x11], 0x1000),  # another context's allocation
                                ([(0x1000, 0x100)], None, 0x1000),  # a module's global
                                ([(0x1000, 0x100)], [0x10], 0x1004)]:  # not aligned
        driver.calls.clear()
        fast.set_regions(regions, fills)
        assert run(fast, runs_record(dst, 32, one_run)).status == 0
        assert driver.named("launch_kernel") == []
        assert driver.named("memcpy_htod_async")[0][:3] == (dst, decoded, 32)
    driver.calls.clear()
    fast.set_regions([(0x1000, 0x100)], [0x10])
    ring.runs_fill = 0  # no kernel in this ring
    assert run(fast, runs_record(0x1000, 32, one_run)).status == 0
    assert driver.named("launch_kernel") == [] and len(driver.named("memcpy_htod_async")) == 1
    driver.calls.clear()
    ring.runs_fill, ring.fill_min = 0xF1, 40  # a kernel, but for bigger copies only
    assert run(fast, runs_record(0x1000, 32, one_run)).status == 0
    assert driver.named("launch_kernel") == [] and len(driver.named("memcpy_htod_async")) == 1
    ring.fill_min = 32
    assert run(fast, runs_record(0x1000, 32, one_run)).status == 0
    assert len(driver.named("launch_kernel")) == 1


def test_a_coded_copy_the_lane_cannot_plan_or_decode_is_pythons(fast, driver, ring):
    ring.runs_fill = 0xF1
    fast.set_regions([(0x1000, 0x100)], [0x10])
    many = b"".join(runs.SEGMENT.pack(1, 4) + bytes(8) + runs.RUN.pack(0, 1) for _ in range(2))  # a 144-byte plan
    for coded, size in [(many, 80), (runs.SEGMENT.pack(0, 4) + runs.RUN.pack(5, 2), 40)]:  # too big; a word short
        batch = runs_record(0x1000, size, coded)
        assert run(fast, batch).pos == 0
    assert [c[0] for c in driver.calls] == ["ctx_set_current"] * 2  # (nothing queued)

