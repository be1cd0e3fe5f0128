"""A session's worker process: `python -m rgpu.session.worker --control-fd N ...` (started by pool.py).

Why a process per session: a kernel fault (CUDA_ERROR_ILLEGAL_ADDRESS and friends) is sticky for the whole
*process* -- measured on the H200: after one session's fault every later cuCtxCreate in the same process
failed with 700. Contexts alone cannot isolate sessions; processes can, and they also give each session its
own GPU address space. Exiting is the most complete teardown there is.

Life of a worker: start, initialise the backend (so a session never waits for cuInit), report READY on the
control socket, wait for one client socket (SCM_RIGHTS) with the session's parameters and keys, serve that
one session with a plain blocking loop -- the only thread here, so blocking on the GPU is fine -- free
everything, report final counters, exit.
"""

from __future__ import annotations

import argparse
import array
import json
import logging
import os
import signal
import socket
import sys

from rgpu.dispatch.backend import BackendUnavailable, make_backend
from rgpu.dispatch.dispatcher import execute_batch_sync, execute_sync
from rgpu.errors import ProtocolError, Status
from rgpu.protocol import ops
from rgpu.protocol.connection import Connection
from rgpu.protocol.frames import Flags, Frame
from rgpu.protocol.handshake import RecordProtector
from rgpu.session.requests import Step, classify
from rgpu.session.modcache import ModuleCache
from rgpu.session.state import Session
from rgpu.transport import SocketFrameStream

log = logging.getLogger("rgpu.worker")


class ShuttingDown(BaseException):
    """SIGTERM from the supervisor: finish the current call, tell the client, free everything, exit."""


_interruptible = False  # only while waiting for a client or serving one; elsewhere we are exiting anyway


def _on_sigterm(signum, frame):
    if _interruptible:
        raise ShuttingDown()


class _Interruptible:
    def __enter__(self):
        global _interruptible
        _interruptible = True

    def __exit__(self, *exc):
        global _interruptible
        _interruptible = False


def send_json(sock: socket.socket, obj: dict) -> None:
    sock.sendall(json.dumps(obj).encode() + b"\n")


def receive_assignment(control: socket.socket) -> tuple[dict, socket.socket] | None:
    """Block until the supervisor hands over a client: (params, client socket), or None at pool shutdown."""
    fds = array.array("i")
    try:
        msg, ancdata, _flags, _addr = control.recvmsg(65536, socket.CMSG_SPACE(fds.itemsize))
    except ConnectionResetError:
        return None
    if not msg:
        return None
    for level, kind, data in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[: len(data) - len(data) % fds.itemsize])
    if len(fds) != 1:
        raise RuntimeError(f"expected one client socket, got {len(fds)}")
    return json.loads(msg), socket.socket(fileno=fds[0])


def serve_blocking(session: Session, io: SocketFrameStream) -> str:
    """The session's request loop; returns why it ended."""
    while True:
        try:
            frame = io.receive_frame()
        except ConnectionError:
            return "client closed the connection"
        session.frames_received += 1
        step, frames = classify(frame, io.conn.max_record)
        if step is Step.BATCH:
            execute_batch_sync(session, frames)
        elif step is Step.GOODBYE:
            session.release_all()
            io.send_frames([frame.reply(deferred_status=session.take_deferred_error())])
            return "closed by GOODBYE"
        else:
            reply = execute_sync(session, frame)
            if reply is not None:
                io.send_frames([reply])


def run_session(params: dict, client: socket.socket, backend) -> dict:
    cache = ModuleCache(params["module_cache"], params["module_cache_bytes"]) if params.get("module_cache") else None
    session = Session(params["session_id"], backend, mem_limit=params.get("mem_limit"), peer=params.get("peer", ""),
                      module_cache=cache)
    conn = Connection(params["max_frame"], reuse_receive_buffers=True)
    if params.get("cipher"):
        conn.protect(RecordProtector(params["cipher"], send_key=bytes.fromhex(params["s2c"]),
                                     recv_key=bytes.fromhex(params["c2s"])))
    # The descriptor arrives with the supervisor's O_NONBLOCK (shared by every copy of it); this loop blocks.
    client.setblocking(True)
    client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    io = SocketFrameStream(client, conn, spin_us=params.get("spin_us", 0))
    reason = "?"
    try:
        with _Interruptible():
            reason = serve_blocking(session, io)
    except ShuttingDown:
        reason = "server shutting down"
        _send_quietly(io, Frame(ops.PROTOCOL_ERROR.code, 0, Flags.REPLY, Status.SHUTTING_DOWN,
                                bulk=b"server shutting down"))
    except ProtocolError as e:
        reason = f"protocol error: {e}"
        session.log.warning("%s; closing", e)
        _send_quietly(io, Frame(ops.PROTOCOL_ERROR.code, 0, Flags.REPLY, e.status, bulk=str(e).encode()))
    except OSError as e:
        reason = f"connection lost ({type(e).__name__})"
    finally:
        session.release_all()
        client.close()
    session.log.info("%s", reason)
    stats = {"reason": reason, "frames": session.frames_received, "calls": session.calls}
    if hasattr(backend, "used"):
        stats["backend_bytes_in_use"] = backend.used  # fake backend accounting: 0 after a clean teardown
        stats["contexts_alive"] = backend.contexts_alive
    return stats


def _send_quietly(io: SocketFrameStream, frame: Frame) -> None:
    try:
        io.sock.settimeout(1.0)
        io.send_frames([frame])
    except OSError:
        pass


def _start_backend(kind: str):
    """(backend, why it is the fake one when `kind` is auto and no GPU answered). The supervisor tells the
    user about the fallback once; every worker saying so would repeat it for each session."""
    if kind != "auto":
        return make_backend(kind), None
    try:
        return make_backend("cuda"), None
    except BackendUnavailable as e:
        return make_backend("fake"), str(e)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="rgpu-worker")
    ap.add_argument("--control-fd", type=int, required=True)
    ap.add_argument("--backend", default="auto")
    ap.add_argument("--log-level", default="info")
    args = ap.parse_args(argv)
    from rgpu import logs

    logs.setup(args.log_level, pid=True)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the supervisor decides when we stop
    signal.signal(signal.SIGTERM, _on_sigterm)
    control = socket.socket(fileno=args.control_fd)
    try:
        with _Interruptible():  # a worker still starting when the server stops has nothing to finish
            backend, fallback = _start_backend(args.backend)
        name = backend.device_name(0) if backend.device_count() else "no device"
        send_json(control, {"ready": True, "pid": os.getpid(), "backend": backend.name, "device": name,
                            "fallback": fallback})
        with _Interruptible():
            assignment = receive_assignment(control)
        if assignment is None:
            return 0
        params, client = assignment
        stats = run_session(params, client, backend)
        # Nothing left to interrupt; SIG_IGN survives interpreter shutdown, where Python would otherwise
        # restore the default action and a late SIGTERM would kill us mid-exit.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        send_json(control, stats)
        return 0
    except (ShuttingDown, BrokenPipeError, ConnectionResetError):
        return 0  # stopped, or the supervisor went away before needing us
    except BackendUnavailable as e:
        log.error("%s", e)
        send_json(control, {"error": str(e)})
        return 2
    except Exception as e:
        log.exception("worker failed")
        try:
            send_json(control, {"error": f"{type(e).__name__}: {e}"})
        except OSError:
            pass
        return 1


if __name__ == "__main__":
    sys.exit(main())
