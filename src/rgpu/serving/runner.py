"""One connection, start to finish: handshake (with authentication when the server has a PSK), the request
loop, and teardown of everything the session owns -- however the connection ends."""

from __future__ import annotations

import json
import logging
import math
import secrets
import time

import attrs

import trio

from rgpu.errors import ProtocolError, Status
from rgpu.protocol.frames import Frame
from rgpu.protocol.connection import Connection
from rgpu.protocol import ops
from rgpu.protocol.handshake import SUPPORTED_FEATURES, Feature, HelloFlags, ServerHandshake
from rgpu.serving.handoff import Handoff, SessionKeys
from rgpu.serving.loop import next_action, protocol_error_frame, shutting_down_frame
from rgpu.serving.pool import run_session_in_worker
from rgpu.session.state import Session
from rgpu.transport import TrioFrameStream

log = logging.getLogger("rgpu.session")

_LOST = (trio.BrokenResourceError, trio.ClosedResourceError, EOFError, ConnectionError)


async def run_session(server, stream: trio.abc.Stream, session_id: int, peer: str) -> None:
    """`server` provides .config, .backend (in-process isolation), .pool (process isolation), .sessions."""
    cfg = server.config
    io = TrioFrameStream(stream, Connection.for_handshake(), frame_timeout=cfg.frame_timeout or None)
    session: Session | None = None
    hs = slot = None
    shutdown = False
    try:
        with server.admission.admit() as admitted, trio.fail_after(cfg.handshake_timeout):
            hs, slot = await _handshake(server, io, session_id, peer)
        if admitted.cancelled_caught:
            log.warning("[session %d] %s: closed before completing the handshake: %d newer connections were "
                        "waiting to start theirs (--max-handshakes)", session_id, peer, server.admission.limit)
            return
        if hs is None:
            return
        if isinstance(hs, LinkJoin):
            await _join_link(server, stream, io, hs.frame, session_id, peer)
            return
        if hs.client.flags & HelloFlags.STATUS:
            await _answer_status(server, io, session_id, peer)
            return
        server.session_started[session_id] = time.time()
        if cfg.isolation == "process":
            server.sessions[session_id] = peer
            await _run_in_worker(server, stream, io, hs, session_id, peer, slot)
            return
        io.conn.open_requests(cfg.max_frame)
        session = Session(session_id, server.backend, mem_limit=cfg.session_mem_limit, peer=peer,
                          module_cache=server.module_cache, ipc=server.ipc)
        session.on_released = slot.release
        server.sessions[session_id] = session
        session.log.info("opened for %s (%d live)", peer, len(server.sessions))
        await _serve_requests(session, io)
    except trio.TooSlowError:
        log.warning("[session %d] %s: no complete handshake within %gs; closed", session_id, peer,
                    cfg.handshake_timeout)
    except ProtocolError as e:
        log.warning("[session %d] %s: protocol error: %s; closing", session_id, peer, e)
        await io.send_quietly(protocol_error_frame(e))
    except _LOST as e:
        log.info("[session %d] %s: connection lost (%s)", session_id, peer, type(e).__name__)
    except trio.Cancelled:
        shutdown = True
        raise
    finally:
        if shutdown and session is not None:
            await io.send_quietly(shutting_down_frame())
        if session is not None:
            await _teardown(server, session)
        # Only after teardown: whoever sees the session gone may rely on its memory being back.
        server.sessions.pop(session_id, None)
        server.session_started.pop(session_id, None)
        if slot is not None:
            slot.release()  # usually done already, as soon as the session's memory was back
        with trio.CancelScope(shield=True), trio.move_on_after(1):
            await stream.aclose()


async def _answer_status(server, io: TrioFrameStream, session_id: int, peer: str) -> None:
    """A status connection (authenticated like a session, when the server has a key) asks SERVER_STATUS once;
    the supervisor answers from what it knows and closes. No session, no worker."""
    # It holds a session slot until it closes: one that never asks must not keep it.
    with trio.move_on_after(server.config.handshake_timeout):
        frame = await io.receive_frame()
    if frame is None:
        return
    if frame.opcode != ops.SERVER_STATUS.code:
        raise ProtocolError(f"a status connection asks SERVER_STATUS only, not opcode 0x{frame.opcode:04x}")
    await io.send_frame(frame.reply(bulk=json.dumps(await server.status_report()).encode()))
    log.info("[connection %d] %s asked for the server's status", session_id, peer)


@attrs.frozen(slots=True)
class LinkJoin:
    """A connection whose first frame is a LINK_JOIN: it asks to become a copy link of a running session."""

    frame: Frame


async def _join_link(server, stream, io: TrioFrameStream, frame: Frame, connection_id: int, peer: str) -> None:
    """Answer a LINK_JOIN, then hand the connection to the session's worker (rgpu.session.links). Its proof is
    an HMAC of the link index under the session's token, 32 random bytes its client had over its own connection."""
    try:
        args = ops.LINK_JOIN.decode(frame.args)
    except ProtocolError as e:
        raise ProtocolError(f"LINK_JOIN: {e}") from None
    if len(frame.bulk) or io.conn.decoder.has_buffered_data:
        raise ProtocolError("a copy link sent more than its LINK_JOIN before the answer")
    offer = None
    if server.pool is None:
        why = "copy links need sessions in worker processes"
    else:
        offer, why = server.pool.claim_link(args.proof, args.link)
    if why:
        log.warning("[connection %d] %s: copy link refused: %s", connection_id, peer, why)
        await io.send_frame(frame.reply(status=Status.AUTH_FAILED, bulk=why.encode()))
        return
    # Answered first: once the worker holds the socket it makes it blocking, which this loop's copy must not be.
    await io.send_frame(frame.reply())
    why = await server.pool.hand_link(offer, args.link, stream.socket.fileno())
    if why:
        log.warning("[connection %d] %s: copy link lost: %s", connection_id, peer, why)
        return
    log.info("[session %d] copy link %d joined from %s", offer.session_id, args.link, peer)


async def _run_in_worker(server, stream, io: TrioFrameStream, hs: ServerHandshake, session_id: int,
                         peer: str, slot) -> None:
    if io.conn.decoder.has_buffered_data:
        raise ProtocolError("client sent frames before the handshake completed")
    cfg = server.config
    cache = server.module_cache
    # (a sealed session's links carry records sealed with keys of their own)
    links = cfg.copy_links if hs.features & hs.client.features & Feature.COPY_LINKS else 0
    handoff = Handoff(session_id, peer, cfg.max_frame, mem_limit=cfg.session_mem_limit,
                      module_cache=str(cache.dir) if cache else None, module_cache_bytes=cache.max_bytes if cache else 0,
                      ipc_dir=str(server.ipc.dir),
                      spin_us=cfg.spin_us, frame_timeout=cfg.frame_timeout, inject_rtt_us=cfg.inject_rtt_us,
                      output=bool(hs.features & hs.client.features & Feature.OUTPUT),
                      link_token=secrets.token_bytes(32).hex() if links else None, copy_links=links,
                      keys=None if hs.keys is None else SessionKeys(*hs.keys))
    log.info("[session %d] opened for %s in a worker process (%d live)", session_id, peer, len(server.sessions))
    try:
        stats = await run_session_in_worker(server.pool, stream, handoff, grace=cfg.teardown_timeout, slot=slot)
    finally:
        server.ipc.sweep(session_id)  # (a worker that died never withdrew its exports; one that ended did already)
    log.info("[session %d] ended: %s (%d frames, %d calls, %d blocking replies, %d graph launches, %.3f s worker "
             "CPU)", session_id, stats.get("reason"), stats.get("frames", 0), stats.get("calls", 0),
             stats.get("blocking", 0), stats.get("graph_launches", 0), stats.get("cpu_s", 0.0))
    if cfg.stats_file:
        _append_stats(cfg.stats_file, {"session_id": session_id, **stats})


async def _handshake(server, io: TrioFrameStream, session_id: int, peer: str):
    """(handshake, its session slot) once the client is in; (None, None) if it was refused. The slot is taken
    where the limit is checked, and given back if the handshake does not complete."""
    held: list = []
    try:
        hs = await _negotiate(server, io, session_id, peer, held)
    except BaseException:
        for slot in held:
            slot.release()
        raise
    if hs is None:
        for slot in held:
            slot.release()
        return None, None
    return hs, (held[0] if held else None)  # (a copy link holds no slot: its session does)


async def _negotiate(server, io: TrioFrameStream, session_id: int, peer: str,
                     held: list) -> ServerHandshake | LinkJoin | None:
    cfg = server.config
    # In-process sessions share one stdout (their kernels' output cannot be told apart, so it stays there) and
    # have no worker to hand copy links to.
    features = SUPPORTED_FEATURES
    if cfg.isolation != "process":
        features &= ~(Feature.OUTPUT | Feature.COPY_LINKS)
    if not cfg.copy_links:
        features &= ~Feature.COPY_LINKS
    features = int(features)
    hs = ServerHandshake(cfg.psk, max_frame=cfg.max_frame, session_id=session_id, features=features)
    frame = await io.receive_frame()
    if frame is None:
        return None
    if frame.opcode == ops.LINK_JOIN.code:
        return LinkJoin(frame)
    reply = hs.on_hello(frame)
    if not reply.status:
        slot = server.slots.take()
        if slot is None:
            hs.failure = f"server is at its limit of {cfg.max_sessions} sessions; try again later"
            reply = frame.reply(status=Status.SESSION_LIMIT, bulk=hs.failure.encode())
        else:
            held.append(slot)
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
    """The trio driver of the session's request loop (loop.py): calls that may block run on a thread, one at
    a time per session (its limiter), so the event loop -- and every other session -- never waits for a GPU."""
    while True:
        action = next_action(session, await io.receive_frame(), io.conn.max_record)
        if action.blocking:
            reply = await trio.to_thread.run_sync(action.run, limiter=session.limiter)
        else:
            reply = action.run()
        if reply is not None:
            await io.send_frame(reply)
        if action.close:
            session.log.info("%s", action.close)
            return


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


def _append_stats(path: str, stats: dict) -> None:
    try:
        with open(path, "a") as f:
            f.write(json.dumps(stats, default=str) + "\n")
    except OSError as e:
        log.warning("cannot append session counters to %s: %s", path, e)
