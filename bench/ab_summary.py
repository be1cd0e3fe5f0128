"""The table bench/shim_ab.sh prints: each run's copy rates (GB/s: H2D and D2H at 1 MiB, then 64 MiB) by variant and
round, then per variant the medians over its rounds -- of the rates, and of each rate over the same run's C TCP copy
(shim_bench --c-tcp; else the native driver's) -- and how far a patch's medians lie from base's. The lent box's own rates drift by 20-30% from one
run to the next (native 1 MiB H2D 4.8-7.4 GB/s in one call, bench/results/gpu-2026-12-04i-piped), and rgpu's do
not drift with the native driver's: the ratio to native does not cancel it (the C TCP copy, through the same
kernel path as rgpu's, may). A column the patch does not touch (D2H, for a patch
to copies up) shows how large a change the rounds can show by chance.

    python bench/ab_summary.py OUTDIR/ab base path/to/one.patch ...   (the names in the order shim_ab ran them)
"""

from __future__ import annotations

import glob
import json
import os
import statistics
import sys

KEYS = ("h2d_1m_gbps", "d2h_1m_gbps", "h2d_gbps", "d2h_gbps")
REFERENCES = ("C TCP", "native driver")  # (the first that every run has)


def load(out: str) -> dict[int, list[tuple[int, dict]]]:
    """Each variant's (round, run) pairs (by its number in shim_ab's order), in round order."""
    runs: dict[int, list[tuple[int, dict]]] = {}
    for f in glob.glob(os.path.join(out, "v*-r*.json")):
        variant, round_ = os.path.basename(f)[1:-5].split("-r")
        with open(f) as fh:
            runs.setdefault(int(variant), []).append((int(round_), json.load(fh)))
    return {v: sorted(rs, key=lambda r: r[0]) for v, rs in runs.items()}


def medians(runs: list[tuple[int, dict]], label: str, ref: str) -> tuple[list[float], list[float]]:
    """The median rate of each key for `label`, and the median of its ratio to the same run's `ref` rate."""
    rates = [statistics.median(d[label][k] for _, d in runs) for k in KEYS]
    ratios = [statistics.median(d[label][k] / d[ref][k] for _, d in runs if d[ref][k] > 0) for k in KEYS]
    return rates, ratios


def summary(out: str, names: list[str]) -> str:
    runs = load(out)
    lines = []
    for n in sorted(runs):
        for r, d in runs[n]:
            row = " | ".join(f"{label} " + " ".join(f"{d[label][k]:5.2f}" for k in KEYS) for label in d)
            lines.append(f"{os.path.basename(names[n]):24} r{r:<3} {row}")
    every = [d for rs in runs.values() for _, d in rs]
    ref = next((r for r in REFERENCES if all(r in d for d in every)), None)
    if ref is None:
        return "\n".join(lines + ["", "(no run has a reference row: " + " or ".join(REFERENCES) + ")"])
    lines.append("")
    lines.append(f"medians over rounds: rates GB/s (H2D 1M, D2H 1M, H2D 64M, D2H 64M), then / the same run's {ref}")
    labels = [label for label in runs[min(runs)][0][1] if label not in REFERENCES]
    for label in labels:
        base_rates, base_ratios = medians(runs[min(runs)], label, ref)
        for n in sorted(runs):
            rates, ratios = medians(runs[n], label, ref)
            change = "" if n == min(runs) else "  vs base: " + " ".join(
                f"{(r / b - 1) * 100:+5.1f}%" for r, b in zip(rates, base_rates)) + " | " + " ".join(
                f"{(r / b - 1) * 100:+5.1f}%" for r, b in zip(ratios, base_ratios))
            lines.append(f"{label:20} {os.path.basename(names[n]):24} {len(runs[n])} rounds "
                         + " ".join(f"{x:5.2f}" for x in rates) + " | " + " ".join(f"{x:5.2f}" for x in ratios)
                         + change)
    return "\n".join(lines)


if __name__ == "__main__":
    print(summary(sys.argv[1], sys.argv[2:]))
