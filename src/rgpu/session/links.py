"""A session's copy links (docs/protocol.md, "Copy links"): extra connections of a plain session that carry the
bytes of big host-to-device copies as LINK_PARTs, each received by a C thread of the fast lane's library
(native/src/lane/links.c), so that one copy's bytes cross several cores on each side of the network.

The supervisor offers a session links with a random token it gives the worker in the hand-off; the client asks
for it (LINKS_OPEN, over its authenticated connection), then opens each link with LINK_JOIN and that token, and
the supervisor hands the joined socket to the worker (attach). MEMCPY_HTOD_LINKED names which parts make a copy;
the dispatcher takes them here, in order."""

from __future__ import annotations

import os
import threading
import time

from rgpu.backends import lane
from rgpu.errors import CudaError, ProtocolError, Status

MAX_LINKS = 8  # RGPU_LANE_MAX_LINKS
# A part goes through one copy-ring slot (the cuda backend's asynchronous copies up): no bigger.
PART_MAX = lane.RING_SLOT_BYTES
# The most parts one linked copy may have: a copy of the C stand-ins' 4 MiB chunk in the smallest parts they send.
MAX_PARTS = 4096
_WAIT_MS = 100  # a take returns this often to Python, so that a SIGTERM is honoured while a part is awaited


class CopyLinks:
    """`count` links, each taking parts of up to `part_max` bytes. A part's bytes are valid from take() until
    release() of the same link; one session thread takes (the dispatcher's), any other may attach."""

    def __init__(self, token: bytes, count: int, part_max: int = PART_MAX, timeout_s: float = 60.0):
        lib = lane.library()
        if lib is None:
            raise CudaError(Status.NOT_SUPPORTED, "copy links need the server's fast lane library, not loaded")
        if not 1 <= count <= MAX_LINKS:
            raise ValueError(f"copy links: {count} links asked for, 1..{MAX_LINKS} allowed")
        ffi = lane.ffi()
        self._lib, self._ffi = lib, ffi
        self._links = lib.rgpu_lane_links_new(count, part_max)
        if self._links == ffi.NULL:
            raise CudaError(Status.OUT_OF_MEMORY, "copy links: no memory for their buffers")
        self.token, self.count, self.part_max, self.timeout_s = token, count, part_max, timeout_s
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

    def attached(self) -> int:
        with self._closing:
            return self._lib.rgpu_lane_links_attached(self._links) if self._links is not None else 0

    def take(self, index: int, seq: int, part: int) -> tuple[memoryview, int]:
        """(part `part` of copy `seq`'s bytes, its offset), received on link `index`; ProtocolError when the
        link failed, sent another part, or sent none within timeout_s (the caller then fails the links)."""
        if self._links is None:
            raise ProtocolError(f"the copy links were closed: {self.broken or 'the session ended'}")
        deadline = time.monotonic() + self.timeout_s
        while True:
            got = self._lib.rgpu_lane_links_take(self._links, index, seq, part, _WAIT_MS, self._data, self._offset,
                                                 self._len, self._why, 256)
            if got == 1:
                return memoryview(self._ffi.buffer(self._data[0], self._len[0])), int(self._offset[0])
            if got < 0:
                raise ProtocolError(self._ffi.string(self._why).decode(errors="replace"))
            if time.monotonic() > deadline:
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
