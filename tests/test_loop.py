"""The session's request loop as a sans-IO step (serving/loop.py), without sockets: what each frame asks of
the drivers (the worker's blocking loop, the trio loop)."""

from __future__ import annotations

import pytest

from rgpu.backends.fake import FakeBackend
from rgpu.errors import ProtocolError, Status
from rgpu.protocol import ops
from rgpu.protocol.frames import FLAG_NO_REPLY, FLAG_REPLY, Frame, frame_bytes
from rgpu.serving.loop import next_action, protocol_error_frame
from rgpu.session.state import Session

MAX_RECORD = 1 << 20


@pytest.fixture
def session():
    s = Session(1, FakeBackend())
    yield s
    s.release_all()


def test_a_plain_call_runs_inline_and_replies(session):
    action = next_action(session, Frame(ops.DEVICE_GET_COUNT.code, 7), MAX_RECORD)
    assert not action.blocking and action.close is None
    reply = action.run()
    assert reply.request_id == 7 and reply.flags & FLAG_REPLY and not reply.status
    assert ops.DEVICE_GET_COUNT.decode_reply(reply.args).count == 1
    assert session.frames_received == 1 and session.calls == 1


def test_a_call_that_may_wait_on_the_gpu_is_marked_blocking(session):
    action = next_action(session, Frame(ops.CTX_SYNCHRONIZE.code, 1), MAX_RECORD)
    assert action.blocking
    assert action.run().status == Status.INVALID_CONTEXT  # no context yet: an error reply, not an exception


def test_a_batch_runs_its_records_and_replies_nothing(session):
    bad = Frame(ops.MEM_FREE.code, 3, FLAG_NO_REPLY, args=ops.MEM_FREE.pack_request(0x1234))
    action = next_action(session, Frame(ops.BATCH.code, 2, bulk=frame_bytes(bad)), MAX_RECORD)
    assert action.blocking and action.close is None
    assert action.run() is None
    assert session.take_deferred_error()  # the failed deferred call is reported with the next reply


def test_goodbye_frees_then_replies_and_closes(session):
    next_action(session, Frame(ops.CTX_CREATE.code, 1, args=ops.CTX_CREATE.pack_request(0, 0)), MAX_RECORD).run()
    assert session.backend.contexts_alive == 1
    action = next_action(session, Frame(ops.GOODBYE.code, 2), MAX_RECORD)
    assert action.close == "closed by GOODBYE"
    assert action.run().request_id == 2 and session.backend.contexts_alive == 0


def test_end_of_stream_closes(session):
    action = next_action(session, None, MAX_RECORD)
    assert action.close == "client closed the connection" and action.run() is None


@pytest.mark.parametrize("frame", [Frame(ops.NOP.code, 1, FLAG_REPLY), Frame(ops.HELLO.code, 1)])
def test_frames_no_session_may_send_are_protocol_errors(session, frame):
    with pytest.raises(ProtocolError) as info:
        next_action(session, frame, MAX_RECORD)
    last = protocol_error_frame(info.value)
    assert last.opcode == ops.PROTOCOL_ERROR.code and last.status == info.value.status


def _batched_failures(records: list[Frame]) -> tuple[list[str], int]:
    """Run `records` as one BATCH in a fresh session: the deferred failures it logged, and the calls counted."""
    s = Session(1, FakeBackend())
    try:
        next_action(s, Frame(ops.CTX_CREATE.code, 1, args=ops.CTX_CREATE.pack_request(0, 0)), MAX_RECORD).run()
        failures = []
        s.defer_error = lambda code, what, request_id, message="": failures.append(
            f"{what} (request {request_id}) failed: {code} ({message})")
        bulk = b"".join(frame_bytes(r) for r in records)
        next_action(s, Frame(ops.BATCH.code, 2, bulk=bulk), MAX_RECORD).run()
        return failures, s.calls
    finally:
        s.release_all()


def test_deferred_records_fail_in_a_batch_as_they_would_alone():
    # A batch's deferred calls run straight from their bytes; the ones that cannot -- an unknown opcode, one that
    # may not be deferred, arguments of the wrong size -- fail as the general path makes them fail, in order.
    memset = ops.MEMSET_D8_ASYNC
    records = [
        Frame(memset.code, 10, FLAG_NO_REPLY, args=memset.pack_request(0x1234, 7, 16, 0)),  # not the session's
        Frame(0x7FFF, 11, FLAG_NO_REPLY),                                                     # unknown opcode
        Frame(ops.MEM_ALLOC.code, 12, FLAG_NO_REPLY, args=ops.MEM_ALLOC.pack_request(64)),    # not deferrable
        Frame(memset.code, 13, FLAG_NO_REPLY, args=memset.pack_request(0x1234, 7, 16, 0)[:-1]),  # short arguments
    ]
    failures, calls = _batched_failures(records)
    assert [f.split(" failed")[0] for f in failures] == ["MEMSET_D8_ASYNC (request 10)", "0x7fff (request 11)",
                                                        "MEM_ALLOC (request 12)", "MEMSET_D8_ASYNC (request 13)"]
    assert "cannot be deferred" in failures[2] and calls == 1 + 4


def _batch_of(payloads: list[bytes]) -> Frame:
    """A BATCH whose records are these payloads as they are (length-prefixed, nothing checked)."""
    return Frame(ops.BATCH.code, 2, bulk=b"".join(len(p).to_bytes(4, "little") + p for p in payloads))


def _payload(frame: Frame) -> bytes:
    return frame_bytes(frame)[4:]  # without its length prefix


@pytest.mark.parametrize("mangle", ["reply expected", "bulk longer than the record", "unknown flag"])
def test_records_the_fast_path_takes_are_checked_like_any_other(mangle):
    # Copies, memsets, launches, records and graph launches run straight from their bytes; a record of one of them
    # that is not a well-formed NO_REPLY call is a protocol error of the batch, as on the general path.
    copy = ops.MEMCPY_HTOD_ASYNC
    good = _payload(Frame(copy.code, 10, FLAG_NO_REPLY, args=copy.pack_request(0x1234, 0), bulk=b"x" * 8))
    header = bytearray(good[:20])
    if mangle == "reply expected":
        header[2:4] = (0).to_bytes(2, "little")
    elif mangle == "bulk longer than the record":
        header[16:20] = (100).to_bytes(4, "little")
    else:
        header[2:4] = (FLAG_NO_REPLY | 0x4000).to_bytes(2, "little")
    s = Session(1, FakeBackend())
    try:
        next_action(s, Frame(ops.CTX_CREATE.code, 1, args=ops.CTX_CREATE.pack_request(0, 0)), MAX_RECORD).run()
        with pytest.raises(ProtocolError):
            next_action(s, _batch_of([bytes(header) + good[20:]]), MAX_RECORD).run()
        assert s.calls == 1  # the copy never ran
    finally:
        s.release_all()
