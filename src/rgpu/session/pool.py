"""Supervisor side of process isolation: keep a few workers started and initialised, hand each
authenticated connection to one of them, and watch it until it exits.

Passing the client socket itself (SCM_RIGHTS) to the worker means the request path has no relay hop: the
worker reads and answers the client directly, while this process keeps what a supervisor needs -- accept,
handshake and authentication, limits, logs, and shutdown (SIGTERM, then SIGKILL after a grace period).
"""

from __future__ import annotations

import array
import collections
import json
import logging
import math
import signal
import socket
import sys

import attrs
import trio

log = logging.getLogger("rgpu.pool")

READY_TIMEOUT = 120.0  # cuInit on a big GPU box can take a while


class WorkerStartError(Exception):
    pass


@attrs.define(eq=False)
class Worker:
    process: trio.Process
    control: trio.socket.SocketType
    info: dict
    _buffer: bytearray = attrs.Factory(bytearray)

    async def read_json(self) -> dict | None:
        """The next JSON line from the worker, or None once it has closed its end."""
        while b"\n" not in self._buffer:
            chunk = await self.control.recv(65536)
            if not chunk:
                return None
            self._buffer += chunk
        line, _, rest = bytes(self._buffer).partition(b"\n")
        self._buffer = bytearray(rest)
        return json.loads(line)

    async def stop(self, grace: float) -> None:
        """SIGTERM, wait up to `grace`, then SIGKILL. Never raises."""
        with trio.CancelScope(shield=True):
            if self.process.returncode is None:
                try:
                    self.process.send_signal(signal.SIGTERM)
                except ProcessLookupError:
                    pass
                with trio.move_on_after(grace if grace > 0 else math.inf):
                    await self.process.wait()
                if self.process.returncode is None:
                    log.error("worker %d ignored SIGTERM for %gs; killing it", self.process.pid, grace)
                    self.process.kill()
                    await self.process.wait()


class WorkerPool:
    def __init__(self, backend: str, size: int, log_level: str = "info"):
        self.backend = backend
        self.size = max(0, size)
        self.log_level = log_level
        self._idle: collections.deque[Worker] = collections.deque()
        self._starting = 0
        self._nursery: trio.Nursery | None = None
        self.backend_info: dict | None = None
        self.finished: collections.deque[dict] = collections.deque(maxlen=256)  # recent session stats

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        # One worker up front: a backend that cannot start is a startup error, not a later session failure.
        first = await self._spawn()
        self._idle.append(first)
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                self._refill()
                task_status.started()
                await trio.sleep_forever()
        finally:
            with trio.CancelScope(shield=True):
                while self._idle:
                    worker = self._idle.popleft()
                    await worker.stop(5)
                    worker.control.close()

    def _refill(self) -> None:
        while self._nursery is not None and len(self._idle) + self._starting < self.size:
            self._starting += 1
            self._nursery.start_soon(self._start_idle)

    async def _start_idle(self) -> None:
        try:
            worker = await self._spawn()
        except Exception as e:
            log.error("could not start a worker: %s", e)
            await trio.sleep(1)  # do not spin if workers cannot start at all
            return
        finally:
            self._starting -= 1
        self._idle.append(worker)

    async def _spawn(self) -> Worker:
        parent, child = socket.socketpair()
        try:
            process = await trio.lowlevel.open_process(
                [sys.executable, "-m", "rgpu.session.worker", "--control-fd", str(child.fileno()),
                 "--backend", self.backend, "--log-level", self.log_level],
                pass_fds=(child.fileno(),))
        finally:
            child.close()
        worker = Worker(process, trio.socket.from_stdlib_socket(parent), {})
        info = None
        try:
            with trio.move_on_after(READY_TIMEOUT):
                info = await worker.read_json()
        except BaseException:
            # Cancelled while it started (server shutting down): do not leave the process behind.
            await worker.stop(1)
            worker.control.close()
            raise
        if info and info.get("ready"):
            worker.info = info
            if self.backend_info is None:
                self.backend_info = info
                if info.get("fallback"):
                    log.warning("NO GPU: %s -- falling back to the FAKE backend (emulated memory and kernels; "
                                "nothing runs on a GPU)", info["fallback"])
                log.info("workers run the %s backend on %s", info["backend"], info["device"])
            return worker
        await worker.stop(1)
        worker.control.close()
        reason = (info or {}).get("error") or f"no READY within {READY_TIMEOUT:g}s"
        raise WorkerStartError(f"session worker could not start: {reason}")

    @property
    def settled(self) -> bool:
        """Every idle slot filled and no worker still starting (a starting worker is still taking GPU
        resources, so only now are device-wide memory figures comparable)."""
        return self._starting == 0 and len(self._idle) >= self.size

    async def acquire(self) -> Worker:
        """A ready worker: an idle one if there is one (then start a replacement), else a fresh one."""
        while self._idle:
            worker = self._idle.popleft()
            self._refill()
            if worker.process.returncode is None:
                return worker
        return await self._spawn()


async def run_session_in_worker(pool: WorkerPool, stream: trio.SocketStream, params: dict, *,
                                grace: float) -> dict:
    """Hand the connection over and wait for the session to end. Cancellation (server shutdown) stops the
    worker: SIGTERM lets it tell its client and free everything; SIGKILL after `grace` seconds."""
    worker = await pool.acquire()
    stats = None
    try:
        fds = array.array("i", [stream.socket.fileno()])
        await worker.control.sendmsg([json.dumps(params).encode()],
                                     [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds.tobytes())])
        # The worker owns the connection now; our descriptor would keep it open after the worker ends.
        await stream.aclose()
        stats = await worker.read_json()
        await worker.process.wait()
    finally:
        with trio.CancelScope(shield=True):
            await worker.stop(grace)
            if stats is None:
                with trio.move_on_after(1):
                    stats = await worker.read_json()  # written just before it exited, if it could
            worker.control.close()
        reported = stats is not None
        stats = stats or {"reason": "worker ended without a report"}
        code = worker.process.returncode
        if code != 0 and not (reported and code == -signal.SIGTERM):
            log.error("[session %d] worker %d exited with %s (the OS released its GPU resources)",
                      params["session_id"], worker.process.pid,
                      code if code is None or code > 0 else signal.Signals(-code).name)
        stats.update(exit_code=code, session_id=params["session_id"], pid=worker.process.pid)
        pool.finished.append(stats)
    return stats
