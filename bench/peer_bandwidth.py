#!/usr/bin/env python3
"""Peer-copy bandwidth natively and through rgpu, and the teardown check (issue 19).

    python bench/peer_bandwidth.py --server HOST:PORT[,HOST:PORT] [--shims DIR] [--sizes 64K,1M,16M,256M]
                                   [--no-native] [--teardown] [--json FILE]

Builds bench/peer_bandwidth.cu (nvcc -cudart shared), runs it natively (unless --no-native: no GPU here) and
through `rgpu run` against the server(s), and prints per direction and size the host-clock GB/s of both and their
ratio (rgpu / native), with the event-timed GB/s beside it. --teardown then checks that killed sessions give back
every byte: each device's free memory (cudaMemGetInfo, natively and as the server reports it through rgpu)
before two sessions that hold memory on both devices, while they hold it, and after they are killed (SIGKILL)
and the server has ended them; before and after must be equal. Exit status 1 if a copy check, a run or the
teardown check failed.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent
LINE = re.compile(r"peer (\d+)->(\d+) bytes=(\d+) reps=(\d+) wall_GBps=([\d.]+) event_GBps=([\d.]+) check=(\w+)")
MEMINFO = re.compile(r"meminfo device (\d+) free=(\d+) total=(\d+)")
UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def parse_size(text: str) -> int:
    m = re.fullmatch(r"(\d+)([KMG]?)", text.strip().upper())
    if not m or int(m.group(1)) == 0:
        raise argparse.ArgumentTypeError(f"bad size {text!r} (e.g. 4096, 64K, 16M, 1G)")
    return int(m.group(1)) * UNITS[m.group(2)]


def parse_copies(text: str) -> dict[tuple[int, int, int], dict]:
    """(source, destination, bytes) -> the measurement of a line of the program."""
    return {(int(m[1]), int(m[2]), int(m[3])): {"reps": int(m[4]), "wall_GBps": float(m[5]),
                                                 "event_GBps": float(m[6]), "check": m[7]}
            for m in LINE.finditer(text)}


def parse_meminfo(text: str) -> dict[int, tuple[int, int]]:
    """device -> (free, total)."""
    return {int(m[1]): (int(m[2]), int(m[3])) for m in MEMINFO.finditer(text)}


def compare(native: dict, rgpu: dict) -> list[dict]:
    """A row per measurement through rgpu, with the native one of the same direction and size, if any."""
    rows = []
    for key in sorted(rgpu, key=lambda k: (k[2], k[0])):
        mine, theirs = rgpu[key], native.get(key)
        rows.append({"src": key[0], "dst": key[1], "bytes": key[2], "rgpu": mine, "native": theirs,
                     "ratio": mine["wall_GBps"] / theirs["wall_GBps"] if theirs and theirs["wall_GBps"] else None})
    return rows


def table(rows: list[dict]) -> str:
    out = [f"{'copy':>6} {'bytes':>11} {'native GB/s':>12} {'rgpu GB/s':>10} {'ratio':>6}   "
           f"{'(events: native':>15} {'rgpu)':>7}  check"]
    for r in rows:
        n = r["native"]
        out.append(f"{r['src']}->{r['dst']:<3} {r['bytes']:>11} {n['wall_GBps'] if n else float('nan'):>12.3f} "
                   f"{r['rgpu']['wall_GBps']:>10.3f} {r['ratio'] if r['ratio'] else float('nan'):>6.3f}   "
                   f"{n['event_GBps'] if n else float('nan'):>15.3f} {r['rgpu']['event_GBps']:>7.3f}  "
                   f"{r['rgpu']['check']}{'' if not n else '/' + n['check']}")
    return "\n".join(out)


class Runner:
    """The program natively and through `rgpu run` (in a process group of its own, so a kill takes the program
    and the `rgpu run` that started it)."""

    def __init__(self, exe: pathlib.Path, server: str, shims: str | None):
        self.exe, self.server = exe, server
        self.rgpu = [sys.executable, "-m", "rgpu.cli", "run", "--server", server,
                     *(["--shims", shims] if shims else []), "--"]
        self.native_env = {k: v for k, v in os.environ.items() if not k.startswith(("RGPU_", "LD_PRELOAD"))}

    def command(self, args: list[str], native: bool) -> list[str]:
        return [str(self.exe), *args] if native else [*self.rgpu, str(self.exe), *args]

    def run(self, args: list[str], native: bool, timeout: float = 600) -> subprocess.CompletedProcess:
        return subprocess.run(self.command(args, native), capture_output=True, text=True, timeout=timeout,
                              env=self.native_env if native else None)

    def hold(self) -> subprocess.Popen:
        proc = subprocess.Popen(self.command(["--hold"], False), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, start_new_session=True)
        line = proc.stdout.readline().strip()
        if line != "HOLDING":
            kill(proc)
            raise SystemExit(f"the holding session did not start: {line!r} {proc.stderr.read()[-2000:]}")
        return proc

    def live_sessions(self) -> int:
        proc = subprocess.run([sys.executable, "-m", "rgpu.cli", "status", "--server", self.server, "--json"],
                              capture_output=True, text=True, timeout=60)
        if proc.returncode != 0:
            raise SystemExit(f"rgpu status failed: {proc.stderr.strip()}")
        report = json.loads(proc.stdout)
        return sum(len(r["server"]["sessions"]) for r in (report if isinstance(report, list) else [report]))


def kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def meminfo(runner: Runner, native: bool) -> dict[int, tuple[int, int]]:
    proc = runner.run(["--meminfo"], native, timeout=120)
    info = parse_meminfo(proc.stdout)
    if proc.returncode != 0 or not info:
        raise SystemExit(f"--meminfo {'natively' if native else 'through rgpu'} failed: {proc.stderr[-2000:]}")
    return info


def settled_meminfo(runner: Runner, native: bool, settle_s: float) -> dict[int, tuple[int, int]]:
    """Free memory once two reads a second apart agree: the server replaces the worker of every session that
    ends (a new one initialises the GPU before it is ready), so a read just after a session may catch that."""
    deadline, last = time.monotonic() + settle_s, meminfo(runner, native)
    while time.monotonic() < deadline:
        time.sleep(1)
        now = meminfo(runner, native)
        if now == last:
            break
        last = now
    return last


def teardown(runner: Runner, native: bool, settle_s: float) -> dict:
    """Free memory per device before, during and after two killed sessions; ok if before == after exactly."""
    views = [("native", True)] if native else []
    views.append(("rgpu", False))
    result = {view: {"before": settled_meminfo(runner, flag, settle_s)} for view, flag in views}
    holders = [runner.hold(), runner.hold()]
    try:
        for view, flag in views:
            result[view]["during"] = meminfo(runner, flag)
    finally:
        for proc in holders:
            kill(proc)
    deadline = time.monotonic() + settle_s
    while runner.live_sessions():
        if time.monotonic() > deadline:
            raise SystemExit(f"the server still has live sessions {settle_s:.0f} s after their programs were killed")
        time.sleep(0.2)
    for view, flag in views:
        result[view]["after"] = settled_meminfo(runner, flag, settle_s)
    ok = True
    for view, r in result.items():
        for dev in sorted(r["before"]):
            before, during, after = (r[k][dev][0] for k in ("before", "during", "after"))
            same = before == after
            ok &= same
            print(f"teardown {view:6} device {dev}: free before={before} during={during} after={after} "
                  f"{'EQUAL' if same else f'DIFFERENT by {after - before}'}")
    result["ok"] = ok
    return result


def build(out: pathlib.Path) -> pathlib.Path:
    exe = out / "peer_bandwidth"
    subprocess.run(["nvcc", "-cudart", "shared", "-O2", "-o", str(exe), str(HERE / "peer_bandwidth.cu")],
                   check=True)
    return exe


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--server", required=True, help="rgpu server(s), as RGPU_SERVER")
    ap.add_argument("--shims", help="stand-ins to run with (default: rgpu run's)")
    ap.add_argument("--sizes", default="64K,1M,16M,256M", type=lambda s: [parse_size(x) for x in s.split(",")])
    ap.add_argument("--exe", type=pathlib.Path, help="bench/peer_bandwidth.cu already built (default: build it)")
    ap.add_argument("--no-native", action="store_true", help="no GPU here: through rgpu only")
    ap.add_argument("--teardown", action="store_true", help="also check killed sessions give all memory back")
    ap.add_argument("--settle", type=float, default=60, help="seconds the server may take to end killed sessions")
    ap.add_argument("--json", type=pathlib.Path, help="write the results here")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        runner = Runner(args.exe or build(pathlib.Path(tmp)), args.server, args.shims)
        sizes = [str(s) for s in args.sizes]
        results: dict = {"server": args.server, "sizes": args.sizes}
        runs = {}
        for view, native in ([] if args.no_native else [("native", True)]) + [("rgpu", False)]:
            proc = runner.run(sizes, native)
            sys.stderr.write(proc.stderr)
            runs[view] = parse_copies(proc.stdout)
            results[f"{view}_rc"] = proc.returncode
        rows = compare(runs.get("native", {}), runs["rgpu"])
        print(table(rows))
        results["copies"] = rows
        ok = all(rc == 0 for k, rc in results.items() if k.endswith("_rc")) and bool(rows)
        ok &= all(r["rgpu"]["check"] == "OK" and (r["native"] is None or r["native"]["check"] == "OK") for r in rows)
        if args.teardown:
            try:
                results["teardown"] = teardown(runner, not args.no_native, args.settle)
            except SystemExit as e:  # a failed step: said, and recorded with the copies measured before it
                print(f"teardown check FAILED: {e}")
                results["teardown"] = {"ok": False, "error": str(e)}
            ok &= results["teardown"]["ok"]
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")
    print(f"peer bandwidth: {'OK' if ok else 'FAILED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
