"""Frames and records: the byte layout of everything on the wire (docs/protocol.md, "Framing").

Sans-IO: nothing here touches a socket. `RecordDecoder` follows asyncio's BufferedProtocol shape
(`get_buffer()` / `buffer_updated(n)`) so the I/O layer can `recv_into` straight into decoder memory; a record
larger than the decoder's scratch buffer gets its own exactly-sized buffer, so bulk data (a 64 MiB upload)
lands once and is handed on as a memoryview without another copy.
"""

from __future__ import annotations

import collections
import enum
import struct

import attrs

from rgpu.errors import ProtocolError, Status

LENGTH = struct.Struct("<I")
# opcode, flags, request_id, status, deferred_status, bulk_len -- everything after the length prefix.
HEADER = struct.Struct("<HHIIII")
HEADER_SIZE = HEADER.size  # 20
PREFIX_SIZE = LENGTH.size  # 4
_PREFIX_HEADER = struct.Struct("<I" + HEADER.format[1:])  # both in one pack: encode_frame is on every call's path
_LONE_REPLY = PREFIX_SIZE + HEADER_SIZE
DEFAULT_MAX_RECORD = 64 * 1024 * 1024 + 4096
SCRATCH_SIZE = 64 * 1024


class Flags(enum.IntFlag):
    NONE = 0
    REPLY = 0x1
    # A request the client does not wait for (deferred call). The server sends no reply; a failure becomes
    # the session's pending deferred error, reported by the next reply.
    NO_REPLY = 0x2
    # Set in a reply whose deferred_status carries an earlier deferred call's failure.
    DEFERRED_ERROR = 0x4


KNOWN_FLAGS = int(Flags.REPLY | Flags.NO_REPLY | Flags.DEFERRED_ERROR)
# Plain ints for the per-call path: enum.IntFlag arithmetic costs about a microsecond per operation.
FLAG_REPLY = int(Flags.REPLY)
FLAG_NO_REPLY = int(Flags.NO_REPLY)
FLAG_DEFERRED_ERROR = int(Flags.DEFERRED_ERROR)


@attrs.frozen(slots=True)
class Frame:
    opcode: int
    request_id: int = 0
    flags: int = 0
    status: int = 0
    deferred_status: int = 0
    args: bytes | memoryview = b""
    bulk: bytes | bytearray | memoryview = b""

    def reply(self, *, status: int = 0, args: bytes = b"", bulk=b"", deferred_status: int = 0) -> "Frame":
        flags = FLAG_REPLY | FLAG_DEFERRED_ERROR if deferred_status else FLAG_REPLY
        return Frame(self.opcode, self.request_id, flags, status, deferred_status, args, bulk)


def encode_frame(frame: Frame) -> list[bytes | memoryview]:
    """Return the frame as buffers to write in order (the bulk is not copied)."""
    args_len = len(frame.args)
    bulk_len = len(memoryview(frame.bulk).cast("B")) if frame.bulk else 0
    body = HEADER_SIZE + args_len + bulk_len
    head = _PREFIX_HEADER.pack(
        body, frame.opcode, frame.flags, frame.request_id, frame.status, frame.deferred_status, bulk_len
    )
    if args_len:
        head += bytes(frame.args)
    return [head, memoryview(frame.bulk).cast("B")] if bulk_len else [head]


def request_record_struct(request_format: str) -> struct.Struct:
    """A request's whole record, for one pack of (body length, header fields, request fields...), where
    `request_format` is the request's struct codes without byte order."""
    return struct.Struct(_PREFIX_HEADER.format + request_format)


def frame_bytes(frame: Frame) -> bytes:
    return b"".join(bytes(b) for b in encode_frame(frame))


def check_header(payload: bytes | bytearray | memoryview) -> tuple:
    """A record payload's header fields, checked against the payload's length."""
    if len(payload) < HEADER_SIZE:
        raise ProtocolError(f"frame of {len(payload)} bytes is shorter than its {HEADER_SIZE}-byte header")
    header = HEADER.unpack_from(payload)
    flags, bulk_len = header[1], header[5]
    if flags & ~KNOWN_FLAGS:
        raise ProtocolError(f"frame has unknown flag bits 0x{flags & ~KNOWN_FLAGS:x}")
    if bulk_len > len(payload) - HEADER_SIZE:
        raise ProtocolError(f"frame declares {bulk_len} bulk bytes but carries only {len(payload) - HEADER_SIZE}")
    return header


def parse_frame(payload: bytes | bytearray | memoryview) -> Frame:
    """Decode one record payload (everything after the length prefix) into a Frame."""
    view = memoryview(payload)
    opcode, flags, request_id, status, deferred, bulk_len = check_header(view)
    args_end = len(view) - bulk_len
    args = bytes(view[HEADER_SIZE:args_end])
    bulk = view[args_end:] if bulk_len else b""
    return Frame(opcode, request_id, flags, status, deferred, args, bulk)


@attrs.frozen(slots=True)
class SplitRecord:
    """A record whose bulk landed in a caller-registered buffer (RecordDecoder.expect_bulk)."""

    head: bytearray  # header + args
    bulk: memoryview


@attrs.frozen(slots=True)
class OpenedRecord:
    """A sealed record opened while it arrived (RecordDecoder.stream_opener): the `counter`-th record of its
    connection, its plaintext (bytes, or a SplitRecord whose bulk went to its sink) -- or None when its tag
    failed, which whoever takes it must report."""

    counter: int
    plaintext: memoryview | SplitRecord | None


def parse_split(record: SplitRecord) -> Frame:
    head = memoryview(record.head)
    opcode, flags, request_id, status, deferred, bulk_len = HEADER.unpack_from(head)
    if bulk_len != len(record.bulk):
        raise ProtocolError("split record does not match its header")
    return Frame(opcode, request_id, flags, status, deferred, bytes(head[HEADER_SIZE:]), record.bulk)


def batch_records(bulk: bytes | memoryview, max_record: int) -> list[memoryview]:
    """A BATCH frame's bulk is a plain concatenation of complete (length-prefixed) frames: their payloads,
    checked to tile the bulk exactly, not yet parsed (the dispatcher takes launches straight from the bytes)."""
    view = memoryview(bulk).cast("B")
    records = []
    pos = 0
    end = len(view)
    while pos < end:
        if end - pos < PREFIX_SIZE:
            raise ProtocolError("batch ends inside a length prefix")
        (length,) = LENGTH.unpack_from(view, pos)
        if length > max_record:
            raise ProtocolError(f"batched frame of {length} bytes exceeds the limit", Status.FRAME_TOO_LARGE)
        pos += PREFIX_SIZE
        if end - pos < length:
            raise ProtocolError("batch ends inside a frame")
        records.append(view[pos : pos + length])
        pos += length
    return records


def split_batch(bulk: bytes | memoryview, max_record: int) -> list[Frame]:
    return [parse_frame(record) for record in batch_records(bulk, max_record)]


class BufferPool:
    """Named buffers, grown on demand and reused."""

    def __init__(self) -> None:
        self._buffers: dict[str, bytearray] = {}

    def get(self, name: str, nbytes: int) -> memoryview:
        buf = self._buffers.get(name)
        if buf is None or len(buf) < nbytes:
            buf = self._buffers[name] = bytearray(-(-nbytes // (1 << 20)) << 20)  # whole MiBs
        return memoryview(buf)[:nbytes]


class RecordDecoder:
    """Incremental decoder of length-prefixed records (`u32 length | payload`).

    Complete records are moved out of the scratch buffer as soon as their last byte arrives, so the scratch
    only ever holds the head of one partial record and get_buffer() never returns an empty view.
    """

    def __init__(self, max_record: int = DEFAULT_MAX_RECORD, scratch_size: int = SCRATCH_SIZE, *,
                 reuse_big: bool = False):
        self.max_record = max_record
        self._buf = bytearray(scratch_size)
        self._view = memoryview(self._buf)  # (never resized: made once, not per receive)
        self._start = 0
        self._end = 0
        # reuse_big: a large record lands in the same memory as the previous one (a server, which is done with
        # a frame before it asks for the next) instead of a fresh allocation, whose page faults cost ~1 ms per
        # 16 MiB.
        self._big_pool = BufferPool() if reuse_big else None
        self._pooled_waiting: memoryview | None = None  # a complete record in the pooled buffer, not yet taken
        self._big_is_pooled = False
        self._big: bytearray | memoryview | None = None  # exactly-sized buffer of a large record in flight
        self._big_filled = 0
        self._ready: collections.deque = collections.deque()
        # stream_opener(records_ahead, length): something that opens a large sealed record as its bytes arrive
        # (advance(record, filled), then finish(record) -> OpenedRecord), or None to leave it sealed. Set by a
        # protected Connection; records_ahead is how many records wait to be taken before it.
        self.stream_opener = None
        self._opening = None
        # Zero-copy landing: request id -> where that reply's bulk should go (plain connections only).
        self._sinks: dict[int, memoryview] = {}
        self._sink_head: bytearray | None = None
        self._sink: memoryview | None = None
        self._sink_filled = 0  # bytes of head + bulk received

    def expect_bulk(self, request_id: int, target: memoryview) -> None:
        """Land the bulk of the reply to `request_id` in `target` if it arrives with status 0 and exactly
        len(target) bulk bytes; otherwise that reply decodes as usual."""
        self._sinks[request_id] = target

    def reuse_big_records(self) -> None:
        """From now on a large record lands in reused memory (as reuse_big), for an owner that copies every
        record out as it takes it."""
        if self._big_pool is None:
            self._big_pool = BufferPool()

    def forget_bulk(self, request_id: int) -> None:
        self._sinks.pop(request_id, None)

    def get_buffer(self) -> memoryview:
        """Memory the caller may fill with received bytes, then report via buffer_updated()."""
        if self._sink is not None:
            head = len(self._sink_head)
            if self._sink_filled < head:
                return memoryview(self._sink_head)[self._sink_filled :]
            return self._sink[self._sink_filled - head :]
        if self._big is not None:
            return memoryview(self._big)[self._big_filled :]
        if self._start == self._end:
            self._start = self._end = 0
        elif len(self._buf) - self._end < 4096:
            pending = self._end - self._start
            self._buf[:pending] = self._buf[self._start : self._end]
            self._start, self._end = 0, pending
        return self._view[self._end :]

    def lone_buffer(self) -> memoryview | None:
        """All the scratch, when nothing is held and no bulk is expected: where the reply to the only request in
        flight can be received for take_lone_reply. None: receive by get_buffer."""
        if self._end != self._start or self._ready or self._sink is not None or self._big is not None or self._sinks:
            return None
        self._start = self._end = 0
        return self._view

    def take_lone_reply(self, nbytes: int, opcode: int, request_id: int, reply: struct.Struct) -> tuple | None:
        """After `nbytes` landed in lone_buffer(): if they are exactly one record replying to `request_id` with
        `opcode`, status 0, no deferred status, no bulk and `reply`'s arguments, those arguments' values, the
        record taken. Otherwise None, the bytes taken as buffer_updated takes them, for next_record."""
        if nbytes == _LONE_REPLY + reply.size:
            length, code, flags, rid, status, deferred, bulk_len = _PREFIX_HEADER.unpack_from(self._buf)
            if (length == nbytes - PREFIX_SIZE and code == opcode and rid == request_id and flags == FLAG_REPLY
                    and not (status or deferred or bulk_len) and length <= self.max_record):
                return reply.unpack_from(self._buf, _LONE_REPLY)
        self.buffer_updated(nbytes)
        return None

    def buffer_updated(self, nbytes: int) -> None:
        if self._sink is not None:
            self._sink_filled += nbytes
            if self._sink_filled == len(self._sink_head) + len(self._sink):
                self._ready.append(SplitRecord(self._sink_head, self._sink))
                self._sink_head, self._sink = None, None
            return
        if self._big is not None:
            self._big_filled += nbytes
            self._advance_opening()
            if self._big_filled == len(self._big):
                record = memoryview(self._big)
                if self._opening is not None:
                    record, self._opening = self._opening.finish(record), None
                self._ready.append(record)
                if self._big_is_pooled:
                    self._pooled_waiting = record
                self._big = None
            return
        self._end += nbytes
        self._drain()

    def feed(self, data: bytes | memoryview) -> None:
        data = memoryview(data).cast("B")
        while data:
            target = self.get_buffer()
            n = min(len(target), len(data))
            target[:n] = data[:n]
            self.buffer_updated(n)
            data = data[n:]

    @property
    def has_partial_record(self) -> bool:
        return self._big is not None or self._sink is not None or self._end > self._start

    @property
    def has_buffered_data(self) -> bool:
        """Anything received but not yet taken: complete records or part of one."""
        return bool(self._ready) or self.has_partial_record

    def take_raw(self, limit: int) -> bytes | None:
        """Everything buffered, as the bytes that came in (the complete records re-prefixed, then the head of a
        partial one, large or not), leaving the decoder empty -- for another reader of the same stream (the C
        request loop, which receives the rest of a large host-to-device copy itself). None, taking nothing, when
        a reply is landing in its sink, a complete large record waits, or it comes to over `limit`."""
        if self._sink is not None or self._opening is not None:
            return None
        parts = []
        for record in self._ready:
            if not isinstance(record, bytes):  # a large record, in memory of its own
                return None
            parts += (LENGTH.pack(len(record)), record)
        if self._big is not None:
            parts += (LENGTH.pack(len(self._big)), bytes(memoryview(self._big)[: self._big_filled]))
        else:
            parts.append(bytes(self._buf[self._start : self._end]))
        if sum(map(len, parts)) > limit:
            return None
        self._ready.clear()
        self._start = self._end = 0
        self._big = None
        return b"".join(parts)

    def abandon(self) -> None:
        """The stream ends here (cut, timed out, refused): a record being opened as it arrived is given up,
        and what it had decrypted into a caller's place wiped."""
        if self._opening is not None:
            self._opening.abort()
            self._opening = None

    def next_record(self) -> bytes | memoryview | None:
        """The next complete record's payload, owned by the caller; None when more bytes are needed."""
        if not self._ready:
            return None
        record = self._ready.popleft()
        if record is self._pooled_waiting:
            self._pooled_waiting = None
        return record

    def _to_sink(self, begin: int, length: int, available: int) -> bool:
        """Start landing a large reply's bulk in its registered sink; False if it has none or does not fit."""
        if not self._sinks or available < PREFIX_SIZE + HEADER_SIZE:
            return False
        _op, _flags, request_id, status, _deferred, bulk_len = HEADER.unpack_from(self._buf, begin)
        sink = self._sinks.pop(request_id, None)
        if sink is None or status != 0 or bulk_len != len(sink) or bulk_len > length - HEADER_SIZE:
            return False
        head_len = length - bulk_len
        have = available - PREFIX_SIZE
        head = bytearray(head_len)
        take = min(have, head_len)
        head[:take] = self._buf[begin : begin + take]
        rest = have - take  # bytes of bulk already in scratch
        if rest:
            sink[:rest] = self._buf[begin + take : begin + take + rest]
        self._start = self._end = 0
        self._sink_head, self._sink, self._sink_filled = head, sink, take + rest
        if self._sink_filled == head_len + bulk_len:  # cannot happen for records this size, but be exact
            self._ready.append(SplitRecord(head, sink))
            self._sink_head, self._sink = None, None
        return True

    def _drain(self) -> None:
        while True:
            available = self._end - self._start
            if available < PREFIX_SIZE:
                return
            (length,) = LENGTH.unpack_from(self._buf, self._start)
            if length > self.max_record:
                raise ProtocolError(
                    f"record of {length} bytes exceeds the limit of {self.max_record}", Status.FRAME_TOO_LARGE
                )
            begin = self._start + PREFIX_SIZE
            if available >= PREFIX_SIZE + length:
                self._ready.append(bytes(self._buf[begin : begin + length]))
                self._start = begin + length
                continue
            if PREFIX_SIZE + length > len(self._buf) // 2 and self._to_sink(begin, length, available):
                return
            if PREFIX_SIZE + length > len(self._buf) // 2:
                # Too big for scratch: give it its own buffer so the rest lands there directly.
                # The pooled buffer only while no record in it waits to be taken (a caller that feeds many
                # records before taking any gets fresh buffers).
                self._big_is_pooled = self._big_pool is not None and self._pooled_waiting is None
                big = self._big_pool.get("record", length) if self._big_is_pooled else bytearray(length)
                have = available - PREFIX_SIZE
                big[:have] = self._buf[begin : begin + have]
                self._start = self._end = 0
                self._big, self._big_filled = big, have
                if self.stream_opener is not None:
                    self._opening = self.stream_opener(len(self._ready), length)
                    self._advance_opening()
            return

    def _advance_opening(self) -> None:
        """The large record in flight, opened as far as it has arrived (if it is being opened so)."""
        if self._opening is not None and not self._opening.advance(self._big, self._big_filled):
            self._opening = None  # (it left the record sealed: it is opened as it is taken)
