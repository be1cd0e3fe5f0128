"""One side of a connection, sans-IO: bytes in -> frames out, frames in -> buffers out.

Before the handshake completes records are plain frames; after `protect()` each record is one AEAD-sealed
frame. The I/O layer only moves bytes (see rgpu.transport).
"""

from __future__ import annotations

from collections import deque

from rgpu.errors import ProtocolError
from rgpu.protocol.frames import (
    DEFAULT_MAX_RECORD,
    PREFIX_SIZE,
    Frame,
    OpenedRecord,
    SCRATCH_SIZE,
    RecordDecoder,
    SplitRecord,
    encode_frame,
    parse_frame,
    parse_split,
)
from rgpu.protocol.handshake import POOLED_RECORD, TAG_SIZE, RecordProtector
from rgpu.protocol.ops import Op

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
        self._sealed_sinks: dict[int, memoryview] = {}  # request id -> where its sealed reply's bulk goes
        self._opened: deque = deque()  # frame bodies opened elsewhere (receive_opened), taken before the decoder's

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
            self.decoder.stream_opener = self._stream_opener

    @property
    def max_record(self) -> int:
        return self.decoder.max_record

    def protect(self, protector: RecordProtector) -> None:
        self.protector = protector
        protector.reuse_opened = self._reuse
        self.decoder.max_record += TAG_SIZE
        # A sealed record is opened into other memory as it is taken, so its own may be reused at once (one
        # opened where it lies, as it arrived, only on a connection that reuses its records anyway).
        self.decoder.reuse_big_records()
        self.decoder.stream_opener = self._stream_opener

    def _stream_opener(self, records_ahead: int, length: int):
        return self.protector.stream_open(records_ahead, length, self._take_sealed_sink if self._sealed_sinks else None,
                                          in_place=self._reuse)

    # input
    def get_buffer(self) -> memoryview:
        return self.decoder.get_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        self.decoder.buffer_updated(nbytes)

    def receive_data(self, data: bytes) -> None:
        self.decoder.feed(data)

    def receive_opened(self, body: bytes) -> None:
        """A frame's body that another reader of this stream opened with this connection's next receiving counter
        (a server worker's C request loop, which set the counter on) and left to this side: the next frame taken,
        ahead of whatever the decoder holds."""
        self._opened.append(body)

    @property
    def has_opened(self) -> bool:
        return bool(self._opened)

    def expect_bulk(self, request_id: int, target: memoryview) -> None:
        """Ask for the reply's bulk to land in `target` if it comes with status 0 and exactly len(target) bytes of
        bulk (plain: received there; sealed: decrypted there). A frame whose bulk `is` target needs no copy."""
        if self.protector is not None:
            self._sealed_sinks[request_id] = target
        else:
            self.decoder.expect_bulk(request_id, target)

    def next_frame(self) -> Frame | None:
        if self._opened:
            return parse_frame(self._opened.popleft())
        record = self.decoder.next_record()
        if record is None:
            return None
        opened = isinstance(record, OpenedRecord)
        if opened:  # (opened as it arrived: its tag checked then)
            self.protector.took_streamed(record)
            record = record.plaintext
        if isinstance(record, SplitRecord):
            return parse_split(record)
        if self.protector is not None and not opened:
            split = self.protector.open_to_sink(record, self._take_sealed_sink) if self._sealed_sinks else None
            if split is not None:
                return parse_split(split)
            record = self.protector.open(record)
        frame = parse_frame(record)
        self.decoder.forget_bulk(frame.request_id)
        self._sealed_sinks.pop(frame.request_id, None)
        return frame

    # The lone call -- one request without bulk, then its reply, nothing else in flight: each synchronous call of
    # the blocking client. On a plain connection its usual reply is taken straight from the received bytes, and
    # neither side builds a Frame.
    def lone_request(self, op: Op, request_id: int, values: tuple) -> bytes:
        """The request's record (a plain connection's: a sealed one writes frames)."""
        record = op.request_record
        return record.pack(record.size - PREFIX_SIZE, op.code, 0, request_id, 0, 0, 0, *values)

    def lone_reply_buffer(self) -> memoryview | None:
        """Where to receive the lone call's reply for take_lone_reply; None: receive and take it as usual
        (get_buffer, buffer_updated, next_frame) -- sealed, or something already held."""
        if self.protector is None and not self._opened:
            return self.decoder.lone_buffer()
        return None

    def take_lone_reply(self, nbytes: int, op: Op, request_id: int) -> tuple | None:
        """The reply's values, when the `nbytes` received into lone_reply_buffer() are all of a reply to the
        request that succeeded, with no deferred error and no bulk; otherwise None, and next_frame takes them."""
        return self.decoder.take_lone_reply(nbytes, op.code, request_id, op.reply)

    def abandon(self) -> None:
        """The connection ends in the middle of a record: nothing of it decrypted stays where a caller reads
        (transports call this wherever receiving ends with an error)."""
        self.decoder.abandon()

    def _take_sealed_sink(self, request_id: int) -> memoryview | None:
        return self._sealed_sinks.pop(request_id, None)

    @property
    def has_partial_frame(self) -> bool:
        return self.decoder.has_partial_record

    # output
    def writes(self, frames: list[Frame]):
        """The frames as writes: lists of buffers, each to be written whole before the next is asked for (a big
        sealed record lives in memory the next big seal reuses). Small buffers are joined into one write."""
        group: list = []
        for frame in frames:
            parts = encode_frame(frame)
            if self.protector is not None and sum(len(p) for p in parts) >= POOLED_RECORD:
                if group:
                    yield _coalesce(group)
                    group = []
                yield from self.protector.seal_pieces(parts)
            else:
                group += self.protector.seal(parts) if self.protector is not None else parts
        if group:
            yield _coalesce(group)


def _coalesce(parts: list) -> list:
    if len(parts) > 1 and sum(len(p) for p in parts) <= _JOIN_LIMIT:
        return [b"".join(parts)]
    return parts
