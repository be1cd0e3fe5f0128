"""The bridge daemon: watch a job location, validate each new record, run it, write output and a done record.

v2 (CUBB2/CBD2): four files -- job, in, out, done (debugfs in production, plain files in tests).
v1 (CUBB/CUBD): one guest RAM file; records and buffers at guest-physical addresses mapped through windows.

Validation order and statuses are bridge/PROTOCOL.md's. A record is acted on once: identical bytes are
not re-run, a seq at or below the last accepted one is ignored (and logged), anything else gets exactly
one done record.
"""

from __future__ import annotations

import logging
import os
from typing import Callable

import attrs
import trio

from rgpu.bridge import records as R
from rgpu.bridge.engine import Engine, JobResult, input_bytes, output_bytes
from rgpu.bridge.records import DoneStatus, Op

log = logging.getLogger("rgpu.bridge")


@attrs.frozen(slots=True)
class Job:
    """A job reduced to what both versions share; ranges already resolved to (file, offset, size)."""

    seq: int
    op: int
    n: int
    submit_ns: int = 0


@attrs.frozen(slots=True)
class Window:
    gpa: int
    size: int
    offset: int  # where this window starts in the RAM file


class GuestRam:
    """A guest RAM image addressed by guest-physical address through windows (e.g. low RAM at GPA 0 and
    high RAM at 4 GiB continuing the file). A range must lie inside one window and inside the file."""

    def __init__(self, path: str, windows: list[Window] | None = None):
        self.path = path
        self.windows = windows or [Window(0, os.path.getsize(path), 0)]

    def resolve(self, gpa: int, size: int) -> int | None:
        """File offset of [gpa, gpa+size), or None when it is not wholly inside one window and the file."""
        if size <= 0 or gpa < 0:
            return None
        file_size = os.path.getsize(self.path)
        for w in self.windows:
            if w.gpa <= gpa and gpa + size <= w.gpa + w.size:
                offset = w.offset + (gpa - w.gpa)
                return offset if offset + size <= file_size else None
        return None

    def read(self, gpa: int, size: int) -> bytes | None:
        offset = self.resolve(gpa, size)
        return None if offset is None else _pread(self.path, offset, size)

    def write(self, gpa: int, data: bytes) -> bool:
        offset = self.resolve(gpa, len(data))
        if offset is None:
            return False
        _pwrite(self.path, offset, data)
        return True


def _pread(path: str, offset: int, size: int) -> bytes:
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.pread(fd, size, offset)
    finally:
        os.close(fd)


def _pwrite(path: str, offset: int, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.pwrite(fd, view, offset + len(data) - len(view)) :]
    finally:
        os.close(fd)


def _file_size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return -1


@attrs.frozen
class V2Files:
    job: str
    inp: str
    out: str
    done: str


class Bridge:
    def __init__(self, engine: Engine, *, emit: Callable[[str], None] | None = None):
        self.engine = engine
        self.last_seq = 0
        self._last_raw: bytes | None = None
        self.emit = emit or (lambda line: print(line, flush=True))
        self.jobs_run = 0

    # -- common ------------------------------------------------------------------------------------
    def _accept(self, raw: bytes, size: int, kind: str, version: int):
        """First checks on a raw record: (record, None) to go on, (record or None, status) to report, or
        None when there is nothing to do (unchanged bytes, empty location, stale seq)."""
        if raw == self._last_raw:
            return None
        self._last_raw = raw
        if not raw.strip(b"\0"):
            return None  # nothing written yet
        if len(raw) < size:
            log.warning("%s record truncated: %d of %d bytes", kind, len(raw), size)
            return None, DoneStatus.TRUNCATED
        rec = R.unpack(kind, raw)
        if R.magic_of(rec) != R.MAGIC[kind]:
            log.warning("%s record has bad magic %r", kind, R.magic_of(rec))
            return rec, DoneStatus.BAD_MAGIC
        if rec.version != version or rec.header_size != size:
            log.warning("%s record: version %d header %d, expected %d/%d", kind, rec.version, rec.header_size,
                        version, size)
            return rec, DoneStatus.BAD_VERSION
        if rec.seq <= self.last_seq:
            log.warning("ignoring stale/duplicate %s seq=%d (last accepted %d)", kind, rec.seq, self.last_seq)
            return None
        self.last_seq = rec.seq
        if rec.op not in Op.__members__.values():
            return rec, DoneStatus.BAD_OP
        if rec.n == 0:
            return rec, DoneStatus.BOUNDS
        if rec.n > self.engine.max_n:
            return rec, DoneStatus.TOO_LARGE
        op = Op(rec.op)
        if rec.in_size < input_bytes(op, rec.n) or rec.out_size < output_bytes(op, rec.n):
            return rec, DoneStatus.BOUNDS
        return rec, None

    def _execute(self, op: Op, n: int, data: bytes) -> JobResult:
        result = self.engine.run(op, n, data)
        self.jobs_run += 1
        return result

    def _line(self, prefix: str, seq: int, op: int, n: int, result: JobResult) -> None:
        op_name = Op(op).name if op in Op.__members__.values() else str(op)
        checksum = R.crc32(result.out) if result.out else 0
        self.emit(f'{prefix} seq={seq} op={op_name} n={n} gpu="{self.engine.device}" kernel_ns={result.kernel_ns} '
                  f"status={result.status.name} checksum=0x{checksum:08x} bad={result.bad} "
                  f"out_bytes={len(result.out)}")

    # -- v2 ----------------------------------------------------------------------------------------
    def poll_v2(self, files: V2Files) -> dict | None:
        """Handle the job file's current record; returns the done record written (as a dict) or None."""
        try:
            raw = _pread(files.job, 0, R.SIZE["cubb2_job"])
        except FileNotFoundError:
            return None
        accepted = self._accept(raw, R.SIZE["cubb2_job"], "cubb2_job", 2)
        if accepted is None:
            return None
        rec, status = accepted
        result = JobResult(status) if status is not None else self._run_v2(rec, files)
        seq, op, n = (rec.seq, rec.op, rec.n) if rec is not None else (0, 0, 0)
        if result.status == DoneStatus.OK:
            _pwrite(files.out, rec.out_offset, result.out)
        done = R.new("cbd2_done", status=int(result.status), seq=seq, op=op, n=n, kernel_ns=result.kernel_ns,
                     out_bytes=len(result.out), out_checksum=R.crc32(result.out) if result.out else 0,
                     cuda_error=result.cuda_error, submit_ns=rec.submit_ns if rec is not None else 0)
        _pwrite(files.done, 0, R.pack(done))
        self._line("CUBB2", seq, op, n, result)
        return R.as_dict(done)

    def _run_v2(self, rec, files: V2Files) -> JobResult:
        op = Op(rec.op)
        need_in = input_bytes(op, rec.n)
        in_size = _file_size(files.inp)
        if rec.in_offset + rec.in_size > in_size:
            log.warning("seq=%d: input range %d+%d past the in file (%d bytes)", rec.seq, rec.in_offset,
                        rec.in_size, in_size)
            return JobResult(DoneStatus.BOUNDS)
        if rec.out_offset + rec.out_size > _file_size(files.out):
            log.warning("seq=%d: output range %d+%d past the out file", rec.seq, rec.out_offset, rec.out_size)
            return JobResult(DoneStatus.BOUNDS)
        data = _pread(files.inp, rec.in_offset, rec.in_size)
        if rec.flags & 1 and R.crc32(data) != rec.in_checksum:
            return JobResult(DoneStatus.CHECKSUM)
        return self._execute(op, rec.n, data[:need_in])

    # -- v1 ----------------------------------------------------------------------------------------
    def poll_v1(self, ram: GuestRam, job_gpa: int, done_gpa: int) -> dict | None:
        raw = ram.read(job_gpa, R.SIZE["cubb_job"])
        if raw is None:
            raise ValueError(f"job GPA 0x{job_gpa:x} is outside the guest RAM windows")
        accepted = self._accept(raw, R.SIZE["cubb_job"], "cubb_job", 1)
        if accepted is None:
            return None
        rec, status = accepted
        result = JobResult(status) if status is not None else self._run_v1(rec, ram)
        if result.status == DoneStatus.OK and not ram.write(rec.out_gpa, result.out):
            result = JobResult(DoneStatus.BOUNDS)
        done = R.new("cubd_done", seq=rec.seq, status=int(result.status), cuda_error=result.cuda_error,
                     kernel_ns=result.kernel_ns, out_bytes=len(result.out),
                     out_checksum=R.crc32(result.out) if result.out else 0)
        if not ram.write(done_gpa, R.pack(done)):
            raise ValueError(f"done GPA 0x{done_gpa:x} is outside the guest RAM windows")
        self._line("CUBB", rec.seq, rec.op, rec.n, result)
        return R.as_dict(done)

    def _run_v1(self, rec, ram: GuestRam) -> JobResult:
        op = Op(rec.op)
        if ram.resolve(rec.out_gpa, rec.out_size) is None:
            return JobResult(DoneStatus.BOUNDS)
        data = ram.read(rec.in_gpa, rec.in_size)
        if data is None:
            log.warning("seq=%d: input GPA range 0x%x+%d is outside the RAM windows", rec.seq, rec.in_gpa,
                        rec.in_size)
            return JobResult(DoneStatus.BOUNDS)
        return self._execute(op, rec.n, data[: input_bytes(op, rec.n)])


@attrs.frozen
class BridgeConfig:
    backend: str = "auto"
    v2: V2Files | None = None
    ram: str | None = None
    windows: tuple[Window, ...] = ()
    job_gpa: int = 0x1000
    done_gpa: int | None = None
    poll_interval: float = 0.002
    once: bool = False
    max_n: int = 1 << 26


def make_engine(config: BridgeConfig, backend=None) -> Engine:
    from rgpu.backends.factory import make_backend

    return Engine(backend or make_backend(config.backend), max_n=config.max_n)


async def run_bridge(config: BridgeConfig, *, backend=None, task_status=trio.TASK_STATUS_IGNORED) -> None:
    """The daemon loop as a trio task: file reads are tiny and stay on the event loop; jobs run in a
    worker thread, so the loop (and a server sharing it) never waits for the GPU."""
    engine = await trio.to_thread.run_sync(make_engine, config, backend)
    bridge = Bridge(engine)
    if config.v2 is not None:
        where = f"job file {config.v2.job}"
        def poll():
            return bridge.poll_v2(config.v2)
    else:
        ram = GuestRam(config.ram, list(config.windows) or None)
        done_gpa = config.done_gpa if config.done_gpa is not None else config.job_gpa + R.SIZE["cubb_job"]
        where = f"guest RAM {config.ram} (job GPA 0x{config.job_gpa:x}, done GPA 0x{done_gpa:x})"
        def poll():
            return bridge.poll_v1(ram, config.job_gpa, done_gpa)
    log.info("bridge running on %s, watching %s", engine.device, where)
    task_status.started(bridge)
    try:
        while True:
            done = await trio.to_thread.run_sync(poll)
            if done is not None and config.once:
                return
            await trio.sleep(config.poll_interval)
    finally:
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(engine.close)


def parse_window(text: str) -> Window:
    """GPA:SIZE:OFFSET, each in any base int() accepts (0x...)."""
    parts = text.split(":")
    if len(parts) != 3:
        raise ValueError(f"--gpa-window wants GPA:SIZE:OFFSET, got {text!r}")
    return Window(*(int(p, 0) for p in parts))
