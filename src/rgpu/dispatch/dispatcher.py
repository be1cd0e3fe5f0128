"""Runs request frames against a session: decode arguments, call the handler (inline or on the session's
worker thread), turn the outcome into a reply frame -- or, for NO_REPLY calls, into a deferred error."""

from __future__ import annotations

import logging

import trio

from rgpu.dispatch.handlers import HANDLERS, Handler, Reply
from rgpu.errors import CudaError, ProtocolError, Status, status_name
from rgpu.protocol import ops
from rgpu.protocol.frames import FLAG_NO_REPLY, Frame
from rgpu.session.state import Session

log = logging.getLogger("rgpu.dispatch")

_NO_REPLY = FLAG_NO_REPLY

_unknown_logged: set[int] = set()


def _lookup(frame: Frame) -> Handler:
    handler = HANDLERS.get(frame.opcode)
    if handler is None:
        if frame.opcode not in _unknown_logged:
            _unknown_logged.add(frame.opcode)
            log.warning("unsupported opcode 0x%04x requested (logged once)", frame.opcode)
        raise CudaError(Status.NOT_SUPPORTED, f"opcode 0x{frame.opcode:04x} is not supported by this server")
    return handler


def call(session: Session, frame: Frame, handler: Handler | None = None):
    """Run one request synchronously. Returns (status, message, Reply | None); never raises for a call's
    own failure."""
    session.calls += 1
    try:
        handler = handler or _lookup(frame)
        if frame.flags & _NO_REPLY and not handler.op.deferrable:
            raise CudaError(Status.INVALID_VALUE, f"{handler.op.name} cannot be deferred")
        args = handler.op.unpack_request(frame.args)
        result = handler.fn(session, args, frame.bulk)
    except CudaError as e:
        return e.code, e.message, None
    except ProtocolError as e:
        return e.status, str(e), None
    except Exception:
        session.log.exception("internal error in opcode 0x%04x", frame.opcode)
        return Status.UNKNOWN, "internal server error (logged on the server)", None
    if result is None:
        result = Reply()
    elif not isinstance(result, Reply):
        result = Reply(result)
    return 0, "", result


def _reply(session: Session, frame: Frame, outcome) -> Frame | None:
    status, message, result = outcome
    if frame.flags & _NO_REPLY:
        if status:
            op = ops.OPS.get(frame.opcode)
            session.defer_error(status, op.name if op else f"0x{frame.opcode:04x}", frame.request_id)
        return None
    deferred = session.take_deferred_error()
    if status:
        if status not in (Status.NOT_READY,):
            session.log.debug("request %d opcode 0x%04x failed: %s %s", frame.request_id, frame.opcode,
                              status_name(status), message)
        return frame.reply(status=status, bulk=message.encode(), deferred_status=deferred)
    try:
        args = HANDLERS[frame.opcode].op.reply.pack(*result.values)
    except Exception:
        session.log.exception("reply of opcode 0x%04x could not be encoded", frame.opcode)
        return frame.reply(status=Status.UNKNOWN, bulk=b"internal server error", deferred_status=deferred)
    return frame.reply(args=args, bulk=result.bulk, deferred_status=deferred)


def execute_sync(session: Session, frame: Frame) -> Frame | None:
    """One request, run on the calling thread (a session's worker process or worker thread)."""
    return _reply(session, frame, call(session, frame))


async def execute(session: Session, frame: Frame) -> Frame | None:
    """One request frame -> its reply (None for NO_REPLY requests)."""
    handler = HANDLERS.get(frame.opcode)
    if handler is not None and handler.blocking:
        outcome = await trio.to_thread.run_sync(call, session, frame, handler, limiter=session.limiter)
    else:
        outcome = call(session, frame, handler)
    return _reply(session, frame, outcome)


def execute_batch_sync(session: Session, frames: list[Frame]) -> None:
    if any(not f.flags & _NO_REPLY for f in frames):
        raise ProtocolError("every frame inside a BATCH must carry NO_REPLY")
    for frame in frames:
        _reply(session, frame, call(session, frame))


async def execute_batch(session: Session, frames: list[Frame]) -> None:
    """A BATCH of deferred calls: one hop off the event loop for the lot (a launch can block when the
    GPU's queue is full, and one hop per batch is cheap next to one per call)."""
    await trio.to_thread.run_sync(execute_batch_sync, session, frames, limiter=session.limiter)
