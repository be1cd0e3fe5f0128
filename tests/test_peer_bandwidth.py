"""bench/peer_bandwidth.py and its CUDA program on two fake devices (issue 19's two-GPU run, as far as no GPU
allows): every peer copy checked, the comparison table, and the teardown check seeing the held memory and its
return when the programs holding it are killed."""

from __future__ import annotations

import importlib.util
import json
import pathlib
import shutil
import subprocess
import sys

import pytest

from rgpu.cli import local_server

ROOT = pathlib.Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "bench" / "peer_bandwidth.py"


def _bench():
    spec = importlib.util.spec_from_file_location("peer_bandwidth", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_lines_are_parsed_and_compared():
    bench = _bench()
    native = bench.parse_copies("devices: 2\n"
                                "peer 0->1 bytes=1048576 reps=200 wall_GBps=40.000 event_GBps=45.500 check=OK\n"
                                "peer 1->0 bytes=1048576 reps=200 wall_GBps=50.000 event_GBps=51.000 check=OK\n")
    rgpu = bench.parse_copies("peer 1->0 bytes=1048576 reps=200 wall_GBps=25.000 event_GBps=50.000 check=OK\n"
                              "peer 0->1 bytes=1048576 reps=200 wall_GBps=10.000 event_GBps=45.000 check=BAD\n")
    rows = bench.compare(native, rgpu)
    assert [(r["src"], r["dst"], r["ratio"]) for r in rows] == [(0, 1, 0.25), (1, 0, 0.5)]
    assert rows[0]["rgpu"]["check"] == "BAD" and rows[1]["native"]["event_GBps"] == 51.0
    assert bench.compare({}, rgpu)[0]["ratio"] is None
    assert "0.250" in bench.table(rows) and "BAD/OK" in bench.table(rows)
    assert bench.parse_meminfo("meminfo device 1 free=10 total=20\n") == {1: (10, 20)}
    assert bench.parse_size("64K") == 65536 and bench.parse_size("2m") == 2 << 20
    with pytest.raises(Exception, match="bad size"):
        bench.parse_size("0")


@pytest.fixture(scope="module")
def program(shim_dir, tmp_path_factory):
    if shutil.which("nvcc") is None:
        pytest.skip("needs nvcc to build bench/peer_bandwidth.cu")
    exe = tmp_path_factory.mktemp("peer") / "peer_bandwidth"
    subprocess.run(["nvcc", "-cudart", "shared", "-o", str(exe), str(ROOT / "bench" / "peer_bandwidth.cu")],
                   check=True, capture_output=True, timeout=300)
    return exe


def test_peer_copies_and_teardown_on_two_fake_devices(shim_dir, program, tmp_path):
    # Thread isolation: the sessions share one fake backend, so one session sees what the others hold (as on a
    # GPU), and the teardown check can see the memory the killed sessions held.
    out = tmp_path / "peer.json"
    with local_server("fake", ["--fake-devices", "2", "--isolation", "thread", "--log-level", "warning"]) as address:
        proc = subprocess.run([sys.executable, str(SCRIPT), "--server", address, "--shims", str(shim_dir),
                               "--exe", str(program), "--no-native", "--sizes", "4K,1M", "--teardown",
                               "--json", str(out)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "peer bandwidth: OK" in proc.stdout and "devices: 2; copying between 0 and 1" in proc.stderr
    results = json.loads(out.read_text())
    assert {(r["src"], r["dst"], r["bytes"]) for r in results["copies"]} == {
        (s, d, n) for s, d in ((0, 1), (1, 0)) for n in (4096, 1 << 20)}
    assert all(r["rgpu"]["check"] == "OK" and r["rgpu"]["wall_GBps"] > 0 for r in results["copies"])
    view = results["teardown"]["rgpu"]
    for dev in ("0", "1"):
        before, during, after = (view[k][dev][0] for k in ("before", "during", "after"))
        assert during <= before - 2 * (64 << 20)  # two sessions held 64 MiB each on this device
        assert after == before
    assert results["teardown"]["ok"]
