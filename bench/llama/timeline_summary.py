"""Where a program's steps spend their time, natively against through rgpu, from bench/llama/call_timeline.c's files.

    python3 bench/llama/timeline_summary.py NATIVE_FILE RGPU_FILE [--skip N] [--bench NATIVE_JSON RGPU_JSON]

A step runs from one cudaGraphLaunch to the next (llama.cpp replays one graph a pp or tg step). Per step: the
period, the time inside each wrapped call (calls nested in another wrapped call, as a stand-in calling its own
entry points, count only in the outer one) and the time outside all of them -- the program's own CPU work and the
calls not wrapped. Medians over the steps after the first N (warm-up), side by side, with rgpu less native; with
--bench, llama-bench's own tokens/s of the two runs (its -o json) and their ratio first.
"""

from __future__ import annotations

import argparse
import collections
import pathlib
import statistics

import compare_bench  # (beside this script)


def steps(path: str, skip: int) -> list[dict]:
    rows = []
    for line in open(path):
        if line.startswith("#"):
            continue
        name, enter, leave, size, kind = line.split()
        rows.append((int(enter), int(leave), name, int(size), int(kind)))
    rows.sort()
    top = []  # outermost calls only
    for r in rows:
        if top and r[1] <= top[-1][1]:
            continue
        top.append(r)
    launches = [i for i, r in enumerate(top) if r[2] == "cudaGraphLaunch"]
    out = []
    for a, b in zip(launches, launches[1:]):
        period = top[b][0] - top[a][0]
        inside = collections.Counter()
        count = collections.Counter()
        for enter, leave, name, size, kind in top[a:b]:
            key = name if not size else f"{name}[{kind}]"
            inside[key] += leave - enter
            count[key] += 1
            if size:
                count[key + " bytes"] += size
        out.append({"period": period, "outside": period - sum(inside.values()), "inside": inside, "count": count})
    return out[skip:]


def median(values) -> float:
    values = list(values)
    return statistics.median(values) if values else 0.0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("native")
    ap.add_argument("rgpu")
    ap.add_argument("--skip", type=int, default=2)
    ap.add_argument("--bench", nargs=2, metavar=("NATIVE_JSON", "RGPU_JSON"))
    args = ap.parse_args()
    if args.bench:
        native, rgpu = (compare_bench.load(pathlib.Path(p)) for p in args.bench)
        for test, (mean, median_rep) in native.items():
            got = rgpu.get(test, (float("nan"), float("nan")))
            print(f"{test}: native {mean:.0f}, rgpu {got[0]:.0f} tokens/s (mean): {got[0] / mean:.1%}; "
                  f"median repetition {got[1] / median_rep:.1%}")
    runs = {"native": steps(args.native, args.skip), "rgpu": steps(args.rgpu, args.skip)}
    print(f"steps: native {len(runs['native'])}, rgpu {len(runs['rgpu'])} (after {args.skip} skipped); medians, us")
    print(f"{'':34} {'native':>10} {'rgpu':>10} {'rgpu-native':>12}")

    def row(label: str, get) -> None:
        n, r = median(get(s) for s in runs["native"]), median(get(s) for s in runs["rgpu"])
        print(f"{label:34} {n / 1e3:10.1f} {r / 1e3:10.1f} {(r - n) / 1e3:12.1f}")

    row("step period", lambda s: s["period"])
    row("outside wrapped calls", lambda s: s["outside"])
    names = sorted({k for run in runs.values() for s in run for k in s["inside"]})
    for k in names:
        row(f"in {k}", lambda s, k=k: s["inside"].get(k, 0))
    print("calls per step (median), native / rgpu:")
    for k in sorted({k for run in runs.values() for s in run for k in s["count"]}):
        n = median(s["count"].get(k, 0) for s in runs["native"])
        r = median(s["count"].get(k, 0) for s in runs["rgpu"])
        print(f"  {k:40} {n:12.0f} {r:12.0f}")


if __name__ == "__main__":
    main()
