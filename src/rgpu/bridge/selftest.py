"""`rgpu bridge --self-test | --mutation-test | --bench`: the bridge checked end to end on plain files."""

from __future__ import annotations

import os
import tempfile
import time
from typing import Callable

import attrs
import numpy as np

from rgpu.bridge import records as R
from rgpu.bridge.daemon import Bridge, GuestRam, V2Files, Window
from rgpu.bridge.engine import Engine
from rgpu.bridge.records import DoneStatus, Op

LOW_WINDOW = 1 << 20  # self-test guest RAM: 1 MiB low RAM at GPA 0 ...
HIGH_GPA = 1 << 32  # ... and 1 MiB high RAM at GPA 4 GiB, stored right after it in the file
JOB_GPA, DONE_GPA = 0x1000, 0x1040


@attrs.frozen
class CaseResult:
    name: str
    expected: str
    got: str

    @property
    def ok(self) -> bool:
        return self.expected == self.got


class V2Producer:
    """Writes jobs the way a guest-side producer does (the job record last, replaced atomically)."""

    def __init__(self, directory: str, in_size: int = 1 << 22, out_size: int = 1 << 22):
        self.files = V2Files(*(os.path.join(directory, name) for name in ("job", "in", "out", "done")))
        for path, size in ((self.files.inp, in_size), (self.files.out, out_size), (self.files.done, 0)):
            with open(path, "wb") as f:
                f.truncate(size)
        self.seq = 0

    def submit(self, op: int, n: int, payload: bytes, *, seq: int | None = None, checksum: bool = True,
               bad_checksum: bool = False, in_offset: int = 0, out_offset: int = 0, in_size: int | None = None,
               out_size: int | None = None, store_payload: bool = True,
               mangle: Callable[[bytes], bytes] | None = None) -> int:
        """Write `payload` to the in file and a job record for it; `mangle` edits the record's bytes (bad
        magic, truncation...). Returns the seq used."""
        if store_payload:
            with open(self.files.inp, "r+b") as f:
                f.seek(in_offset)
                f.write(payload)
        if seq is None:
            self.seq += 1
            seq = self.seq
        crc = R.crc32(payload) ^ (1 if bad_checksum else 0)
        rec = R.new("cubb2_job", seq=seq, op=op, n=n, in_offset=in_offset,
                    in_size=len(payload) if in_size is None else in_size, out_offset=out_offset,
                    out_size=(n * 4 if op != Op.MAIL else n) if out_size is None else out_size,
                    flags=1 if checksum else 0, in_checksum=crc, submit_ns=time.monotonic_ns())
        data = R.pack(rec) if mangle is None else mangle(R.pack(rec))
        tmp = self.files.job + ".tmp"
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, self.files.job)
        return seq

    def done(self) -> dict:
        with open(self.files.done, "rb") as f:
            return R.as_dict(R.unpack("cbd2_done", f.read()))

    def output(self, nbytes: int, offset: int = 0) -> bytes:
        with open(self.files.out, "rb") as f:
            f.seek(offset)
            return f.read(nbytes)


def _vectors(n: int, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)


def _v1_ram(directory: str) -> GuestRam:
    path = os.path.join(directory, "ram")
    with open(path, "wb") as f:
        f.truncate(2 * LOW_WINDOW)
    return GuestRam(path, [Window(0, LOW_WINDOW, 0), Window(HIGH_GPA, LOW_WINDOW, LOW_WINDOW)])


def _v1_job(ram: GuestRam, seq: int, op: int, n: int, in_gpa: int, payload: bytes, out_gpa: int,
            out_size: int | None = None, in_size: int | None = None) -> None:
    ram.write(in_gpa, payload) if ram.resolve(in_gpa, len(payload)) is not None else None
    rec = R.new("cubb_job", seq=seq, op=op, n=n, in_gpa=in_gpa,
                in_size=len(payload) if in_size is None else in_size, out_gpa=out_gpa,
                out_size=(4 * n if op != Op.MAIL else n) if out_size is None else out_size)
    assert ram.write(JOB_GPA, R.pack(rec))


def self_test(engine: Engine, emit: Callable[[str], None] = print) -> list[CaseResult]:
    results: list[CaseResult] = []
    with tempfile.TemporaryDirectory(prefix="rgpu-bridge-") as tmp:
        os.makedirs(os.path.join(tmp, "v2"))
        prod = V2Producer(os.path.join(tmp, "v2"))
        bridge = Bridge(engine, emit=emit)

        def v2(name, expected: DoneStatus, check_output: Callable[[], bool] | None = None, **job):
            prod.submit(**job)
            done = bridge.poll_v2(prod.files)
            got = DoneStatus(done["status"]).name if done else "NO-DONE-RECORD"
            if got == "OK" and check_output is not None and not check_output():
                got = "OK-BUT-WRONG-OUTPUT"
            results.append(CaseResult(name, expected.name, got))

        message = b"hello from the guest, via the GPU\0" * 31
        v2("v2 mail round trip", DoneStatus.OK, lambda: prod.output(len(message)) == message,
           op=Op.MAIL, n=len(message), payload=message)
        a, b = _vectors(1 << 16)
        v2("v2 vadd", DoneStatus.OK, lambda: np.array_equal(np.frombuffer(prod.output(a.nbytes), np.float32), a + b),
           op=Op.VADD, n=a.size, payload=a.tobytes() + b.tobytes())
        v2("v2 vadd at offsets", DoneStatus.OK,
           lambda: np.array_equal(np.frombuffer(prod.output(a.nbytes, 4096), np.float32), a + b),
           op=Op.VADD, n=a.size, payload=a.tobytes() + b.tobytes(), in_offset=8192, out_offset=4096)
        # A stale seq is ignored: no done record is written for it.
        before = prod.done()
        prod.submit(op=Op.MAIL, n=4, payload=b"late", seq=1)
        stale = bridge.poll_v2(prod.files)
        results.append(CaseResult("v2 stale seq ignored", "IGNORED",
                                  "IGNORED" if stale is None and prod.done() == before else "PROCESSED"))
        prod.submit(op=Op.MAIL, n=4, payload=b"dupe", seq=prod.seq)
        results.append(CaseResult("v2 duplicate seq ignored", "IGNORED",
                                  "IGNORED" if bridge.poll_v2(prod.files) is None else "PROCESSED"))
        v2("v2 bad magic", DoneStatus.BAD_MAGIC, op=Op.MAIL, n=4, payload=b"abcd",
           mangle=lambda rec: b"NOTAJOB!" + rec[8:])
        v2("v2 unknown version", DoneStatus.BAD_VERSION, op=Op.MAIL, n=4, payload=b"abcd",
           mangle=lambda rec: rec[:8] + b"\x03" + rec[9:])
        v2("v2 truncated record", DoneStatus.TRUNCATED, op=Op.MAIL, n=4, payload=b"abcd",
           mangle=lambda rec: rec[:40])
        v2("v2 unknown op (failure path)", DoneStatus.BAD_OP, op=77, n=4, payload=b"abcd", out_size=4)
        v2("v2 checksum mismatch (failure path)", DoneStatus.CHECKSUM, op=Op.MAIL, n=4, payload=b"abcd",
           bad_checksum=True)
        v2("v2 input past the in file", DoneStatus.BOUNDS, op=Op.MAIL, n=16, payload=b"x" * 16,
           in_offset=(1 << 22) - 8, store_payload=False)
        v2("v2 output past the out file", DoneStatus.BOUNDS, op=Op.MAIL, n=16, payload=b"x" * 16,
           out_offset=(1 << 22) - 8)
        v2("v2 huge offset", DoneStatus.BOUNDS, op=Op.MAIL, n=16, payload=b"x" * 16, in_offset=2**63,
           store_payload=False)
        v2("v2 sizes too small for n", DoneStatus.BOUNDS, op=Op.VADD, n=1000, payload=b"x" * 100)
        v2("v2 n = 0", DoneStatus.BOUNDS, op=Op.MAIL, n=0, payload=b"", out_size=0)
        v2("v2 n above the limit", DoneStatus.TOO_LARGE, op=Op.VADD, n=engine.max_n + 1, payload=b"x" * 8,
           in_size=8 * (engine.max_n + 1), out_size=4 * (engine.max_n + 1))

        # -- v1: guest RAM with a low and a high window ------------------------------------------------
        ram = _v1_ram(tmp)
        v1_bridge = Bridge(engine, emit=emit)

        def v1(name, expected: DoneStatus, check=None, **job):
            _v1_job(ram, **job)
            done = v1_bridge.poll_v1(ram, JOB_GPA, DONE_GPA)
            got = DoneStatus(done["status"]).name if done else "NO-DONE-RECORD"
            if got == "OK" and check is not None and not check():
                got = "OK-BUT-WRONG-OUTPUT"
            results.append(CaseResult(name, expected.name, got))

        a, b = _vectors(4096, seed=2)
        want = (a + b).tobytes()
        v1("v1 vadd, low GPA window", DoneStatus.OK, lambda: ram.read(0x10000, len(want)) == want,
           seq=1, op=Op.VADD, n=a.size, in_gpa=0x20000, payload=a.tobytes() + b.tobytes(), out_gpa=0x10000)
        v1("v1 vadd, high GPA window", DoneStatus.OK, lambda: ram.read(HIGH_GPA + 0x8000, len(want)) == want,
           seq=2, op=Op.VADD, n=a.size, in_gpa=HIGH_GPA + 0x40000, payload=a.tobytes() + b.tobytes(),
           out_gpa=HIGH_GPA + 0x8000)
        v1("v1 mail", DoneStatus.OK, lambda: ram.read(0x30000, 11) == b"v1 mailbox!", seq=3, op=Op.MAIL, n=11,
           in_gpa=0x31000, payload=b"v1 mailbox!", out_gpa=0x30000)
        v1("v1 input GPA in the hole between windows", DoneStatus.BOUNDS, seq=4, op=Op.MAIL, n=16,
           in_gpa=LOW_WINDOW + 0x1000, payload=b"x" * 16, out_gpa=0x30000)
        v1("v1 input straddling a window end", DoneStatus.BOUNDS, seq=5, op=Op.MAIL, n=64,
           in_gpa=LOW_WINDOW - 32, payload=b"x" * 32, in_size=64, out_gpa=0x30000)
        v1("v1 output GPA past the RAM file", DoneStatus.BOUNDS, seq=6, op=Op.MAIL, n=16, in_gpa=0x31000,
           payload=b"x" * 16, out_gpa=HIGH_GPA + LOW_WINDOW - 8)
        _v1_job(ram, seq=2, op=Op.MAIL, n=4, in_gpa=0x31000, payload=b"late", out_gpa=0x30000)
        results.append(CaseResult("v1 stale seq ignored", "IGNORED",
                                  "IGNORED" if v1_bridge.poll_v1(ram, JOB_GPA, DONE_GPA) is None else "PROCESSED"))
    return results


def mutation_test(engine: Engine, n: int = 1 << 20, emit: Callable[[str], None] = print) -> list[CaseResult]:
    """vadd gives a + b; vadd_mutated gives a + b + 1 in every element. Only the device kernels know the
    difference, so matching results prove the real kernels ran."""
    results = []
    a, b = _vectors(n, seed=3)
    with tempfile.TemporaryDirectory(prefix="rgpu-bridge-") as tmp:
        prod = V2Producer(tmp, in_size=8 * n, out_size=4 * n)
        bridge = Bridge(engine, emit=emit)
        for op, want in ((Op.VADD, a + b), (Op.VADD_MUTATED, a + b + np.float32(1))):
            prod.submit(op=op, n=n, payload=a.tobytes() + b.tobytes())
            done = bridge.poll_v2(prod.files)
            got = np.frombuffer(prod.output(4 * n), np.float32)
            mismatched_vs_plain = int(np.count_nonzero(got != a + b))
            ok = done["status"] == DoneStatus.OK and np.array_equal(got, want)
            expected_diff = 0 if op == Op.VADD else n
            results.append(CaseResult(f"{op.name}: output as expected, {mismatched_vs_plain} of {n} differ from a+b",
                                      f"True/{expected_diff}", f"{ok}/{mismatched_vs_plain}"))
    return results


def bench(engine: Engine, sizes=(1 << 20, 1 << 24), repeats: int = 5, emit: Callable[[str], None] = print) -> list[dict]:
    """Kernel time from CUDA events vs the same vadd on the CPU (numpy), best of `repeats`."""
    rows = []
    quiet = lambda line: None  # noqa: E731 - the per-job lines would drown the table
    for n in sizes:
        a, b = _vectors(n, seed=4)
        with tempfile.TemporaryDirectory(prefix="rgpu-bridge-") as tmp:
            prod = V2Producer(tmp, in_size=8 * n, out_size=4 * n)
            bridge = Bridge(engine, emit=quiet)
            kernel, job = [], []
            for _ in range(repeats):
                prod.submit(op=Op.VADD, n=n, payload=a.tobytes() + b.tobytes(), checksum=False)
                t0 = time.perf_counter_ns()
                done = bridge.poll_v2(prod.files)
                job.append(time.perf_counter_ns() - t0)
                assert done["status"] == DoneStatus.OK, done
                kernel.append(done["kernel_ns"])
            cpu = []
            out = np.empty_like(a)
            for _ in range(repeats):
                t0 = time.perf_counter_ns()
                np.add(a, b, out=out)
                cpu.append(time.perf_counter_ns() - t0)
        row = {"n": n, "gpu_kernel_ns": min(kernel), "job_ns": min(job), "cpu_ns": min(cpu)}
        row["speedup_kernel_vs_cpu"] = row["cpu_ns"] / max(row["gpu_kernel_ns"], 1)
        gbps = 12 * n / max(row["gpu_kernel_ns"], 1)
        emit(f'BENCH vadd n={n} gpu="{engine.device}" kernel_ns={row["gpu_kernel_ns"]} ({gbps:.0f} GB/s) '
             f'cpu_ns={row["cpu_ns"]} speedup={row["speedup_kernel_vs_cpu"]:.1f}x job_ns={row["job_ns"]} '
             f'(copies, files and checks included)')
        rows.append(row)
    return rows
