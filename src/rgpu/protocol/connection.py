"""One side of a connection, sans-IO: bytes in -> frames out, frames in -> buffers out.

Before the handshake completes records are plain frames; after `protect()` each record is one AEAD-sealed
frame. The I/O layer only moves bytes (see rgpu.transport).
"""

from __future__ import annotations

from rgpu.errors import ProtocolError
from rgpu.protocol.frames import (
    DEFAULT_MAX_RECORD,
    Frame,
    SCRATCH_SIZE,
    RecordDecoder,
    SplitRecord,
    encode_frame,
    parse_frame,
    parse_split,
)
from rgpu.protocol.handshake import POOLED_RECORD, TAG_SIZE, RecordProtector

# Below this, joining a write's buffers into one beats a second syscall.
_JOIN_LIMIT = 256 * 1024

# Before a connection is authenticated it may only send handshake records (HELLO, AUTH: under 400 bytes with
# any reasonable agent string): a bigger length prefix is refused before anything is allocated for it, and the
# receive buffer is this small, so an unauthenticated connection costs the server a few KiB, whatever it sends.
HANDSHAKE_MAX_RECORD = 4096
_HANDSHAKE_SCRATCH = 2 * HANDSHAKE_MAX_RECORD


class Connection:
    """`reuse_receive_buffers`: big records land (and are opened) in memory reused by the next big record, so a
    frame is only valid until the next one is taken -- right for a server, which finishes each request first."""

    def __init__(self, max_record: int = DEFAULT_MAX_RECORD, *, reuse_receive_buffers: bool = False,
                 scratch_size: int = SCRATCH_SIZE):
        self.decoder = RecordDecoder(max_record, scratch_size, reuse_big=reuse_receive_buffers)
        self.protector: RecordProtector | None = None
        self._reuse = reuse_receive_buffers

    @classmethod
    def for_handshake(cls) -> "Connection":
        """A server's connection before authentication: handshake-sized records only (see open_requests)."""
        return cls(HANDSHAKE_MAX_RECORD, scratch_size=_HANDSHAKE_SCRATCH)

    def open_requests(self, max_record: int, *, reuse_receive_buffers: bool = True) -> None:
        """After the handshake: take requests of up to `max_record` bytes. A client waits for the handshake's
        last reply before it sends a request, so nothing may be buffered yet."""
        if self.decoder.has_buffered_data:
            raise ProtocolError("client sent frames before the handshake completed")
        self._reuse = reuse_receive_buffers
        self.decoder = RecordDecoder(max_record + (TAG_SIZE if self.protector is not None else 0),
                                     reuse_big=reuse_receive_buffers)
        if self.protector is not None:
            self.protector.reuse_opened = reuse_receive_buffers

    @property
    def max_record(self) -> int:
        return self.decoder.max_record

    def protect(self, protector: RecordProtector) -> None:
        self.protector = protector
        protector.reuse_opened = self._reuse
        self.decoder.max_record += TAG_SIZE

    # input
    def get_buffer(self) -> memoryview:
        return self.decoder.get_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        self.decoder.buffer_updated(nbytes)

    def receive_data(self, data: bytes) -> None:
        self.decoder.feed(data)

    def expect_bulk(self, request_id: int, target: memoryview) -> bool:
        """Ask for the reply's bulk to land in `target` (plain connections; sealed records must be opened
        whole). True if registered: then a frame whose bulk `is` target needs no copy."""
        if self.protector is not None:
            return False
        self.decoder.expect_bulk(request_id, target)
        return True

    def next_frame(self) -> Frame | None:
        record = self.decoder.next_record()
        if record is None:
            return None
        if isinstance(record, SplitRecord):
            return parse_split(record)
        if self.protector is not None:
            record = self.protector.open(record)
        frame = parse_frame(record)
        self.decoder.forget_bulk(frame.request_id)
        return frame

    @property
    def has_partial_frame(self) -> bool:
        return self.decoder.has_partial_record

    # output
    def encode(self, frame: Frame) -> list:
        parts = encode_frame(frame)
        return self.protector.seal(parts) if self.protector is not None else parts

    def writes(self, frames: list[Frame]):
        """The frames as writes: lists of buffers, each to be written whole before the next is asked for (a big
        sealed record lives in memory the next big seal reuses). Small buffers are joined into one write."""
        group: list = []
        for frame in frames:
            parts = self.encode(frame)
            if self.protector is not None and sum(len(p) for p in parts) >= POOLED_RECORD:
                if group:
                    yield _coalesce(group)
                    group = []
                yield parts
            else:
                group += parts
        if group:
            yield _coalesce(group)


def _coalesce(parts: list) -> list:
    if len(parts) > 1 and sum(len(p) for p in parts) <= _JOIN_LIMIT:
        return [b"".join(parts)]
    return parts
