"""The C request loop (native/src/lane/serve.c, rgpu/serving/native_loop.py) against Python's own loop: two fake
sessions behind real sockets, one served with the C loop and one with RGPU_NATIVE_LOOP=0, get the same random
stream of frames -- batches of good and hostile records (tests/test_lane_differential.py's), NOPs right and
wrong, blocking synchronizes and copies, a frame too big for the C loop's buffer, a malformed batch -- written in
random pieces with pauses longer than the loop polls, so that frames arrive whole, split and several at once.
Both must send the same bytes back, close the same way, and leave the same counts, failures and memory."""

from __future__ import annotations

import itertools
import os
import random
import re
import socket
import struct
import threading
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rgpu.backends import fake_lag, fake_lane, lane
from rgpu.backends.fake_lane import RING_SLOT_BYTES, RING_SLOTS, FakeLaneDriver
from rgpu.errors import CudaError, ProtocolError, Status
from rgpu.protocol import ops
from rgpu.protocol.connection import Connection
from rgpu.protocol.frames import FLAG_DEFERRED_ERROR, FLAG_NO_REPLY, HEADER, PREFIX_SIZE, Frame, frame_bytes
from rgpu.protocol.handshake import Cipher, RecordProtector
from rgpu.serving import native_loop, worker
from rgpu.serving.output import KernelOutput
from rgpu.transport import SocketFrameStream

from .test_lane_differential import BUFFER, MAX_RECORD, Side, encode, records

BIG = native_loop.BUFFER_BYTES + 4096
BIG_ALLOC = 1536 << 10  # the device buffer large host-to-device copies go to (allocated on first use)
TOO_BIG = native_loop.BUFFER_BYTES + 5000  # a copy whose frame (or record) is beyond the C loop's buffer
_copy_sizes = [1, 1000, 70 << 10, 200 << 10, TOO_BIG, 600 << 10]

frames = st.one_of(
    st.tuples(st.just("batch"), st.lists(records, min_size=1, max_size=8)),
    st.tuples(st.just("nop")),
    st.tuples(st.just("nop"), st.sampled_from(["no_reply", "args", "bulk"])),
    st.tuples(st.just("sync"), st.sampled_from([0, 1, 2])),
    st.tuples(st.just("dtoh"), st.integers(0, 2), st.sampled_from([4, 64, 256, 300])),
    st.tuples(st.just("dtoh_async"), st.integers(0, 5), st.sampled_from([0, 4, 64, 256, 300]), st.sampled_from([0, 1, 2])),
    st.tuples(st.just("big_nop")),
    st.tuples(st.just("info"), st.sampled_from(["", "args"])),
    st.tuples(st.just("ctx_sync"), st.sampled_from(["", "", "args"])),
    # a host-to-device copy as a frame of its own (as the C stand-ins send those over 64 KiB): at the start, at
    # the very end, or running past the end of the buffer; on the NULL, a good or a foreign stream
    st.tuples(st.just("htod"), st.sampled_from(_copy_sizes), st.sampled_from(["start", "end", "past"]),
              st.sampled_from([0, 1, 1, 2]), st.integers(0, 255),
              st.sampled_from(["async", "async", "async_reply", "sync", "sync_reply"])),
    st.tuples(st.just("read_big")),
    # copy frames C must leave to Python: arguments one byte short or long, a flag of replies, no bytes at all
    st.tuples(st.just("htod_bad"), st.sampled_from(["short", "long", "flag", "empty"]), st.booleans()),
    # a copy back larger than the reply buffer (through the ring: the fake's holds 256 KiB) or than the ring
    st.tuples(st.just("dtoh_big"), st.sampled_from([70 << 10, 200 << 10, 256 << 10, 300 << 10]),
              st.sampled_from(["start", "end", "past"]), st.sampled_from([0, 1, 1, 2, "sync"])),
)


def big_buffer(side: Side) -> int:
    if not hasattr(side, "big"):
        side.big = side.call(ops.MEM_ALLOC, BIG_ALLOC).dptr
    return side.big


def pattern(size: int, seed: int) -> bytes:
    """Bytes that never repeat at a slot's distance (a copy of the wrong piece shows)."""
    return random.Random(seed).randbytes(size)


def frame_for(side: Side, item, request_id: int) -> bytes:
    kind, *a = item
    if kind == "batch":
        bulk = b"".join(encode(side, r, request_id * 100 + i) for i, r in enumerate(a[0]))
        return frame_bytes(Frame(ops.BATCH.code, request_id, FLAG_NO_REPLY, bulk=bulk))
    if kind == "nop":
        how = a[0] if a else ""
        return frame_bytes(Frame(ops.NOP.code, request_id, FLAG_NO_REPLY if how == "no_reply" else 0,
                                 args=b"x" if how == "args" else b"", bulk=b"y" if how == "bulk" else b""))
    if kind == "sync":
        return frame_bytes(Frame(ops.STREAM_SYNCHRONIZE.code, request_id, args=ops.STREAM_SYNCHRONIZE.pack_request(
            side.stream(a[0]))))
    if kind == "dtoh":
        return frame_bytes(Frame(ops.MEMCPY_DTOH.code, request_id,
                                 args=ops.MEMCPY_DTOH.pack_request(side.pointer(a[0], 0), a[1])))
    if kind == "dtoh_async":
        buf, size, stream = a
        return frame_bytes(Frame(ops.MEMCPY_DTOH_ASYNC.code, request_id, args=ops.MEMCPY_DTOH_ASYNC.pack_request(
            side.pointer(buf, 0), size, side.stream(stream))))
    if kind in ("info", "ctx_sync"):
        op = ops.MEM_GET_INFO if kind == "info" else ops.CTX_SYNCHRONIZE
        return frame_bytes(Frame(op.code, request_id, args=b"x" if a[0] == "args" else b""))
    if kind == "htod":  # as the C stand-ins send copies over 64 KiB ("async"); as the Python client, "sync_reply"
        size, where, stream, seed, *how = a
        how = how[0] if how else "async"
        dst = big_buffer(side) + {"start": 0, "end": BIG_ALLOC - size, "past": BIG_ALLOC - size + 8}[where]
        flags = 0 if how.endswith("reply") else FLAG_NO_REPLY
        if how.startswith("sync"):
            return frame_bytes(Frame(ops.MEMCPY_HTOD.code, request_id, flags, args=ops.MEMCPY_HTOD.pack_request(dst),
                                     bulk=pattern(size, seed)))
        return frame_bytes(Frame(ops.MEMCPY_HTOD_ASYNC.code, request_id, flags,
                                 args=ops.MEMCPY_HTOD_ASYNC.pack_request(dst, side.stream(stream)),
                                 bulk=pattern(size, seed)))
    if kind == "htod_bad":
        how, sync = a
        op = ops.MEMCPY_HTOD if sync else ops.MEMCPY_HTOD_ASYNC
        args = op.pack_request(big_buffer(side)) if sync else op.pack_request(big_buffer(side), side.stream(1))
        args = {"short": args[:-1], "long": args + b"\0"}.get(how, args)
        flags = FLAG_NO_REPLY | (FLAG_DEFERRED_ERROR if how == "flag" else 0)  # (a server's flag, not a request's)
        return frame_bytes(Frame(op.code, request_id, flags, args=args, bulk=b"" if how == "empty" else bytes(300)))
    if kind == "dtoh_big":
        size, where, stream = a
        src = big_buffer(side) + {"start": 0, "end": BIG_ALLOC - size, "past": BIG_ALLOC - size + 8}[where]
        if stream == "sync":
            return frame_bytes(Frame(ops.MEMCPY_DTOH.code, request_id, args=ops.MEMCPY_DTOH.pack_request(src, size)))
        return frame_bytes(Frame(ops.MEMCPY_DTOH_ASYNC.code, request_id, args=ops.MEMCPY_DTOH_ASYNC.pack_request(
            src, size, side.stream(stream))))
    if kind == "read_big":  # what the copies left in device memory, in a reply
        return frame_bytes(Frame(ops.MEMCPY_DTOH.code, request_id,
                                 args=ops.MEMCPY_DTOH.pack_request(big_buffer(side), BIG_ALLOC)))
    return frame_bytes(Frame(ops.NOP.code, request_id, bulk=bytes(BIG)))  # beyond the C loop's buffer


# A sealed session's record keys (tests only), client-to-server and back.
C2S_KEY, S2C_KEY = bytes(range(32)), bytes(range(32, 64))


def sealed_records(frames_in: list[bytes]) -> list[bytes]:
    """Encoded frames as a client with the test keys seals them, counters from 0: a record each."""
    client = RecordProtector(Cipher.AES_256_GCM, C2S_KEY, S2C_KEY)
    return [b"".join(bytes(part) for part in client.seal([frame])) for frame in frames_in]


def opened_replies(got: bytes) -> list[Frame]:
    conn = Connection(MAX_RECORD)
    conn.protect(RecordProtector(Cipher.AES_256_GCM, C2S_KEY, S2C_KEY))
    conn.receive_data(got)
    return list(iter(conn.next_frame, None))


def serve(side: Side, stream: bytes, cuts: list[int], pauses: list[bool], native: bool, monkeypatch,
          output: KernelOutput | None = None, before_each=None, sealed: bool = False, spin_us: float = 5000,
          pause_s: float = 0.1) -> tuple[bytes, str]:
    """Serve `stream` (written in pieces at `cuts`, pausing `pause_s` where `pauses` says) through serve_blocking;
    returns (every byte the client got back, why the loop ended). `sealed`: the session's records are protected
    with the test keys (the stream must be sealed with them). The loop polls `spin_us` for bytes: a pause longer
    than that makes it go idle with whatever part it holds. The defaults leave a wide margin both ways (a writer
    descheduled on a loaded machine must not look like a pause, and a pause must outlast the loop taking in what
    came before it): a 0.5 ms pause against a 100 us poll failed tests that assert where Python takes over."""
    monkeypatch.setenv("RGPU_NATIVE_LOOP", "1" if native else "0")
    server, client = socket.socketpair()
    conn = Connection(MAX_RECORD, reuse_receive_buffers=True)
    if sealed:
        conn.protect(RecordProtector(Cipher.AES_256_GCM, S2C_KEY, C2S_KEY))
    io = SocketFrameStream(server, conn, spin_us=spin_us)
    ended: list[str] = []

    def run():
        try:
            ended.append(worker.serve_blocking(side.s, io, 0, output))
        except ProtocolError as e:
            ended.append(f"protocol error: {e}")
            io.send_quietly(worker.protocol_error_frame(e))
        except OSError as e:  # (as the session's runner ends it)
            ended.append(f"connection lost: {e}")
        finally:
            server.shutdown(socket.SHUT_RDWR)  # (a writer still sending after a protocol error gets an error)

    thread = threading.Thread(target=run)
    thread.start()
    got = bytearray()
    reader = threading.Thread(target=lambda: _read_all(client, got))
    reader.start()
    try:
        start = 0
        for cut, pause in zip([*cuts, len(stream)], [*pauses, False]):
            if cut > start:
                if before_each is not None:
                    before_each()
                client.sendall(stream[start:cut])
                start = cut
            if pause:
                time.sleep(pause_s)
    except OSError:
        pass  # the server ended the session (a protocol error) while we wrote
    thread.join(20)
    client.shutdown(socket.SHUT_WR)
    reader.join(20)
    assert not thread.is_alive() and not reader.is_alive()
    client.close()
    server.close()
    return bytes(got), ended[0]


def _read_all(sock: socket.socket, into: bytearray) -> None:
    while chunk := sock.recv(1 << 16):
        into += chunk


def frames_python_runs(monkeypatch) -> list[tuple[int, int, int]]:
    """(opcode, request id, bulk length) of each frame Python's loop runs from now on (the C loop's it never
    sees)."""
    seen: list[tuple[int, int, int]] = []
    real_next_action = worker.next_action

    def watched(s, frame, max_record):
        if frame is not None:
            seen.append((frame.opcode, frame.request_id, len(frame.bulk)))
        return real_next_action(s, frame, max_record)

    monkeypatch.setattr(worker, "next_action", watched)
    return seen


def fail_synchronize_once(monkeypatch) -> list:
    """The fake lane driver's next stream synchronize fails (LAUNCH_FAILED); the list gets its stream."""
    failed = []
    real_synchronize = FakeLaneDriver._synchronize

    def synchronize_failing_once(self, stream):
        if not failed:
            failed.append(stream)
            raise CudaError(Status.LAUNCH_FAILED, "injected")
        return real_synchronize(self, stream)

    monkeypatch.setattr(FakeLaneDriver, "_synchronize", synchronize_failing_once)
    return failed


def driver_calls(monkeypatch, **letters: str) -> list[str]:
    """A letter for each call the lane makes of the fake driver's methods named (letters: method -> letter), in
    order."""
    calls: list[str] = []
    for name, letter in letters.items():
        real = getattr(FakeLaneDriver, name)
        monkeypatch.setattr(FakeLaneDriver, name, lambda self, *a, real=real, letter=letter: calls.append(
            letter) or real(self, *a))
    return calls


def serve_plan(side: Side, plan: list, monkeypatch, pause_in: tuple[int, float] | None = None, sealed: bool = False,
               native: bool = True):
    """Serve `plan` (then a GOODBYE) through the C loop (`native`; else Python's), pausing once inside frame
    `pause_in[0]` at that fraction of it; the session is released after. Returns (the frames that came back, those
    Python's loop ran)."""
    pieces = [frame_for(side, f, i + 1) for i, f in enumerate(plan)] + [frame_bytes(Frame(ops.GOODBYE.code, 99))]
    if sealed:
        pieces = sealed_records(pieces)
    cuts = []
    if pause_in is not None:
        index, fraction = pause_in
        cuts = [sum(map(len, pieces[:index])) + int(len(pieces[index]) * fraction)]
    runs = frames_python_runs(monkeypatch)
    try:
        got, why = serve(side, b"".join(pieces), cuts, [True] * len(cuts), native, monkeypatch, sealed=sealed)
    finally:
        side.s.release_all()
    assert why == "closed by GOODBYE"
    if sealed:
        return opened_replies(got), runs
    conn = Connection(MAX_RECORD)
    conn.receive_data(got)
    return list(iter(conn.next_frame, None)), runs


def state(side: Side) -> tuple:
    """(Memory is gone with the GOODBYE: the plan's device-to-host copies compare it, in the replies.)"""
    s = side.s
    return (s.frames_received, s.calls, dict(s.calls_by_op), s.replies_sent, dict(s.replies_by_op), side.failures)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.lists(frames, min_size=1, max_size=12), st.booleans(), st.booleans(), st.none() | st.integers(0, 20),
       st.data())
def test_the_c_loop_and_python_agree_byte_for_byte(monkeypatch, plan, malformed_last, sealed, spoil, data):
    """`sealed`: both sessions protected with the same keys, so the same replies are the same ciphertext;
    `spoil`: with a seal, the record (of that index, wrapped) whose tag no longer matches."""
    sides = [Side(True), Side(True)]
    results = []
    try:
        streams = []
        for side in sides:
            stream = [frame_for(side, item, i + 10) for i, item in enumerate(plan)]
            if malformed_last:  # a batch whose last record runs past its end: a protocol error, the session ends
                malformed = struct.pack("<I", 64) + bytes(8)
                stream.append(frame_bytes(Frame(ops.BATCH.code, 99, FLAG_NO_REPLY, bulk=malformed)))
            stream.append(frame_bytes(Frame(ops.GOODBYE.code, 98)))
            records = sealed_records(stream) if sealed else stream
            if sealed and spoil is not None:  # one record's ciphertext changed: the session ends there, both ways
                at = spoil % len(records)
                records[at] = records[at][:-1] + bytes([records[at][-1] ^ 1])
            streams.append(b"".join(records))
        assert len(streams[0]) == len(streams[1])
        cuts = sorted(data.draw(st.lists(st.integers(1, len(streams[0]) - 1), max_size=6, unique=True)))
        pauses = data.draw(st.lists(st.booleans(), min_size=len(cuts), max_size=len(cuts)))
        for side, stream, native in zip(sides, streams, (True, False)):
            # (short pauses and polls: many examples, whose outcome must not depend on where the loop went idle)
            results.append(serve(side, stream, cuts, pauses, native, monkeypatch, sealed=sealed, spin_us=100,
                                 pause_s=0.0005))
        assert results[0] == results[1]
        assert state(sides[0]) == state(sides[1])
        if sealed and spoil is not None:
            assert results[0][1].startswith("protocol error"), results[0][1]
    finally:
        for side in sides:
            side.s.release_all()


def test_the_c_loop_serves_what_it_may_itself(monkeypatch):
    """The comparison above means something only if the C loop really served: NOPs, batches of bound records,
    synchronizes and copies back on a bound stream go through it, with nothing for Python's dispatcher to run."""
    side = Side(True)
    record = ("memset8", 0, 0, 16, 1, 7)
    frames_in = [("batch", [record])]  # (binds the stream for the lane: Python runs the memset)
    frames_in += [("sync", 1), ("batch", [record, record]), ("nop",), ("nop",), ("batch", [record]),
                  ("dtoh_async", 0, 16, 1), ("dtoh", 0, 16), ("info", ""), ("info", ""), ("ctx_sync", "")]
    stream = b"".join(frame_for(side, f, i + 1) for i, f in enumerate(frames_in))
    runs, before = frames_python_runs(monkeypatch), side.s.frames_received
    got, why = serve(side, stream + frame_bytes(Frame(ops.GOODBYE.code, 99)), [], [], True, monkeypatch)
    assert why == "closed by GOODBYE"
    # Python's loop saw the synchronous copy (the NULL stream not yet bound: Python's) and the goodbye; the C loop
    # the rest (the first
    # batch it handed back at its first record, on a stream not yet bound for the lane: Python ran it on, outside
    # that loop).
    # That copy binds the context's NULL stream for the lane: C answers both cuMemGetInfo and the context's
    # synchronize.
    assert [op for op, _, _ in runs] == [ops.MEMCPY_DTOH.code, ops.GOODBYE.code], runs
    assert got.count(b"\7" * 16) == 2
    by_op = side.s.replies_by_op
    assert by_op[ops.NOP.code] == 2 and by_op[ops.STREAM_SYNCHRONIZE.code] == 1 and by_op[ops.MEMCPY_DTOH_ASYNC.code] == 1
    assert by_op[ops.MEM_GET_INFO.code] == 2 and by_op[ops.CTX_SYNCHRONIZE.code] == 1
    conn = Connection(MAX_RECORD)
    conn.receive_data(got)
    infos = [ops.MEM_GET_INFO.decode_reply(f.args) for f in iter(conn.next_frame, None)
             if f.opcode == ops.MEM_GET_INFO.code]
    assert len(infos) == 2 and infos[0] == infos[1] and infos[0].total > infos[0].free > 0, infos
    assert side.s.frames_received == before + len(frames_in) + 1
    side.s.release_all()


def test_every_operation_of_one_c_turn_is_counted_as_python_counts_it(monkeypatch):
    """Ten different operations served in one turn of the C loop (more than a counting pass took once): the
    session's counts by operation, calls and replies, come out as Python's loop leaves them."""
    binders = [("batch", [("memset8", 0, 0, 16, 1, 7)]), ("dtoh", 0, 16)]  # (Python's: bind stream 1, NULL)
    one_turn = [("sync", 1), ("batch", [("memset8", 0, 0, 16, 1, 7), ("memset32", 1, 0, 4, 1, 9),
                                        ("htod", 2, 0, 16, 1, b"ab")]),
                ("nop",), ("dtoh_async", 0, 16, 1), ("info", ""), ("ctx_sync", ""),
                ("htod", 1000, "start", 0, 7, "sync_reply"), ("dtoh", 0, 16)]
    sides, results = [Side(True), Side(True)], []
    try:
        for side, native in zip(sides, (True, False)):
            stream = b"".join(frame_for(side, f, i + 1) for i, f in enumerate(binders + one_turn))
            results.append(serve(side, stream + frame_bytes(Frame(ops.GOODBYE.code, 99)), [], [], native, monkeypatch))
        assert results[0] == results[1]
        assert state(sides[0]) == state(sides[1])
        assert len(sides[0].s.replies_by_op) >= 8, sides[0].s.replies_by_op
    finally:
        for side in sides:
            side.s.release_all()


def test_a_session_with_a_memory_quota_gets_its_quota_from_python(monkeypatch):
    """cuMemGetInfo under a quota says what the session may still take, which only Python knows: the C loop
    leaves it there, however often it comes."""
    side = Side(True)
    side.s.memory.limit = side.s.memory.allocated + 1000
    plan = [("batch", [("memset8", 0, 0, 16, 0, 7)])] + [("info", "")] * 3  # (binds the NULL stream for the lane)
    replies, _ = serve_plan(side, plan, monkeypatch)
    infos = [ops.MEM_GET_INFO.decode_reply(f.args) for f in replies if f.opcode == ops.MEM_GET_INFO.code]
    assert [(i.free, i.total) for i in infos] == [(1000, side.s.memory.limit)] * 3, infos


def test_the_c_loop_receives_copies_straight_into_the_ring(monkeypatch):
    """Host-to-device copies sent as frames of their own go from the socket into the stream's ring in C, however
    they arrive; one the client pauses in for longer than the loop polls goes on in Python from where C left it
    (a frame for the rest, of the same request), and the device holds every byte where it belongs."""
    side = Side(True)
    record = ("memset8", 0, 0, 16, 1, 7)
    plan = [("batch", [record]),  # (Python runs it, binding the stream for the lane)
            ("htod", 600 << 10, "start", 1, 3), ("htod", 200 << 10, "end", 1, 9), ("htod", 1000, "start", 1, 5),
            ("htod", 70 << 10, "past", 1, 1), ("read_big",), ("dtoh_big", 200 << 10, "end", 1),
            ("dtoh_big", 300 << 10, "start", 1)]
    replies, seen = serve_plan(side, plan, monkeypatch, pause_in=(2, 0.5))
    # Python's loop saw the rest of the copy the client paused in (a part of it: C had queued what came before
    # the pause), the copy outside the buffer (refused there, as ever), the read and the goodbye. (The batch
    # stopped in C at its first record, on a stream not yet bound, and Python ran it on outside that loop.)
    # A copy back through the ring (200 KiB) stays in C; one larger than the ring (300 KiB) is Python's.
    assert [op for op, *_ in seen] == [ops.MEMCPY_HTOD_ASYNC.code, ops.MEMCPY_HTOD_ASYNC.code, ops.MEMCPY_DTOH.code,
                                       ops.MEMCPY_DTOH_ASYNC.code, ops.GOODBYE.code], seen
    assert seen[3][1] == 8, seen
    assert seen[0][1] == 3 and 0 < seen[0][2] < 200 << 10, seen
    assert seen[1][1:] == (5, 70 << 10), seen
    assert side.failures == [(1, "MEMCPY_HTOD_ASYNC", 5)], side.failures  # INVALID_VALUE: outside the buffer
    expected = bytearray(BIG_ALLOC)
    expected[: 600 << 10] = pattern(600 << 10, 3)
    expected[BIG_ALLOC - (200 << 10):] = pattern(200 << 10, 9)
    expected[:1000] = pattern(1000, 5)
    assert [bytes(r.bulk) for r in replies[:3]] == [bytes(expected), bytes(expected[-(200 << 10):]),
                                                    bytes(expected[: 300 << 10])]


def test_the_python_client_s_synchronous_copies_stream_too(monkeypatch):
    """Synchronous copies with a reply each (as the Python client sends them) on the NULL stream: after the first
    (Python's, which binds that stream for the lane), C streams them and answers; a pause inside one leaves Python
    the rest, which it answers; a synchronous copy back through the ring stays in C."""
    side = Side(True)
    plan = [("htod", 200 << 10, "start", 0, 1, "sync_reply"), ("htod", 600 << 10, "start", 0, 2, "sync_reply"),
            ("htod", 100 << 10, "end", 0, 3, "sync_reply"), ("dtoh_big", 200 << 10, "start", "sync"), ("read_big",)]
    replies, seen = serve_plan(side, plan, monkeypatch, pause_in=(1, 0.75))
    assert [(op, rid) for op, rid, _ in seen] == [(ops.MEMCPY_HTOD.code, 1), (ops.MEMCPY_HTOD.code, 2),
                                                  (ops.MEMCPY_DTOH.code, 5), (ops.GOODBYE.code, 99)], seen
    assert 0 < seen[1][2] < (600 << 10) // 2, seen  # (the part after the pause only)
    assert [(f.opcode, f.request_id, f.status) for f in replies[:3]] == [
        (ops.MEMCPY_HTOD.code, i, 0) for i in (1, 2, 3)], replies
    expected = bytearray(BIG_ALLOC)
    expected[: 600 << 10] = pattern(600 << 10, 2)
    expected[BIG_ALLOC - (100 << 10):] = pattern(100 << 10, 3)
    assert bytes(replies[3].bulk) == bytes(expected[: 200 << 10]) and bytes(replies[4].bulk) == bytes(expected)
    assert side.s.replies_by_op[ops.MEMCPY_HTOD.code] == 3 and side.s.replies_by_op[ops.MEMCPY_DTOH.code] == 2


def test_a_synchronous_copy_whose_synchronize_fails_in_c_ends_in_python(monkeypatch):
    """When the synchronize that ends a streamed synchronous copy fails (once, injected), Python gets the copy's
    last piece with its bytes, copies it again and answers: the device holds the whole copy."""
    failed = fail_synchronize_once(monkeypatch)
    side = Side(True)
    plan = [("htod", 10, "end", 0, 9, "sync_reply"), ("htod", 600 << 10, "start", 0, 6, "sync_reply"), ("read_big",)]
    replies, seen = serve_plan(side, plan, monkeypatch)
    assert failed and not side.failures, (failed, side.failures)
    # Python saw the rest of the copy: its last piece (at most a fake ring slot, 64 KiB)
    assert [n for op, rid, n in seen if rid == 2] and 0 < [n for op, rid, n in seen if rid == 2][0] <= 64 << 10, seen
    assert [(f.request_id, f.status) for f in replies[:2]] == [(1, 0), (2, 0)], replies
    assert bytes(replies[2].bulk)[: 600 << 10] == pattern(600 << 10, 6)


@pytest.mark.parametrize("sealed", [False, True])
def test_a_synchronous_copy_without_a_reply_leaves_its_synchronize_for_what_runs_next(monkeypatch, sealed):
    """Synchronous copies up sent without a reply (the C stand-ins' cuMemcpyHtoD) on the NULL stream: C no longer
    waits for the device after each -- the next copy on that stream is ordered after it by the stream -- but
    synchronizes that stream once before it runs anything else (here a batch on another stream) and before it
    hands the socket back (here for a NOP too big for its buffer); the device holds the copies."""
    calls = driver_calls(monkeypatch, _htod="c", _synchronize="S", _memset_d8="m")
    real_next_action = worker.next_action
    monkeypatch.setattr(worker, "next_action", lambda s, frame, max_record: (
        calls.append("P") if frame is not None and frame.request_id > 2 else None) or real_next_action(
            s, frame, max_record))
    side = Side(True)
    size = 100 << 10  # (two of the fake ring's slots: a sealed record C opens into consecutive slots)
    memset = ("memset8", 0, 0, 16, 1, 7)
    plan = [("batch", [memset]), ("htod", 10, "end", 0, 9, "sync_reply"),  # (Python's: they bind the streams)
            ("htod", size, "start", 0, 1, "sync"), ("htod", size, "end", 0, 2, "sync"), ("batch", [memset]),
            ("htod", size, "start", 0, 3, "sync"), ("big_nop",), ("read_big",)]
    replies, seen = serve_plan(side, plan, monkeypatch, pause_in=(2, 0.0), sealed=sealed)
    assert [rid for _, rid, _ in seen if rid > 2] == [7, 8, 99], seen  # (C ran the copies and the second batch)
    # each copy's slots; one synchronize, then the batch's memset; the last copy's synchronize before Python's NOP
    order = "".join(calls)
    assert re.fullmatch(r"c+Smc+SPPP", order), order
    (read,) = [f for f in replies if f.request_id == 8]
    expected = bytearray(BIG_ALLOC)
    expected[:size] = pattern(size, 3)
    expected[BIG_ALLOC - size:] = pattern(size, 2)
    assert bytes(read.bulk) == bytes(expected)


@pytest.mark.parametrize("sealed", [False, True])
def test_an_owed_synchronize_is_settled_before_a_copy_up_on_another_stream(monkeypatch, sealed):
    """A synchronous copy up without a reply on the NULL stream, then an asynchronous copy up on another stream: C
    synchronizes the NULL stream before it queues the second copy's first slot, not only at the hand-back."""
    calls = driver_calls(monkeypatch, _htod="c", _synchronize="S")
    side = Side(True)
    size = 100 << 10
    plan = [("batch", [("memset8", 0, 0, 16, 1, 7)]), ("htod", 10, "end", 0, 9, "sync_reply"),
            ("htod", 10, "start", 1, 8, "async"),  # (Python's: they bind both streams)
            ("htod", size, "start", 0, 1, "sync"), ("htod", size, "end", 1, 2, "async"), ("big_nop",),
            ("read_big",)]
    replies, seen = serve_plan(side, plan, monkeypatch, pause_in=(3, 0.0), sealed=sealed)
    assert [rid for _, rid, _ in seen if rid > 3] == [6, 7, 99], seen
    # (Python's own copies of frames 1-3 do not go through the lane's driver table)
    assert re.fullmatch(r"c+Sc+", "".join(calls)), calls


@pytest.mark.parametrize("sealed", [False, True])
def test_a_copy_up_on_a_non_blocking_stream_lands_after_an_owed_one_to_the_same_place(monkeypatch, sealed):
    """The bytes, on a device that may run a non-blocking stream's copy at once and holds the NULL stream's: a
    synchronous copy up without a reply, then an asynchronous one to the same place on a non-blocking stream, which
    the NULL stream does not order. The program saw the first copy done before it sent the second, so the second's
    bytes must be what stays -- only the owed synchronize, settled before the second copy, makes them."""
    monkeypatch.setattr(fake_lag.LaggingDevice, "eager_non_blocking", True)
    side = Side(True)
    side.streams.append(side.call(ops.STREAM_CREATE, 1).stream)  # CU_STREAM_NON_BLOCKING, as side.stream(1)
    size = 60 << 10  # (a slot each: reusing one would wait for its event, which runs what the device holds)
    plan = [("batch", [("memset8", 0, 0, 16, 1, 7)]), ("htod", 10, "end", 0, 9, "sync_reply"),
            ("htod", 10, "start", 1, 8, "async"),  # (Python's: they bind both streams)
            ("htod", size, "start", 0, 1, "sync"), ("htod", size, "start", 1, 2, "async"), ("big_nop",),
            ("read_big",)]
    replies, seen = serve_plan(side, plan, monkeypatch, pause_in=(3, 0.0), sealed=sealed)
    assert [rid for _, rid, _ in seen if rid > 3] == [6, 7, 99], seen  # (C ran both copies)
    (read,) = [f for f in replies if f.request_id == 7]
    assert bytes(read.bulk)[:size] == pattern(size, 2)


ONES = ("memset32", 0, BUFFER - 64, 16, 1, 0x3F800000)  # (1.0f: a batch norm's statistics, which it reads there)


@pytest.mark.parametrize("work", [
    ("memset8", 3, 0, 16, 1, 0x5A), ("memset32", 3, 4, 4, 1, 0x01020304),
    ("launch", True, 1, 3, 0, 16, 0, True), ("launch_ex", [], 1, 3, 8, 0),
    ("bn", True, 3, 1, 0, 1, "float"),  # (x in the copy's place, y in buffer 1: y = x with ONES' statistics)
], ids=lambda work: work[0])
def test_work_queued_after_a_streamed_copy_on_its_stream_sees_the_copy_s_bytes(monkeypatch, work):
    """A copy up C streams through the ring on a stream, then a batch's record on that stream in the same place:
    on a device that holds the copy until something waits for it, the record must still run after it (each of
    the lane driver's calls that runs work lets the device catch up on its stream first). Python's loop, which
    copies at once, gives the bytes to expect."""
    got = []
    for native in (True, False):
        side = Side(True)
        side.buffers.append(big_buffer(side))  # (buffer 3 of the records: the copy's destination)
        # (Python's first batch and copy bind the stream and the record, which the lane then runs itself)
        plan = [("batch", [("memset8", 0, 0, 16, 1, 7), ONES, work]), ("htod", 10, "end", 1, 9, "sync_reply"),
                ("htod", 100 << 10, "start", 1, 4, "async"), ("batch", [work]), ("dtoh", 1, 64), ("read_big",)]
        replies, seen = serve_plan(side, plan, monkeypatch, pause_in=(2, 0.0), native=native)
        if native:
            assert [rid for _, rid, _ in seen if rid > 2] == [6, 99], seen  # (C ran the copy and the batch)
        assert not side.failures, side.failures
        got.append([bytes(f.bulk) for f in replies if f.request_id in (5, 6)])
    assert got[0] == got[1]


def test_a_synchronous_copy_with_a_reply_on_the_owed_stream_settles_what_was_owed(monkeypatch):
    """A copy up with a reply synchronizes its stream before answering: a synchronize owed on that stream is
    settled by it, not run again before the next batch."""
    calls = driver_calls(monkeypatch, _htod="c", _synchronize="S", _memset_d8="m")
    side = Side(True)
    memset = ("memset8", 0, 0, 16, 1, 7)
    plan = [("batch", [memset]), ("htod", 10, "end", 0, 9, "sync_reply"),  # (Python's: they bind the streams)
            ("htod", 100 << 10, "start", 0, 1, "sync"), ("htod", 100 << 10, "end", 0, 2, "sync_reply"),
            ("batch", [memset]), ("read_big",)]
    replies, seen = serve_plan(side, plan, monkeypatch, pause_in=(2, 0.0))
    assert [rid for _, rid, _ in seen if rid > 2] == [6, 99], seen
    assert re.fullmatch(r"c+c+Sm", "".join(calls)), calls


@pytest.mark.parametrize("sealed", [False, True])
def test_an_owed_synchronize_that_fails_is_the_copy_s_deferred_error(monkeypatch, sealed):
    """When the synchronize a copy up without a reply left owed fails (once, injected) as C settles it before a
    batch, the copy's request gets the deferred error, and the batch, with what follows, is Python's to run (the
    next reply carries the error); the copy's bytes were queued, and the device holds them."""
    failed = fail_synchronize_once(monkeypatch)
    side = Side(True)
    size = 100 << 10
    memset = ("memset8", 0, 0, 16, 1, 7)
    plan = [("batch", [memset]), ("htod", 10, "end", 0, 9, "sync_reply"),  # (Python's: they bind the streams)
            ("htod", size, "start", 0, 1, "sync"), ("batch", [memset]), ("read_big",)]
    replies, seen = serve_plan(side, plan, monkeypatch, pause_in=(2, 0.0), sealed=sealed)
    assert failed and side.failures == [(Status.LAUNCH_FAILED, "MEMCPY_HTOD", 3)], (failed, side.failures)
    assert [rid for _, rid, _ in seen if rid > 2] == [4, 5, 99], seen
    (read,) = [f for f in replies if f.request_id == 5]
    assert bytes(read.bulk)[:size] == pattern(size, 1)


@pytest.mark.parametrize("room", [0, -1])
def test_c_streams_a_copy_only_while_a_slot_and_a_frame_head_fit_its_buffer(monkeypatch, room):
    """What C hands back of a copy is a frame head and up to a ring slot's bytes: with a buffer one byte too small
    for that, the copy is Python's whole; with exactly enough, C streams it."""
    monkeypatch.setattr(native_loop, "BUFFER_BYTES", RING_SLOT_BYTES + 40 + room)
    side = Side(True)
    plan = [("batch", [("memset8", 0, 0, 16, 1, 7)]), ("htod", 300 << 10, "start", 1, 5), ("read_big",)]
    replies, runs = serve_plan(side, plan, monkeypatch)
    copies = [n for op, _, n in runs if op == ops.MEMCPY_HTOD_ASYNC.code]
    assert copies == ([300 << 10] if room < 0 else []), runs
    assert bytes(replies[0].bulk)[: 300 << 10] == pattern(300 << 10, 5)


def test_a_copy_c_fails_partway_goes_on_in_python_with_the_bytes_c_had_received(monkeypatch):
    """A driver call failing in the middle of a streamed copy (once: Python's own try succeeds) leaves Python the
    rest of the copy, from the first byte not queued, including those C had received into the failed slot."""
    failed = []
    real_htod = FakeLaneDriver._htod

    def htod_failing_once_beyond(self, dst, src, n, stream):
        if not failed and dst - big_buffer(side) >= 400 << 10:  # (a piece from a slot: beyond the C buffer)
            failed.append(n)
            raise CudaError(Status.LAUNCH_FAILED, "injected")
        return real_htod(self, dst, src, n, stream)

    monkeypatch.setattr(FakeLaneDriver, "_htod", htod_failing_once_beyond)
    side = Side(True)
    plan = [("batch", [("memset8", 0, 0, 16, 1, 7)]), ("htod", 600 << 10, "start", 1, 4), ("read_big",)]
    replies, _ = serve_plan(side, plan, monkeypatch)
    assert failed and not side.failures, (failed, side.failures)
    read = [f for f in replies if f.opcode == ops.MEMCPY_DTOH.code]
    assert bytes(read[0].bulk)[: 600 << 10] == pattern(600 << 10, 4)


def test_a_copy_back_goes_out_as_its_slots_land_the_first_on_its_own(monkeypatch):
    """A copy back through the ring is queued as a copy of its first slot, then one copy of the rest (up to four
    slots to a copy, each with one event); its reply waits for the first slot, then once for the rest's event,
    and sends what that wait found landed without waiting again. The reply carries every byte in order."""
    waits: list[int] = []
    real_dtoh = FakeLaneDriver._dtoh
    copied: list[int] = []

    def waited(self, event):
        waits.append(len(copied))
        return 0

    def dtoh(self, dst, src, n, stream):
        copied.append(n)
        return real_dtoh(self, dst, src, n, stream)

    monkeypatch.setattr(FakeLaneDriver, "_event_synchronize", waited)
    monkeypatch.setattr(FakeLaneDriver, "_dtoh", dtoh)
    side = Side(True)
    size = RING_SLOTS * RING_SLOT_BYTES - (56 << 10)  # (every slot, the last one short)
    plan = [("batch", [("memset8", 0, 0, 16, 1, 7)]), ("htod", size, "start", 1, 3), ("dtoh_big", size, "start", 1)]
    replies, seen = serve_plan(side, plan, monkeypatch)
    assert ops.MEMCPY_DTOH_ASYNC.code not in [op for op, *_ in seen], seen  # (C's)
    assert copied == [RING_SLOT_BYTES, size - RING_SLOT_BYTES], copied
    # (before: the copy up's slots freed as the copy back takes them, when the copy up went through the ring)
    assert waits[-2:] == [2, 2] and all(w < 2 for w in waits[:-2]), waits
    assert bytes(replies[0].bulk) == pattern(size, 3)


def wait_failing_at(n: int, waits: list):
    """A FakeLaneDriver._event_synchronize that notes each event waited for in `waits` and fails the n-th wait (the
    context broke meanwhile, injected)."""
    def waited(self, event):
        waits.append(event)
        if len(waits) == n:
            raise CudaError(Status.ILLEGAL_ADDRESS, "injected")
        return 0

    return waited


def test_a_copy_back_cut_short_leaves_its_slots_to_be_freed_by_one_wait(monkeypatch, caplog):
    """Slots a copy back marked with one event (its last slot's) and never waited for (the context broke after the
    first slot went out, so the session ends) are freed by one wait for that event when the ring next takes them:
    none keeps pointing at an event its own slot's next copy records again."""
    waits: list[int] = []
    monkeypatch.setattr(FakeLaneDriver, "_event_synchronize", wait_failing_at(2, waits))
    side = Side(True)
    size = RING_SLOTS * RING_SLOT_BYTES
    plan = [("batch", [("memset8", 0, 0, 16, 1, 7)]), ("dtoh_big", size, "start", 1)]
    stream = b"".join(frame_for(side, f, i + 1) for i, f in enumerate(plan))
    try:
        serve(side, stream + frame_bytes(Frame(ops.GOODBYE.code, 99)), [], [], True, monkeypatch)
        ((ring, _, _),) = side.s.lane._rings.values()
        assert [ring.pending[i] for i in range(RING_SLOTS)] == [0] + [RING_SLOTS] * (RING_SLOTS - 1)
        waits.clear()
        monkeypatch.setattr(FakeLaneDriver, "_event_synchronize", lambda self, event: waits.append(event) or 0)
        ffi, what = lane.ffi(), lane.ffi().new("char **")
        for _ in range(RING_SLOTS):  # the ring takes each slot in turn for copies up
            assert not lane.library().rgpu_lane_ring_copy(side.s.lane.fake_driver.table, ring, side.pointer(0, 0),
                                                          ffi.from_buffer(b"x" * 64), 64, 0, what)
        assert waits == [ring.events[RING_SLOTS - 1]], waits
        assert [ring.pending[i] for i in range(RING_SLOTS)] == [i + 1 for i in range(RING_SLOTS)]  # (their own)
    finally:
        side.s.release_all()


def test_a_context_failing_between_the_slots_of_a_copy_back_ends_the_session(monkeypatch, caplog):
    """Once a copy back's reply has begun, its status has gone out as success: a slot that then fails (the context
    broke meanwhile, injected) cannot be reported, so the session ends, with a warning that says why, instead of
    sending bytes the GPU never wrote."""
    monkeypatch.setattr(FakeLaneDriver, "_event_synchronize", wait_failing_at(2, []))
    side = Side(True)
    plan = [("batch", [("memset8", 0, 0, 16, 1, 7)]), ("dtoh_big", 200 << 10, "start", 1), ("nop",)]
    stream = b"".join(frame_for(side, f, i + 1) for i, f in enumerate(plan))
    try:
        got, why = serve(side, stream + frame_bytes(Frame(ops.GOODBYE.code, 99)), [], [], True, monkeypatch)
    finally:
        side.s.release_all()
    assert why.startswith("connection lost"), why
    assert "while a copy back was being sent" in caplog.text and "status 700" in caplog.text
    conn = Connection(MAX_RECORD)
    conn.receive_data(got)
    assert conn.next_frame() is None  # (the reply's head and its first slot only: no whole frame, no NOP reply)
    assert len(got) == PREFIX_SIZE + HEADER.size + RING_SLOT_BYTES, len(got)


@pytest.mark.parametrize("kind", ["nop", "copy"])
def test_kernel_output_goes_ahead_of_a_reply_the_c_loop_would_send(monkeypatch, kind):
    """Output printed before a NOP, or before a synchronous copy C streams, reaches the client before its reply,
    whether it still sat in the pipe or Python's reader had taken it already (a copy's last piece then goes to
    Python, which copies it again and answers)."""
    side = Side(True)
    target_r, target_w = os.pipe()
    output = KernelOutput.capture(max_chunk=1024, target_fd=target_w)
    printed = iter([b"first\n", b"second\n", b"third\n"])
    opcode = ops.NOP.code if kind == "nop" else ops.MEMCPY_HTOD.code
    items = [("nop",)] * 3 if kind == "nop" else [("htod", 300 << 10, "start", 0, i, "sync_reply") for i in range(3)]
    frames = [frame_for(side, item, i + 1) for i, item in enumerate(items)]
    if kind == "copy":  # one that Python answers first, binding the NULL stream for the lane (nothing printed)
        frames.insert(0, frame_for(side, ("htod", 10, "end", 0, 9, "sync_reply"), 7))
    pieces = itertools.count(1 if kind == "nop" else 0)

    def print_something():
        if next(pieces):
            os.write(target_w, next(printed, b""))
            time.sleep(0.002)  # (the reader thread takes it meanwhile, or not)

    stream = b"".join(frames) + frame_bytes(Frame(ops.GOODBYE.code, 9))
    cuts = list(itertools.accumulate(map(len, frames)))[:-1]
    try:
        got, why = serve(side, stream, cuts, [True] * len(cuts), True, monkeypatch, output, print_something)
    finally:
        output.close()
        os.close(target_r)
        side.s.release_all()
    assert why == "closed by GOODBYE"
    conn = Connection(MAX_RECORD)
    conn.receive_data(got)
    seen = []
    while (f := conn.next_frame()) is not None:
        seen.append((f.opcode, bytes(f.bulk)) if f.opcode == ops.OUTPUT.code else (f.opcode, f.request_id))
    seen = [x for x in seen if x != (ops.MEMCPY_HTOD.code, 7)]
    # Each reply comes after all that was printed before its request was sent (on a loaded machine the server may
    # answer a request only after the next print, which then goes ahead too); nothing is lost or reordered.
    text, before = b"", {}
    for what, value in seen:
        if what == ops.OUTPUT.code:
            text += value
        else:
            before[(what, value)] = text
    assert list(before) == [(opcode, 1), (opcode, 2), (opcode, 3), (ops.GOODBYE.code, 9)], seen
    printed_before = [b"first\n", b"first\nsecond\n", b"first\nsecond\nthird\n"]
    assert all(before[(opcode, i + 1)].startswith(printed_before[i]) for i in range(3)), seen
    assert text == printed_before[-1], seen


def test_a_blocking_call_that_fails_in_the_c_loop_is_answered_as_python_answers_it(monkeypatch):
    """A kernel fault leaves the context broken: the next synchronizes (of the stream and of the context) and copy
    back fail in the C loop, which leaves them to Python (it runs them again): the same error replies. A copy to
    the device fails there too, and goes back to Python whole: the same error, reported at the next reply."""
    record = ("memset8", 0, 0, 16, 1, 7)
    fault = ("launch", True, 1, 0, 10 * BIG, 8, 0, True)  # a pointer far outside: the fake kernel faults
    plan = [("batch", [record]), ("sync", 1), ("ctx_sync", ""), ("batch", [fault]), ("sync", 1),
            ("dtoh_async", 0, 16, 1), ("dtoh_big", 200 << 10, "start", 1), ("htod", 200 << 10, "start", 1, 2),
            ("ctx_sync", ""), ("nop",)]
    sides, results = [Side(True), Side(True)], []
    try:
        for side, native in zip(sides, (True, False)):
            stream = b"".join(frame_for(side, f, i + 1) for i, f in enumerate(plan))
            results.append(serve(side, stream + frame_bytes(Frame(ops.GOODBYE.code, 99)), [], [], native, monkeypatch))
        assert results[0] == results[1]
        assert state(sides[0]) == state(sides[1])
        conn = Connection(MAX_RECORD)
        conn.receive_data(results[0][0])
        statuses = [(f.opcode, f.status) for f in iter(conn.next_frame, None)]
        assert statuses[:2] == [(ops.STREAM_SYNCHRONIZE.code, 0), (ops.CTX_SYNCHRONIZE.code, 0)], statuses
        assert statuses[2][1] and statuses[3][1] and statuses[4][1], statuses
        assert statuses[5] == (ops.CTX_SYNCHRONIZE.code, statuses[2][1]), statuses
    finally:
        for side in sides:
            side.s.release_all()


def test_a_sealed_session_is_served_in_c_too(monkeypatch):
    """With record protection the C loop opens each record whole and seals its replies: the same frames as in a
    plain session stay out of Python's loop -- batches, NOPs, synchronizes, copies both ways through the ring --
    and the client opens every reply with its counters in order (Python's and C's records interleaved). Records
    too big for C's buffer stay sealed for Python, which takes them with the next counter."""
    side = Side(True)
    record = ("memset8", 0, 0, 16, 1, 7)
    plan = [("batch", [record]),  # (Python runs it, binding the stream for the lane)
            ("sync", 1), ("batch", [record, record]), ("nop",), ("htod", 200 << 10, "start", 1, 3),
            ("htod", 1000, "end", 1, 5), ("dtoh_async", 0, 16, 1), ("big_nop",), ("nop",),
            ("dtoh_big", 200 << 10, "start", 1), ("htod", TOO_BIG, "start", 1, 8), ("read_big",), ("info", "")]
    replies, seen = serve_plan(side, plan, monkeypatch, pause_in=(1, 0.0), sealed=True)  # (C gets the batch alone)
    # Python's loop ran the NOP too big for C's buffer, the copy too big for it, the read (on the NULL stream, not
    # yet bound) and the goodbye. (The first batch stopped in C at its unbound stream; Python ran it on outside
    # that loop.)
    assert [(op, rid) for op, rid, _ in seen] == [
        (ops.NOP.code, 8), (ops.MEMCPY_HTOD_ASYNC.code, 11), (ops.MEMCPY_DTOH.code, 12), (ops.GOODBYE.code, 99)], seen
    assert [f.request_id for f in replies] == [2, 4, 7, 8, 9, 10, 12, 13, 99], replies
    assert all(f.status == 0 for f in replies), replies
    assert bytes(replies[2].bulk) == b"\7" * 16
    expected = bytearray(BIG_ALLOC)
    expected[: 200 << 10] = pattern(200 << 10, 3)
    expected[BIG_ALLOC - 1000:] = pattern(1000, 5)
    assert bytes(replies[5].bulk) == bytes(expected[: 200 << 10])
    expected[:TOO_BIG] = pattern(TOO_BIG, 8)
    assert bytes(replies[6].bulk) == bytes(expected)


def test_sealed_copies_with_slots_as_big_as_the_cuda_backends_are_served_in_c(monkeypatch):
    """With ring slots of 256 KiB, as the cuda backend's: a sealed copy up of 200 KiB is opened straight into its
    slot (serve_open_htod), and a sealed copy back of 600 KiB leaves C a slot at a time as one record the client
    opens whole, holding what the copy up wrote."""
    monkeypatch.setattr(fake_lane, "RING_SLOT_BYTES", 256 << 10)
    side = Side(True)
    plan = [("batch", [("memset8", 0, 0, 16, 1, 7)]), ("htod", 200 << 10, "start", 1, 3),
            ("dtoh_big", 600 << 10, "start", 1), ("read_big",)]
    replies, seen = serve_plan(side, plan, monkeypatch, pause_in=(1, 0.0), sealed=True)  # (C gets the batch alone)
    # (Python's loop ran the read, on the NULL stream not yet bound, and the goodbye)
    assert [(op, rid) for op, rid, _ in seen] == [(ops.MEMCPY_DTOH.code, 4), (ops.GOODBYE.code, 99)], seen
    assert [(f.request_id, f.status) for f in replies] == [(3, 0), (4, 0), (99, 0)], replies
    expected = bytearray(BIG_ALLOC)
    expected[: 200 << 10] = pattern(200 << 10, 3)
    assert bytes(replies[0].bulk) == bytes(expected[: 600 << 10])
    assert bytes(replies[1].bulk) == bytes(expected)


@pytest.mark.parametrize("arrives", ["whole", "in_pieces"])
def test_sealed_copies_up_of_several_slots_are_opened_into_consecutive_slots(monkeypatch, arrives):
    """With the cuda backend's 256 KiB slots (eight of them), sealed copies up of one, four and two slots are each
    opened straight into consecutive slots and go to the device as one copy -- the 1 MiB records the C stand-ins
    send -- and a four-slot copy that would run past the ring's end starts again at its first slot (waiting for
    what was there). Whether each record is there whole when the loop reaches it, or arrives in pieces that the
    AEAD pipe opens as they come; what the device holds afterwards is what was sent."""
    monkeypatch.setattr(fake_lane, "RING_SLOT_BYTES", 256 << 10)
    monkeypatch.setattr(fake_lane, "RING_SLOTS", 8)
    copied: list[tuple[int, int]] = []  # (source address, bytes) of each device copy
    waits: list[int] = []  # the events waited for before a slot was reused
    real_htod = fake_lane.FakeLaneDriver._htod
    monkeypatch.setattr(fake_lane.FakeLaneDriver, "_htod", lambda self, dst, src, n, stream: copied.append(
        (int(lane.ffi().cast("uintptr_t", src)), n)) or real_htod(self, dst, src, n, stream))
    monkeypatch.setattr(fake_lane.FakeLaneDriver, "_event_synchronize", lambda self, event: waits.append(event) or 0)
    side = Side(True)
    sizes = [200 << 10, 1 << 20, 500 << 10, 1 << 20]  # (slot 0, slots 1-4, 5-6, then 0-3: not 7-10)
    plan = [("batch", [("memset8", 0, 0, 16, 1, 7)]), ("htod", sizes[0], "start", 1, 3),
            ("htod", sizes[1], "end", 1, 4), ("htod", sizes[2], "start", 1, 5), ("htod", sizes[3], "end", 1, 6),
            ("read_big",)]
    records = sealed_records([frame_for(side, f, i + 1) for i, f in enumerate(plan)]
                             + [frame_bytes(Frame(ops.GOODBYE.code, 99))])
    cuts = []
    if arrives == "in_pieces":  # (each copy's record in four pieces, the loop polling through the gaps)
        at = 0
        for record in records:
            if len(record) > 100_000:
                cuts += [at + 4096, at + len(record) // 3, at + 2 * len(record) // 3]
            at += len(record)
    else:
        cuts = [len(records[0])]  # (the batch alone first: it binds the stream the copies use)
    runs = frames_python_runs(monkeypatch)
    session_lane = side.s.lane  # (the session lets it go at its goodbye)
    try:
        got, why = serve(side, b"".join(records), cuts, [True] * len(cuts), True, monkeypatch, sealed=True,
                         spin_us=200_000, pause_s=0.02)
        ((ring, _, _),) = session_lane._rings.values()
        base = int(lane.ffi().cast("uintptr_t", ring.base))
    finally:
        side.s.release_all()
    assert why == "closed by GOODBYE", why
    assert [op for op, _, _ in runs if op in (ops.MEMCPY_HTOD.code, ops.MEMCPY_HTOD_ASYNC.code)] == [], runs
    # one device copy each, from slot 0, slots 1-4, 5-6, then (7-10 would run past the ring) 0-3 again
    assert [((src - base) // (256 << 10), n) for src, n in copied] == list(zip([0, 1, 5, 0], sizes)), copied
    # ...once the copies that read slots 0 and 1-4 were done: their events, slot 0's and slot 4's (ids 1 and 5)
    assert waits == [1, 5], waits
    (read,) = [f for f in opened_replies(got) if f.request_id == 6]
    expected = bytearray(BIG_ALLOC)
    for (_, size, where, _, seed) in plan[1:5]:
        at = 0 if where == "start" else BIG_ALLOC - size
        expected[at:at + size] = pattern(size, seed)
    assert bytes(read.bulk) == bytes(expected)


@pytest.mark.parametrize("stream", ["bound", "unbound"])
def test_a_sealed_copy_up_arriving_behind_other_records_is_opened_where_it_lies(monkeypatch, stream):
    """A big sealed copy up whose record begins in the same receive as records before it (two NOPs) is opened
    where it lies in the loop's buffer, behind them (serve.c moves it to the front only when the rest would not
    fit), and served in C ("bound"); one the loop may not take (its stream not yet bound) goes to Python once it
    has all come ("unbound"). Both land whole. (Whether C opened it as it arrived or once it had all come, the
    outcome is the same: a record opened from the wrong place fails.)"""
    monkeypatch.setattr(fake_lane, "RING_SLOT_BYTES", 256 << 10)
    side = Side(True)
    plan = [("batch", [("memset8", 0, 0, 16, 1, 7)]), ("nop",), ("nop",),
            ("htod", 200 << 10, "start", 1 if stream == "bound" else 0, 3), ("read_big",)]
    records = sealed_records([frame_for(side, f, i + 1) for i, f in enumerate(plan)]
                             + [frame_bytes(Frame(ops.GOODBYE.code, 99))])
    copy_at = sum(map(len, records[:3]))
    # the batch alone (Python binds its stream), then the NOPs with the copy's first 4 KiB, then the rest of it in
    # two pieces, the loop polling through the gaps
    cuts = [len(records[0]), copy_at + 4096, copy_at + 100_000]
    runs = frames_python_runs(monkeypatch)
    try:
        got, why = serve(side, b"".join(records), cuts, [True] * len(cuts), True, monkeypatch, sealed=True,
                         spin_us=200_000, pause_s=0.02)
    finally:
        side.s.release_all()
    assert why == "closed by GOODBYE", why
    copies_in_python = [rid for op, rid, _ in runs if op == ops.MEMCPY_HTOD_ASYNC.code]
    assert copies_in_python == ([] if stream == "bound" else [4]), runs
    replies = opened_replies(got)
    assert [f.request_id for f in replies if f.opcode == ops.NOP.code] == [2, 3], replies
    (read,) = [f for f in replies if f.request_id == 5]
    assert bytes(read.bulk)[: 200 << 10] == pattern(200 << 10, 3)


@pytest.mark.parametrize("gaps", ["polled", "idle", "tampered"])
def test_a_big_sealed_copy_up_is_opened_as_it_arrives(monkeypatch, gaps):
    """With the cuda backend's 256 KiB slots, a sealed copy up of 200 KiB whose record arrives in pieces is opened
    into its slot as they come (the AEAD pipe opening one while the loop receives the next) when the loop polls
    through the gaps ("polled"); a gap longer than the loop polls ("idle") leaves nothing of it opened and the
    receive counter where it was, so Python, taking the session over mid-record, opens it; a changed byte
    ("tampered") fails the tag, with nothing of the record on the device."""
    monkeypatch.setattr(fake_lane, "RING_SLOT_BYTES", 256 << 10)
    side = Side(True)
    plan = [("batch", [("memset8", 0, 0, 16, 1, 7)]), ("htod", 200 << 10, "start", 1, 3), ("read_big",)]
    records = sealed_records([frame_for(side, f, i + 1) for i, f in enumerate(plan)]
                             + [frame_bytes(Frame(ops.GOODBYE.code, 99))])
    if gaps == "tampered":
        spoiled = bytearray(records[1])
        spoiled[150_000] ^= 1
        records[1] = bytes(spoiled)
    at = len(records[0])
    cuts = [at + 4096, at + 100_000, at + 180_000]  # (inside the copy's record)
    # (the idle gap 200 times the loop's poll: on a loaded machine a shorter one was absorbed, the loop still
    # taking in what came before it when it ended)
    spin_us, pause_s = (100, 0.02) if gaps == "idle" else (200_000, 0.005)
    before = bytes(side.s.backend._view(big_buffer(side), 200 << 10))
    runs = frames_python_runs(monkeypatch)
    try:
        got, why = serve(side, b"".join(records), cuts, [True] * len(cuts), True, monkeypatch, sealed=True,
                         spin_us=spin_us, pause_s=pause_s)
        if gaps == "tampered":
            assert why.startswith("protocol error: frame failed authentication"), why
            assert bytes(side.s.backend._view(big_buffer(side), 200 << 10)) == before
            return
    finally:
        side.s.release_all()
    assert why == "closed by GOODBYE", why
    copies_in_python = [rid for op, rid, _ in runs if op == ops.MEMCPY_HTOD_ASYNC.code]
    assert copies_in_python == ([2] if gaps == "idle" else []), runs
    (read,) = [f for f in opened_replies(got) if f.request_id == 3]
    assert bytes(read.bulk)[: 200 << 10] == pattern(200 << 10, 3)


@pytest.mark.parametrize("where", ["batch", "copy", "header"])
def test_a_tampered_record_ends_a_sealed_session_in_c_with_nothing_of_it_run(monkeypatch, where):
    """A record whose ciphertext was changed fails its tag in C: the session ends with Python's protocol error
    ("failed authentication"), and nothing of the record reached the device -- a memset, a copy."""
    side = Side(True)
    plan = [("batch", [("memset8", 0, 0, 16, 1, 7)]), ("nop",),
            {"batch": ("batch", [("memset8", 0, 0, 16, 1, 9)]), "copy": ("htod", 1000, "start", 1, 5),
             "header": ("nop",)}[where], ("nop",)]
    records = sealed_records([frame_for(side, f, i + 1) for i, f in enumerate(plan)])
    spoiled = bytearray(records[2])
    spoiled[8 if where == "header" else -40] ^= 1
    records[2] = bytes(spoiled)
    before = bytes(side.s.backend._view(big_buffer(side), 1000))
    runs = frames_python_runs(monkeypatch)
    opened_in_python = []
    real_open = RecordProtector.open
    monkeypatch.setattr(RecordProtector, "open", lambda self, r: opened_in_python.append(r) or real_open(self, r))
    try:
        got, why = serve(side, b"".join(records), [], [], True, monkeypatch, sealed=True)
        assert why.startswith("protocol error: frame failed authentication"), why
        # (C opened every record: the first batch it stopped in, Python ran on outside its loop)
        assert not runs and not opened_in_python, (runs, opened_in_python)
        assert bytes(side.s.backend._view(side.pointer(0, 0), 16)) == b"\7" * 16
        assert bytes(side.s.backend._view(big_buffer(side), 1000)) == before
        assert [f.opcode for f in opened_replies(got)[:1]] == [ops.NOP.code]
    finally:
        side.s.release_all()
