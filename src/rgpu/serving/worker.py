"""A session's worker process: `python -m rgpu.serving.worker --control-fd N ...` (started by pool.py).

Why a process per session: a kernel fault (CUDA_ERROR_ILLEGAL_ADDRESS and friends) is sticky for the whole
*process* -- measured on the H200: after one session's fault every later cuCtxCreate in the same process
failed with 700. Contexts alone cannot isolate sessions; processes can, and they also give each session its
own GPU address space. Exiting is the most complete teardown there is.

Life of a worker: start, initialise the backend (so a session never waits for cuInit), report READY on the
control socket, wait for one client socket (SCM_RIGHTS) with the session's parameters and keys, serve that
one session with a plain blocking loop -- the only thread that serves requests, so blocking on the GPU is
fine (two helpers answer `rgpu status` and drain kernel printf output) -- free
everything, report final counters, exit.
"""

from __future__ import annotations

import argparse
import array
import json
import logging
import os
import resource
import signal
import socket
import sys
import threading
import time

from rgpu.backends import lane
from rgpu.backends.base import BackendUnavailable
from rgpu.backends.factory import make_backend
from rgpu.dispatch import graphs
from rgpu.errors import ProtocolError
from rgpu.protocol import ops
from rgpu.protocol.connection import Connection
from rgpu.protocol.handshake import RecordProtector
from rgpu.serving.handoff import Handoff
from rgpu.serving.loop import next_action, protocol_error_frame, shutting_down_frame
from rgpu.serving.native_loop import NativeLoop
from rgpu.serving.output import KernelOutput
from rgpu.session.ipc import IpcRegistry
from rgpu.session.links import LinksOffer
from rgpu.session.modcache import ModuleCache
from rgpu.session.state import Session
from rgpu.transport import SocketFrameStream

log = logging.getLogger("rgpu.worker")


class ShuttingDown(BaseException):
    """SIGTERM from the supervisor: finish the current call, tell the client, free everything, exit."""


_interruptible = False  # only while waiting for a client or serving one; elsewhere we are exiting anyway
_stop_requested = False  # a SIGTERM came: honoured at the next interruptible step, if it came outside one


def _on_sigterm(signum, frame):
    global _stop_requested
    _stop_requested = True
    if _interruptible:
        raise ShuttingDown()


class _Interruptible:
    def __enter__(self):
        global _interruptible
        _interruptible = True
        if _stop_requested:  # arrived while starting up, or was swallowed by code that caught everything
            _interruptible = False
            raise ShuttingDown()

    def __exit__(self, *exc):
        global _interruptible
        _interruptible = False


def send_json(sock: socket.socket, obj: dict) -> None:
    sock.sendall(json.dumps(obj).encode() + b"\n")


def receive_with_fds(sock: socket.socket, size: int) -> tuple[bytes, array.array]:
    """One message from the supervisor and the descriptor that came with it, if any (room for one): the caller's
    to keep or close. Raises what recvmsg raises."""
    fds = array.array("i")
    msg, ancdata, _flags, _addr = sock.recvmsg(size, socket.CMSG_SPACE(fds.itemsize))
    for level, kind, data in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[: len(data) - len(data) % fds.itemsize])
    return msg, fds


def receive_assignment(control: socket.socket) -> tuple[Handoff, socket.socket] | None:
    """Block until the supervisor hands over a client: (its hand-off, client socket), or None at pool
    shutdown."""
    try:
        msg, fds = receive_with_fds(control, 65536)
    except ConnectionResetError:
        return None
    if not msg:
        return None
    if len(fds) != 1:
        for fd in fds:
            os.close(fd)
        raise RuntimeError(f"expected one client socket, got {len(fds)}")
    client = socket.socket(fileno=fds[0])
    try:
        return Handoff.decode(msg), client
    except ValueError:
        client.close()
        raise


# Kernel output travels in frames of at most this much bulk: well under any frame limit a client may hold
# (the C stand-ins accept no less than 64 KiB).
OUTPUT_CHUNK = 32 << 10


def serve_blocking(session: Session, io: SocketFrameStream, inject_rtt_us: float = 0,
                   output: KernelOutput | None = None) -> str:
    """The blocking driver of the session's request loop (loop.py); returns why it ended. `inject_rtt_us`
    (benchmarks) holds each reply that long, as a slower network would. `output`: what the session's kernels
    printed goes to the client just ahead of each reply."""
    delay_ns = int(inject_rtt_us * 1000)
    clock = time.perf_counter_ns
    loop_ns = session.loop_ns
    native = NativeLoop.make(session, io, output, inject_rtt_us)
    while True:
        # The C loop serves what it can whole (batches, NOPs); the frame it leaves is served below.
        if native is not None and native.serve():
            continue
        started = clock()
        session.receiving = (started, loop_ns[0])  # one tuple: `rgpu status` reads both or neither
        try:
            frame = io.receive_frame()
        except ConnectionError:
            frame = None
        received = clock()
        loop_ns[0] += received - started
        session.receiving = (0, loop_ns[0])
        action = next_action(session, frame, io.conn.max_record)
        reply = action.run()  # the only thread serving: blocking on the GPU blocks no one else
        ran = clock()
        if reply is not None:
            session.replies_sent += 1
            session.replies_by_op[reply.opcode] = session.replies_by_op.get(reply.opcode, 0) + 1
            if delay_ns:
                _hold(delay_ns)
            io.send_frames([*output.frames(), reply] if output is not None else [reply])
        # Where each turn of the loop went (benchmarks): receiving (waiting for the client and reading and
        # opening its frame), running the request, replying (kernel output, encoding, sealing, sending).
        loop_ns[1] += ran - received
        loop_ns[2] += clock() - ran
        if action.close:
            return action.close


def session_counters(session: Session, io: SocketFrameStream) -> dict:
    """What a benchmark reads of a session (the --stats-file record as it ends, `rgpu status --json` while it
    runs): its operations and the round trips among them, by operation too, the worker's seconds in each,
    bytes each way, the worker process's CPU seconds, and the time it waited for the client. Taken between two
    turns of the C request loop, which counts its frames as it returns (it returns within its poll, or after 64
    frames; a figure taken while it waits on the GPU longer than COUNTING_WAIT_S may miss its latest frames)."""
    held = session.counting.acquire(timeout=COUNTING_WAIT_S)
    try:
        return _counters(session, io)
    finally:
        if held:
            session.counting.release()


COUNTING_WAIT_S = 0.5


def _counters(session: Session, io: SocketFrameStream) -> dict:
    return {"frames": session.frames_received, "calls": session.calls,
            "graph_launches": graphs.graph_launches(session), "blocking": session.replies_sent,
            "deferred": session.calls - session.replies_sent, "bytes_in": io.bytes_received,
            "bytes_out": io.bytes_sent, "cpu_s": _cpu_seconds(), "wait_s": _wait_seconds(session, io),
            "blocking_by_op": _by_name(dict(session.replies_by_op)), "calls_by_op": _by_name(dict(session.calls_by_op)),
            "seconds_by_op": {name: ns / 1e9 for name, ns in _by_name(dict(session.ns_by_op)).items()},
            "loop_s": _loop_seconds(session)}


def _loop_seconds(session: Session) -> dict:
    """session.loop_ns, with the wait in progress counted up to now: read between two calls of a program that
    waits at a mark, the figures then cover exactly the time between the two readings."""
    since, receive = session.receiving
    _, run, reply = session.loop_ns
    if since:
        receive += max(time.perf_counter_ns() - since, 0)
    return {"receive": receive / 1e9, "run": run / 1e9, "reply": reply / 1e9}


def _wait_seconds(session: Session, io: SocketFrameStream) -> float:
    """The time waited for the client, with a receive in progress counted up to now, as _loop_seconds counts it:
    a wait that began before a reading and ends after it is split between the two."""
    since, _ = session.receiving
    return (io.wait_ns + (max(time.perf_counter_ns() - since, 0) if since else 0)) / 1e9


def _by_name(counts: dict[int, int]) -> dict[str, int]:
    return {ops.OPS[code].name if code in ops.OPS else hex(code): n for code, n in sorted(counts.items())}


def _serve_profiled(session: Session, io: SocketFrameStream, inject_rtt_us: float, output) -> str:
    """serve_blocking under cProfile when RGPU_PROFILE_DIR names a folder (a benchmarking aid: where the
    worker's time goes per operation); the profile lands there as worker-<pid>.prof when the session ends."""
    folder = os.environ.get("RGPU_PROFILE_DIR")
    if not folder:
        return serve_blocking(session, io, inject_rtt_us, output)
    import cProfile

    profile = cProfile.Profile()
    try:
        return profile.runcall(serve_blocking, session, io, inject_rtt_us, output)
    finally:
        profile.dump_stats(os.path.join(folder, f"worker-{os.getpid()}.prof"))


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _hold(ns: int) -> None:
    # Sleep is too coarse below a millisecond (it overshoots by ~50 us); poll the clock for the last part.
    until = time.perf_counter_ns() + ns
    if ns > 2_000_000:
        time.sleep((ns - 1_000_000) / 1e9)
    while time.perf_counter_ns() < until:
        pass


def report_released(control: socket.socket) -> None:
    """Tell the supervisor this session's memory is all back, and wait until it has freed the session's slot
    (see pool._follow): called before a GOODBYE is confirmed, so the client may reconnect at once."""
    try:
        send_json(control, {"released": True})
        control.settimeout(5.0)
        control.recv(1)
    except OSError:
        pass  # a supervisor that does not answer frees the slot when we exit
    finally:
        control.settimeout(None)


def answer_status_queries(sock: socket.socket, session: Session, counters=None) -> None:
    """`rgpu status` asks the supervisor, which asks each worker on a socket of its own: this thread answers
    with the session's figures (and `counters()`, session_counters, as "counters"), so the session's loop never
    looks at that socket. Ends with the socket."""
    try:
        while sock.recv(64):
            try:
                usage = session.usage()
                if counters is not None:
                    usage["counters"] = counters()
            except Exception as e:  # a figure mid-change: no figures this time, the session carries on
                usage = {"usage_error": f"{type(e).__name__}: {e}"}
            sock.sendall(json.dumps(usage).encode() + b"\n")
    except OSError:
        pass


def take_links(sock: socket.socket, session: Session) -> None:
    """The supervisor hands over each copy link that joins the session (pool.hand_link): this thread gives it to
    the session's links (rgpu.session.links), or closes it when the client never opened them. Ends with the
    socket."""
    while True:
        try:
            msg, fds = receive_with_fds(sock, 256)
        except OSError:
            return
        if not msg:
            return
        try:
            index = int(json.loads(msg)["link"])
        except (ValueError, KeyError, TypeError):
            index = -1
        for i, fd in enumerate(fds):
            links = session.copy_links
            if i == 0 and index >= 0 and links is not None:
                os.set_blocking(fd, True)  # (the supervisor's copy was non-blocking; the link's thread blocks in recv)
                if links.attach(index, fd):  # (which closes it when it refuses it)
                    session.log.info("copy link %d joined", index)
                    continue
            else:
                os.close(fd)
            session.log.warning("copy link %d refused (the session has not opened its links, or that link joined "
                                "already)", index)


def run_session(handoff: Handoff, client: socket.socket, backend, control: socket.socket | None = None,
                status: socket.socket | None = None, links: socket.socket | None = None) -> dict:
    cache = ModuleCache(handoff.module_cache, handoff.module_cache_bytes) if handoff.module_cache else None
    session = Session(handoff.session_id, backend, mem_limit=handoff.mem_limit, peer=handoff.peer,
                      module_cache=cache, ipc=IpcRegistry(handoff.ipc_dir) if handoff.ipc_dir else None)
    if handoff.link_token and handoff.copy_links:
        keys = handoff.keys
        session.links_offer = LinksOffer(bytes.fromhex(handoff.link_token), handoff.copy_links,
                                         handoff.frame_timeout or None, keys.cipher if keys else None,
                                         keys.c2s if keys else None)
    if links is not None:
        threading.Thread(target=take_links, args=(links, session), name="links", daemon=True).start()
    if control is not None:
        session.on_released = lambda: report_released(control)
    conn = Connection(handoff.max_frame, reuse_receive_buffers=True)
    if handoff.keys is not None:
        keys = handoff.keys
        conn.protect(RecordProtector(keys.cipher, send_key=keys.s2c, recv_key=keys.c2s))
    # The descriptor arrives with the supervisor's O_NONBLOCK (shared by every copy of it); this loop blocks.
    client.setblocking(True)
    client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    io = SocketFrameStream(client, conn, spin_us=handoff.spin_us, frame_timeout=handoff.frame_timeout or None)
    if status is not None:
        threading.Thread(target=answer_status_queries, args=(status, session, lambda: session_counters(session, io)),
                         name="status", daemon=True).start()
    output = KernelOutput.capture(max_chunk=OUTPUT_CHUNK, session_log=session.log) if handoff.output else None
    reason = "?"
    started = time.perf_counter()
    try:
        with _Interruptible():
            reason = _serve_profiled(session, io, handoff.inject_rtt_us, output)
    except ShuttingDown:
        reason = "server shutting down"
        io.send_quietly(shutting_down_frame())
    except ProtocolError as e:
        reason = f"protocol error: {e}"
        session.log.warning("%s; closing", e)
        io.send_quietly(protocol_error_frame(e))
    except OSError as e:
        reason = f"connection lost ({type(e).__name__})"
    finally:
        session.release_all()
        client.close()
        if output is not None:
            output.close()
    session.log.info("%s", reason)
    stats = {"reason": reason, **session_counters(session, io), "wall_s": time.perf_counter() - started,
             "printf_bytes": output.forwarded if output else 0, "printf_dropped": output.dropped_total if output else 0}
    if hasattr(backend, "used"):
        stats["backend_bytes_in_use"] = backend.used  # fake backend accounting: 0 after a clean teardown
        stats["contexts_alive"] = backend.contexts_alive
    return stats


def _start_backend(kind: str):
    """(backend, why it is the fake one when `kind` is auto and no GPU answered). The supervisor tells the
    user about the fallback once; every worker saying so would repeat it for each session."""
    lane.load_from_environment()  # before the backend: its copy rings live in the lane's library
    if kind != "auto":
        return make_backend(kind), None
    try:
        return make_backend("cuda"), None
    except BackendUnavailable as e:
        return make_backend("fake"), str(e)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="rgpu-worker")
    ap.add_argument("--control-fd", type=int, required=True)
    ap.add_argument("--status-fd", type=int, default=None)
    ap.add_argument("--links-fd", type=int, default=None)
    ap.add_argument("--backend", default="auto")
    ap.add_argument("--log-level", default="info")
    args = ap.parse_args(argv)
    from rgpu import logs

    logs.setup(args.log_level, pid=True)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the supervisor decides when we stop
    signal.signal(signal.SIGTERM, _on_sigterm)
    control = socket.socket(fileno=args.control_fd)
    status = socket.socket(fileno=args.status_fd) if args.status_fd is not None else None
    links = socket.socket(fileno=args.links_fd) if args.links_fd is not None else None
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
        handoff, client = assignment
        stats = run_session(handoff, client, backend, control, status, links)
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
