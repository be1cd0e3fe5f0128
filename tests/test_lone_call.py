"""The blocking client's lone call (Client._call): on a plain connection with nothing queued, its usual reply is
taken straight from the received bytes (Connection.lone_request, take_lone_reply). Whatever the server sends, it
must end as the Frame path (Client._call_frame) ends: the same result or error, the same requests on the wire,
the same counters, the same kernel output, the connection in the same state for the next call."""

from __future__ import annotations

import socket
import struct
import threading
import time
import types

import attrs
import pytest

from rgpu.client import Client
from rgpu.errors import ProtocolError, Status
from rgpu.protocol import ops
from rgpu.protocol.connection import Connection
from rgpu.protocol.frames import PREFIX_SIZE, Flags, Frame, RecordDecoder, frame_bytes
from rgpu.protocol.handshake import Feature, Hello
from rgpu.transport import SocketFrameStream

OUTPUT = frame_bytes(Frame(ops.OUTPUT.code, 0, Flags.REPLY, bulk=b"printf_demo: tag 1\n"))


def _reply(request: Frame, *, args: bytes = b"", **fields) -> bytes:
    """The record answering `request` (status 0, `args`), with any header field (or the bulk) replaced."""
    return frame_bytes(attrs.evolve(request.reply(args=args), **fields))


def _count(value: int) -> bytes:
    return struct.pack("<i", value)


# name: (what the program calls, what the server sends for each request that wants a reply: chunks written
# 20 ms apart, so that each lands in a receive of its own; None: the server closes the connection)
CASES = {
    "null call": (lambda c: c.nop(), lambda f: [_reply(f)]),
    "one result": (lambda c: c.device_count(), lambda f: [_reply(f, args=_count(3))]),
    "named results": (lambda c: c.mem_get_info(), lambda f: [_reply(f, args=struct.pack("<QQ", 5, 8))]),
    "decoded result": (lambda c: c.ctx_get_limit(1), lambda f: [_reply(f, args=struct.pack("<Q", 1024))]),
    "bulk": (lambda c: c.device_name(), lambda f: [_reply(f, bulk=b"Fake GPU")]),
    "deferred error": (lambda c: c.synchronize(),
                       lambda f: [_reply(f, flags=Flags.REPLY | Flags.DEFERRED_ERROR,
                                         deferred_status=Status.INVALID_HANDLE)]),
    "deferred error without its flag": (lambda c: c.synchronize(),
                                        lambda f: [_reply(f, deferred_status=Status.INVALID_HANDLE)]),
    "failed": (lambda c: c.mem_alloc(1 << 40),
               lambda f: [_reply(f, status=Status.OUT_OF_MEMORY, bulk=b"out of memory")]),
    "not ready": (lambda c: c.event_query(1), lambda f: [_reply(f, status=Status.NOT_READY)]),
    "output with the reply": (lambda c: c.synchronize(), lambda f: [OUTPUT + _reply(f)]),
    "output before the reply": (lambda c: c.synchronize(), lambda f: [OUTPUT, _reply(f)]),
    "reply in pieces": (lambda c: c.device_count(),
                        lambda f: [_reply(f, args=_count(3))[:10], _reply(f, args=_count(3))[10:]]),
    "another request's reply": (lambda c: c.device_count(),
                                lambda f: [_reply(f, args=_count(3), request_id=f.request_id + 1)]),
    "another operation's reply": (lambda c: c.device_count(),
                                  lambda f: [_reply(f, args=_count(3), opcode=ops.DEVICE_GET.code)]),
    "protocol error": (lambda c: c.nop(),
                       lambda f: [frame_bytes(Frame(ops.PROTOCOL_ERROR.code, 0, Flags.REPLY,
                                                    Status.FRAME_TOO_LARGE, bulk=b"too big"))]),
    "results too short": (lambda c: c.device_count(), lambda f: [_reply(f, args=b"\3\0")]),
    "results too long": (lambda c: c.nop(), lambda f: [_reply(f, args=_count(3))]),
    "results too long, in pieces": (lambda c: c.nop(), lambda f: [_reply(f, args=_count(3))[:24],
                                                               _reply(f, args=_count(3))[24:]]),
    "results as bulk": (lambda c: c.device_count(), lambda f: [_reply(f, bulk=_count(3))]),
    "no reply flag": (lambda c: c.device_count(), lambda f: [_reply(f, args=_count(3), flags=0)]),
    "unknown flag": (lambda c: c.device_count(), lambda f: [_reply(f, args=_count(3), flags=0x81)]),
    "a reply too many": (lambda c: (c.device_count(), c.device_count()),
                         lambda f: [_reply(f, args=_count(3)) * 2]),
    "queued call first": (lambda c: (c.ctx_set_current(9), c.device_count()),
                          lambda f: [_reply(f, args=_count(3))]),
    "server gone": (lambda c: c.device_count(), lambda f: None),
}
# Where the short way must be taken: no Frame made of the reply.
USUAL = {"null call", "one result", "named results", "decoded result"}


def _serve(sock: socket.socket, script, received: list) -> None:
    io = SocketFrameStream(sock, Connection())
    try:
        while True:
            request = io.receive_frame()
            received.append(frame_bytes(request))
            if request.flags & Flags.NO_REPLY:
                continue
            chunks = script(request)
            if chunks is None:
                sock.shutdown(socket.SHUT_RDWR)
                return
            for i, chunk in enumerate(chunks):
                time.sleep(0.02 if i else 0)
                sock.sendall(chunk)
    except ConnectionError:
        pass


def _run(case: str, path: str) -> dict:
    call, script = CASES[case]
    ours, theirs = socket.socketpair()
    received: list = []
    server = threading.Thread(target=_serve, args=(theirs, script, received))
    server.start()
    output: list = []
    hs = types.SimpleNamespace(server=Hello(features=int(Feature.OUTPUT), max_frame=1 << 20, session_id=1))
    client = Client(ours, SocketFrameStream(ours, Connection(), spin_us=50), hs, True, output.append)
    if path == "frames":
        client._call = client._call_frame
    frames_taken = []
    take = client.io.conn.next_frame
    client.io.conn.next_frame = lambda: frames_taken.append(take()) or frames_taken[-1]
    try:
        result = call(client)
        outcome = ("returned", type(result).__name__, result)
    except Exception as e:  # noqa: BLE001 -- what was raised is what is compared
        outcome = ("raised", type(e).__name__, str(e), getattr(e, "code", None), getattr(e, "deferred", None))
    ours.close()
    server.join(10)
    theirs.close()
    return {"outcome": outcome, "requests": received, "sent": client.io.bytes_sent,
            "received": client.io.bytes_received, "output": output,
            "frames taken": sum(f is not None for f in frames_taken)}


@pytest.mark.parametrize("case", CASES)
def test_a_lone_call_ends_as_through_frames(case):
    lone, frames = _run(case, "lone"), _run(case, "frames")
    if case in USUAL:
        assert lone.pop("frames taken") == 0 and frames.pop("frames taken") == 1
    else:
        del lone["frames taken"], frames["frames taken"]
    assert lone == frames
    assert lone["requests"] and lone["sent"] == sum(map(len, lone["requests"]))


def test_the_answers_themselves():
    """(The comparison above holds the two paths together; these pin what they both give.)"""
    assert _run("null call", "lone")["outcome"] == ("returned", "NoneType", None)
    assert _run("named results", "lone")["outcome"][1:] == ("MemGetInfoReply", (5, 8))
    assert _run("decoded result", "lone")["outcome"] == ("returned", "int", 1024)
    assert _run("deferred error", "lone")["outcome"][3:] == (Status.INVALID_HANDLE, True)
    assert _run("not ready", "lone")["outcome"] == ("returned", "bool", False)
    run = _run("output before the reply", "lone")
    assert run["output"] == [b"printf_demo: tag 1\n"] and run["outcome"] == ("returned", "NoneType", None)
    assert _run("another request's reply", "lone")["outcome"][1] == "ProtocolError"
    assert _run("server gone", "lone")["outcome"][3] == Status.CONNECTION_LOST
    assert ops.BATCH.code in {struct.unpack_from("<H", r, 4)[0] for r in _run("queued call first", "lone")["requests"]}


@pytest.mark.parametrize("over", [0, 1])
def test_a_lone_reply_over_the_record_limit_is_refused_as_any_record(over):
    record = _reply(Frame(ops.DEVICE_GET_COUNT.code, 2), args=_count(3))
    op = ops.DEVICE_GET_COUNT
    decoder = RecordDecoder(max_record=len(record) - PREFIX_SIZE - over)
    decoder.lone_buffer()[: len(record)] = record
    if not over:
        assert decoder.take_lone_reply(len(record), op.code, 2, op.reply) == (3,)
        return
    with pytest.raises(ProtocolError) as e:
        decoder.take_lone_reply(len(record), op.code, 2, op.reply)
    assert e.value.status == Status.FRAME_TOO_LARGE
