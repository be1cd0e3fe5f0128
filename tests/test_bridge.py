"""The bridge on the fake backend: every self-test case, the mutation test, a live daemon fed by an external
producer, hostile records, and the bridge running inside rgpu-server."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rgpu.bridge import records as R
from rgpu.bridge.daemon import Bridge, GuestRam, Window
from rgpu.bridge.engine import Engine
from rgpu.bridge.records import DoneStatus, Op
from rgpu.bridge.selftest import V2Producer, mutation_test, self_test
from rgpu.backends.fake import FakeBackend


@pytest.fixture(scope="module")
def engine():
    e = Engine(FakeBackend())
    yield e
    e.close()


def test_every_self_test_case(engine):
    lines = []
    results = self_test(engine, emit=lines.append)
    assert len(results) >= 20
    failed = [r for r in results if not r.ok]
    assert not failed, failed
    assert any('op=VADD' in line and "status=OK" in line and "bad=0" in line for line in lines)
    assert sum(line.startswith("CUBB ") for line in lines) >= 5


def test_mutation_test(engine):
    results = mutation_test(engine, n=1 << 14, emit=lambda line: None)
    assert [r.ok for r in results] == [True, True]


def test_greppable_line_format(engine, tmp_path):
    lines = []
    prod = V2Producer(str(tmp_path))
    a = np.arange(256, dtype=np.float32)
    prod.submit(op=Op.VADD, n=256, payload=a.tobytes() * 2)
    Bridge(engine, emit=lines.append).poll_v2(prod.files)
    (line,) = lines
    pattern = (r'^CUBB2 seq=1 op=VADD n=256 gpu="rgpu fake GPU 0" kernel_ns=\d+ status=OK checksum=0x[0-9a-f]{8} '
               r"bad=0 out_bytes=1024$")
    import re

    assert re.match(pattern, line), line
    done = prod.done()
    assert done["out_checksum"] == R.crc32(prod.output(1024)) and done["out_bytes"] == 1024


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(min_size=0, max_size=120), st.integers(0, 2**64 - 1), st.integers(0, 2**32 - 1),
       st.integers(0, 2**32 - 1), st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1))
def test_hostile_v2_records_never_crash(engine, tmp_path_factory, noise, seq, op, n, off, size):
    tmp = tmp_path_factory.mktemp("hostile")
    prod = V2Producer(str(tmp), in_size=4096, out_size=4096)
    bridge = Bridge(engine, emit=lambda line: None)
    rec = R.new("cubb2_job", seq=seq or 1, op=op % 5, n=n % (1 << 28), in_offset=off, in_size=size,
                out_offset=size, out_size=off)
    for data in (noise, R.pack(rec), R.pack(rec)[:50] + noise):
        with open(prod.files.job, "wb") as f:
            f.write(data)
        done = bridge.poll_v2(prod.files)
        if done is not None:
            assert done["status"] in {s.value for s in DoneStatus}
            if done["status"] == DoneStatus.OK:  # only a well-formed, in-bounds job can succeed
                assert os.path.getsize(prod.files.out) == 4096


def test_truncated_ram_file_and_offsets_past_it(engine, tmp_path):
    ram_path = tmp_path / "ram"
    ram_path.write_bytes(b"\0" * 8192)
    # The windows claim 1 MiB, the file holds 8 KiB: anything past the file is BOUNDS, never a crash.
    ram = GuestRam(str(ram_path), [Window(0, 1 << 20, 0)])
    bridge = Bridge(engine, emit=lambda line: None)
    ram.write(0x100, b"hello")
    rec = R.new("cubb_job", seq=1, op=Op.MAIL, n=5, in_gpa=0x100, in_size=5, out_gpa=0x9000, out_size=5)
    ram.write(0x1000, R.pack(rec))
    assert bridge.poll_v1(ram, 0x1000, 0x1040)["status"] == DoneStatus.BOUNDS
    rec = R.new("cubb_job", seq=2, op=Op.MAIL, n=5, in_gpa=2**63, in_size=2**63, out_gpa=0x200, out_size=5)
    ram.write(0x1000, R.pack(rec))
    assert bridge.poll_v1(ram, 0x1000, 0x1040)["status"] == DoneStatus.BOUNDS
    with pytest.raises(ValueError, match="outside"):
        bridge.poll_v1(ram, 0x100000, 0x1040)


def _wait_for_done(prod: V2Producer, seq: int, timeout: float = 20) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if os.path.getsize(prod.files.done) >= R.SIZE["cbd2_done"]:
            done = prod.done()
            if done["seq"] == seq:
                return done
        time.sleep(0.005)
    raise AssertionError(f"no done record for seq {seq}")


def test_external_producer_against_a_running_daemon(tmp_path):
    prod = V2Producer(str(tmp_path))
    proc = subprocess.Popen([sys.executable, "-m", "rgpu.cli", "bridge", "--backend", "fake", "--job",
                             prod.files.job, "--in", prod.files.inp, "--out", prod.files.out, "--done",
                             prod.files.done, "--poll-ms", "1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        rng = np.random.default_rng(0)
        for i in range(10):
            n = int(rng.integers(1, 50_000))
            if i % 2:
                msg = rng.integers(0, 256, n, dtype=np.uint8).tobytes()
                seq = prod.submit(op=Op.MAIL, n=n, payload=msg)
                done = _wait_for_done(prod, seq)
                assert done["status"] == DoneStatus.OK and prod.output(n) == msg
            else:
                a, b = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
                seq = prod.submit(op=Op.VADD, n=n, payload=a.tobytes() + b.tobytes())
                done = _wait_for_done(prod, seq)
                assert done["status"] == DoneStatus.OK
                assert np.array_equal(np.frombuffer(prod.output(4 * n), np.float32), a + b)
        seq = prod.submit(op=Op.MAIL, n=10, payload=b"0123456789", bad_checksum=True)
        assert _wait_for_done(prod, seq)["status"] == DoneStatus.CHECKSUM
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert out.count("CUBB2 seq=") == 11 and out.count("status=OK") == 10


def test_once_mode_handles_one_job_and_exits(tmp_path):
    prod = V2Producer(str(tmp_path))
    prod.submit(op=Op.MAIL, n=5, payload=b"hello")
    proc = subprocess.run([sys.executable, "-m", "rgpu.cli", "bridge", "--backend", "fake", "--once", "--job",
                           prod.files.job, "--in", prod.files.inp, "--out", prod.files.out, "--done",
                           prod.files.done], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "CUBB2 seq=1 op=MAIL n=5" in proc.stdout and prod.output(5) == b"hello"


def test_bridge_inside_rgpu_server_shares_its_shutdown(tmp_path):
    prod = V2Producer(str(tmp_path))
    proc = subprocess.Popen([sys.executable, "-m", "rgpu.cli", "server", "--port", "0", "--backend", "fake",
                             "--bridge-job", prod.files.job, "--bridge-in", prod.files.inp, "--bridge-out",
                             prod.files.out, "--bridge-done", prod.files.done], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        seq = prod.submit(op=Op.MAIL, n=6, payload=b"server")
        assert _wait_for_done(prod, seq)["status"] == DoneStatus.OK
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "CUBB2 seq=1 op=MAIL n=6" in out and "server stopped" in err


def test_incomplete_bridge_options_are_refused(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "rgpu.cli", "server", "--port", "0", "--backend", "fake",
                           "--bridge-job", str(tmp_path / "job")], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "go together" in proc.stderr


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc to regenerate")
def test_committed_ptx_is_what_the_sources_compile_to(tmp_path):
    import pathlib

    from rgpu.kernels import build

    sources = build.sources(pathlib.Path(__file__).parents[1])
    assert len(sources) == 2 and all(s.exists() for s in sources)
    for src in sources:
        out = tmp_path / build.ptx_path(src).name
        build.compile_ptx(src, out)
        assert out.read_bytes() == build.ptx_path(src).read_bytes(), f"{src} changed: run python -m rgpu.kernels.build"
