"""The only code that moves protocol bytes through sockets: a trio flavour and a blocking flavour."""

from __future__ import annotations

import socket
import time
from typing import TYPE_CHECKING

from rgpu.protocol.connection import Connection
from rgpu.protocol.frames import Frame

if TYPE_CHECKING:
    import trio

DEFAULT_PORT = 9713

class TrioFrameStream:
    def __init__(self, stream: trio.abc.Stream, conn: Connection):
        self.stream = stream
        self.conn = conn
        # Landing bytes with recv_into saves a copy per receive on real sockets.
        self._sock = getattr(stream, "socket", None)

    async def receive_frame(self) -> Frame | None:
        """The next frame, or None at a clean end of stream. A stream cut mid-frame raises EOFError."""
        while True:
            frame = self.conn.next_frame()
            if frame is not None:
                return frame
            if self._sock is not None:
                n = await self._sock.recv_into(self.conn.get_buffer())
                if n:
                    self.conn.buffer_updated(n)
            else:
                data = await self.stream.receive_some()
                n = len(data)
                if n:
                    self.conn.receive_data(data)
            if not n:
                if self.conn.has_partial_frame:
                    raise EOFError("connection closed in the middle of a frame")
                return None

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

    def __init__(self, sock: socket.socket, conn: Connection, *, spin_us: float = 0):
        self.sock = sock
        self.conn = conn
        self.spin_ns = int(spin_us * 1000)

    def receive_frame(self) -> Frame:
        while True:
            frame = self.conn.next_frame()
            if frame is not None:
                return frame
            n = self._receive(self.conn.get_buffer())
            if not n:
                raise ConnectionError("server closed the connection")
            self.conn.buffer_updated(n)

    def _receive(self, buffer: memoryview) -> int:
        if self.spin_ns:
            deadline = time.perf_counter_ns() + self.spin_ns
            while True:
                try:
                    return self.sock.recv_into(buffer, 0, socket.MSG_DONTWAIT)
                except BlockingIOError:
                    if time.perf_counter_ns() >= deadline:
                        break
        return self.sock.recv_into(buffer)

    def send_frames(self, frames: list[Frame]) -> None:
        for write in self.conn.writes(frames):
            for part in write:
                self.sock.sendall(part)

    def send_quietly(self, frame: Frame, timeout: float = 1.0) -> None:
        """A last word to a peer that may be gone or stuck: at most `timeout` seconds per write; failures are
        ignored. Leaves the socket with that timeout (it is about to be closed)."""
        try:
            self.sock.settimeout(timeout)
            self.send_frames([frame])
        except OSError:
            pass
