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
import os
import select
import signal
import socket
import sys

import attrs
import trio

from rgpu.serving.handoff import Handoff
from rgpu.session.links import join_proof

log = logging.getLogger("rgpu.pool")

READY_TIMEOUT = 120.0  # cuInit on a big GPU box can take a while


class WorkerStartError(Exception):
    pass


@attrs.define(eq=False)
class Worker:
    process: trio.Process
    control: trio.socket.SocketType
    info: dict
    # Asks for the session's figures (`rgpu status`), answered by a thread of the worker's own.
    status: trio.socket.SocketType | None = None
    # The session's copy links, as they join (rgpu.session.links), taken by another thread of the worker's.
    links: trio.socket.SocketType | None = None
    _buffer: bytearray = attrs.Factory(bytearray)
    _status_lock: trio.Lock = attrs.Factory(trio.Lock)

    async def usage(self) -> dict | None:
        """The worker's session figures (Session.usage), or None if it does not answer within a second."""
        if self.status is None:
            return None
        async with self._status_lock:
            with trio.move_on_after(1.0):
                try:
                    await self.status.send(b"?")
                    line = b""
                    while not line.endswith(b"\n"):
                        chunk = await self.status.recv(65536)
                        if not chunk:
                            return None
                        line += chunk
                    usage = json.loads(line)
                    return usage if isinstance(usage, dict) else None
                except (OSError, ValueError):
                    return None
            # Timed out: an answer may still come and would be taken for the next question's.
            self.status.close()
            self.status = None
            return None

    def close(self) -> None:
        self.control.close()
        if self.status is not None:
            self.status.close()
        if self.links is not None:
            self.links.close()

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
        self.live: dict[int, Worker] = {}  # session id -> the worker serving it
        # Each offered link by its join proof (rgpu.session.links.join_proof), which a client shows for it
        self._link_offers: dict[bytes, tuple[LinkOffer, int]] = {}

    async def session_usage(self, session_id: int) -> dict | None:
        worker = self.live.get(session_id)
        return await worker.usage() if worker is not None else None

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
                    worker.close()

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
        status_parent, status_child = socket.socketpair()
        links_parent, links_child = socket.socketpair()
        try:
            process = await trio.lowlevel.open_process(
                [sys.executable, "-m", "rgpu.serving.worker", "--control-fd", str(child.fileno()),
                 "--status-fd", str(status_child.fileno()), "--links-fd", str(links_child.fileno()),
                 "--backend", self.backend, "--log-level", self.log_level],
                pass_fds=(child.fileno(), status_child.fileno(), links_child.fileno()))
        except BaseException:
            parent.close()
            status_parent.close()
            links_parent.close()
            raise
        finally:
            child.close()
            status_child.close()
            links_child.close()
        worker = Worker(process, trio.socket.from_stdlib_socket(parent), {},
                        trio.socket.from_stdlib_socket(status_parent), trio.socket.from_stdlib_socket(links_parent))
        info = None
        try:
            with trio.move_on_after(READY_TIMEOUT):
                info = await worker.read_json()
        except BaseException:
            # Cancelled while it started (server shutting down): do not leave the process behind.
            await worker.stop(1)
            worker.close()
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
        worker.close()
        reason = (info or {}).get("error") or f"no READY within {READY_TIMEOUT:g}s"
        raise WorkerStartError(f"session worker could not start: {reason}")

    @property
    def settled(self) -> bool:
        """Every idle slot filled and no worker still starting (a starting worker is still taking GPU
        resources, so only now are device-wide memory figures comparable)."""
        return self._starting == 0 and len(self._idle) >= self.size

    def offer_links(self, token: bytes, count: int, worker: Worker, session_id: int) -> None:
        offer = LinkOffer(worker, count, session_id)
        for link in range(count):
            self._link_offers[join_proof(token, link)] = (offer, link)

    def withdraw_links(self, token: bytes, count: int) -> None:
        for link in range(count):
            self._link_offers.pop(join_proof(token, link), None)

    def claim_link(self, proof: bytes, link: int) -> tuple[LinkOffer | None, str]:
        """(the offer, "") when `proof` is a running session's for copy link `link`, which is then taken: a second
        join of it, however close behind, is refused. (None, why not) otherwise."""
        entry = self._link_offers.get(proof)
        if entry is None or entry[1] != link:
            return None, f"no session offers copy link {link} under that proof"
        offer = entry[0]
        if link in offer.joined:
            return None, f"copy link {link} of session {offer.session_id} joined already"
        offer.joined.add(link)
        return offer, ""

    @staticmethod
    async def hand_link(offer: LinkOffer, link: int, fd: int) -> str:
        """Hand socket `fd` to the worker of the session that offered the claimed `link`: "", or why it could not."""
        try:
            await _send_with_fd(offer.worker.links, json.dumps({"link": link}).encode(), fd)
        except OSError as e:
            return f"session {offer.session_id}'s worker did not take the link ({e})"
        return ""

    async def acquire(self) -> Worker:
        """A ready worker: an idle one if there is one (then start a replacement), else a fresh one."""
        while self._idle:
            worker = self._idle.popleft()
            self._refill()
            if worker.process.returncode is None:
                return worker
        return await self._spawn()


async def _send_with_fd(sock: trio.socket.SocketType, message: bytes, fd: int) -> None:
    """`message` to a worker with a copy of descriptor `fd` (SCM_RIGHTS): a session's client, or a copy link."""
    await sock.sendmsg([message], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd]).tobytes())])


@attrs.define(eq=False)
class LinkOffer:
    """A session's copy links, offered until it ends: its worker, how many links, which have joined."""

    worker: Worker
    count: int
    session_id: int
    joined: set[int] = attrs.Factory(set)


# A worker whose client has hung up gets this long to notice on its own (it does at its next read) before it
# is stopped: a session stuck in a long call must not keep its slot, and a CPU, for a client that is gone.
CLIENT_GONE_GRACE = 5.0


async def run_session_in_worker(pool: WorkerPool, stream: trio.SocketStream, handoff: Handoff, *,
                                grace: float, slot=None) -> dict:
    """Hand the connection over and wait for the session to end. Cancellation (server shutdown) stops the
    worker: SIGTERM lets it tell its client and free everything; SIGKILL after `grace` seconds. `slot` (its
    place under --max-sessions) is released as soon as the worker reports the session's memory released."""
    worker = await pool.acquire()
    stats = None
    watch = _HangupWatch(stream.socket.fileno())
    pool.live[handoff.session_id] = worker
    token = bytes.fromhex(handoff.link_token) if handoff.link_token else None
    if token is not None:
        pool.offer_links(token, handoff.copy_links, worker, handoff.session_id)
    try:
        await _send_with_fd(worker.control, handoff.encode(), stream.socket.fileno())
        # The worker owns the connection now; our descriptor would keep it open after the worker ends (the
        # watch's own descriptor is only polled, and closed as soon as the worker is done).
        await stream.aclose()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_stop_when_client_gone, watch, worker, grace, handoff.session_id)
            stats = await _follow(worker, slot)
            await worker.process.wait()
            nursery.cancel_scope.cancel()
    finally:
        watch.close()
        if token is not None:
            pool.withdraw_links(token, handoff.copy_links)
        with trio.CancelScope(shield=True):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(worker.stop, grace)
                if stats is None:
                    # Read on while it stops: it reports its memory released, then its counters (if it can)
                    # just before it exits; its end of the control socket closes with it in any case.
                    stats = await _follow(worker, slot)
            pool.live.pop(handoff.session_id, None)
            worker.close()
        if slot is not None:
            slot.release()
        reported = stats is not None
        stats = stats or {"reason": "worker ended without a report"}
        code = worker.process.returncode
        if code != 0 and not (reported and code == -signal.SIGTERM):
            log.error("[session %d] worker %d exited with %s (the OS released its GPU resources)",
                      handoff.session_id, worker.process.pid,
                      code if code is None or code > 0 else signal.Signals(-code).name)
        stats.update(exit_code=code, session_id=handoff.session_id, pid=worker.process.pid)
        pool.finished.append(stats)
    return stats


async def _follow(worker: Worker, slot) -> dict | None:
    """The worker's messages until its final report (None if it ends without one). {"released": true} says
    everything the session held is freed: the slot goes back, then the worker hears so (it waits for that
    before confirming a GOODBYE, so a client that saw the confirmation finds its slot free)."""
    while True:
        try:
            message = await worker.read_json()
        except (OSError, ValueError):
            return None
        if message is None or not message.get("released"):
            return message
        if slot is not None:
            slot.release()
        try:
            await worker.control.send(b"\n")
        except OSError:
            pass  # it stopped waiting for the answer: its report may still be there to read


class _HangupWatch:
    """Tells when the client hangs up, without reading what it sent (the worker reads the connection): an
    epoll set holding a copy of the client socket, for EPOLLRDHUP only (hang-ups and errors always count)."""

    def __init__(self, fd: int):
        self._fd = os.dup(fd)
        self._epoll = select.epoll()
        self._epoll.register(self._fd, select.EPOLLRDHUP)

    async def wait(self) -> None:
        while not self._epoll.poll(0):
            await trio.lowlevel.wait_readable(self._epoll.fileno())

    def close(self) -> None:
        if self._fd >= 0:
            self._epoll.close()
            os.close(self._fd)
            self._fd = -1


async def _stop_when_client_gone(watch: _HangupWatch, worker: Worker, grace: float, session_id: int) -> None:
    await watch.wait()
    watch.close()  # the connection is over; our copy must not keep it open
    with trio.move_on_after(CLIENT_GONE_GRACE):
        await worker.process.wait()
        return
    log.warning("[session %d] client is gone but its worker is still busy after %gs; stopping it", session_id,
                CLIENT_GONE_GRACE)
    await worker.stop(grace)
