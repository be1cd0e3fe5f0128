"""Inter-process sharing on the fake backend: the FakeBackend mixin (requests are checked in rgpu.dispatch.ipc).

Sessions run in separate worker processes, each with its own fake memory; so an exported allocation moves into the
file the registry gives it (its bytes copied once, under the same address), and another worker maps that file at
an address of its own. The registry removes the file with the export; a mapping stays valid after that (as a
mapped file does), so what others opened stays theirs until they close it. An opened event is complete: the fake
runs a stream's work as it is queued, so whatever was recorded has happened."""

from __future__ import annotations

import bisect
import json
import mmap
import os
import stat

import numpy as np

from rgpu.errors import CudaError, Status


def _map(fd: int, size: int) -> np.ndarray:
    return np.frombuffer(mmap.mmap(fd, size), np.uint8)


class FakeIpc:
    """Mixed into FakeBackend (which provides `_lock`, `_memory`, `_starts`, `_next`, `_exported` and
    `_opened`)."""

    def ipc_export_memory(self, ctx, ptr: int, place) -> bytes:
        ctx.check()
        with self._lock:
            path = self._exported.get(ptr)
            if path is None:
                buf = self._memory[ptr]
                path = str(place)
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
                try:
                    os.posix_fallocate(fd, 0, buf.size)  # (a full tmpfs is ENOSPC here, not SIGBUS at the copy)
                    shared = _map(fd, buf.size)
                except BaseException:
                    os.unlink(path)
                    raise
                finally:
                    os.close(fd)
                shared[:] = buf
                self._memory[ptr] = shared
                self._exported[ptr] = path
        return json.dumps({"path": path, "size": int(self._memory[ptr].size)}).encode()

    def ipc_withdraw_memory(self, ctx, ptr: int) -> None:
        with self._lock:
            self._exported.pop(ptr, None)  # (the registry removes the file; this worker's mapping stays)

    def ipc_open_memory(self, ctx, payload: bytes, flags: int) -> tuple[int, int]:
        ctx.check()
        try:
            info = json.loads(payload)
            path, size = str(info["path"]), int(info["size"])
            fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW)
        except FileNotFoundError:
            raise CudaError(Status.INVALID_VALUE, "the exported memory was freed") from None
        except (ValueError, KeyError, TypeError, OSError) as e:
            raise CudaError(Status.INVALID_VALUE, f"not a fake export ({e})") from None
        try:
            st = os.fstat(fd)
            # (the file is the registry's, made by a worker of this server: anything else is not mapped)
            if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid() or st.st_size < size or size <= 0:
                raise CudaError(Status.INVALID_VALUE, "not a fake export")
            shared = _map(fd, size)
        finally:
            os.close(fd)
        with self._lock:
            ptr = self._next
            self._next += (size + 4095) // 4096 * 4096 + 4096  # (addresses never reused, as mem_alloc's)
            self._memory[ptr] = shared
            bisect.insort(self._starts, ptr)
            self._opened[ptr] = ctx
        return ptr, size

    def ipc_close_memory(self, ctx, ptr: int) -> None:
        with self._lock:
            if self._opened.pop(ptr, None) is None:
                raise CudaError(Status.INVALID_VALUE, f"0x{ptr:x} is not opened memory")
            del self._memory[ptr]
            del self._starts[bisect.bisect_left(self._starts, ptr)]

    def ipc_export_event(self, ctx, event) -> bytes:
        ctx.check()
        return b"fake event"

    def ipc_open_event(self, ctx, payload: bytes):
        event = self.event_create(ctx, 0x6)  # INTERPROCESS | DISABLE_TIMING
        event.timestamp = 0.0  # recorded long ago
        return event
