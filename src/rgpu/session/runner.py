"""One connection, start to finish: handshake (with authentication when the server has a PSK), the request
loop, and teardown of everything the session owns -- however the connection ends."""

from __future__ import annotations

import json
import logging
import math
import time

import trio

from rgpu.dispatch.dispatcher import execute, execute_batch_sync
from rgpu.errors import ProtocolError, Status
from rgpu.protocol import ops
from rgpu.protocol.connection import Connection
from rgpu.protocol.frames import Flags, Frame
from rgpu.protocol.handshake import HelloFlags, ServerHandshake
from rgpu.session.pool import run_session_in_worker
from rgpu.session.requests import Step, classify
from rgpu.session.state import Session
from rgpu.transport import TrioFrameStream

log = logging.getLogger("rgpu.session")

_LOST = (trio.BrokenResourceError, trio.ClosedResourceError, EOFError, ConnectionError)


async def run_session(server, stream: trio.abc.Stream, session_id: int, peer: str) -> None:
    """`server` provides .config, .backend (in-process isolation), .pool (process isolation), .sessions."""
    cfg = server.config
    io = TrioFrameStream(stream, Connection(cfg.max_frame, reuse_receive_buffers=True))
    session: Session | None = None
    shutdown = False
    try:
        with trio.fail_after(cfg.handshake_timeout):
            hs = await _handshake(server, io, session_id, peer)
        if hs is None:
            return
        if hs.client.flags & HelloFlags.STATUS:
            await _answer_status(server, io, session_id, peer)
            return
        server.session_started[session_id] = time.time()
        if cfg.isolation == "process":
            server.sessions[session_id] = peer
            await _run_in_worker(server, stream, io, hs, session_id, peer)
            return
        session = Session(session_id, server.backend, mem_limit=cfg.session_mem_limit, peer=peer,
                          module_cache=server.module_cache)
        server.sessions[session_id] = session
        session.log.info("opened for %s (%d live)", peer, len(server.sessions))
        await _serve_requests(session, io)
    except trio.TooSlowError:
        log.warning("[session %d] %s: no complete handshake within %gs; closed", session_id, peer,
                    cfg.handshake_timeout)
    except ProtocolError as e:
        log.warning("[session %d] %s: protocol error: %s; closing", session_id, peer, e)
        await _send_quietly(io, Frame(ops.PROTOCOL_ERROR.code, 0, Flags.REPLY, e.status, bulk=str(e).encode()))
    except _LOST as e:
        log.info("[session %d] %s: connection lost (%s)", session_id, peer, type(e).__name__)
    except trio.Cancelled:
        shutdown = True
        raise
    finally:
        if shutdown and session is not None:
            await _send_quietly(io, Frame(ops.PROTOCOL_ERROR.code, 0, Flags.REPLY, Status.SHUTTING_DOWN,
                                          bulk=b"server shutting down"))
        if session is not None:
            await _teardown(server, session)
        # Only after teardown: whoever sees the session gone may rely on its memory being back.
        server.sessions.pop(session_id, None)
        server.session_started.pop(session_id, None)
        with trio.CancelScope(shield=True), trio.move_on_after(1):
            await stream.aclose()


async def _answer_status(server, io: TrioFrameStream, session_id: int, peer: str) -> None:
    """A status connection (authenticated like a session, when the server has a key) asks SERVER_STATUS once;
    the supervisor answers from what it knows and closes. No session, no worker."""
    frame = await io.receive_frame()
    if frame is None:
        return
    if frame.opcode != ops.SERVER_STATUS.code:
        raise ProtocolError(f"a status connection asks SERVER_STATUS only, not opcode 0x{frame.opcode:04x}")
    await io.send_frame(frame.reply(bulk=json.dumps(server.status()).encode()))
    log.info("[connection %d] %s asked for the server's status", session_id, peer)


async def _run_in_worker(server, stream, io: TrioFrameStream, hs: ServerHandshake, session_id: int,
                         peer: str) -> None:
    if io.conn.decoder.has_buffered_data:
        raise ProtocolError("client sent frames before the handshake completed")
    cfg = server.config
    params = {"session_id": session_id, "peer": peer, "max_frame": cfg.max_frame,
              "mem_limit": cfg.session_mem_limit,
              "module_cache": str(server.module_cache.dir) if server.module_cache else None,
              "module_cache_bytes": server.module_cache.max_bytes if server.module_cache else 0,
              "spin_us": cfg.spin_us}
    if hs.keys is not None:
        cipher, c2s, s2c = hs.keys
        params.update(cipher=cipher, c2s=c2s.hex(), s2c=s2c.hex())
    log.info("[session %d] opened for %s in a worker process (%d live)", session_id, peer, len(server.sessions))
    stats = await run_session_in_worker(server.pool, stream, params, grace=cfg.teardown_timeout)
    log.info("[session %d] ended: %s (%d frames, %d calls)", session_id, stats.get("reason"),
             stats.get("frames", 0), stats.get("calls", 0))


async def _handshake(server, io: TrioFrameStream, session_id: int, peer: str) -> ServerHandshake | None:
    cfg = server.config
    hs = ServerHandshake(cfg.psk, max_frame=cfg.max_frame, session_id=session_id)
    frame = await io.receive_frame()
    if frame is None:
        return None
    reply = hs.on_hello(frame)
    if not reply.status and len(server.sessions) >= cfg.max_sessions:
        hs.failure = f"server is at its limit of {cfg.max_sessions} sessions; try again later"
        reply = frame.reply(status=Status.SESSION_LIMIT, bulk=hs.failure.encode())
    await io.send_frame(reply)
    if hs.failure:
        log.warning("[session %d] %s: refused: %s", session_id, peer, hs.failure)
        return None
    if hs.needs_auth:
        frame = await io.receive_frame()
        if frame is None:
            log.warning("[session %d] %s: authentication failed: client left before proving the key",
                        session_id, peer)
            return None
        reply = hs.on_auth(frame)
        await io.send_frame(reply)
        if hs.failure:
            log.warning("[session %d] %s: %s", session_id, peer, hs.failure)
            return None
        io.conn.protect(hs.protector)
    return hs


async def _serve_requests(session: Session, io: TrioFrameStream) -> None:
    def offload(fn, *args):
        return trio.to_thread.run_sync(fn, *args, limiter=session.limiter)

    while True:
        frame = await io.receive_frame()
        if frame is None:
            session.log.info("client closed the connection")
            return
        session.frames_received += 1
        step, frames = classify(frame, io.conn.max_record)
        if step is Step.BATCH:
            # One hop off the event loop for the lot: a launch can block when the GPU's queue is full, and one
            # hop per batch is cheap next to one per call.
            await offload(execute_batch_sync, session, frames)
        elif step is Step.GOODBYE:
            # Free before confirming, so a client that saw the reply knows its memory is back.
            await trio.to_thread.run_sync(session.release_all, limiter=session.limiter)
            await io.send_frame(frame.reply(deferred_status=session.take_deferred_error()))
            session.log.info("closed by GOODBYE")
            return
        else:
            reply = await execute(session, frame, offload)
            if reply is not None:
                await io.send_frame(reply)


async def _teardown(server, session: Session) -> None:
    timeout = server.config.teardown_timeout
    with trio.CancelScope(shield=True):
        with trio.move_on_after(timeout if timeout > 0 else math.inf) as scope:
            try:
                await trio.to_thread.run_sync(session.release_all, limiter=session.limiter,
                                              abandon_on_cancel=True)
            except Exception:
                session.log.exception("teardown failed")
        if scope.cancelled_caught:
            session.log.error("teardown did not finish within %gs (GPU hung?); left to the worker thread", timeout)


async def _send_quietly(io: TrioFrameStream, frame: Frame) -> None:
    with trio.CancelScope(shield=True), trio.move_on_after(1):
        try:
            await io.send_frame(frame)
        except (*_LOST, trio.BusyResourceError):
            pass
