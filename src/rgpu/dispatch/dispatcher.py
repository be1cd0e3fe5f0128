"""Runs request frames against a session: decode arguments, call the handler, turn the outcome into a reply
frame -- or, for NO_REPLY calls, into a deferred error. Synchronous; which calls an event loop must run off
itself is `may_block`'s answer (serving/loop.py)."""

from __future__ import annotations

import logging
import os
import struct
from time import perf_counter_ns

from rgpu.backends.lane import Stop
from rgpu.dispatch.handlers import HANDLERS, Handler, Reply
from rgpu.dispatch.registry import FIELD_HANDLERS
from rgpu.errors import CudaError, ProtocolError, Status, status_name
from rgpu.protocol import ops
from rgpu.protocol.frames import FLAG_NO_REPLY, HEADER_SIZE, LENGTH as _LENGTH, PREFIX_SIZE, Frame, batch_records, \
    check_header, parse_frame
from rgpu.session.state import Session

log = logging.getLogger("rgpu.dispatch")

_NO_REPLY = FLAG_NO_REPLY

_unknown_logged: set[int] = set()

# RGPU_TRACE_OPS=1 (a debugging aid, read once): every request of every session, decoded, at INFO in the
# session's log -- the operations a failing program made just before it failed. Launches show their first
# parameter bytes. Costs a log line per call; never on by default.
_TRACE = os.environ.get("RGPU_TRACE_OPS") == "1"
_TRACE_PARAM_BYTES = 64


def tracing() -> bool:
    """Whether RGPU_TRACE_OPS asks for every request in the log (every request then takes Python's path)."""
    return _TRACE


def _trace(session: Session, name: str, args, bulk) -> None:
    size = len(bulk) if bulk is not None else 0
    shown = bytes(bulk[:_TRACE_PARAM_BYTES]).hex() if size and name.startswith("LAUNCH") else ""
    session.log.info("trace %s %s bulk=%d %s", name, args, size, shown)


def _lookup(frame: Frame) -> Handler:
    handler = HANDLERS.get(frame.opcode)
    if handler is None:
        if frame.opcode not in _unknown_logged:
            _unknown_logged.add(frame.opcode)
            log.warning("unsupported opcode 0x%04x requested (logged once)", frame.opcode)
        raise CudaError(Status.NOT_SUPPORTED, f"opcode 0x{frame.opcode:04x} is not supported by this server")
    return handler


def call(session: Session, frame: Frame):
    """Run one request. Returns (status, message, Reply | None); never raises for a call's own failure."""
    try:
        handler = _lookup(frame)
        if frame.flags & _NO_REPLY and not handler.op.deferrable:
            raise CudaError(Status.INVALID_VALUE, f"{handler.op.name} cannot be deferred")
        args = handler.op.decode(frame.args)
        if _TRACE:
            _trace(session, handler.op.name, args, frame.bulk)
    except (CudaError, ProtocolError) as e:
        _count(session, frame.opcode)
        return _failure(session, frame.opcode, e)
    return _run(session, frame.opcode, handler.fn, args, frame.bulk)


def _count(session: Session, opcode: int, started_ns: int = 0) -> None:
    """One more operation of this opcode; with `started_ns`, the time it took (benchmarks: where the worker's
    time goes, without a profiler's distortion)."""
    session.calls += 1
    session.calls_by_op[opcode] = session.calls_by_op.get(opcode, 0) + 1
    if started_ns:
        session.ns_by_op[opcode] = session.ns_by_op.get(opcode, 0) + perf_counter_ns() - started_ns


def _run(session: Session, opcode: int, fn, args: tuple, bulk):
    started = perf_counter_ns()
    try:
        return 0, "", fn(session, args, bulk)
    except Exception as e:
        return _failure(session, opcode, e)
    finally:
        _count(session, opcode, started)


def _failure(session: Session, opcode: int, e: Exception):
    """(status, message, None) for a call that raised."""
    if isinstance(e, CudaError):
        return e.code, e.message, None
    if isinstance(e, ProtocolError):
        return e.status, str(e), None
    session.log.error("internal error in opcode 0x%04x", opcode, exc_info=e)
    return Status.UNKNOWN, "internal server error (logged on the server)", None


def _reply(session: Session, frame: Frame, outcome) -> Frame | None:
    status, message, result = outcome
    if frame.flags & _NO_REPLY:
        if status:
            op = ops.OPS.get(frame.opcode)
            session.defer_error(status, op.name if op else f"0x{frame.opcode:04x}", frame.request_id, message)
        return None
    deferred = session.take_deferred_error()
    if status:
        if status not in (Status.NOT_READY,):
            session.log.debug("request %d opcode 0x%04x failed: %s %s", frame.request_id, frame.opcode,
                              status_name(status), message)
        return frame.reply(status=status, bulk=message.encode(), deferred_status=deferred)
    # A handler returns None, its reply's values, or a Reply (values and bulk).
    if result is None:
        values, bulk = (), b""
    elif isinstance(result, Reply):
        values, bulk = result.values, result.bulk
    else:
        values, bulk = result, b""
    try:
        args = HANDLERS[frame.opcode].op.reply.pack(*values)
    except Exception:
        session.log.exception("reply of opcode 0x%04x could not be encoded", frame.opcode)
        return frame.reply(status=Status.UNKNOWN, bulk=b"internal server error", deferred_status=deferred)
    return frame.reply(args=args, bulk=bulk, deferred_status=deferred)


def execute_sync(session: Session, frame: Frame) -> Frame | None:
    """One request, run on the calling thread (a session's worker process or worker thread)."""
    return _reply(session, frame, call(session, frame))


def may_block(frame: Frame) -> bool:
    """Whether the call can wait on the GPU (see `handles(blocking=)`): an event loop runs it off itself."""
    handler = HANDLERS.get(frame.opcode)
    return handler is not None and handler.blocking


# Records of the hottest deferred operations (those registered with handles_fields) read in one go: header,
# then the request's fields, straight into the handler; the rest of the record is the bulk.
_HEADER_FORMAT = "<HHIIII"
_FAST = {code: (struct.Struct(_HEADER_FORMAT + HANDLERS[code].op.request.format.lstrip("<")), HANDLERS[code])
         for code in FIELD_HANDLERS if HANDLERS[code].op.deferrable}
assert struct.calcsize(_HEADER_FORMAT) == HEADER_SIZE
_OPCODE = struct.Struct("<H")


def _fast_record(session: Session, record) -> bool:
    """Run a deferred record of a handles_fields operation straight from its bytes (no Frame, no generic decode,
    no named tuple) and say so; False for anything else, which then takes the general path."""
    if len(record) < HEADER_SIZE:
        return False
    fast = _FAST.get(_OPCODE.unpack_from(record)[0])
    if fast is None:
        return False
    layout, handler = fast
    if len(record) < layout.size:
        return False
    v = layout.unpack_from(record)
    if v[1] != _NO_REPLY or len(record) != layout.size + v[5]:
        return False
    bulk = memoryview(record)[layout.size:] if v[5] else b""
    if _TRACE:
        _trace(session, handler.op.name, handler.op.Request._make(v[6:]), bulk)
    # v[6:] are the request's fields in spec order: what a handles_fields handler takes, as a plain tuple.
    _run_deferred(session, handler, v[6:], bulk, v[2])
    return True


def _deferred_record(session: Session, record) -> None:
    """A deferred call of a BATCH run straight from its bytes (no Frame, no bytes copy of its arguments): what
    call() and _reply() do for a NO_REPLY frame, for the common case of a known, deferrable operation with
    arguments of the right size; anything else takes the general path, which gives it its error."""
    view = memoryview(record)
    opcode, flags, request_id, _status, _deferred, bulk_len = check_header(view)
    if not flags & _NO_REPLY:
        raise ProtocolError("every frame inside a BATCH must carry NO_REPLY")
    handler = HANDLERS.get(opcode)
    args_end = len(view) - bulk_len
    if handler is None or not handler.op.deferrable or _TRACE or args_end - HEADER_SIZE != handler.op.request.size:
        frame = parse_frame(view)
        _reply(session, frame, call(session, frame))
        return
    op = handler.op
    _run_deferred(session, handler, op.Request._make(op.request.unpack_from(view, HEADER_SIZE)),
                  view[args_end:] if bulk_len else b"", request_id)


def _run_deferred(session: Session, handler: Handler, args: tuple, bulk, request_id: int) -> None:
    """Run a NO_REPLY call; a failure becomes the session's deferred error."""
    status, message, _ = _run(session, handler.op.code, handler.fn, args, bulk)
    if status:
        session.defer_error(status, handler.op.name, request_id, message)


def execute_batch_sync(session: Session, batch, max_record: int) -> None:
    """The records of a BATCH frame's bulk, in order, as if they had arrived one by one; a batch that does not
    tile into records of at most `max_record` bytes is a ProtocolError before any of them runs. The session's
    fast lane, if it has one, runs what it can; the rest takes the paths above."""
    lane = session.lane
    if lane is None or _TRACE:
        for record in batch_records(batch, max_record):
            _python_record(session, record)
        return
    view, end = lane.view(batch), len(batch)
    if not lane.check_batch(view, end, max_record):
        batch_records(batch, max_record)  # raises, saying what is wrong
        raise ProtocolError("malformed batch")
    try:
        _run_batch_from(session, lane, batch, view, None)
    finally:
        take_lane_counts(session)


def resume_batch(session: Session, batch, stop: Stop) -> None:
    """The rest of a checked BATCH (its bulk) that the lane ran up to `stop` on its own (the C request loop,
    serving/native_loop.py): from there on, what execute_batch_sync does."""
    lane = session.lane
    try:
        _run_batch_from(session, lane, batch, lane.view(batch), stop)
    finally:
        take_lane_counts(session)


def _run_batch_from(session: Session, lane, batch, view, stop: Stop | None) -> None:
    """Alternately the lane and Python over the records of a checked batch, starting with `stop`'s outcome (a
    run already made) or, with None, a run of the lane from the start."""
    end = len(batch)
    if stop is None:
        stop = session.lane_ready().run(view, end, 0, session.current_ctx)
    while True:
        pos = stop.pos
        if stop.status:
            session.defer_error(stop.status, ops.OPS[stop.opcode].name, stop.request_id, stop.what)
        else:  # the lane leaves this record to Python, and the ones after it that it never runs
            while pos < end:
                (length,) = _LENGTH.unpack_from(batch, pos)
                if pos != stop.pos and length >= _OPCODE.size and \
                        _OPCODE.unpack_from(batch, pos + PREFIX_SIZE)[0] in lane.serves:
                    break
                pos += PREFIX_SIZE
                _python_record(session, batch[pos : pos + length])
                pos += length
        if pos >= end:
            return
        stop = session.lane_ready().run(view, end, pos, session.current_ctx)


def take_lane_counts(session: Session) -> None:
    """What the session's lane ran (and its request loop answered) since last asked, into the session's counts by
    operation."""
    for opcode, calls, ns, replies in session.lane.take_counts():
        session.calls += calls
        session.calls_by_op[opcode] = session.calls_by_op.get(opcode, 0) + calls
        session.ns_by_op[opcode] = session.ns_by_op.get(opcode, 0) + ns
        if replies:
            session.replies_sent += replies
            session.replies_by_op[opcode] = session.replies_by_op.get(opcode, 0) + replies


def _python_record(session: Session, record) -> None:
    if not _fast_record(session, record):
        _deferred_record(session, record)
