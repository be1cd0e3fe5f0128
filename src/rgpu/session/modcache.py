"""Module images cached by content (SHA-256), shared by every session of one server.

A runtime shim uploads each fatbin once per content: it first asks MODULE_LOAD_CACHED with the digest and sends
the image only when the server does not have it. The server computes every digest itself from bytes it
received, so a client cannot plant an image under someone else's digest. Sessions live in separate worker
processes, hence a directory (one file per digest, written atomically) rather than memory; it is bounded in
bytes and evicts the least recently used images.
"""

from __future__ import annotations

import hashlib
import logging
import os
import pathlib
import shutil
import tempfile

log = logging.getLogger("rgpu.modcache")

# Smaller images are cheaper to send again than to look up in a round trip of their own.
MIN_CACHED_BYTES = 16 << 10
DEFAULT_MAX_BYTES = 2 << 30


class ModuleCache:
    def __init__(self, directory: str | os.PathLike, max_bytes: int = DEFAULT_MAX_BYTES):
        self.dir = pathlib.Path(directory)
        self.max_bytes = max_bytes

    @classmethod
    def temporary(cls, max_bytes: int = DEFAULT_MAX_BYTES) -> ModuleCache:
        return cls(tempfile.mkdtemp(prefix="rgpu-modules-"), max_bytes)

    def remove(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)

    def _path(self, digest: bytes) -> pathlib.Path:
        return self.dir / digest.hex()

    def get(self, digest: bytes) -> bytes | None:
        if len(digest) != 32:
            return None
        path = self._path(digest)
        try:
            image = path.read_bytes()
        except OSError:
            return None
        if hashlib.sha256(image).digest() != digest:  # a torn or tampered file is a miss, never a load
            log.warning("module cache: %s does not match its digest; dropped", path.name)
            path.unlink(missing_ok=True)
            return None
        os.utime(path)  # recency for eviction
        return image

    def put(self, image: bytes) -> None:
        if len(image) < MIN_CACHED_BYTES or len(image) > self.max_bytes:
            return
        path = self._path(hashlib.sha256(image).digest())
        if path.exists():
            return
        try:
            fd, tmp = tempfile.mkstemp(dir=self.dir, prefix=".incoming-")
            with os.fdopen(fd, "wb") as f:
                f.write(image)
            os.replace(tmp, path)
            self._evict()
        except OSError as e:
            log.warning("module cache: cannot store an image (%s); sessions will upload it again", e)

    def _evict(self) -> None:
        entries = []
        for p in self.dir.iterdir():
            if p.name.startswith("."):
                continue
            try:
                st = p.stat()
            except OSError:
                continue
            entries.append((st.st_mtime, st.st_size, p))
        total = sum(size for _, size, _ in entries)
        for _, size, p in sorted(entries):
            if total <= self.max_bytes:
                break
            p.unlink(missing_ok=True)
            total -= size
