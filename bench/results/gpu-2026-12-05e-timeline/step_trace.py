"""Run 2b's step, side by side: the client's call timeline (bench/llama/call_timeline.c) and the C loop's timestamps
(lane_trace.patch) on one clock, medians over llama-bench's pp128 steps, in microseconds from the client's graph
launch of the step (negative: before it).

    python3 step_trace.py CLIENT_TIMELINE LANE_TRACE...
"""
import pathlib
import re
import statistics
import sys

OPS = {}
for line in open(pathlib.Path(__file__).resolve().parents[3] / "native" / "gen" / "rgpu_ops.h"):
    m = re.match(r"#define RGPU_OP_(\w+) (0x[0-9A-Fa-f]+)", line)
    if m:
        OPS[int(m.group(2), 16)] = m.group(1)

client = [l.split() for l in open(sys.argv[1]) if not l.startswith("#")]
client = sorted((int(a), int(b), n, int(s)) for n, a, b, s, _ in client)
lane = []
for path in sys.argv[2:]:
    for l in open(path):
        tag, a, n, t0, t1 = l.split()
        lane.append((int(t0), int(t1), tag, OPS.get(int(a), a) if tag in "BrHWw" else a, int(n)))
lane.sort()
launches = [c[0] for c in client if c[2] == "cudaGraphLaunch"]
rows = {}
for prev, at, nxt in zip(launches, launches[1:], launches[2:]):
    lo, hi = prev + (at - prev) // 2, at + (nxt - at) // 2  # the step around this launch
    got = {}
    big = [c for c in client if lo <= c[0] < at and c[2] == "cudaMemcpyAsync" and c[3] >= 1 << 19]
    if big:
        got["client: the 512 KiB input copy begins"] = (big[0][0] - at, big[0][1] - big[0][0])
    for t0, t1, tag, name, n in lane:
        if not lo <= t0 < hi:
            continue
        key = {"S": "C loop entered (after Python's wait)", "H": "C: the 512 KiB copy streamed",
               "B": f"C: a batch of {n} bytes", "W": f"C: {name} run", "w": f"C: {name} reply sent"}.get(tag)
        if tag == "r":
            key = f"C: record {name}"
        if key and tag == "S" and t1 - t0 < 500_000:
            continue  # (a turn that ended at once)
        if key and key not in got:
            got[key] = (t0 - at, t1 - t0)
    d2h = [c for c in client if at <= c[0] < hi and c[2] == "cudaMemcpyAsync"]
    if d2h:
        got["client: the logits copy returns"] = (d2h[0][1] - at, 0)
    for k, v in got.items():
        rows.setdefault(k, []).append(v)
print(f"{len(launches) - 2} steps; medians, us from the client's graph launch: (start, duration)")
for k, v in sorted(rows.items(), key=lambda kv: statistics.median(x[0] for x in kv[1])):
    print(f"  {k:45} {statistics.median(x[0] for x in v) / 1e3:9.1f} {statistics.median(x[1] for x in v) / 1e3:9.1f}"
          f"   ({len(v)} steps)")
