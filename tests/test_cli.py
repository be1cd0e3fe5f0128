"""The real `rgpu-server` process: startup rules, clean shutdown, the blocking client, `rgpu demo`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import rgpu
from rgpu.cli import local_server, run_demo
from rgpu.errors import AuthenticationError, CudaError, Status
from rgpu.kernels import load

SERVER = [sys.executable, "-m", "rgpu.cli", "server"]


def test_non_loopback_bind_without_psk_is_refused():
    proc = subprocess.run(SERVER + ["--bind", "0.0.0.0", "--port", "0", "--backend", "fake"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "without a pre-shared key" in proc.stderr and "--insecure" in proc.stderr


def test_short_psk_file_is_refused(tmp_path):
    key = tmp_path / "key"
    key.write_text("0011223344")
    key.chmod(0o600)
    proc = subprocess.run(SERVER + ["--port", "0", "--backend", "fake", "--psk-file", str(key)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "at least 32" in proc.stderr


def test_out_of_range_polling_time_is_refused():
    proc = subprocess.run(SERVER + ["--port", "0", "--backend", "fake", "--spin-us", "-5"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "--spin-us must be between 0 and 1000000" in proc.stderr


def test_server_that_never_polls_still_answers():
    with local_server("fake", ["--spin-us", "0", "--log-level", "warning"]) as address:
        with rgpu.connect(address, spin_us=0) as c:
            assert c.device_count() == 1 and c.mem_get_info()[1] > 0


def test_polling_defaults_to_off_where_the_server_has_one_cpu(tmp_path):
    """On one core a polling worker takes the time the kernel needs to deliver the client's bytes (3.2-3.9 ms a
    token on the H200 box against 0.51 ms not polling): without --spin-us the server polls only with 2 CPUs or
    more, and says so when it does not; an explicit --spin-us stands."""
    from rgpu.serving.server import DEFAULT_SPIN_US, default_spin_us

    assert default_spin_us(1) == 0 and default_spin_us(1.5) == 0 and default_spin_us(2) == DEFAULT_SPIN_US
    said = "do not poll for requests (--spin-us 0)"
    for cpus, args, expected in (({0}, [], True), ({0}, ["--spin-us", "300"], False), ({0, 1}, [], False)):
        if len(os.sched_getaffinity(0) & cpus) < len(cpus):
            continue  # (this machine lacks those cores)
        log = tmp_path / f"server-{len(cpus)}-{len(args)}.log"
        with local_server("fake", ["--log-level", "info", "--log-file", str(log), *args], cpus=cpus) as address:
            with rgpu.connect(address) as c:
                assert c.device_count() == 1
        assert (said in log.read_text()) == expected, (cpus, args, log.read_text())


def test_the_cpu_quota_is_read_from_the_servers_own_cgroup_and_those_above_it(tmp_path):
    """A cgroup v2 quota is in cpu.max of the process's own cgroup (/proc/self/cgroup's "0::" line) or of one
    above it -- at the mount's root only inside a cgroup namespace; the tightest counts, and a root with no cpu.max,
    "max" or a malformed file leave the affinity."""
    from rgpu.serving.server import usable_cpus

    affinity = float(len(os.sched_getaffinity(0)))
    root, proc = tmp_path / "cgroup", tmp_path / "proc-cgroup"
    service = root / "system.slice" / "rgpu.service"
    service.mkdir(parents=True)
    proc.write_text("0::/system.slice/rgpu.service\n")
    assert usable_cpus(str(root), str(proc)) == affinity  # (no cpu.max anywhere, as at a host's root)
    (service / "cpu.max").write_text("50000 100000\n")  # systemd's CPUQuota=50%
    assert usable_cpus(str(root), str(proc)) == min(affinity, 0.5)
    (service / "cpu.max").write_text("max 100000\n")
    (root / "system.slice" / "cpu.max").write_text("30000 100000\n")
    assert usable_cpus(str(root), str(proc)) == min(affinity, 0.3)
    for bad in ("garbage\n", "", "0 100000", "100000 0", "-1 100000", "1 2 3"):
        (root / "system.slice" / "cpu.max").write_text(bad)
        assert usable_cpus(str(root), str(proc)) == affinity, bad
    proc.write_text("0::/../../etc\n")  # (a path out of the mount reads none of it but the root)
    assert usable_cpus(str(root), str(proc)) == affinity
    proc.write_text("0::/\n")  # (in a cgroup namespace: its own cgroup is the mount's root)
    (root / "cpu.max").write_text("100000 100000\n")
    assert usable_cpus(str(root), str(proc)) == min(affinity, 1.0)
    assert usable_cpus(str(root), str(tmp_path / "absent")) == min(affinity, 1.0)  # (no /proc: the root)


def test_sigterm_with_live_sessions_exits_zero_and_frees_them(tmp_path):
    port_file = tmp_path / "port"
    proc = subprocess.Popen(SERVER + ["--port", "0", "--port-file", str(port_file), "--backend", "fake"],
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not port_file.exists():
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        c = rgpu.connect(f"127.0.0.1:{int(port_file.read_text())}")
        c.mem_alloc(1 << 20)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
        with pytest.raises(CudaError) as e:
            c.nop()
        assert e.value.code in (Status.SHUTTING_DOWN, Status.CONNECTION_LOST)
    finally:
        if proc.poll() is None:
            proc.kill()
    log = proc.stderr.read()
    assert "released 1 context" in log and "server stopped" in log


def test_blocking_client_end_to_end_and_sigkilled_client_is_cleaned_up():
    # In-process sessions share one fake device, so one session can watch another's memory come back.
    with local_server("fake", ["--isolation", "thread"]) as address:
        with rgpu.connect(address) as c:
            free0, total = c.mem_get_info()
            mod = c.module_load(load("demo.ptx"))
            fill = c.get_function(mod, "fill")
            p = c.mem_alloc(4096)
            c.launch(fill, 4, 256, (p, 7.5, 1024))
            assert (np.frombuffer(c.memcpy_dtoh(p, 4096), np.float32) == 7.5).all()
            assert c.stream_query(0) is True
            script = textwrap.dedent(f"""
                import os, rgpu
                c = rgpu.connect({address!r})
                c.mem_alloc(64 << 20)
                print("allocated", flush=True)
                os.kill(os.getpid(), 9)
            """)
            child = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
            assert child.returncode == -9 and "allocated" in child.stdout
            # Our own 4096-byte buffer and demo.ptx's 16-byte `counters` global are still held.
            expected_free = free0 - 4096 - 16
            deadline = time.monotonic() + 10
            while c.mem_get_info()[0] != expected_free:
                assert time.monotonic() < deadline, "memory of a SIGKILLed client was not returned"
                time.sleep(0.05)


def test_psk_files_between_real_processes(tmp_path):
    key = tmp_path / "key"
    subprocess.run([sys.executable, "-m", "rgpu.cli", "keygen", str(key)], check=True, timeout=60)
    assert oct(key.stat().st_mode & 0o777) == "0o600"
    other = tmp_path / "other"
    other.write_text(os.urandom(32).hex())
    other.chmod(0o600)
    with local_server("fake", ["--psk-file", str(key)]) as address:
        run_demo(address, psk_file=str(key), n=4096)
        with pytest.raises(AuthenticationError):
            rgpu.connect(address, psk_file=str(other))
        with pytest.raises(AuthenticationError):
            rgpu.connect(address)
        run_demo(address, psk_file=str(key), n=4096)


def test_rgpu_demo_command():
    proc = subprocess.run([sys.executable, "-m", "rgpu.cli", "demo", "--backend", "fake"], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "vadd  n=1048576: OK" in proc.stdout and "saxpy n=1048576: OK" in proc.stdout
    assert "C program through libcuda.so.1 shim: vecadd n=1048576" in proc.stdout and "OK (0 wrong)" in proc.stdout


def test_rgpu_info_reports_a_missing_server_clearly():
    proc = subprocess.run([sys.executable, "-m", "rgpu.cli", "info", "--server", "127.0.0.1:1"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and "rgpu:" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.skipif(os.path.exists("/dev/nvidia0"), reason="this host has a GPU")
@pytest.mark.parametrize("isolation", ["process", "thread"])
def test_cuda_backend_without_a_gpu_is_a_clear_startup_error(isolation):
    proc = subprocess.run(SERVER + ["--port", "0", "--backend", "cuda", "--isolation", isolation],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "cuda backend unavailable" in proc.stderr and "Traceback" not in proc.stderr
