"""Host-to-device copies coded as runs (MEMCPY_HTOD_RUNS; docs/protocol.md, "Coded copies").

Some inputs programs copy up every step are arithmetic: llama.cpp's KV-cache row indices (1 MiB of int64 per
128-token prompt step at flash-attention off, each row `first + k * kv_size`) and its attention mask (0 or -inf
floats in long stretches). Sent as they are, those bytes cost a socket their size; coded as runs of 8-byte
words they are a few kilobytes. The C stand-ins code (native/src/copy_runs.c) and the worker's fast lane decodes
the same way in C; this module is the format's Python side: the decoder for the worker's Python path and an
encoder for tests.

The coded form of `size` bytes, taken as size // 8 little-endian u64 words and size % 8 tail bytes:
segments, each `literal:u32 run:u32`, then `literal` words as they are, then, when run > 0, `first:u64 step:u64`
standing for the `run` words first + k * step (k = 0 .. run - 1, modulo 2**64); the segments' words add up to
size // 8 exactly, no segment is empty, and the tail bytes end the coded form. size is 1 to MAX_COPY_BYTES, the
coded form at most MAX_CODED_BYTES.
"""

from __future__ import annotations

import struct

import numpy as np

# The most bytes one coded copy stands for: eight of the worker's 256 KiB copy-ring slots, as many as one copy
# may take (native/src/lane/ring.c). The C stand-ins code a copy in pieces no larger.
MAX_COPY_BYTES = 2 << 20
# The most bytes of coding one carries: a coding is worth sending only much smaller than its bytes, and a bound on
# it bounds a decoder's work (its segments) whatever a client sends. (The C stand-ins' codings travel inside a
# batch: conn_batch.c's INLINE_BULK_LIMIT is the same 64 KiB.)
MAX_CODED_BYTES = 64 << 10
# A run is coded only from this many words: shorter ones cost about what they save.
MIN_RUN = 8
SEGMENT = struct.Struct("<II")
RUN = struct.Struct("<QQ")
_MASK = (1 << 64) - 1


class CodingError(ValueError):
    """The coded form does not stand for exactly the copy's bytes."""


def decode(coded, size: int) -> bytearray:
    """The `size` bytes `coded` stands for; CodingError when it is malformed (anything but exactly those)."""
    coded = memoryview(coded).cast("B")
    if not 1 <= size <= MAX_COPY_BYTES:
        raise CodingError(f"a coded copy of {size} bytes (1 to {MAX_COPY_BYTES})")
    if len(coded) > MAX_CODED_BYTES:
        raise CodingError(f"{len(coded)} bytes of coding (at most {MAX_CODED_BYTES})")
    words, tail = divmod(size, 8)
    if len(coded) < tail:
        raise CodingError("the coded copy is shorter than its tail")
    body = len(coded) - tail
    out = bytearray(size)
    view = np.frombuffer(out, dtype="<u8", count=words)
    at = done = 0
    while done < words:
        if body - at < SEGMENT.size:
            raise CodingError(f"the coded copy ends after {done} of {words} words")
        literal, run = SEGMENT.unpack_from(coded, at)
        at += SEGMENT.size
        if not literal and not run:
            raise CodingError("an empty segment")
        if literal > words - done or literal * 8 > body - at:
            raise CodingError(f"a literal of {literal} words where {words - done} are left")
        view[done:done + literal] = np.frombuffer(coded, dtype="<u8", count=literal, offset=at)
        at += literal * 8
        done += literal
        if run:
            if run > words - done:
                raise CodingError(f"a run of {run} words where {words - done} are left")
            if body - at < RUN.size:
                raise CodingError("a run's first word and step cut short")
            first, step = RUN.unpack_from(coded, at)
            at += RUN.size
            view[done:done + run] = np.arange(run, dtype=np.uint64) * np.uint64(step) + np.uint64(first)
            done += run
    if at != body:
        raise CodingError(f"{body - at} bytes after the last segment")
    out[words * 8:] = coded[body:]
    return out


def encode(data, min_run: int = MIN_RUN) -> bytes:
    """The coded form of `data` (every run of at least `min_run` words coded as one); for tests and tools -- the
    C stand-ins have their own, which also gives up when coding does not pay."""
    if min_run < 2:
        raise ValueError("a run is at least 2 words (its step is the second less the first)")
    data = memoryview(data).cast("B")
    words = len(data) // 8
    w = [int(x) for x in np.frombuffer(data, dtype="<u8", count=words)]
    out, literal_from, i = bytearray(), 0, 0
    while i < words:
        j = i + 1
        if i + 1 < words:
            step = (w[i + 1] - w[i]) & _MASK
            j = i + 2
            while j < words and (w[j] - w[j - 1]) & _MASK == step:
                j += 1
        if j - i >= min_run:
            out += SEGMENT.pack(i - literal_from, j - i) + bytes(data[literal_from * 8:i * 8])
            out += RUN.pack(w[i], (w[i + 1] - w[i]) & _MASK)
            i = literal_from = j
        else:
            i += 1
    if literal_from < words:
        out += SEGMENT.pack(words - literal_from, 0) + bytes(data[literal_from * 8:words * 8])
    return bytes(out + data[words * 8:])
