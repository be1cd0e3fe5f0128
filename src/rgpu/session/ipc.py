"""What sessions export for each other (cuIpcGetMemHandle, cuIpcGetEventHandle): one server's registry.

Sessions live in separate worker processes, so the registry is a directory the server makes for itself (mode
0700, removed when it stops), one file per export, named by the SHA-256 of its handle and written atomically.
A handle is 64 bytes the server mints at random: holding it is the only way to name an export, as any process of
a machine holding a CUDA IPC handle may open it. The file says which session exported what, and holds what the
backend needs to open it (the driver's own handle, or the fake backend's shared file); the exporter removes it
when the memory is freed or the session ends, after which the handle opens nothing."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import pathlib
import secrets
import shutil
import tempfile

import attrs

from rgpu.protocol import ops

log = logging.getLogger("rgpu.ipc")


@attrs.frozen(slots=True)
class Export:
    kind: str  # "memory" or "event"
    session: int
    payload: bytes  # the backend's


class IpcRegistry:
    def __init__(self, directory: str | os.PathLike):
        self.dir = pathlib.Path(directory)

    @classmethod
    def temporary(cls) -> IpcRegistry:
        return cls(tempfile.mkdtemp(prefix="rgpu-ipc-"))  # (mkdtemp makes it 0700)

    def remove(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)

    def _path(self, handle: bytes) -> pathlib.Path:
        return self.dir / hashlib.sha256(handle).hexdigest()

    def publish(self, export: Export) -> bytes:
        """A new handle naming `export`."""
        handle = secrets.token_bytes(ops.IPC_HANDLE_SIZE)
        record = json.dumps({"kind": export.kind, "session": export.session, "payload": export.payload.hex()})
        fd, tmp = tempfile.mkstemp(dir=self.dir, prefix=".incoming-")
        with os.fdopen(fd, "w") as f:
            f.write(record)
        os.replace(tmp, self._path(handle))
        return handle

    def lookup(self, handle: bytes, kind: str) -> Export | None:
        try:
            record = json.loads(self._path(bytes(handle)).read_text())
            export = Export(record["kind"], int(record["session"]), bytes.fromhex(record["payload"]))
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as e:  # a torn or tampered record opens nothing
            log.warning("IPC registry: an unreadable record (%s)", e)
            return None
        return export if export.kind == kind else None

    def withdraw(self, handle: bytes) -> None:
        self._path(handle).unlink(missing_ok=True)
