"""The only code that moves protocol bytes through sockets: a trio flavour and a blocking flavour."""

from __future__ import annotations

import os
import socket
import time
from typing import TYPE_CHECKING

from rgpu.errors import ProtocolError
from rgpu.protocol.connection import Connection
from rgpu.protocol.frames import Frame
from rgpu.protocol.ops import Op

if TYPE_CHECKING:
    import trio

DEFAULT_PORT = 9713

# Between polls the CPU goes to any other thread that wants it, as in the C stand-ins (conn_io.c says what it
# measured); RGPU_SPIN_YIELD=0 turns that off, for comparisons.
SPIN_YIELD = os.environ.get("RGPU_SPIN_YIELD") != "0"

def _trio_now() -> float:
    import trio

    return trio.current_time()


def frame_overdue(timeout: float) -> ProtocolError:
    return ProtocolError(f"a frame was begun but not completed within {timeout:g}s (--frame-timeout)")


class TrioFrameStream:
    """`frame_timeout`: once a frame has begun to arrive, the rest must follow within this many seconds, or
    receive_frame raises ProtocolError -- a peer cannot hold a session with a frame it never finishes."""

    def __init__(self, stream: trio.abc.Stream, conn: Connection, *, frame_timeout: float | None = None):
        self.stream = stream
        self.conn = conn
        self.frame_timeout = frame_timeout
        # Landing bytes with recv_into saves a copy per receive on real sockets.
        self._sock = getattr(stream, "socket", None)

    async def receive_frame(self) -> Frame | None:
        """The next frame, or None at a clean end of stream. A stream cut mid-frame raises EOFError."""
        try:
            return await self._receive_frame()
        except Exception:  # (a cancellation is not one: a later receive may go on)
            self.conn.abandon()
            raise

    async def _receive_frame(self) -> Frame | None:
        deadline = None
        while True:
            frame = self.conn.next_frame()
            if frame is not None:
                return frame
            if self.frame_timeout and self.conn.has_partial_frame:
                n = await self._receive_by(deadline := deadline or _trio_now() + self.frame_timeout)
            else:
                n = await self._receive_some()
            if not n:
                if self.conn.has_partial_frame:
                    raise EOFError("connection closed in the middle of a frame")
                return None

    async def _receive_by(self, deadline: float) -> int:
        import trio

        with trio.move_on_at(deadline):
            return await self._receive_some()
        raise frame_overdue(self.frame_timeout)

    async def _receive_some(self) -> int:
        if self._sock is not None:
            n = await self._sock.recv_into(self.conn.get_buffer())
            if n:
                self.conn.buffer_updated(n)
            return n
        data = await self.stream.receive_some()
        if data:
            self.conn.receive_data(data)
        return len(data)

    async def send_frame(self, frame: Frame) -> None:
        await self.send_frames([frame])

    async def send_frames(self, frames: list[Frame]) -> None:
        for write in self.conn.writes(frames):
            for part in write:
                await self.stream.send_all(part)

    async def send_quietly(self, frame: Frame, timeout: float = 1.0) -> None:
        """A last word to a peer that may be gone or stuck: at most `timeout` seconds, even when cancelled;
        failures are ignored."""
        import trio

        with trio.CancelScope(shield=True), trio.move_on_after(timeout):
            try:
                await self.send_frames([frame])
            except (trio.BrokenResourceError, trio.ClosedResourceError, trio.BusyResourceError, OSError):
                pass


class SocketFrameStream:
    """Blocking counterpart: the session worker's loop, the synchronous client and benchmarks.

    `spin_us`: before sleeping in recv, poll for that long. The next request (or reply) usually follows within
    tens of microseconds, and waking a sleeping thread costs a good part of that again -- on a VM an idle CPU
    is woken through the host. Polling costs CPU only for that long per wait; 0 turns it off."""

    def __init__(self, sock: socket.socket, conn: Connection, *, spin_us: float = 0,
                 frame_timeout: float | None = None):
        self.sock = sock
        self.conn = conn
        self.spin_ns = int(spin_us * 1000)
        self.frame_timeout = frame_timeout  # as TrioFrameStream's (the socket must be a blocking one)
        self.bytes_received = 0
        self.bytes_sent = 0
        self.wait_ns = 0  # time spent waiting for bytes from the peer (benchmarks: the session's idle time)

    def receive_frame(self) -> Frame:
        try:
            return self._receive_frame()
        except Exception:  # (a cut, a timeout, a refused record): the stream ends here
            self.conn.abandon()
            raise

    def _receive_frame(self) -> Frame:
        deadline = None
        while True:
            frame = self.conn.next_frame()
            if frame is not None:
                return frame
            if self.frame_timeout and self.conn.has_partial_frame and deadline is None:
                deadline = time.monotonic() + self.frame_timeout
            self.conn.buffer_updated(self._receive_counted(self.conn.get_buffer(), deadline))

    def call(self, op: Op, request_id: int, values: tuple) -> tuple | None:
        """Send a lone call's request (plain connections: see Connection.lone_request) and, where the connection
        can take the reply the short way, receive it: its values, or None when receive_frame is to take it."""
        conn = self.conn
        record = conn.lone_request(op, request_id, values)
        self.sock.sendall(record)
        self.bytes_sent += len(record)
        buffer = conn.lone_reply_buffer()
        if buffer is None:
            return None
        try:  # (as receive_frame)
            return conn.take_lone_reply(self._receive_counted(buffer), op, request_id)
        except Exception:
            conn.abandon()
            raise

    def _receive_counted(self, buffer: memoryview, deadline: float | None = None) -> int:
        started = time.perf_counter_ns()
        n = self._receive(buffer, deadline)
        self.wait_ns += time.perf_counter_ns() - started
        if not n:
            raise ConnectionError("server closed the connection")
        self.bytes_received += n
        return n

    def _receive(self, buffer: memoryview, deadline: float | None = None) -> int:
        if self.spin_ns:
            spin_until = time.perf_counter_ns() + self.spin_ns
            while True:
                try:
                    return self.sock.recv_into(buffer, 0, socket.MSG_DONTWAIT)
                except BlockingIOError:
                    if time.perf_counter_ns() >= spin_until:
                        break
                    if SPIN_YIELD:
                        os.sched_yield()
        if deadline is None:
            return self.sock.recv_into(buffer)
        # Only in the middle of a frame: a timeout costs a poll per receive, which the common case is spared.
        self.sock.settimeout(max(deadline - time.monotonic(), 1e-3))
        try:
            return self.sock.recv_into(buffer)
        except TimeoutError:
            raise frame_overdue(self.frame_timeout) from None
        finally:
            self.sock.settimeout(None)

    def send_frames(self, frames: list[Frame]) -> None:
        for write in self.conn.writes(frames):
            for part in write:
                self.sock.sendall(part)
                self.bytes_sent += memoryview(part).nbytes

    def send_quietly(self, frame: Frame, timeout: float = 1.0) -> None:
        """A last word to a peer that may be gone or stuck: at most `timeout` seconds per write; failures are
        ignored. Leaves the socket with that timeout (it is about to be closed)."""
        try:
            self.sock.settimeout(timeout)
            self.send_frames([frame])
        except OSError:
            pass
