"""Kernel printf for the client (the OUTPUT feature, docs/protocol.md "Kernel output").

The CUDA driver writes a kernel's printf output to the process's stdout when it empties the device's printf
buffer (at synchronisations, launches, module loads, context teardown). A worker process serves one session,
so its fd 1 is that session's alone: at the session's start fd 1 becomes a pipe, a thread keeps the pipe
drained into a bounded buffer (a full pipe would block the driver -- and the session with it -- in the middle
of a call), and before each reply the session loop takes what is there and sends it ahead of the reply, so the
client writes it to its own stdout before that call returns, as a local driver would have.

What a kernel prints between two replies is kept up to `max_pending` bytes; the rest is dropped, with a line
in the server's log and a marker in the output where the bytes went missing.
"""

from __future__ import annotations

import array
import ctypes
import logging
import os
import select
import sys
import threading

from rgpu.protocol import ops
from rgpu.protocol.frames import Flags, Frame

log = logging.getLogger("rgpu.output")

MAX_PENDING = 4 << 20
_READ = 64 << 10
_IONBF = 2  # glibc's value


def marker(dropped: int, limit: int) -> bytes:
    return (f"\n[rgpu: {dropped} bytes of kernel printf output dropped: more than {limit} bytes between two "
            "synchronising calls]\n").encode()


def unbuffer_c_stdout() -> None:
    """The driver prints through C's stdout, which is fully buffered on a pipe: without this, output would
    reach the pipe only 4 KiB at a time, or at exit."""
    try:
        libc = ctypes.CDLL(None)
        libc.setvbuf(ctypes.c_void_p.in_dll(libc, "stdout"), None, _IONBF, 0)
    except (OSError, AttributeError, ValueError) as e:  # not glibc: the driver may still flush on its own
        log.debug("cannot make C stdout unbuffered: %s", e)


class KernelOutput:
    """fd 1 of this process, captured for one session. `frames()` before each reply; `close()` at the end."""

    def __init__(self, read_fd: int, saved_stdout: int, *, max_pending: int = MAX_PENDING, max_chunk: int,
                 session_log: logging.Logger | logging.LoggerAdapter = log, target_fd: int = 1):
        self.read_fd = read_fd  # (the C request loop polls it too: output there must go before a reply)
        # Nonzero while output may be in here rather than in the pipe: set before the reader empties the pipe,
        # cleared when everything was taken, both under the lock; the C request loop (native_loop.py) reads it
        # to leave a reply to Python while output waits.
        self.held = array.array("i", [0])
        self._saved = saved_stdout
        self._target = target_fd
        self.max_pending = max_pending
        self.max_chunk = max(1, max_chunk)
        self._log = session_log
        self._lock = threading.Lock()
        self._pending = bytearray()
        self._dropped = 0  # since the last frames(): goes into the marker
        self.dropped_total = 0
        self.forwarded = 0
        self._eof = False
        # One poll object per thread: they may not share one.
        self._poll, self._wait = select.poll(), select.poll()
        self._poll.register(read_fd, select.POLLIN)
        self._wait.register(read_fd, select.POLLIN)
        self._thread = threading.Thread(target=self._pump, name="kernel-output", daemon=True)
        self._thread.start()

    @classmethod
    def capture(cls, *, max_chunk: int, max_pending: int = MAX_PENDING,
                session_log: logging.Logger | logging.LoggerAdapter = log, target_fd: int = 1) -> KernelOutput:
        """Point fd 1 (`target_fd`: tests) at a new pipe; Python's own sys.stdout keeps the server's stdout."""
        if target_fd == 1:
            unbuffer_c_stdout()
            sys.stdout.flush()
        read_fd, write_fd = os.pipe2(os.O_CLOEXEC)
        saved = os.dup(target_fd)
        os.dup2(write_fd, target_fd)  # the target itself stays inheritable, as stdout should
        os.close(write_fd)
        os.set_blocking(read_fd, False)
        if target_fd == 1:
            sys.stdout = open(saved, "w", buffering=1, closefd=False)
        return cls(read_fd, saved, max_pending=max_pending, max_chunk=max_chunk, session_log=session_log,
                   target_fd=target_fd)

    def _pump(self) -> None:
        while True:
            self._wait.poll()
            with self._lock:
                self.held[0] = 1
                self._read_locked()
                if self._eof:
                    return

    def _read_locked(self) -> None:
        while not self._eof:
            try:
                data = os.read(self.read_fd, _READ)
            except BlockingIOError:
                return
            except OSError:  # closed under us: the session is over
                self._eof = True
                return
            if not data:
                self._eof = True
                return
            room = 0 if self._dropped else self.max_pending - len(self._pending)  # what follows a gap goes too
            if len(data) > room:
                if not self.dropped_total:
                    self._log.warning("kernel printf output beyond %d bytes between two replies is dropped "
                                      "(the client sees a marker where it was)", self.max_pending)
                self._dropped += len(data) - room
                self.dropped_total += len(data) - room
                data = data[:room]
            self._pending += data

    def take(self) -> bytes:
        """Everything printed so far (what the driver wrote before this call is in the pipe: read it here,
        not only in the thread), with a marker where bytes were dropped."""
        with self._lock:
            if self._poll.poll(0):
                self._read_locked()
            self.held[0] = 0
            if not self._pending and not self._dropped:
                return b""
            data = bytes(self._pending)
            if self._dropped:
                data += marker(self._dropped, self.max_pending)
            self._pending.clear()
            self._dropped = 0
        self.forwarded += len(data)
        return data

    def frames(self) -> list[Frame]:
        """The OUTPUT frames to send ahead of the next reply (none, almost always)."""
        data = self.take()
        return [Frame(ops.OUTPUT.code, 0, Flags.REPLY, bulk=data[i : i + self.max_chunk])
                for i in range(0, len(data), self.max_chunk)]

    def close(self) -> None:
        """Give fd 1 back to the server's stdout; output no frame carried (the client is gone) goes there."""
        if self._target == 1:
            sys.stdout.flush()
        os.dup2(self._saved, self._target)  # the pipe's last write end closes: the thread sees the end
        self._thread.join(timeout=5)
        rest = self.take()
        with self._lock:
            os.close(self.read_fd)
            self._eof = True
        try:
            while rest:
                rest = rest[os.write(self._saved, rest):]
        except OSError:
            pass
        if self.dropped_total:
            self._log.warning("%d bytes of kernel printf output were dropped in all", self.dropped_total)
        if self._target == 1:
            sys.stdout = sys.__stdout__
        os.close(self._saved)
