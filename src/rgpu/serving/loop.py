"""A session's request loop as one sans-IO step: given the next frame from the client (None when it closed the
connection), say what to do. Two drivers run it -- the worker process's blocking loop (worker.py) and the
in-process trio loop (runner.py) -- and differ only in how they receive, send, and keep the event loop free.

    while True:
        action = next_action(session, <receive a frame or None>, max_record)
        reply = action.run()              # trio: off the event loop when action.blocking
        if reply is not None: <send reply>
        if action.close: return action.close
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import attrs

from rgpu.dispatch.dispatcher import execute_batch_sync, execute_sync, may_block
from rgpu.errors import ProtocolError, Status
from rgpu.protocol import ops
from rgpu.protocol.frames import Flags, Frame
from rgpu.serving.requests import Step, classify
from rgpu.session.state import Session


@attrs.frozen(slots=True)
class Action:
    run: Callable[[], Frame | None]  # the work; returns the reply to send, if any
    blocking: bool  # may wait on the GPU: an event loop runs it off itself, on the session's thread
    close: str | None = None  # the session ends after this step, for this reason


def _nothing() -> None:
    return None


_CLIENT_CLOSED = Action(_nothing, False, "client closed the connection")


def _goodbye(session: Session, frame: Frame) -> Frame:
    # Free before confirming, so a client that saw the reply knows its memory is back.
    session.release_all()
    return frame.reply(deferred_status=session.take_deferred_error())


def next_action(session: Session, frame: Frame | None, max_record: int) -> Action:
    """The step for one received frame. Raises ProtocolError for a frame no session may send (the driver
    answers with `protocol_error_frame` and closes)."""
    if frame is None:
        return _CLIENT_CLOSED
    session.frames_received += 1
    step, work = classify(frame)
    if step is Step.CALL:
        return Action(functools.partial(execute_sync, session, frame), may_block(frame))
    if step is Step.BATCH:
        # One hop off an event loop for the lot: a launch can block when the GPU's queue is full, and one hop
        # per batch is cheap next to one per call.
        return Action(functools.partial(execute_batch_sync, session, work, max_record), True)
    return Action(functools.partial(_goodbye, session, frame), True, "closed by GOODBYE")


def protocol_error_frame(e: ProtocolError) -> Frame:
    """The last word to a client that broke the protocol."""
    return Frame(ops.PROTOCOL_ERROR.code, 0, Flags.REPLY, e.status, bulk=str(e).encode())


def shutting_down_frame() -> Frame:
    """The last word to a client whose server is stopping."""
    return Frame(ops.PROTOCOL_ERROR.code, 0, Flags.REPLY, Status.SHUTTING_DOWN, bulk=b"server shutting down")
