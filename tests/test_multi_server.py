"""Unmodified CUDA programs on several devices through the C stand-ins: two devices of one fake server, and the
devices of two fake servers on 127.0.0.1 in one program (RGPU_SERVER=A,B), one of the servers killed mid-run."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time

import pytest

from rgpu import shims
from rgpu.cli import local_server
from tests.test_cuda_programs import build_program


@pytest.fixture(scope="module")
def programs(shim_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("multi")
    return {name: build_program(shim_dir, out, name) for name in ("multi_device", "server_lost")}


@contextlib.contextmanager
def fake_server(tmp_path, name: str, *args: str):
    """An rgpu-server (fake backend) in a process group of its own, so a test can kill it with its workers."""
    port_file = tmp_path / f"{name}.port"
    proc = subprocess.Popen([sys.executable, "-m", "rgpu.cli", "server", "--backend", "fake", "--port", "0",
                             "--port-file", str(port_file), "--log-level", "warning", *args],
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not port_file.exists() or not port_file.read_text().strip():
            assert proc.poll() is None, f"server {name} exited with {proc.returncode}"
            assert time.monotonic() < deadline, f"server {name} did not start"
            time.sleep(0.05)
        yield f"127.0.0.1:{int(port_file.read_text())}", proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _env(shim_dir, *addresses: str) -> dict:
    env = shims.environment(shim_dir)
    env["RGPU_SERVER"] = ",".join(addresses)
    return env


def test_cuda_program_on_two_devices_of_one_server(shim_dir, programs):
    with local_server("fake", ["--fake-devices", "2", "--log-level", "warning"]) as address:
        proc = subprocess.run([str(programs["multi_device"])], env=_env(shim_dir, address), capture_output=True,
                              text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "multi_device OK devices=2" in proc.stdout
    assert "not supported" not in proc.stderr, proc.stderr


def test_cuda_program_on_the_devices_of_two_servers(shim_dir, programs, tmp_path):
    exe = programs["multi_device"]
    with fake_server(tmp_path, "a") as (a, _), fake_server(tmp_path, "b") as (b, _):
        proc = subprocess.run([str(exe)], env=_env(shim_dir, a, b), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "multi_device OK devices=2" in proc.stdout
    assert "not supported" not in proc.stderr, proc.stderr


def test_devices_are_numbered_across_servers_in_order(shim_dir, programs, tmp_path):
    # Server A has two devices, B one: device 2 is B's device 0, and the program's devices 0 and 1 are both A's.
    exe = programs["multi_device"]
    with fake_server(tmp_path, "a", "--fake-devices", "2") as (a, _), fake_server(tmp_path, "b") as (b, _):
        proc = subprocess.run([str(exe)], env=_env(shim_dir, a, b), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "multi_device OK devices=3" in proc.stdout


def test_a_server_killed_mid_run_fails_only_its_device(shim_dir, programs, tmp_path):
    exe = programs["server_lost"]
    with fake_server(tmp_path, "a") as (a, _), fake_server(tmp_path, "b") as (b, server_b):
        prog = subprocess.Popen([str(exe)], env=_env(shim_dir, a, b), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        try:
            assert prog.stdout.readline().strip() == "READY", prog.stderr.read() if prog.poll() is not None else ""
            os.killpg(server_b.pid, signal.SIGKILL)
            server_b.wait(30)
            out, err = prog.communicate("killed\n", timeout=60)
        finally:
            if prog.poll() is None:
                prog.kill()
    assert prog.returncode == 0, out + err
    assert "server_lost OK" in out
    assert "device 1: cuda" in out  # a named CUDA error


def test_a_server_that_does_not_answer_fails_cuinit_cleanly(shim_dir, programs, tmp_path):
    exe = programs["multi_device"]
    with fake_server(tmp_path, "a") as (a, _):
        proc = subprocess.run([str(exe)], env=_env(shim_dir, a, "127.0.0.1:1"), capture_output=True, text=True,
                              timeout=120)
    assert proc.returncode != 0
    assert "cannot reach rgpu-server at 127.0.0.1:1" in proc.stderr


def test_python_client_over_two_servers(tmp_path):
    import numpy as np

    import rgpu
    from rgpu.errors import CudaError, Status
    from rgpu.kernels import load

    n = 4096
    a = np.arange(n, dtype=np.float32)
    with fake_server(tmp_path, "a", "--fake-devices", "2") as (addr_a, _), \
            fake_server(tmp_path, "b") as (addr_b, server_b):
        with rgpu.connect(f"{addr_a},{addr_b}") as gpu:
            assert gpu.device_count() == 3
            assert [gpu.device_name(d) for d in range(3)] == ["rgpu fake GPU 0", "rgpu fake GPU 1",
                                                               "rgpu fake GPU 0"]
            assert gpu.device_can_access_peer(0, 1) and not gpu.device_can_access_peer(0, 2)
            with pytest.raises(CudaError) as e:
                gpu.set_device(3)
            assert e.value.code == Status.INVALID_DEVICE
            out = {}
            for dev in range(3):
                gpu.set_device(dev)
                vadd = gpu.get_function(gpu.module_load(load("demo.ptx")), "vadd")
                da, dc = gpu.mem_alloc(a.nbytes), gpu.mem_alloc(a.nbytes)
                gpu.memcpy_htod(da, a * (dev + 1))
                gpu.launch(vadd, n // 256, 256, (da, da, dc, n))
                out[dev] = dc
            gpu.set_device(0)
            assert np.array_equal(np.frombuffer(gpu.memcpy_dtoh(out[0], a.nbytes), np.float32), 2 * a)
            gpu.memcpy_peer(out[1], 1, out[0], 0, a.nbytes)  # on server A
            gpu.memcpy_peer(out[2], 2, out[1], 1, a.nbytes)  # A -> here -> B
            gpu.set_device(2)
            assert np.array_equal(np.frombuffer(gpu.memcpy_dtoh(out[2], a.nbytes), np.float32), 2 * a)

            os.killpg(server_b.pid, signal.SIGKILL)
            server_b.wait(30)
            with pytest.raises((CudaError, OSError)):
                gpu.memcpy_dtoh(out[2], a.nbytes)
            gpu.set_device(1)  # server A's devices keep working
            assert np.array_equal(np.frombuffer(gpu.memcpy_dtoh(out[1], a.nbytes), np.float32), 2 * a)


def test_info_and_status_list_the_devices_of_every_server(tmp_path):
    import json

    with fake_server(tmp_path, "a", "--fake-devices", "2") as (a, _), fake_server(tmp_path, "b") as (b, _):
        def rgpu_cli(*args):
            proc = subprocess.run([sys.executable, "-m", "rgpu.cli", *args, "--server", f"{a},{b}"],
                                  capture_output=True, text=True, timeout=120)
            assert proc.returncode == 0, proc.stdout + proc.stderr
            return proc.stdout

        info = rgpu_cli("info")
        assert f"server {a}" in info and f"server {b}" in info
        assert "device 1: rgpu fake GPU 1" in info and "device 2: rgpu fake GPU 0" in info
        reports = json.loads(rgpu_cli("status", "--json"))
        assert [r["address"] for r in reports] == [a, b]
        assert [d["index"] for r in reports for d in r["devices"]] == [0, 1, 2]
        assert all(d["free"] > 0 for r in reports for d in r["devices"])


def test_rgpu_run_takes_a_server_list(shim_dir, programs, tmp_path):
    with fake_server(tmp_path, "a") as (a, _), fake_server(tmp_path, "b") as (b, _):
        proc = subprocess.run([sys.executable, "-m", "rgpu.cli", "run", "--server", f"{a},{b}", "--shims",
                               str(shim_dir), "--", str(programs["multi_device"])], capture_output=True, text=True,
                              timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "multi_device OK devices=2" in proc.stdout


def test_servers_handing_out_the_same_addresses_are_told_apart(shim_dir, programs, tmp_path, monkeypatch):
    # Both fake servers in the same address slot: device 1's first blocks overlap device 0's, so the client
    # keeps them while asking its server again, then gives them back.
    from rgpu.backends import factory

    monkeypatch.setenv(factory.FAKE_SLOT_ENV, "0")
    with fake_server(tmp_path, "a") as (a, _), fake_server(tmp_path, "b") as (b, _):
        env = _env(shim_dir, a, b)
        env["RGPU_LOG"] = "info"
        proc = subprocess.run([str(programs["multi_device"])], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "multi_device OK devices=2" in proc.stdout
    assert "overlapped another server's memory; asked again" in proc.stderr
