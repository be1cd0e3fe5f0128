"""Benchmark aids of rgpu-server: per-session counters in --stats-file, and --inject-rtt-us holding replies."""

import json
import pathlib
import sys
import time

import pytest
import trio

from .conftest import running_server


async def test_stats_file_counts_blocking_and_deferred_calls(tmp_path):
    stats = tmp_path / "stats.jsonl"
    async with running_server(stats_file=str(stats)) as s:
        c = await s.connect()
        ptr = await c.mem_alloc(4096)
        for _ in range(5):
            await c.memset_d8_async(ptr, 1, 4096)  # deferred: no reply
        await c.synchronize()
        await c.nop()
        await c.aclose()
        with trio.fail_after(30):
            while not stats.exists() or not stats.read_text().strip():
                await trio.sleep(0.05)
    (record,) = [json.loads(line) for line in stats.read_text().splitlines()]
    # mem_alloc, synchronize, nop (GOODBYE's confirmation is not a call); the 5 memsets went without replies.
    assert record["blocking"] >= 3 and record["deferred"] >= 5
    assert record["calls"] == record["blocking"] + record["deferred"]
    assert record["bytes_in"] > 0 and record["bytes_out"] > 0 and record["cpu_s"] > 0


async def test_injected_round_trip_time_holds_every_reply():
    async with running_server(inject_rtt_us=20_000) as s:
        c = await s.connect()
        start = time.perf_counter()
        for _ in range(5):
            await c.nop()
        assert time.perf_counter() - start >= 5 * 0.020  # a lower bound only: never flaky on a slow machine
        await c.aclose()


_MARKED_CHILD = """
import ctypes, sys
cu = ctypes.CDLL(sys.argv[1])
dev, ctx, ptr = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_uint64()
assert cu.cuInit(0) == 0 and cu.cuDeviceGet(ctypes.byref(dev), 0) == 0
assert cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) == 0 and cu.cuCtxSetCurrent(ctx) == 0
assert cu.cuMemAlloc_v2(ctypes.byref(ptr), 4096) == 0
import time
time.sleep(float(sys.argv[2]) if len(sys.argv) > 2 else 0)  # the worker waits for us meanwhile
def mark(where):
    print("MARK " + where, flush=True)
    sys.stdin.readline()
mark("start")
for _ in range(7):
    assert cu.cuMemsetD8Async(ptr, 1, 4096, None) == 0
assert cu.cuCtxSynchronize() == 0
mark("end")
print('RESULT {"ms": 1.0, "check": 0.0}')
"""


def _bench_script(name):
    """bench/<name>.py, as a module (it is a script, not a package's)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, pathlib.Path(__file__).parents[1] / f"bench/{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _workloads():
    return _bench_script("workloads")


def test_workloads_harness_reads_the_counters_of_the_running_session_at_the_childs_marks(shim_dir, tmp_path):
    # bench/workloads.py's per-step figures: the server's counters read at the start and the end of the timed steps,
    # inside one session, so set-up costs are outside the difference.
    from rgpu import shims

    workloads = _workloads()
    child = tmp_path / "child.py"
    child.write_text(_MARKED_CHILD)
    server = workloads.Server(0, backend="fake")
    try:
        env = shims.environment(shim_dir)
        env["RGPU_SERVER"] = server.address
        output, marks = workloads._run_marked([sys.executable, str(child), str(shim_dir / "libcuda.so.1"), "0.5"],
                                              env, server)
    finally:
        server.close()
    assert "RESULT" in output and len(marks) == 2, output
    a, b = marks
    assert workloads._per_step(a, b, "calls_by_op", 7) == {"MEMSET_D8_ASYNC": 1.0, "CTX_SYNCHRONIZE": round(1 / 7, 2)}
    assert b["blocking"] - a["blocking"] == 1 and b["deferred"] - a["deferred"] == 7
    assert b["bytes_in"] > a["bytes_in"] and b["seconds_by_op"]["MEMSET_D8_ASYNC"] > 0
    # the loop's turns between the marks: waiting for the child and running its calls both took time
    assert all(b["loop_s"][k] > a["loop_s"][k] for k in ("receive", "run", "reply")), (a["loop_s"], b["loop_s"])
    # the worker had waited 0.5 s for the child when the first mark was read: that wait belongs before it
    assert 0 < b["wait_s"] - a["wait_s"] < 0.4, (a["wait_s"], b["wait_s"])


def test_workloads_rounds_report_the_median_measurement_of_each_side():
    workloads = _workloads()
    rounds = [({"ms": 2.8}, {"ms": 3.0, "blocking_per_step": 1}), ({"ms": 1.5}, {"ms": 2.9, "blocking_per_step": 2}),
              ({"ms": 2.0}, {"ms": 3.1, "blocking_per_step": 3})]
    native, remote = workloads._median_round(rounds)
    assert native == {"ms": 2.0} and remote == {"ms": 3.0, "blocking_per_step": 1}  # (its counters with it)


def test_workloads_main_runs_rounds_alternately_and_prints_the_medians(tmp_path, monkeypatch, capsys):
    workloads = _workloads()
    (tmp_path / "libcuda.so.1").write_bytes(b"")
    order, times = [], iter([2.8, 3.0, 1.5, 2.9, 2.0, 3.1])

    def measure(name, server, steps, warmup, shims):
        order.append("rgpu" if server else "native")
        return {"ms": next(times), "check": 1.0}

    class NoServer:
        def __init__(self, rtt):
            pass

        def close(self):
            pass

    monkeypatch.setattr(workloads, "measure", measure)
    monkeypatch.setattr(workloads, "Server", NoServer)
    assert workloads.main(["--only", "resnet18_b1", "--rounds", "3", "--shims", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert order == ["native", "rgpu"] * 3
    assert "resnet18_b1" in out and "2.00       3.00   1.50x" in out, out
    assert "2.80 3.00 1.07x, 1.50 2.90 1.93x, 2.00 3.10 1.55x" in out, out


@pytest.mark.parametrize("c_tcp", [False, True])
def test_ab_summary_gives_each_variant_its_median_round_and_its_distance_from_base(tmp_path, c_tcp):
    def run(variant, round_, native, batched):
        row = lambda x: {k: x for k in ("h2d_1m_gbps", "d2h_1m_gbps", "h2d_gbps", "d2h_gbps")}
        rows = {"native driver": row(native), "rgpu batched": row(batched)}
        if c_tcp:  # (the reference when every run has it: here half the native rate)
            rows["C TCP"] = row(native / 2)
        (tmp_path / f"v{variant}-r{round_}.json").write_text(json.dumps(rows))

    for round_, (native, base, patched) in enumerate([(8.0, 4.0, 6.0), (4.0, 2.0, 5.0), (6.0, 3.0, 30.0)], 1):
        run(0, round_, native, base)
        run(1, round_, native, patched)
    for round_ in range(10, 12):  # (rounds in number order, not the files' name order: r10 after r3)
        run(0, round_, 6.0, 3.0)
        run(1, round_, 6.0, 6.0)
    lines = _bench_script("ab_summary").summary(str(tmp_path), ["base", "bench/x.patch"]).splitlines()
    assert [line.split()[:2] for line in lines[:5]] == [["base", f"r{i}"] for i in (1, 2, 3, 10, 11)], lines
    (base_line,) = [line for line in lines if line.startswith("rgpu batched") and "base " in line]
    (patch_line,) = [line for line in lines if line.startswith("rgpu batched") and "x.patch" in line]
    # (medians: the patch's one wild round ignored)
    assert f"5 rounds  3.00  3.00  3.00  3.00 |  {1.0 if c_tcp else 0.5:.2f}" in base_line, base_line
    assert "5 rounds  6.00" in patch_line and "vs base: +100.0%" in patch_line, patch_line
    medians = lines[lines.index(next(line for line in lines if line.startswith("medians"))):]
    assert len(medians) == 3 and medians[0].endswith("C TCP" if c_tcp else "native driver"), medians

