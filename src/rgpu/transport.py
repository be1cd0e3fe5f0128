"""The only code that moves protocol bytes through sockets: a trio flavour and a blocking flavour."""

from __future__ import annotations

import socket

import trio

from rgpu.protocol.connection import Connection
from rgpu.protocol.frames import Frame

DEFAULT_PORT = 9713

# Below this, joining header and bulk into one write beats a second syscall.
_JOIN_LIMIT = 256 * 1024


def _coalesce(parts: list) -> list:
    if len(parts) > 1 and sum(len(p) for p in parts) <= _JOIN_LIMIT:
        return [b"".join(parts)]
    return parts


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
        for part in _coalesce(self.conn.encode(frame)):
            await self.stream.send_all(part)

    async def send_frames(self, frames: list[Frame]) -> None:
        parts = [p for f in frames for p in self.conn.encode(f)]
        for part in _coalesce(parts):
            await self.stream.send_all(part)


class SocketFrameStream:
    """Blocking counterpart used by the synchronous client and benchmarks."""

    def __init__(self, sock: socket.socket, conn: Connection):
        self.sock = sock
        self.conn = conn

    def receive_frame(self) -> Frame:
        while True:
            frame = self.conn.next_frame()
            if frame is not None:
                return frame
            n = self.sock.recv_into(self.conn.get_buffer())
            if not n:
                raise ConnectionError("server closed the connection")
            self.conn.buffer_updated(n)

    def send_frames(self, frames: list[Frame]) -> None:
        parts = [p for f in frames for p in self.conn.encode(f)]
        parts = _coalesce(parts)
        if len(parts) == 1:
            self.sock.sendall(parts[0])
        else:
            for part in parts:
                self.sock.sendall(part)
