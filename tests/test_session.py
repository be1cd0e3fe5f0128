"""End to end against an in-process server on the fake backend: operations, ownership, teardown, limits,
bad input, authentication, concurrency. Everything binds 127.0.0.1."""

from __future__ import annotations

import struct

import numpy as np
import pytest
import trio

import rgpu
from rgpu.errors import AuthenticationError, CudaError, Status
from rgpu.protocol import ops
from rgpu.protocol.frames import Flags, Frame, frame_bytes, parse_frame
from rgpu.protocol.handshake import ClientHandshake

from .conftest import DEMO_PTX, TEST_PSK, long_kernel_vs_other_session, running_server, wait_for

N = 4096


async def vadd_roundtrip(c: rgpu.AsyncClient, n: int = N, seed: int = 0) -> bool:
    rng = np.random.default_rng(seed)
    a, b = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
    mod = await c.module_load(DEMO_PTX)
    fn = await c.get_function(mod, "vadd")
    da, db, dc = [await c.mem_alloc(n * 4) for _ in range(3)]
    await c.memcpy_htod(da, a)
    await c.memcpy_htod(db, b)
    await c.launch(fn, (n + 127) // 128, 128, (da, db, dc, n))
    out = np.frombuffer(await c.memcpy_dtoh(dc, n * 4), dtype=np.float32)
    for p in (da, db, dc):
        await c.mem_free(p)
    await c.module_unload(mod)
    return bool(np.array_equal(out, a + b))


async def test_vadd_and_saxpy(client):
    assert await vadd_roundtrip(client)
    mod = await client.module_load(DEMO_PTX)
    saxpy = await client.get_function(mod, "saxpy")
    assert saxpy.layout == ((0, 4), (8, 8), (16, 8), (24, 4))
    x = np.arange(N, dtype=np.float32)
    dx, dy = await client.mem_alloc(N * 4), await client.mem_alloc(N * 4)
    await client.memcpy_htod(dx, x)
    await client.memset_d32(dy, np.float32(1.0).view(np.uint32), N)
    await client.launch(saxpy, N // 256, 256, (3.0, dx, dy, N))
    y = np.frombuffer(await client.memcpy_dtoh(dy, N * 4), dtype=np.float32)
    assert np.array_equal(y, 3 * x + 1)


async def test_launch_covers_only_the_threads_launched(client):
    mod = await client.module_load(DEMO_PTX)
    fill = await client.get_function(mod, "fill")
    p = await client.mem_alloc(N * 4)
    await client.launch(fill, 2, 128, (p, 5.0, N))  # 256 threads for 4096 elements
    out = np.frombuffer(await client.memcpy_dtoh(p, N * 4), dtype=np.float32)
    assert (out[:256] == 5).all() and (out[256:] == 0).all()


async def test_device_queries(client):
    assert await client.device_count() == 1
    assert await client.driver_version() == 13000
    assert "fake" in await client.device_name(0)
    attrs = await client.device_attributes(0)
    assert attrs[75] == 9 and attrs[10] == 32 and 999 not in attrs
    assert await client.device_attribute(16, 0) == attrs[16]
    assert len(await client.device_uuid(0)) == 16
    with pytest.raises(CudaError) as e:
        await client.device_name(3)
    assert e.value.code == Status.INVALID_DEVICE


async def test_memset_dtod_and_async_copies(client):
    a, b = await client.mem_alloc(1024), await client.mem_alloc(1024)
    s = await client.stream_create()
    await client.memset_d8_async(a, 0xAB, 1024, s)
    await client.memcpy_dtod_async(b, a, 512, s)
    await client.memcpy_htod_async(a, b"\x01" * 16, s)
    data = await client.memcpy_dtoh_async(b, 1024, s)
    assert data[:512] == b"\xab" * 512 and data[512:] == b"\0" * 512
    assert (await client.memcpy_dtoh(a, 32))[:17] == b"\x01" * 16 + b"\xab"
    await client.memcpy_dtod(b, a, 1024)
    assert await client.memcpy_dtoh(b, 1024) == await client.memcpy_dtoh(a, 1024)


async def test_large_copy_is_chunked_and_exact():
    # In-process sessions: the test counts the frames the Session received.
    async with running_server(max_frame=256 * 1024, isolation="thread") as small:
        c = await small.connect()
        data = np.random.default_rng(1).integers(0, 255, 3 * 1024 * 1024 + 17, dtype=np.uint8)
        p = await c.mem_alloc(data.nbytes)
        await c.memcpy_htod(p, data)
        out = np.empty_like(data)
        await c.memcpy_dtoh(p, data.nbytes, out=out)
        assert np.array_equal(out, data)
        assert small.server.sessions[c.session_id].frames_received > 20
        await c.aclose()


async def test_module_globals_are_addressable_and_bounded(client):
    mod = await client.module_load(DEMO_PTX)
    ptr, size = await client.get_global(mod, "counters")
    assert size == 16
    await client.memcpy_htod(ptr, struct.pack("<4i", 1, 2, 3, 4))
    assert struct.unpack("<4i", await client.memcpy_dtoh(ptr, 16)) == (1, 2, 3, 4)
    with pytest.raises(CudaError):
        await client.memcpy_dtoh(ptr, 17)
    await client.module_unload(mod)
    with pytest.raises(CudaError) as e:
        await client.memcpy_dtoh(ptr, 4)
    assert e.value.code == Status.INVALID_VALUE


async def test_streams_events_and_elapsed_time(client):
    mod = await client.module_load(DEMO_PTX)
    spin = await client.get_function(mod, "spin_ns")
    s = await client.stream_create()
    e0, e1 = await client.event_create(), await client.event_create()
    await client.event_record(e0, s)
    await client.launch(spin, 1, 1, (200_000_000,), stream=s)
    await client.event_record(e1, s)
    assert await client.stream_query(s) is False
    assert await client.event_query(e1) is False
    with pytest.raises(CudaError) as e:
        await client.event_elapsed_time(e0, e1)
    assert e.value.code == Status.NOT_READY
    await client.event_synchronize(e1)
    assert await client.event_query(e1) is True
    assert 190 <= await client.event_elapsed_time(e0, e1) <= 400
    # a second stream waits on the first one's event
    s2 = await client.stream_create()
    await client.launch(spin, 1, 1, (100_000_000,), stream=s)
    e2 = await client.event_create()
    await client.event_record(e2, s)
    await client.stream_wait_event(s2, e2)
    assert await client.stream_query(s2) is False
    await client.stream_synchronize(s2)
    assert await client.stream_query(s) is True
    await client.stream_destroy(s2)
    with pytest.raises(CudaError):
        await client.stream_query(s2)


async def test_batching_sends_deferred_calls_in_one_frame(tsrv):
    # In-process sessions (tsrv): the test counts the Session's frames and calls.
    srv, client = tsrv, await tsrv.connect()
    mod = await client.module_load(DEMO_PTX)
    fill = await client.get_function(mod, "fill")
    p = await client.mem_alloc(1024)
    session = srv.server.sessions[client.session_id]
    before_frames, before_calls = session.frames_received, session.calls
    for i in range(200):
        await client.launch(fill, 1, 256, (p, float(i), 256))
    await client.synchronize()
    assert session.calls - before_calls == 201
    assert session.frames_received - before_frames == 2  # one BATCH + the synchronize
    out = np.frombuffer(await client.memcpy_dtoh(p, 1024), dtype=np.float32)
    assert (out == 199).all()


async def test_unbatched_client_waits_for_each_call(tsrv):
    # In-process sessions (tsrv): the test reads the Session's deferred error.
    srv = tsrv
    c = await srv.connect(batching=False)
    mod = await c.module_load(DEMO_PTX)
    fill = await c.get_function(mod, "fill")
    p = await c.mem_alloc(1024)
    with pytest.raises(ValueError):
        await c.launch(fill, 1, 1, (p, 1.0))  # wrong arity is caught client-side
    with pytest.raises(CudaError) as e:
        await c.launch(fill, 1, 2048, (p, 2.0, 256))  # too many threads: refused at the launch itself
    assert e.value.code == Status.INVALID_VALUE and not e.value.deferred
    await c.launch(fill, 1, 256, (p, 2.0, 256))
    session = srv.server.sessions[c.session_id]
    assert session.deferred_error == 0
    await c.aclose()


async def test_deferred_error_surfaces_at_the_next_synchronising_call(client):
    mod = await client.module_load(DEMO_PTX)
    fill = await client.get_function(mod, "fill")
    bogus = rgpu.Function(fill.handle + 1000, "fill", fill.layout)
    await client.launch(bogus, 1, 1, (0, 1.0, 1))  # queued: no error yet
    with pytest.raises(CudaError) as e:
        await client.synchronize()
    assert e.value.deferred and e.value.code == Status.INVALID_HANDLE
    await client.synchronize()  # reported once, then clear


async def test_batched_launch_sees_handles_destroyed_since_an_earlier_launch(client):
    """Launches resolve their handles once and cache them (Session.launch_target); every removal of a handle
    must invalidate that, or a launch could reach an unloaded function or a destroyed stream."""
    mod = await client.module_load(DEMO_PTX)
    fill = await client.get_function(mod, "fill")
    p = await client.mem_alloc(1024)
    stream = await client.stream_create()
    await client.launch(fill, 1, 256, (p, 1.0, 256), stream=stream)
    await client.synchronize()
    await client.stream_destroy(stream)
    await client.launch(fill, 1, 256, (p, 2.0, 256), stream=stream)  # same pair, stream now gone
    with pytest.raises(CudaError) as e:
        await client.synchronize()
    assert e.value.deferred and e.value.code == Status.INVALID_HANDLE
    await client.launch(fill, 1, 256, (p, 3.0, 256))
    await client.module_unload(mod)
    await client.launch(fill, 1, 256, (p, 4.0, 256))  # function gone with its module
    with pytest.raises(CudaError) as e:
        await client.synchronize()
    assert e.value.deferred and e.value.code == Status.INVALID_HANDLE
    out = np.frombuffer(await client.memcpy_dtoh(p, 1024), dtype=np.float32)
    assert (out == 3).all()


async def test_batched_launch_with_a_wrong_parameter_buffer_is_a_deferred_error(client):
    mod = await client.module_load(DEMO_PTX)
    fill = await client.get_function(mod, "fill")
    short = rgpu.Function(fill.handle, "fill", fill.layout[:2])  # the client packs one parameter too few
    p = await client.mem_alloc(1024)
    await client.launch(short, 1, 256, (p, 1.0))
    with pytest.raises(CudaError) as e:
        await client.synchronize()
    assert e.value.deferred and e.value.code == Status.INVALID_VALUE


# The next tests watch the fake backend's accounting, so their sessions run in this process (tsrv); the same
# teardown in worker processes is checked through the workers' final counters in test_isolation.py.
async def test_abrupt_disconnect_frees_everything(tsrv):
    srv = tsrv
    baseline = srv.backend.used
    c = await srv.connect()
    await c.module_load(DEMO_PTX)
    for _ in range(5):
        await c.mem_alloc(1 << 20)
    await c.stream_create()
    await c.event_create()
    assert srv.backend.used > baseline and srv.backend.contexts_alive == 1
    await c.stream.aclose()  # no GOODBYE: like a crashed or killed client
    # The session leaves the table only after its memory is back (runner.run_session): wait for both.
    await wait_for(lambda: srv.backend.used == baseline and srv.backend.contexts_alive == 0
                   and not srv.server.sessions)


async def test_cut_mid_frame_frees_everything(tsrv):
    srv = tsrv
    baseline = srv.backend.used
    c = await srv.connect()
    await c.mem_alloc(1 << 20)
    await c.stream.send_all(struct.pack("<I", 1000) + b"\x43\x00" + b"\0" * 100)  # half a MEMCPY_HTOD
    await c.stream.aclose()
    await wait_for(lambda: srv.backend.used == baseline and srv.backend.contexts_alive == 0)


async def test_goodbye_frees_before_it_replies(tsrv):
    srv = tsrv
    baseline = srv.backend.used
    c = await srv.connect()
    await c.mem_alloc(1 << 20)
    await c.aclose()
    assert srv.backend.used == baseline


async def test_one_session_cannot_name_anothers_memory_or_handles(srv):
    a, b = await srv.connect(), await srv.connect()
    ptr = await a.mem_alloc(4096)
    await a.memcpy_htod(ptr, b"secret" * 10)
    stream, event = await a.stream_create(), await a.event_create()
    mod = await a.module_load(DEMO_PTX)
    fn = await a.get_function(mod, "fill")
    for attempt in (b.memcpy_dtoh(ptr, 16), b.memcpy_htod(ptr, b"x"), b.mem_free(ptr),
                    b.memset_d8(ptr, 0, 1), b.memcpy_dtod(ptr, ptr + 8, 8)):
        with pytest.raises(CudaError) as e:
            await attempt
        assert e.value.code == Status.INVALID_VALUE
    for attempt in (b.stream_synchronize(stream), b.event_query(event), b.module_unload(mod),
                    b.get_function(mod, "fill")):
        with pytest.raises(CudaError) as e:
            await attempt
        assert e.value.code == Status.INVALID_HANDLE
    own = await b.mem_alloc(64)
    await b.launch(fn, 1, 1, (own, 1.0, 1))
    with pytest.raises(CudaError) as e:
        await b.synchronize()
    assert e.value.code == Status.INVALID_HANDLE and e.value.deferred
    await b.ctx_set_current(await a.ctx_get_current())  # deferred: refused at the next sync
    with pytest.raises(CudaError) as e:
        await b.synchronize()
    assert e.value.code == Status.INVALID_CONTEXT
    assert bytes(await a.memcpy_dtoh(ptr, 6)) == b"secret"
    await a.aclose()
    await b.aclose()


async def test_range_checks_catch_overruns(client):
    p = await client.mem_alloc(100)
    await client.memcpy_htod(p + 90, b"x" * 10)
    for bad in (client.memcpy_htod(p + 91, b"x" * 10), client.memcpy_dtoh(p - 1, 2),
                client.memset_d32(p + 4, 0, 25), client.mem_free(p + 4)):
        with pytest.raises(CudaError) as e:
            await bad
        assert e.value.code == Status.INVALID_VALUE


async def test_session_memory_limit():
    async with running_server(session_mem_limit=1 << 20) as s:
        c = await s.connect()
        await c.mem_alloc(600 * 1024)
        with pytest.raises(CudaError) as e:
            await c.mem_alloc(600 * 1024)
        assert e.value.code == Status.OUT_OF_MEMORY and "limit" in e.value.message
        free, total = await c.mem_get_info()
        assert total == 1 << 20 and free == (1 << 20) - 600 * 1024
        await c.aclose()


async def test_max_sessions_refuses_clearly_and_recovers():
    async with running_server(max_sessions=2) as s:
        a, b = await s.connect(), await s.connect()
        with pytest.raises(CudaError) as e:
            await s.connect()
        assert e.value.code == Status.SESSION_LIMIT
        await a.aclose()
        await wait_for(lambda: len(s.server.sessions) < 2)  # a's slot frees once its worker has finished
        c = await s.connect()
        assert await vadd_roundtrip(c)
        await b.aclose()
        await c.aclose()


async def test_handshake_timeout_closes_silent_connections():
    async with running_server(handshake_timeout=0.3) as s:
        stream = await trio.open_tcp_stream("127.0.0.1", int(s.address.split(":")[1]))
        with trio.fail_after(3):
            assert await stream.receive_some() == b""
        c = await s.connect()  # the server still serves
        assert await c.device_count() == 1


async def _raw_session(address: str) -> trio.SocketStream:
    stream = await trio.open_tcp_stream("127.0.0.1", int(address.split(":")[1]))
    await stream.send_all(frame_bytes(ClientHandshake(None).hello()))
    await _read_frame(stream)
    return stream


async def _read_frame(stream) -> Frame | None:
    data = b""
    with trio.fail_after(5):
        while len(data) < 4 or len(data) < 4 + struct.unpack_from("<I", data)[0]:
            chunk = await stream.receive_some()
            if not chunk:
                return None
            data += chunk
    return parse_frame(data[4:])


@pytest.mark.parametrize("garbage,status", [
    (struct.pack("<I", 0x7FFFFFFF), Status.FRAME_TOO_LARGE),
    (struct.pack("<I", 4) + b"abcd", Status.PROTOCOL_ERROR),
    (frame_bytes(Frame(ops.HELLO.code, 5)), Status.PROTOCOL_ERROR),
    (frame_bytes(Frame(ops.BATCH.code, 5, Flags.NO_REPLY, bulk=b"\x10\0\0\0abc")), Status.PROTOCOL_ERROR),
])
async def test_malformed_input_gets_an_error_and_only_that_connection_closes(srv, client, garbage, status):
    raw = await _raw_session(srv.address)
    await raw.send_all(garbage)
    err = await _read_frame(raw)
    assert err.opcode == ops.PROTOCOL_ERROR.code and err.status == status
    assert await _read_frame(raw) is None  # closed
    assert await vadd_roundtrip(client)  # the other session is unharmed


async def test_bad_arguments_and_unknown_opcodes_keep_the_session(srv):
    raw = await _raw_session(srv.address)
    await raw.send_all(frame_bytes(Frame(ops.MEM_ALLOC.code, 2, args=b"\x01\x02\x03")))
    reply = await _read_frame(raw)
    assert reply.status == Status.PROTOCOL_ERROR and b"expected 8" in bytes(reply.bulk)
    await raw.send_all(frame_bytes(Frame(0x7777, 3)))
    reply = await _read_frame(raw)
    assert reply.status == Status.NOT_SUPPORTED and reply.request_id == 3
    await raw.send_all(frame_bytes(Frame(ops.NOP.code, 4)))
    assert (await _read_frame(raw)).status == 0
    await raw.send_all(frame_bytes(Frame(ops.MEM_ALLOC.code, 5, args=struct.pack("<Q", 64))))
    assert (await _read_frame(raw)).status == Status.INVALID_CONTEXT  # no context yet: a CUDA error, not a crash


async def test_kernel_fault_breaks_only_its_own_session(srv):
    a, b = await srv.connect(), await srv.connect()
    mod = await a.module_load(DEMO_PTX)
    fault = await a.get_function(mod, "fault")
    await a.mem_alloc(1 << 20)
    await a.launch(fault, 1, 1, (0x10,))
    async with trio.open_nursery() as n:
        n.start_soon(vadd_roundtrip, b)
        with pytest.raises(CudaError) as e:
            await a.synchronize()
        assert e.value.code == Status.ILLEGAL_ADDRESS
    assert await vadd_roundtrip(b)
    await a.stream.aclose()
    await wait_for(lambda: len(srv.server.sessions) == 1)
    assert await vadd_roundtrip(b)


async def test_long_kernel_in_one_session_does_not_delay_another(srv):
    a, b = await srv.connect(), await srv.connect()
    elapsed, worst = await long_kernel_vs_other_session(a, b, 2.0)
    assert elapsed >= 1.9
    assert worst < 0.25, f"session B waited {worst:.3f}s behind session A's kernel"


async def test_many_concurrent_sessions(tsrv):
    # In-process sessions (tsrv): the fake backend's accounting shows every session's memory back, and 48
    # worker processes would cost CI more than they test here (test_soak.py runs sessions in workers).
    srv = tsrv
    baseline = srv.backend.used
    results = []

    async def one(i):
        c = await srv.connect()
        results.append(await vadd_roundtrip(c, 1024, seed=i))
        await c.mem_alloc(4096)  # left for teardown to free
        if i % 2:
            await c.aclose()
        else:
            await c.stream.aclose()

    async with trio.open_nursery() as n:
        for i in range(48):
            n.start_soon(one, i)
    assert results == [True] * 48
    await wait_for(lambda: srv.backend.used == baseline and not srv.server.sessions)


async def test_server_shutdown_frees_live_sessions():
    # In-process sessions: the test reads the backend after the server stopped (workers report it instead:
    # test_isolation.py).
    async with running_server(isolation="thread") as s:
        c = await s.connect()
        await c.mem_alloc(1 << 20)
        backend = s.backend
        s.cancel.cancel()
    assert backend.used == 0 and backend.contexts_alive == 0


# -- PSK ---------------------------------------------------------------------------------------------
class TamperingStream(trio.abc.Stream):
    """Passes bytes through, flipping one bit of the n-th write once armed."""

    def __init__(self, inner):
        self.inner, self.armed, self.socket = inner, False, None

    async def send_all(self, data):
        if self.armed and len(data) > 8:
            data = bytearray(data)
            data[-3] ^= 0x40
            self.armed = False
        await self.inner.send_all(data)

    async def wait_send_all_might_not_block(self):
        await self.inner.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes=None):
        return await self.inner.receive_some(max_bytes)

    async def send_eof(self):
        await self.inner.send_eof()

    async def aclose(self):
        await self.inner.aclose()


async def test_psk_session_works_and_wrong_keys_are_refused():
    async with running_server(psk=TEST_PSK) as s:
        good = await s.connect(psk=TEST_PSK)
        assert await vadd_roundtrip(good)
        with pytest.raises(AuthenticationError):
            await s.connect(psk=bytes(32))
        with pytest.raises(AuthenticationError, match="requires a pre-shared key"):
            await s.connect()
        assert await vadd_roundtrip(good)  # the server kept serving
        await good.aclose()


async def test_tampered_frame_closes_that_connection():
    async with running_server(psk=TEST_PSK) as s:
        port = int(s.address.split(":")[1])
        tamper = TamperingStream(await trio.open_tcp_stream("127.0.0.1", port))
        c = await rgpu.connect_async(psk=TEST_PSK, stream=tamper)
        await c.nop()
        tamper.armed = True
        with pytest.raises(CudaError):
            await c.nop()
        await wait_for(lambda: not s.server.sessions)
        other = await s.connect(psk=TEST_PSK)
        assert await other.device_count() == 1


def test_plain_socket_bytes_after_psk_handshake_are_ciphertext():
    # What a passive observer sees: no plaintext opcode/args of a MEMCPY.
    from rgpu.protocol.handshake import ServerHandshake

    c = ClientHandshake(TEST_PSK)
    srv = ServerHandshake(TEST_PSK, max_frame=1 << 20, session_id=1)
    c.on_auth_reply(srv.on_auth(c.on_hello_reply(srv.on_hello(c.hello()))))
    secret = b"TOP-SECRET-WEIGHTS" * 4
    wire = b"".join(c.protector.seal([frame_bytes(Frame(ops.MEMCPY_HTOD.code, 9, args=b"\0" * 8, bulk=secret))]))
    assert secret[:18] not in wire


def test_fatbin_parsing_of_plain_and_malformed_images():
    from rgpu.backends import ptx

    text = DEMO_PTX
    entry = struct.pack("<HHIQ", 1, 0x101, 64, len(text)) + b"\0" * 48
    fatbin = struct.pack("<IHHQ", ptx.FATBIN_MAGIC, 1, 16, len(entry) + len(text)) + entry + text
    assert ptx.fatbin_ptx(fatbin) == text.split(b"\0")[0]
    assert ptx.extract_ptx(fatbin) == text.split(b"\0")[0]
    bad = struct.pack("<IHHQ", ptx.FATBIN_MAGIC, 1, 16, 200) + struct.pack("<HHIQ", 1, 0x101, 8, 10**9) + b"\0" * 200
    with pytest.raises(ptx.UnsupportedImage):
        ptx.fatbin_ptx(bad)
