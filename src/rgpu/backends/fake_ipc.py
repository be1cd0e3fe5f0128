"""Inter-process sharing on the fake backend: the FakeBackend mixin (requests are checked in rgpu.dispatch.ipc).

Sessions run in separate worker processes, each with its own fake memory; so an exported allocation moves into a
file mapped into memory (its bytes copied once, under the same address), and another worker maps the same file
at an address of its own. The file goes when the exporter frees the memory, as the driver's handle stops opening
then; workers that opened it keep their mapping until they close it. An opened event is complete: the fake runs
a stream's work as it is queued, so whatever was recorded has happened."""

from __future__ import annotations

import bisect
import json
import mmap
import os
import tempfile

import numpy as np

from rgpu.errors import CudaError, Status

_SHARED_DIR = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()


class FakeIpc:
    """Mixed into FakeBackend (which provides `_lock`, `_memory`, `_starts`, `_owner`, `_next`, `_exported` and
    `_opened`)."""

    def ipc_export_memory(self, ctx, ptr: int) -> bytes:
        ctx.check()
        with self._lock:
            path = self._exported.get(ptr)
            if path is None:
                buf = self._memory[ptr]
                fd, path = tempfile.mkstemp(prefix="rgpu-fake-ipc-", dir=_SHARED_DIR)
                try:
                    os.ftruncate(fd, buf.size)
                    shared = np.frombuffer(mmap.mmap(fd, buf.size), np.uint8)
                finally:
                    os.close(fd)
                shared[:] = buf
                self._memory[ptr] = shared
                self._exported[ptr] = path
        return json.dumps({"path": path, "size": int(self._memory[ptr].size)}).encode()

    def ipc_withdraw_memory(self, ctx, ptr: int) -> None:
        with self._lock:
            path = self._exported.pop(ptr, None)
        if path is not None:
            os.unlink(path)

    def ipc_open_memory(self, ctx, payload: bytes, flags: int) -> tuple[int, int]:
        ctx.check()
        try:
            info = json.loads(payload)
            path, size = str(info["path"]), int(info["size"])
            if os.path.dirname(path) != _SHARED_DIR or not os.path.basename(path).startswith("rgpu-fake-ipc-"):
                raise ValueError(path)
            fd = os.open(path, os.O_RDWR)
        except FileNotFoundError:
            raise CudaError(Status.INVALID_VALUE, "the exported memory was freed") from None
        except (ValueError, KeyError, TypeError, OSError) as e:
            raise CudaError(Status.INVALID_VALUE, f"not a fake export ({e})") from None
        try:
            shared = np.frombuffer(mmap.mmap(fd, size), np.uint8)
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
