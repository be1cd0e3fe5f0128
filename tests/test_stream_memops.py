"""Stream memory operations (protocol 1.8: STREAM_MEM_OP, STREAM_BATCH_MEM_OP) on the fake backend: writes land and
waits pass in stream order, deferred like launches; the fake's waits and their conditions; every wrong request a
hostile client can make is refused with INVALID_VALUE (or INVALID_HANDLE, NOT_SUPPORTED) and touches nothing; a
capture records them; the cuda backend hands the driver CUDA's own records; the C stand-in defers what the server
will take, refuses host memory, and against a server before 1.8 refuses the calls and says through the device
attributes that it offers none."""

from __future__ import annotations

import random
import struct
import subprocess
import sys
import time

import pytest

from rgpu import shims
from rgpu.backends.fake import FakeBackend
from rgpu.backends.fake_memops import _holds
from rgpu.cli import local_server
from rgpu.dispatch import dispatcher
from rgpu.errors import CudaError, Status
from rgpu.protocol import memops, ops
from rgpu.protocol.frames import FLAG_NO_REPLY, Frame, frame_bytes
from rgpu.serving.loop import next_action
from rgpu.session.handles import Kind
from rgpu.session.state import Session

from .conftest import wait_for_stats_record
from .test_graphs import mint
from .test_hostile_server import CorruptingProxy, _with
from .test_vmm import call, fails, read

W32, W64, WAIT32, WAIT64 = memops.WRITE_VALUE_32, memops.WRITE_VALUE_64, memops.WAIT_VALUE_32, memops.WAIT_VALUE_64
BARRIER, FLUSH = memops.BARRIER, memops.FLUSH_REMOTE_WRITES
SIZE = 60  # (not a multiple of 8: a 64-bit word at 56 runs past the end)


def records(*operations) -> bytes:
    return b"".join(ops.STREAM_BATCH_MEM_OP.request_item.pack(*op) for op in operations)


class Pair:
    """Two sessions of one fake GPU, each with a context, a stream and SIZE bytes (the other's memory is the
    foreign memory a hostile client names)."""

    def __init__(self):
        backend = FakeBackend()
        self.s, self.other = Session(1, backend), Session(2, backend)
        for s in (self.s, self.other):
            call(s, ops.CTX_CREATE, 0, 0)
        (self.p,) = call(self.s, ops.MEM_ALLOC, SIZE)
        (self.foreign,) = call(self.other, ops.MEM_ALLOC, SIZE)
        (self.stream,) = call(self.s, ops.STREAM_CREATE, 0)
        call(self.other, ops.MEMSET_D8, self.foreign, 0x5A, SIZE)

    def one(self, operation, flags, address, value, stream=None):
        return call(self.s, ops.STREAM_MEM_OP, self.stream if stream is None else stream, operation, flags, address,
                    value)

    def batch(self, *operations, flags=0, count=None):
        return call(self.s, ops.STREAM_BATCH_MEM_OP, self.stream, len(operations) if count is None else count, flags,
                    bulk=records(*operations))

    def words(self) -> bytes:
        return read(self.s, self.p, SIZE)

    def untouched(self) -> bool:
        return read(self.other, self.foreign, SIZE) == b"\x5a" * SIZE

    def close(self):
        for s in (self.s, self.other):
            s.release_all()


@pytest.fixture
def pair():
    p = Pair()
    yield p
    p.close()


# -- what they do ---------------------------------------------------------------------------------------
async def test_writes_and_waits_queue_in_order_and_land(client):
    ctx = await client.primary_ctx_retain(0)
    await client.ctx_set_current(ctx)
    p = await client.mem_alloc(64)
    await client.memset_d8(p, 0, 64)
    producer, consumer = await client.stream_create(1), await client.stream_create(1)
    await client.stream_mem_op(W32, p, 0xCAFEF00D, stream=producer)
    await client.stream_mem_op(W64, p + 8, 2**64 - 2, stream=producer)
    await client.stream_mem_op(WAIT32, p, 0xCAFEF00D, memops.WAIT_EQ, stream=consumer)
    await client.stream_batch_mem_op([(WAIT64, memops.WAIT_AND, p + 8, 2), (BARRIER, memops.BARRIER_GPU, 0, 0),
                                      (W32, 0, p + 16, 9)], stream=consumer)
    await client.stream_synchronize(consumer)
    assert struct.unpack("<I4xQI", await client.memcpy_dtoh(p, 20)) == (0xCAFEF00D, 2**64 - 2, 9)


async def test_a_wait_nothing_queued_before_it_satisfies_fails_at_the_next_synchronization(client):
    """The fake cannot hold the stream back for a write queued later: the wait fails NOT_SUPPORTED, reported as a
    deferred failure; the stream's later work runs."""
    ctx = await client.primary_ctx_retain(0)
    await client.ctx_set_current(ctx)
    p = await client.mem_alloc(8)
    await client.memset_d8(p, 0, 8)
    await client.stream_mem_op(WAIT32, p, 1)
    await client.stream_mem_op(W32, p + 4, 3)
    with pytest.raises(CudaError) as e:
        await client.stream_synchronize()
    assert e.value.code == Status.NOT_SUPPORTED and e.value.deferred
    assert await client.memcpy_dtoh(p, 8) == bytes(4) + struct.pack("<I", 3)


@pytest.mark.parametrize("condition,current,value,width,holds", [
    (memops.WAIT_GEQ, 5, 5, 4, True), (memops.WAIT_GEQ, 4, 5, 4, False),
    (memops.WAIT_GEQ, 0x10, 0xFFFFFFF0, 4, True),  # cyclic: 0x10 is 0x20 past 0xFFFFFFF0
    (memops.WAIT_GEQ, 0xFFFFFFF0, 0x10, 4, False), (memops.WAIT_GEQ, 0x10, 0xFFFFFFF0, 8, False),
    (memops.WAIT_GEQ, 1, 2**64 - 1, 8, True), (memops.WAIT_EQ, 7, 7, 4, True), (memops.WAIT_EQ, 7, 8, 8, False),
    (memops.WAIT_AND, 0x10, 0x30, 4, True), (memops.WAIT_AND, 0x10, 0x20, 4, False),
    (memops.WAIT_NOR, 0x10, 0x0F, 4, True), (memops.WAIT_NOR, 0xFFFF0000, 0xFFFF, 4, False),
    (memops.WAIT_NOR, 0xFFFF0000, 0xFFFF, 8, True),  # (the high 32 bits of a 64-bit word are 0)
])
def test_wait_conditions(pair, condition, current, value, width, holds):
    assert _holds(condition, current, value, width) is holds
    write, wait = (W32, WAIT32) if width == 4 else (W64, WAIT64)
    pair.one(write, 0, pair.p, current)
    if holds:
        pair.one(wait, condition, pair.p, value)
    else:
        assert fails(Status.NOT_SUPPORTED, pair.s, ops.STREAM_MEM_OP, pair.stream, wait, condition, pair.p, value)


def test_a_satisfied_wait_keeps_its_stream_busy_until_the_write_lands(pair):
    """As an event would: the write's stream was busy (a long kernel) when it was queued."""
    (other,) = call(pair.s, ops.STREAM_CREATE, 0)
    _, producer = pair.s.stream(pair.stream)
    _, consumer = pair.s.stream(other)
    producer.busy_until = time.monotonic() + 3600  # (nothing waits for it: the session is released unsynchronized)
    pair.one(W32, 0, pair.p, 1)
    pair.one(WAIT32, memops.WAIT_EQ, pair.p, 1, stream=other)
    assert consumer.busy_until == producer.busy_until
    assert fails(Status.NOT_READY, pair.s, ops.STREAM_QUERY, other)


def test_the_fake_remembers_a_bounded_number_of_landing_times(pair):
    _, producer = pair.s.stream(pair.stream)
    producer.busy_until = time.monotonic() + 3600  # (none of them has landed)
    (big,) = call(pair.s, ops.MEM_ALLOC, 4 * 5000)
    for i in range(5000):
        pair.one(W32, 0, big + 4 * i, i)
    assert len(pair.s.backend._landed) <= 4096
    assert read(pair.s, big + 4 * 4999, 4) == struct.pack("<I", 4999)


def test_remote_write_flushes_are_not_offered_and_a_refused_batch_runs_nothing(pair):
    assert call(pair.s, ops.DEVICE_GET_ATTRIBUTE, 98, 0) == (0,)
    assert [call(pair.s, ops.DEVICE_GET_ATTRIBUTE, a, 0)[0] for a in (92, 93, 94, 122, 123)] == [1] * 5
    for operations in ([(W32, 0, pair.p, 1), (FLUSH, 0, 0, 0)],
                       [(W32, 0, pair.p, 1), (WAIT32, memops.WAIT_FLUSH, pair.p, 1)]):
        fails(Status.NOT_SUPPORTED, pair.s, ops.STREAM_BATCH_MEM_OP, pair.stream, 2, 0, bulk=records(*operations))
    assert pair.words() == bytes(SIZE)


def test_what_the_device_attributes_deny_is_not_supported(pair, monkeypatch):
    from rgpu.backends import fake

    monkeypatch.setitem(fake.ATTRIBUTES, 122, 0)
    monkeypatch.setitem(fake.ATTRIBUTES, 123, 0)
    for op in ((W64, 0, pair.p, 1), (WAIT64, 0, pair.p, 0), (WAIT32, memops.WAIT_NOR, pair.p, 1)):
        fails(Status.NOT_SUPPORTED, pair.s, ops.STREAM_MEM_OP, pair.stream, *op)
    pair.one(WAIT32, memops.WAIT_EQ, pair.p, 0)
    assert pair.words() == bytes(SIZE)


def test_captured_operations_run_when_the_graph_runs(pair):
    s, graph, exe = pair.s, mint(Kind.GRAPH), mint(Kind.GRAPH_EXEC)
    call(s, ops.STREAM_BEGIN_CAPTURE, pair.stream, 0, graph)
    pair.one(W32, 0, pair.p, 42)
    pair.batch((WAIT32, memops.WAIT_EQ, pair.p, 42), (W64, 0, pair.p + 8, 43))
    call(s, ops.STREAM_END_CAPTURE, pair.stream, graph)
    assert pair.words() == bytes(SIZE)  # recorded, not run
    count, = call(s, ops.GRAPH_GET_NODES, graph)
    assert count == 2
    call(s, ops.GRAPH_INSTANTIATE, graph, exe, 0)
    call(s, ops.GRAPH_LAUNCH, exe, pair.stream)
    assert struct.unpack_from("<I4xQ", pair.words()) == (42, 43)


def test_the_node_type_of_a_captured_operation_is_a_batch_memory_operation():
    from rgpu.backends.fake_graphs import BATCH_MEM_OP

    assert BATCH_MEM_OP == 12  # CU_GRAPH_NODE_TYPE_BATCH_MEM_OP


# -- wrong requests ---------------------------------------------------------------------------------------
WRONG_ONES = {  # name -> (fields of STREAM_MEM_OP, status), addresses relative to the session's memory ("p")
    "unknown operation": ((7, 0, 0, 0), Status.INVALID_VALUE),
    "operation 0": ((0, 0, 0, 0), Status.INVALID_VALUE),
    "a barrier is no call of its own": ((BARRIER, 0, 0, 0), Status.INVALID_VALUE),
    "a flush is no call of its own": ((FLUSH, 0, 0, 0), Status.INVALID_VALUE),
    "wait flag 4": ((WAIT32, 4, "p", 0), Status.INVALID_VALUE),
    "wait flag 1 << 29": ((WAIT64, 1 << 29, "p", 0), Status.INVALID_VALUE),
    "write flag 2": ((W32, 2, "p", 0), Status.INVALID_VALUE),
    "NO_MEMORY_BARRIER (not in the v2 API)": ((W64, memops.WRITE_NO_MEMORY_BARRIER, "p", 0), Status.INVALID_VALUE),
    "misaligned 32-bit write": ((W32, 0, "p+2", 0), Status.INVALID_VALUE),
    "misaligned 64-bit wait": ((WAIT64, 0, "p+4", 0), Status.INVALID_VALUE),
    "a 32-bit value of 33 bits": ((W32, 0, "p", 1 << 32), Status.INVALID_VALUE),
    "a 64-bit word past the end": ((W64, 0, "p+56", 0), Status.INVALID_VALUE),
    "just past the end": ((W32, 0, "p+60", 0), Status.INVALID_VALUE),
    "another session's memory": ((W32, 0, "foreign", 0), Status.INVALID_VALUE),
    "a wait on another session's memory": ((WAIT32, 0, "foreign", 0), Status.INVALID_VALUE),
    "address 0": ((W32, 0, 0, 0), Status.INVALID_VALUE),
    "an address nobody was given": ((W64, 0, 0x7000_0000_0000, 0), Status.INVALID_VALUE),
}


def _resolve(pair, fields):
    places = {"p": pair.p, "p+2": pair.p + 2, "p+4": pair.p + 4, "p+56": pair.p + 56, "p+60": pair.p + 60,
              "foreign": pair.foreign}
    return tuple(places.get(f, f) if isinstance(f, str) else f for f in fields)


@pytest.mark.parametrize("name", sorted(WRONG_ONES))
def test_a_wrong_operation_is_refused_alone_and_in_a_batch(pair, name):
    fields, status = WRONG_ONES[name]
    op = _resolve(pair, fields)
    error = fails(status, pair.s, ops.STREAM_MEM_OP, pair.stream, *op)
    assert error.message
    if op[0] not in (BARRIER, FLUSH):  # (those two are fine in a batch)
        good = (W32, 0, pair.p, 1)
        fails(status, pair.s, ops.STREAM_BATCH_MEM_OP, pair.stream, 3, 0, bulk=records(good, op, good))
    assert pair.words() == bytes(SIZE) and pair.untouched()


@pytest.mark.parametrize("count,bulk_ops,flags,extra", [
    (0, 0, 0, b""), (1, 0, 0, b""), (1, 2, 0, b""), (2, 1, 0, b""), (1, 1, 0, b"x"), (1, 1, 1, b""),
    (256, 256, 0, b""), (2**32 - 1, 1, 0, b""),
])
def test_a_batch_of_the_wrong_size_or_flags_is_refused(pair, count, bulk_ops, flags, extra):
    bulk = records(*[(W32, 0, pair.p, 1)] * bulk_ops) + extra
    fails(Status.INVALID_VALUE, pair.s, ops.STREAM_BATCH_MEM_OP, pair.stream, count, flags, bulk=bulk)
    assert pair.words() == bytes(SIZE)


def test_batch_only_operations_take_their_own_flags_and_nothing_else(pair):
    for bad in ((BARRIER, 2, 0, 0), (BARRIER, 0, pair.p, 0), (FLUSH, 1, 0, 0), (FLUSH, 0, 0, 5)):
        fails(Status.INVALID_VALUE, pair.s, ops.STREAM_BATCH_MEM_OP, pair.stream, 1, 0, bulk=records(bad))
    pair.batch((BARRIER, memops.BARRIER_SYS, 0, 0), (BARRIER, memops.BARRIER_GPU, 0, 0))


def test_streams_bulk_and_argument_sizes(pair):
    fails(Status.INVALID_HANDLE, pair.s, ops.STREAM_MEM_OP, 0x1234, W32, 0, pair.p, 1)
    (theirs,) = call(pair.other, ops.STREAM_CREATE, 0)
    fails(Status.INVALID_HANDLE, pair.s, ops.STREAM_MEM_OP, theirs, W32, 0, pair.p, 1)
    fails(Status.INVALID_VALUE, pair.s, ops.STREAM_MEM_OP, pair.stream, W32, 0, pair.p, 1, bulk=b"\0" * 24)
    for op, args in ((ops.STREAM_MEM_OP, bytes(31)), (ops.STREAM_BATCH_MEM_OP, bytes(17))):
        status, _, _ = dispatcher.call(pair.s, Frame(op.code, 1, args=args))
        assert status == Status.PROTOCOL_ERROR
    assert pair.words() == bytes(SIZE) and pair.untouched()


def test_deferred_failures_come_back_with_the_next_reply_and_the_session_goes_on(pair):
    good, bad = (W32, 0, pair.p, 7), (W32, 0, pair.foreign, 7)
    frames = [frame_bytes(Frame(ops.STREAM_MEM_OP.code, 10, FLAG_NO_REPLY,
                                args=ops.STREAM_MEM_OP.pack_request(pair.stream, *bad))),
              frame_bytes(Frame(ops.STREAM_BATCH_MEM_OP.code, 11, FLAG_NO_REPLY,
                                args=ops.STREAM_BATCH_MEM_OP.pack_request(pair.stream, 1, 0), bulk=records(good)))]
    next_action(pair.s, Frame(ops.BATCH.code, 12, FLAG_NO_REPLY, bulk=b"".join(frames)), 1 << 20).run()
    reply = next_action(pair.s, Frame(ops.NOP.code, 13), 1 << 20).run()
    assert reply.deferred_status == Status.INVALID_VALUE
    assert pair.words()[:4] == struct.pack("<I", 7) and pair.untouched()


def test_arbitrary_requests_never_fail_inside_the_server_or_reach_other_memory(pair):
    rng = random.Random(8)
    interesting = [0, 1, 4, 8, pair.p, pair.p + 4, pair.p + 56, pair.p + 60, pair.foreign, pair.stream, 2**63,
                   2**64 - 1]
    small = [0, 1, 2, 3, 4, 5, 6, 7, 255, 256, 1 << 29, 1 << 30, 2**32 - 1]
    for i in range(3000):
        op = rng.choice((ops.STREAM_MEM_OP, ops.STREAM_BATCH_MEM_OP))
        values = [rng.choice(interesting if f.size == 8 else small) if rng.random() < 0.9 else rng.getrandbits(8 * f.size)
                  for f in op.request_fields]
        bulk = b""
        if op is ops.STREAM_BATCH_MEM_OP:
            bulk = records(*[(rng.choice(small[:8]), rng.choice(small), rng.choice(interesting),
                              rng.choice(interesting)) for _ in range(rng.choice((0, 1, 2, 3)))])
            bulk = bulk[:len(bulk) - rng.choice((0, 0, 0, 1, 24))] if bulk else bulk
        status, message, _ = dispatcher.call(pair.s, Frame(op.code, i, args=op.pack_request(*values), bulk=bulk))
        assert status != Status.UNKNOWN, (op.name, values, message)
    assert pair.untouched()


# -- the cuda backend, without a GPU ----------------------------------------------------------------------
_PARAMS_C = r"""
#include <stdio.h>
#include <string.h>
#include <cuda.h>
int main(void)
{
    CUstreamBatchMemOpParams p[4];
    memset(p, 0, sizeof p);
    p[0].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32, p[0].writeValue.address = 0x7f0000001000ull;
    p[0].writeValue.value = 0xCAFEF00Du, p[0].writeValue.flags = CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER;
    p[1].waitValue.operation = CU_STREAM_MEM_OP_WAIT_VALUE_64, p[1].waitValue.address = 0x7f0000001008ull;
    p[1].waitValue.value64 = 0x123456789ABCDEF0ull, p[1].waitValue.flags = CU_STREAM_WAIT_VALUE_EQ;
    p[2].memoryBarrier.operation = CU_STREAM_MEM_OP_BARRIER, p[2].memoryBarrier.flags = CU_STREAM_MEMORY_BARRIER_TYPE_GPU;
    p[3].flushRemoteWrites.operation = CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES;
    for (size_t i = 0; i < sizeof p; i++)
        printf("%02x", ((unsigned char *)p)[i]);
    return 0;
}
"""


class _RecordingDriver:
    def __init__(self):
        self.calls = []

    def __getattr__(self, name):
        return lambda *args: self.calls.append((name, args)) or 0


def test_the_cuda_backend_calls_the_drivers_own_entry_points_with_its_records(tmp_path, monkeypatch):
    cuda_memops = pytest.importorskip("rgpu.backends.cuda_memops", exc_type=ImportError)
    source, exe = tmp_path / "params.c", tmp_path / "params"
    source.write_text(_PARAMS_C)
    subprocess.run(["gcc", f"-I{shims.cuda_include(13)}", str(source), "-o", str(exe)], check=True)
    driver = _RecordingDriver()
    monkeypatch.setattr(cuda_memops, "driver", lambda ffi: driver)
    backend = cuda_memops.CudaMemOps()
    batch = [memops.MemOp(W32, memops.WRITE_NO_MEMORY_BARRIER, 0x7F0000001000, 0xCAFEF00D),
             memops.MemOp(WAIT64, memops.WAIT_EQ, 0x7F0000001008, 0x123456789ABCDEF0),
             memops.MemOp(BARRIER, memops.BARRIER_GPU, 0, 0), memops.MemOp(FLUSH, 0, 0, 0)]
    backend.stream_mem_ops(0x10, 0x20, batch, True)
    backend.stream_mem_ops(0x10, None, batch[1:2], False)
    (_, set_current), (name, (stream, count, params, flags)), _, single = driver.calls
    assert set_current == (0x10,) and (name, stream, count, flags) == ("cuStreamBatchMemOp_v2", 0x20, 4, 0)
    records = bytes(cuda_memops._ffi.buffer(params, count * cuda_memops.PARAMS_SIZE))
    assert records.hex() == subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout
    assert single == ("cuStreamWaitValue64_v2", (0, 0x7F0000001008, 0x123456789ABCDEF0, memops.WAIT_EQ))


# -- the C stand-in ----------------------------------------------------------------------------------------
_CHILD = """
import ctypes, sys
cu = ctypes.CDLL(sys.argv[1])
dev, ctx, p, s, host = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_uint64(), ctypes.c_void_p(), ctypes.c_void_p()
assert cu.cuInit(0) == 0 and cu.cuDeviceGet(ctypes.byref(dev), 0) == 0
attrs = []
for a in (92, 93, 94, 98, 122, 123):
    v = ctypes.c_int(-1)
    assert cu.cuDeviceGetAttribute(ctypes.byref(v), a, dev) == 0
    attrs.append(v.value)
print("attributes", attrs)
assert cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) == 0 and cu.cuCtxSetCurrent(ctx) == 0
assert cu.cuMemAlloc_v2(ctypes.byref(p), 64) == 0 and cu.cuStreamCreate(ctypes.byref(s), 1) == 0
assert cu.cuMemsetD8_v2(p, 0, ctypes.c_size_t(64)) == 0
u64 = ctypes.c_uint64
write32, wait32, write64 = cu.cuStreamWriteValue32_v2, cu.cuStreamWaitValue32_v2, cu.cuStreamWriteValue64_v2
print("write", write32(s, p, 5, 0), write64(s, u64(p.value + 8), u64(2**40), 0), wait32(s, p, 5, 1))
params = (ctypes.c_uint64 * 6 * 2)()
params[0][0], params[0][1], params[0][2] = 2, p.value + 16, 6  # WRITE_VALUE_32
params[1][0], params[1][1], params[1][2] = 1, p.value + 16, 6  # WAIT_VALUE_32 (GEQ)
print("batch", cu.cuStreamBatchMemOp_v2(s, 2, params, 0))
print("synchronize", cu.cuStreamSynchronize(s))
back = ctypes.create_string_buffer(24)
assert cu.cuMemcpyDtoH_v2(back, p, ctypes.c_size_t(24)) == 0
print("words", back.raw.hex())
assert cu.cuMemAllocHost_v2(ctypes.byref(host), 64) == 0
print("refused", write32(s, u64(host.value), 1, 0), write32(s, u64(p.value + 2), 1, 0), wait32(s, p, 0, 4),
      write32(s, u64(0x10), 1, 0), cu.cuStreamBatchMemOp_v2(s, 256, params, 0), cu.cuStreamBatchMemOp_v2(s, 1, params, 1))
print("after", cu.cuStreamSynchronize(s))
"""


def _child(shim_dir, tmp_path, address, stats=None):
    script = tmp_path / "child.py"
    script.write_text(_CHILD)
    env = shims.environment(shim_dir)
    env["RGPU_SERVER"] = address
    res = subprocess.run([sys.executable, str(script), str(shim_dir / "libcuda.so.1")], env=env, capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
    return dict(line.split(" ", 1) for line in res.stdout.splitlines()), res.stderr


def test_the_c_stand_in_defers_what_the_server_takes_and_refuses_the_rest_at_the_call(shim_dir, tmp_path):
    import json

    stats = tmp_path / "stats.jsonl"
    with local_server("fake", ["--log-level", "warning", "--stats-file", str(stats)]) as address:
        out, err = _child(shim_dir, tmp_path, address)
        wait_for_stats_record(stats, 10)
    assert out["attributes"] == "[1, 1, 1, 0, 1, 1]"
    assert out["write"] == "0 0 0" and out["batch"] == "0" and out["synchronize"] == "0"
    assert out["words"] == (struct.pack("<I4xQI", 5, 2**40, 6) + bytes(4)).hex()
    # host memory NOT_SUPPORTED (logged), then INVALID_VALUE from the server at the call for each of the rest
    assert out["refused"] == "801 1 1 1 1 1" and out["after"] == "0"
    assert "stream memory operations on host memory" in err
    record = json.loads(stats.read_text().splitlines()[0])
    assert record["calls_by_op"]["STREAM_MEM_OP"] == 6 and record["calls_by_op"]["STREAM_BATCH_MEM_OP"] == 2
    # the good ones deferred; only those the server refused were waited for (the 256 never left the client)
    assert record["blocking_by_op"]["STREAM_MEM_OP"] == 3 and record["blocking_by_op"]["STREAM_BATCH_MEM_OP"] == 1


def test_a_server_before_1_8_offers_none_and_the_calls_are_not_supported(shim_dir, tmp_path):
    def older(frame):
        hello = ops.HELLO.decode_reply(frame.args)._replace(minor=7)
        return _with(frame, args=ops.HELLO.pack_reply(*hello))

    with local_server("fake", ["--log-level", "warning"]) as address:
        proxy = CorruptingProxy(address, ops.HELLO.code, older)
        try:
            out, err = _child(shim_dir, tmp_path, proxy.address)
            assert proxy.corrupted.is_set()
        finally:
            proxy.close()
    assert out["attributes"] == "[0, 0, 0, 0, 0, 0]"
    assert out["write"] == "801 801 801" and out["batch"] == "801"
    assert "stream memory operations needs a server of protocol 1.8 or later; this one speaks 1.7" in err
