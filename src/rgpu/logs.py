"""Log set-up shared by `rgpu-server`, its session workers and the `rgpu` commands: plain lines, or one JSON
object per line (`--log-format json`, for journald/ELK-style collectors). Workers inherit the server's
choice through $RGPU_LOG_FORMAT and its stderr, which `--log-file` points at the file."""

from __future__ import annotations

import json
import logging
import os
import sys
import time

FORMATS = ("text", "json")


class JsonFormatter(logging.Formatter):
    def __init__(self, pid: bool):
        super().__init__()
        self.pid = pid

    def format(self, record: logging.LogRecord) -> str:
        entry = {"time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
                 "level": record.levelname, "logger": record.name, "message": record.getMessage()}
        if self.pid:
            entry["pid"] = record.process
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry)


def setup(level: str, *, pid: bool = False, fmt: str | None = None) -> None:
    """Configure the root logger on stderr. `pid`: tag lines with the process id (session workers)."""
    fmt = fmt or os.environ.get("RGPU_LOG_FORMAT", "text")
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter(pid))
    else:
        tag = f"[{os.getpid()}]" if pid else ""
        handler.setFormatter(logging.Formatter(f"%(asctime)s %(levelname)s %(name)s{tag}: %(message)s"))
    logging.basicConfig(level=getattr(logging, level.upper()), handlers=[handler], force=True)


def redirect_stderr(path: str) -> None:
    """Send this process's stderr -- and so its workers' -- to `path` (appended)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o640)
    os.dup2(fd, 2)
    os.close(fd)
