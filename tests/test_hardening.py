"""What a hostile client could do to the server (issue 14), each kept from happening: session slots taken by
concurrent HELLOs, memory and file descriptors before authentication, module globals past the session quota,
log amplification, a slot kept after GOODBYE, a frame never finished, unbounded work in the fake backend,
and a worker left busy for a client that is gone. Loopback only; no timing assertions beyond generous bounds
(each failure mode on the old code was unbounded or an order of magnitude past them)."""

from __future__ import annotations

import logging
import os
import pathlib
import signal
import struct
import subprocess
import sys
import time

import pytest
import trio

import rgpu
from rgpu.backends import fake, ptx
from rgpu.dispatch.dispatcher import execute_sync
from rgpu.errors import CudaError, ProtocolError, Status
from rgpu.protocol import ops
from rgpu.protocol.connection import HANDSHAKE_MAX_RECORD, Connection
from rgpu.protocol.frames import Flags, Frame, frame_bytes
from rgpu.protocol.handshake import ClientHandshake
from rgpu.serving import pool as worker_pool
from rgpu.session import state
from rgpu.session.state import Session

from .conftest import DEMO_PTX, TEST_PSK, running_server, wait_for
from .test_session import _raw_session, _read_frame

PORT = lambda address: int(address.split(":")[1])  # noqa: E731


def _ptx_with_global(nbytes: int, name: str = "big") -> bytes:
    return (b".version 8.0\n.target sm_90\n.address_size 64\n"
            b".visible .global .align 1 .b8 %s[%d];\n" % (name.encode(), nbytes))


# -- 1. --max-sessions against concurrent HELLOs ----------------------------------------------------
@pytest.mark.parametrize("psk", [None, TEST_PSK], ids=["plain", "psk"])
async def test_concurrent_hellos_get_no_more_sessions_than_the_limit(psk):
    async with running_server(max_sessions=2, psk=psk) as s:
        streams = [await trio.open_tcp_stream("127.0.0.1", PORT(s.address)) for _ in range(12)]
        for stream in streams:  # every HELLO is in before any handshake completes
            await stream.send_all(frame_bytes(ClientHandshake(psk).hello()))
        replies = [await _read_frame(stream) for stream in streams]
        admitted = [r for r in replies if r is not None and r.status == 0]
        refused = [r for r in replies if r is not None and r.status == Status.SESSION_LIMIT]
        assert len(admitted) == 2 and len(refused) == 10
        for stream in streams:
            await stream.aclose()
        # Slots of connections that left mid-handshake come back.
        await wait_for(lambda: s.server.slots.taken == 0)
        c = await s.connect(psk=psk)
        assert await c.device_count() == 1
        await c.aclose()


# -- 2. before authentication --------------------------------------------------------------------------
def test_handshake_connection_refuses_a_big_record_before_allocating_it():
    conn = Connection.for_handshake()
    with pytest.raises(ProtocolError) as e:
        conn.receive_data(struct.pack("<I", 64 << 20) + b"x")
    assert e.value.status == Status.FRAME_TOO_LARGE
    assert len(conn.get_buffer()) <= 2 * HANDSHAKE_MAX_RECORD
    hello = frame_bytes(ClientHandshake(TEST_PSK, agent="a" * 200).hello())
    assert len(hello) < HANDSHAKE_MAX_RECORD  # what real clients send fits, with room to spare


@pytest.mark.parametrize("isolation", ["thread", "process"])
async def test_a_huge_length_prefix_before_the_hello_is_refused_at_once(isolation):
    async with running_server(isolation=isolation, handshake_timeout=120) as s:
        raw = await trio.open_tcp_stream("127.0.0.1", PORT(s.address))
        await raw.send_all(struct.pack("<I", 64 << 20) + b"x")
        err = await _read_frame(raw)  # within 5 s; the old server waited for the 64 MiB it had allocated
        assert err.opcode == ops.PROTOCOL_ERROR.code and err.status == Status.FRAME_TOO_LARGE
        assert await _read_frame(raw) is None


async def test_oldest_stalled_handshakes_make_room_for_new_connections():
    async with running_server(max_handshakes=16, handshake_timeout=300) as s:
        stalled = []
        for _ in range(40):
            stream = await trio.open_tcp_stream("127.0.0.1", PORT(s.address))
            await stream.send_all(frame_bytes(ClientHandshake(None).hello())[:10])  # a HELLO, never finished
            stalled.append(stream)
        c = await s.connect()
        assert await c.device_count() == 1
        await c.aclose()
        closed = 0
        for stream in stalled[:24]:  # the 24 oldest were closed to keep 16 in the handshake
            with trio.move_on_after(10):
                closed += await stream.receive_some() == b""
        assert closed == 24 and s.server.admission.evicted >= 24
        for stream in stalled:
            await stream.aclose()


STALLED = 200


def test_a_client_connects_promptly_past_stalled_connections_at_a_low_open_file_limit(tmp_path):
    """The old server, at its open-file limit, stopped accepting until stalled handshakes timed out."""
    port_file = tmp_path / "port"
    server = subprocess.Popen(
        [sys.executable, "-c", "import sys; from rgpu.cli import server_main; sys.exit(server_main())", "--backend", "fake", "--isolation", "thread", "--port", "0",
         "--port-file", str(port_file), "--handshake-timeout", "600", "--log-level", "warning"],
        preexec_fn=lambda: __import__("resource").setrlimit(__import__("resource").RLIMIT_NOFILE, (128, 128)),
        stderr=subprocess.DEVNULL)
    import socket

    stalled = []
    try:
        deadline = time.monotonic() + 60
        while not port_file.exists():
            assert time.monotonic() < deadline and server.poll() is None
            time.sleep(0.05)
        address = f"127.0.0.1:{int(port_file.read_text())}"
        for _ in range(STALLED):
            sock = socket.create_connection(("127.0.0.1", PORT(address)))
            sock.sendall(frame_bytes(ClientHandshake(None).hello())[:10])  # a HELLO, never finished
            stalled.append(sock)

        async def legitimate():
            with trio.fail_after(30):  # the old server: 600 s, until stalled handshakes time out
                c = await rgpu.connect_async(address)
                assert await c.device_count() == 1
                await c.aclose()

        trio.run(legitimate)
    finally:
        for sock in stalled:
            sock.close()
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


# -- 3. module globals count against --session-mem-limit ------------------------------------------------
async def test_module_globals_count_against_the_session_memory_limit():
    # Thread isolation: the test reads the session's quota accounting in this process.
    async with running_server(session_mem_limit=1 << 20, isolation="thread") as s:
        c = await s.connect()
        with pytest.raises(CudaError) as e:
            await c.module_load(_ptx_with_global(512 << 20))
        assert e.value.code == Status.OUT_OF_MEMORY
        mod = await c.module_load(_ptx_with_global(600 << 10))
        with pytest.raises(CudaError) as e:
            await c.module_load(_ptx_with_global(600 << 10, "other"))  # two would exceed the limit
        assert e.value.code == Status.OUT_OF_MEMORY
        with pytest.raises(CudaError):
            await c.mem_alloc(600 << 10)  # the global's bytes are taken
        free, total = await c.mem_get_info()
        assert total == 1 << 20 and free == (1 << 20) - (600 << 10)
        await c.module_unload(mod)
        mod = await c.module_load(_ptx_with_global(600 << 10, "other"))  # its bytes are back
        session = s.server.sessions[c.session_id]
        assert session.memory.charged["module globals"] == 600 << 10
        await c.aclose()


def test_destroying_a_context_gives_back_what_its_modules_were_charged():
    session = Session(1, fake.FakeBackend(), mem_limit=1 << 20)
    ctx = _call(session, ops.CTX_CREATE, 0, 0)[0]
    _call(session, ops.MODULE_LOAD_DATA, bulk=_ptx_with_global(1000))
    _call(session, ops.MODULE_LOAD_DATA, bulk=DEMO_PTX)
    assert session.memory.allocated == 1000 + ptx.image_device_bytes(DEMO_PTX)
    _call(session, ops.CTX_DESTROY, ctx)
    assert session.memory.allocated == 0 and session.backend.used == 0


def test_charge_and_release_are_one_quota_for_every_kind_of_device_memory():
    session = Session(1, fake.FakeBackend(), mem_limit=1000)
    session.charge_memory(600, "pool")
    with pytest.raises(CudaError) as e:
        session.charge_memory(500, "graph")
    assert e.value.code == Status.OUT_OF_MEMORY and "pool 600" in e.value.message
    assert session.memory.allocated == 600  # a refused charge counts nothing
    session.release_memory(600, "pool")
    session.charge_memory(1000, "graph")


@pytest.mark.parametrize("kind", ["cubin", "fatbin"])
def test_cubin_and_fatbin_globals_are_read_from_their_sections(kind, tmp_path):
    """An uninitialised __device__ array takes no bytes in the cubin; its section table still says how big."""
    import shutil

    if shutil.which("nvcc") is None:
        pytest.skip("needs nvcc")
    src = tmp_path / "g.cu"
    src.write_text("__device__ char big[1 << 22];\n__global__ void k(int *p) { p[0] = big[p[1]]; }\n")
    out = tmp_path / f"g.{kind}"
    flags = ["-cubin", "-arch=sm_90"] if kind == "cubin" else ["--fatbin", "-gencode", "arch=compute_90,code=sm_90"]
    subprocess.run(["nvcc", *flags, "-o", str(out), str(src)], check=True, timeout=300)
    image = out.read_bytes()
    assert len(image) < 1 << 16 and ptx.image_device_bytes(image) >= 1 << 22


# -- 4. failing deferred calls do not flood the log ----------------------------------------------------
def test_failed_deferred_calls_are_summarised_not_logged_one_by_one(caplog):
    session = Session(1, fake.FakeBackend())
    _call(session, ops.PRIMARY_CTX_RETAIN, 0)
    bad = Frame(ops.MEM_FREE.code, 1, Flags.NO_REPLY, args=ops.MEM_FREE.request.pack(0xDEAD))
    t0 = time.monotonic()
    with caplog.at_level(logging.INFO, logger="rgpu.session"):
        for _ in range(10_000):
            assert execute_sync(session, bad) is None
        session.release_all()
    lines = [r for r in caplog.records if "deferred" in r.getMessage()]
    periods = (time.monotonic() - t0) / state.DEFERRED_LOG_INTERVAL
    assert len(lines) <= 2 + periods  # the first, a summary per interval, the last at close
    assert "10000 in all" in lines[-1].getMessage()


# -- 5. GOODBYE frees the slot before it is confirmed -------------------------------------------------
@pytest.mark.parametrize("isolation", ["thread", "process"])
async def test_immediate_reconnect_after_goodbye_at_one_session(isolation):
    async with running_server(isolation=isolation, max_sessions=1) as s:
        for _ in range(10):
            c = await s.connect()
            await c.nop()
            await c.aclose()  # GOODBYE, confirmed; the next connect must find the slot free


# -- 6. a frame never finished ------------------------------------------------------------------------
@pytest.mark.parametrize("isolation", ["thread", "process"])
async def test_a_frame_never_finished_closes_the_session(isolation):
    async with running_server(isolation=isolation, frame_timeout=0.5, max_sessions=1) as s:
        raw = await _raw_session(s.address)
        body = frame_bytes(Frame(ops.NOP.code, 1))
        await raw.send_all(body[:-1])  # one byte short, forever
        with trio.fail_after(20):
            err = await _read_frame(raw)
            assert err is None or (err.opcode == ops.PROTOCOL_ERROR.code and b"frame-timeout" in bytes(err.bulk))
        await raw.aclose()
        with trio.fail_after(20):
            while True:  # the slot comes back
                try:
                    c = await s.connect()
                    break
                except CudaError as e:
                    assert e.code == Status.SESSION_LIMIT
                    await trio.sleep(0.1)
        await c.aclose()


# -- 7. bounded work in the fake backend ------------------------------------------------------------------
HEAD = b".version 8.0\n.target sm_90\n"


@pytest.mark.parametrize("text", [
    HEAD + b"\n" * 30_000,
    HEAD + b" \t" * 15_000,
    HEAD + b".visible\n" * 4000,
    HEAD + b".entry a(\n" * 3000,
    HEAD + b".entry a(.param .u64" + b" " * 30_000,
    HEAD + b".global" + b" " * 30_000,
    HEAD + b".global .attribute(.managed) .align 4 .b8 x[30000] = {" + b"1, " * 30_000,
    HEAD + (b".global .u32 x = " + b"7" * 200 + b"\n") * 300,
], ids=["newlines", "blanks", "visible", "open-entries", "param-blanks", "global-blanks", "open-initializer",
        "long-initializers"])
def test_ptx_parsing_is_linear(text):
    t0 = time.process_time()
    try:
        ptx.parse_ptx(text)
        ptx.extract_ptx(text)
        ptx.image_device_bytes(text)
    except ValueError:
        pass
    assert time.process_time() - t0 < 2.0  # the old newline case: 11-19 s


def test_ptx_initializers_give_globals_their_first_bytes_or_none():
    text = HEAD + (b".global .attribute(.managed) .align 4 .b8 arr[8] = {1, 2, 3, 4, 255, 0, 0, 0};\n"
                   b".global .align 4 .u32 x = 7;\n.global .align 4 .f32 y = 0f3F800000;\n"
                   b".global .align 8 .f64 z = 0.5;\n.global .align 4 .u32 w = -1;\n"
                   b".global .align 8 .u64 p = generic(x);\n.global .align 4 .b8 spread[4] = {1,\n2, 3, 4};\n"
                   b".global .align 4 .b8 over[2] = {1, 2, 3};\n.global .align 4 .u32 plain;\n"
                   b".global .align 2 .f16 half = 1.5;\n.global .align 8 .b8 twice[8] = {1, 2, 3, 4, 5, 6, 7, 8};\n"
                   b".global .align 2 .b8 twice[2];\n")
    m = ptx.parse_ptx(text)
    assert m.globals == {"arr": 8, "x": 4, "y": 4, "z": 8, "w": 4, "p": 8, "spread": 4, "over": 2, "plain": 4,
                         "half": 2, "twice": 2}
    assert m.initial == {"arr": bytes([1, 2, 3, 4, 255, 0, 0, 0]), "x": struct.pack("<I", 7),
                         "y": struct.pack("<f", 1.0), "z": struct.pack("<d", 0.5), "w": b"\xff" * 4,
                         "half": struct.pack("<e", 1.5)}


def _fatbin(payload: bytes, claimed: int) -> bytes:
    entry = bytearray(64)
    struct.pack_into("<HHIQ", entry, 0, 1, 0x101, 64, len(payload))
    struct.pack_into("<I", entry, 16, len(payload))
    struct.pack_into("<Q", entry, 40, 0x8000)  # zstd
    struct.pack_into("<Q", entry, 56, claimed)
    return struct.pack("<IHHQ", ptx.FATBIN_MAGIC, 1, 16, 64 + len(payload)) + bytes(entry) + payload


def test_a_zstd_fatbin_cannot_unpack_past_the_limit():
    zstandard = pytest.importorskip("zstandard")
    bomb = zstandard.ZstdCompressor(level=1).compress(HEAD + b"\0" * (ptx.MAX_PTX_TEXT + 4096))
    assert len(bomb) < 64 << 10
    with pytest.raises(ptx.UnsupportedImage, match="more than"):
        ptx.fatbin_ptx(_fatbin(bomb, 1 << 40))
    backend = fake.FakeBackend()
    with pytest.raises(CudaError) as e:
        backend.module_load(backend.ctx_create(0, 0), _fatbin(bomb, 1 << 40))
    assert e.value.code == Status.INVALID_IMAGE
    ok = zstandard.ZstdCompressor().compress(DEMO_PTX)
    assert ptx.fatbin_ptx(_fatbin(ok, 1 << 40)) == DEMO_PTX.split(b"\0")[0]


def test_2d_memset_and_copy_do_work_per_byte_not_per_row(monkeypatch):
    backend = fake.FakeBackend()
    session = Session(1, backend)
    _call(session, ops.PRIMARY_CTX_RETAIN, 0)
    _call(session, ops.CTX_SET_CURRENT, _call(session, ops.PRIMARY_CTX_RETAIN, 0)[0])
    ptr = _call(session, ops.MEM_ALLOC, 1 << 16)[0]
    checks = []
    original = backend._checked_view
    monkeypatch.setattr(backend, "_checked_view", lambda p, n: checks.append(n) or original(p, n))
    huge = 1 << 20  # rows: a check per row shows as a million checks (and 2**40 rows would be as cheap)
    _call(session, ops.MEMSET_2D, ptr, 0, 7, 1, 0, huge, 0)  # width 0: nothing to do
    _call(session, ops.MEMCPY_2D, 3, ptr, 0, ptr, 0, 0, huge, 0)
    assert _call(session, ops.MEMCPY_2D, 2, 0, 0, ptr, 0, 0, huge, 0) == ()
    _call(session, ops.MEMSET_2D, ptr, 1, 0xAB, 1, 1, 1 << 16, 0)  # 65536 one-byte rows
    assert len(checks) <= 2
    data = bytes(backend.memcpy_dtoh(session.context().obj, ptr, 1 << 16))
    assert data == b"\xab" * (1 << 16)
    _call(session, ops.MEMSET_2D, ptr, 8, 0x01020304, 4, 1, 4, 0)
    rows = backend.memcpy_2d(session.context().obj, 2, 0, 0, ptr, 8, 8, 4, None)
    assert bytes(rows) == (b"\x04\x03\x02\x01" + b"\xab" * 4) * 4


def test_fuzzer_flags_slow_and_memory_hungry_inputs(monkeypatch):
    from rgpu.dispatch import handlers

    from .fuzz import fuzz_server

    def slow(session, args, bulk):
        t0 = time.process_time()
        while time.process_time() - t0 < 0.3:
            pass

    def hungry(session, args, bulk):
        bytearray(64 << 20)

    nop = frame_bytes(Frame(ops.NOP.code, 1))
    monkeypatch.setitem(handlers.HANDLERS, ops.NOP.code, handlers.Handler(ops.NOP, slow, False))
    with pytest.raises(RuntimeError, match="unbounded work"):
        fuzz_server.Harness(cpu_limit=0.1).feed(nop)
    monkeypatch.setitem(handlers.HANDLERS, ops.NOP.code, handlers.Handler(ops.NOP, hungry, False))
    with pytest.raises(RuntimeError, match="unbounded memory"):
        fuzz_server.Harness(memory_limit=16 << 20).feed(nop)


# -- a worker whose client is gone --------------------------------------------------------------------
CLIENT = """
import sys, rgpu
from rgpu.kernels import load
c = rgpu.connect(sys.argv[1])
mod = c.module_load(load("demo.ptx"))
spin = c.get_function(mod, "spin_ns")
c.launch(spin, 1, 1, (3600 * 10**9,))
print("busy", flush=True)
c.synchronize()  # an hour
"""


async def test_a_worker_busy_for_a_client_that_is_gone_is_stopped_and_its_slot_freed(monkeypatch):
    monkeypatch.setattr(worker_pool, "CLIENT_GONE_GRACE", 0.5)
    async with running_server(isolation="process", max_sessions=1, teardown_timeout=10) as s:
        client = await trio.lowlevel.open_process([sys.executable, "-c", CLIENT, s.address],
                                                  stdout=subprocess.PIPE)
        with trio.fail_after(60):
            assert b"busy" in await client.stdout.receive_some()
        await trio.sleep(0.2)  # the synchronize is on its way
        client.kill()
        await client.wait()
        with trio.fail_after(60):  # the old server: an hour
            while True:
                try:
                    c = await s.connect()
                    break
                except CudaError as e:
                    assert e.code == Status.SESSION_LIMIT
                    await trio.sleep(0.2)
        assert await c.device_count() == 1
        await c.aclose()
        await client.stdout.aclose()
        with trio.fail_after(30):  # the abandoned session's worker, stopped (its record lands after its slot)
            while len(s.server.pool.finished) < 1:
                await trio.sleep(0.05)


def _call(session: Session, op, *values, bulk=b""):
    reply = execute_sync(session, Frame(op.code, 1, args=op.request.pack(*values), bulk=bulk))
    if reply.status:
        raise CudaError(reply.status, bytes(reply.bulk).decode())
    return op.reply.unpack(reply.args)


def test_compressed_fatbin_entries_share_one_unpacking_budget(monkeypatch):
    """A thousand small zstd entries must not unpack 64 MiB each: the image's entries share one budget."""
    zstandard = pytest.importorskip("zstandard")
    monkeypatch.setattr(ptx, "MAX_PTX_TEXT", 1 << 20)
    unpacked = []
    original = ptx._decompress_bounded
    monkeypatch.setattr(ptx, "_decompress_bounded",
                        lambda z, data, limit=1 << 20: unpacked.append(limit) or original(z, data, limit))
    entry_text = HEAD + b".global .b8 g[16];\n" + b"/" * (300 << 10)
    one = zstandard.ZstdCompressor().compress(entry_text)
    entries = b""
    for _ in range(50):
        head = bytearray(64)
        struct.pack_into("<HHIQ", head, 0, 1, 0x101, 64, len(one))
        struct.pack_into("<I", head, 16, len(one))
        struct.pack_into("<Q", head, 40, 0x8000)
        entries += bytes(head) + one
    image = struct.pack("<IHHQ", ptx.FATBIN_MAGIC, 1, 16, len(entries)) + entries
    assert ptx.image_device_bytes(image) == len(image)  # past the budget: charged its own size
    assert len(unpacked) <= 5  # the fourth entry runs out of the 1 MiB budget
