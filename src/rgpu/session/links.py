"""A session's copy links (docs/protocol.md, "Copy links"): extra connections of a session that carry the
bytes of big host-to-device copies as LINK_PARTs, each received by a C thread of the fast lane's library
(native/src/lane/links.c), so that one copy's bytes cross several cores on each side of the network.

The supervisor offers a session links with a random token it gives the worker in the hand-off; the client asks
for it (LINKS_OPEN, over its own connection), then opens each link with LINK_JOIN and a proof made with that
token, and the supervisor hands the joined socket to the worker (attach). MEMCPY_HTOD_LINKED names which parts
make a copy; the dispatcher takes them here, in order. A sealed session's links carry records sealed under keys
derived from its own (link_key), which the links' threads open."""

from __future__ import annotations

import hashlib
import hmac
import os
import struct
import threading
import time

import attrs

from rgpu.backends import lane
from rgpu.errors import CudaError, ProtocolError, Status

MAX_LINKS = 8  # RGPU_LANE_MAX_LINKS
# A part goes through one copy-ring slot (the cuda backend's asynchronous copies up): no bigger.
PART_MAX = lane.RING_SLOT_BYTES
# The most parts one linked copy may have: a copy of the C stand-ins' 4 MiB chunk in the smallest parts they send.
MAX_PARTS = 4096
_WAIT_MS = 100  # a take returns this often to Python, so that a SIGTERM is honoured while a part is awaited
_PROOF_LABEL = b"rgpu copy link"
_KEY_LABEL = b"rgpu copy link key"


def join_proof(token: bytes, link: int) -> bytes:
    """What LINK_JOIN carries for link `link`: HMAC-SHA256(token, "rgpu copy link" || u32 link). The token itself
    never crosses a link, where a sealed session's records do not protect it."""
    return hmac.new(token, _PROOF_LABEL + struct.pack("<I", link), hashlib.sha256).digest()


def link_key(c2s_key: bytes, token: bytes, link: int) -> bytes:
    """A sealed session's key for link `link`'s records: HKDF-SHA256 (RFC 5869) of its client-to-server key, salt
    the token, info "rgpu copy link key" || u32 link."""
    prk = hmac.new(token, c2s_key, hashlib.sha256).digest()
    return hmac.new(prk, _KEY_LABEL + struct.pack("<I", link) + b"\x01", hashlib.sha256).digest()


@attrs.frozen(slots=True, repr=False)
class LinksOffer:
    """What the supervisor offered a session: the token, how many links, how long a part may take; for a sealed
    session its cipher and client-to-server key, from which each link's key derives."""

    token: bytes
    count: int
    timeout_s: float | None = 60.0  # a part may take this long to come once its copy is due; None: no limit
    cipher: int | None = None
    c2s_key: bytes | None = None

    def __repr__(self) -> str:
        return f"LinksOffer(count={self.count}, sealed={self.c2s_key is not None}, ...)"  # never the secrets


class CopyLinks:
    """`count` links, each taking parts of up to `part_max` bytes. A part's bytes are valid from take() until
    release() of the same link; one session thread takes (the dispatcher's), any other may attach."""

    def __init__(self, offer: LinksOffer, part_max: int = PART_MAX):
        lib = lane.library()
        if lib is None:
            raise CudaError(Status.NOT_SUPPORTED, "copy links need the server's fast lane library, not loaded")
        count = offer.count
        if not 1 <= count <= MAX_LINKS:
            raise ValueError(f"copy links: {count} links asked for, 1..{MAX_LINKS} allowed")
        ffi = lane.ffi()
        self._lib, self._ffi = lib, ffi
        keys = ffi.NULL
        if offer.c2s_key is not None:
            keys = b"".join(link_key(offer.c2s_key, offer.token, i) for i in range(count))
        self._links = lib.rgpu_lane_links_new(count, part_max, offer.cipher or 0, keys)
        if self._links == ffi.NULL:
            raise CudaError(Status.OUT_OF_MEMORY, "copy links: no memory for their buffers"
                            + (", or no libcrypto to open their records" if offer.c2s_key is not None else ""))
        self.token, self.count, self.part_max, self.timeout_s = offer.token, count, part_max, offer.timeout_s
        self.next_seq = 1  # the seq the next MEMCPY_HTOD_LINKED must carry
        self.broken = ""  # why the links were closed before the session ended (out of step, failed)
        self._data = ffi.new("const uint8_t **")
        self._offset = ffi.new("uint64_t *")
        self._len = ffi.new("uint32_t *")
        self._why = ffi.new("char[]", 256)
        self._closing = threading.Lock()  # attach (the worker's links thread) against close (the session's)

    def attach(self, index: int, fd: int) -> bool:
        """Link `index` reads from `fd`, which is the links' from now on (closed at once if refused)."""
        with self._closing:
            if self._links is None:
                os.close(fd)
                return False
            return self._lib.rgpu_lane_links_attach(self._links, index, fd) == 0

    def take(self, index: int, seq: int, part: int) -> tuple[memoryview, int]:
        """(part `part` of copy `seq`'s bytes, its offset), received on link `index`; ProtocolError when the
        link failed, sent another part, or sent none within timeout_s (the caller then fails the links)."""
        if self._links is None:
            raise ProtocolError(f"the copy links were closed: {self.broken or 'the session ended'}")
        deadline = time.monotonic() + self.timeout_s if self.timeout_s else None
        while True:
            got = self._lib.rgpu_lane_links_take(self._links, index, seq, part, _WAIT_MS, self._data, self._offset,
                                                 self._len, self._why, 256)
            if got == 1:
                return memoryview(self._ffi.buffer(self._data[0], self._len[0])), int(self._offset[0])
            if got < 0:
                raise ProtocolError(self._ffi.string(self._why).decode(errors="replace"))
            if deadline is not None and time.monotonic() > deadline:
                raise ProtocolError(f"copy link {index}: part {part} of linked copy {seq} did not come within "
                                    f"{self.timeout_s:g}s")

    def fail(self, why: str) -> None:
        """The links are out of step with the session's copies (a bad part, a failed link): close them; every
        later linked copy fails with `why`."""
        self.broken = self.broken or why
        self.close()

    def release(self, index: int) -> None:
        if self._links is not None:
            self._lib.rgpu_lane_links_release(self._links, index)

    def close(self) -> None:
        """Close every link and stop its thread (idempotent)."""
        with self._closing:
            links, self._links = self._links, None
        if links is not None:
            self._lib.rgpu_lane_links_free(links)
