"""What sessions export for each other (cuIpcGetMemHandle, cuIpcGetEventHandle): one server's registry.

Sessions live in separate worker processes, so the registry is a directory the server makes for itself (mode
0700, on /dev/shm where there is one, removed when it stops). For an export whose handle hashes to D:
- D: the record (which session exported what, and what the backend needs to open it), written atomically;
- D.data: a file the backend may share the memory through (the fake backend does; the driver needs none);
- D.open.S: session S has it open (so the exporter's free waits: freeing mapped memory is undefined in CUDA).
A handle is 64 bytes the server mints at random: holding it is the only way to name an export, as any process of
a machine holding a CUDA IPC handle may open it. The exporter withdraws the record when the memory is freed or the
session ends; the server sweeps what a session left when its worker ends however it ended."""

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
_SHARED_MEMORY = "/dev/shm"


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
        where = _SHARED_MEMORY if os.path.isdir(_SHARED_MEMORY) else None  # (the fake's shared files: RAM)
        return cls(tempfile.mkdtemp(prefix="rgpu-ipc-", dir=where))  # (mkdtemp makes it 0700)

    def remove(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)

    @staticmethod
    def new_handle() -> bytes:
        return secrets.token_bytes(ops.IPC_HANDLE_SIZE)

    def _path(self, handle: bytes, suffix: str = "") -> pathlib.Path:
        return self.dir / (hashlib.sha256(bytes(handle)).hexdigest() + suffix)

    def data_path(self, handle: bytes) -> pathlib.Path:
        """Where a backend may keep the shared bytes of the export `handle` names (removed with it)."""
        return self._path(handle, ".data")

    def publish(self, handle: bytes, export: Export) -> None:
        record = json.dumps({"kind": export.kind, "session": export.session, "payload": export.payload.hex()})
        fd, tmp = tempfile.mkstemp(dir=self.dir, prefix=".incoming-")
        with os.fdopen(fd, "w") as f:
            f.write(record)
        os.replace(tmp, self._path(handle))

    def lookup(self, handle: bytes, kind: str) -> Export | None:
        return self._read(self._path(handle), kind)

    @staticmethod
    def _read(path: pathlib.Path, kind: str | None = None) -> Export | None:
        try:
            record = json.loads(path.read_text())
            export = Export(record["kind"], int(record["session"]), bytes.fromhex(record["payload"]))
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as e:  # a torn or tampered record opens nothing
            log.warning("IPC registry: an unreadable record (%s)", e)
            return None
        return export if kind is None or export.kind == kind else None

    def withdraw(self, handle: bytes) -> None:
        """The export opens nothing from now on (what was opened stays mapped where it was)."""
        self._path(handle).unlink(missing_ok=True)
        self.data_path(handle).unlink(missing_ok=True)

    def note_open(self, handle: bytes, session: int) -> None:
        self._path(handle, f".open.{session}").touch()

    def note_closed(self, handle: bytes, session: int) -> None:
        self._path(handle, f".open.{session}").unlink(missing_ok=True)

    def opened_elsewhere(self, handle: bytes) -> bool:
        return any(self.dir.glob(self._path(handle).name + ".open.*"))

    def sweep(self, session: int) -> None:
        """Everything `session` left: its exports withdrawn, its opens forgotten (its worker has ended)."""
        for path in list(self.dir.iterdir()):
            name = path.name
            if name.endswith(f".open.{session}"):
                path.unlink(missing_ok=True)
            elif len(name) == 64 and "." not in name:
                export = self._read(path)
                if export is not None and export.session == session:
                    path.unlink(missing_ok=True)
                    (self.dir / (name + ".data")).unlink(missing_ok=True)
