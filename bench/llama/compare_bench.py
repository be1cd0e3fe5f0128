"""Summarise llama-bench JSON results natively and through rgpu: tokens/s and the ratio per test -- llama-bench's
own mean over its repetitions, and the same from the median repetition (its first timed repetition runs well
slower than the rest, natively too, so with few repetitions the mean swings with it).

    python3 bench/llama/compare_bench.py OUT_DIR     (reads bench_native_*.json, bench_rgpu_*.json)
"""

from __future__ import annotations

import json
import pathlib
import statistics
import sys


def load(path: pathlib.Path) -> dict:
    """(test, fa) -> (llama-bench's mean tokens/s, tokens/s of the median repetition)."""
    try:
        rows = json.loads(path.read_text() or "[]")
    except (OSError, json.JSONDecodeError):
        return {}
    out = {}
    for r in rows:
        tokens = r.get("n_prompt") or r["n_gen"]
        test = f"pp{r['n_prompt']}" if r.get("n_prompt") else f"tg{r['n_gen']}"
        samples = r.get("samples_ns") or []
        median_ts = tokens / (statistics.median(samples) / 1e9) if samples else float("nan")
        out[(test, int(r.get("flash_attn", 0)))] = (r["avg_ts"], median_ts)
    return out


def rtt_table(d: pathlib.Path) -> None:
    """Token generation through rgpu as the network gets slower (rtt_<us>.json from the `rtt` section)."""
    runs = sorted(d.glob("rtt_*.json"), key=lambda p: int(p.stem.removeprefix("rtt_")))
    if not runs:
        return
    print(f"\n{'injected RTT us':>15} {'tg t/s':>10} {'of 0 us':>8}")
    base = None
    for path in runs:
        ts = next(iter(load(path).values()), (float("nan"),))[0]
        base = base or ts
        print(f"{path.stem.removeprefix('rtt_'):>15} {ts:>10.1f} {ts / base:>8.1%}")


def ratio_table(d: pathlib.Path) -> dict:
    """(native, rgpu) figures per (model, test, fa) from one directory's bench_native_*.json and bench_rgpu_*.json."""
    out = {}
    missing = (float("nan"), float("nan"))
    for native in sorted(d.glob("bench_native_*.json")):
        model = native.stem.removeprefix("bench_native_")
        a, b = load(native), load(d / f"bench_rgpu_{model}.json")
        for key in sorted(a):
            out[(model, *key)] = (a[key], b.get(key, missing))
    return out


def main(out_dirs: list[str]) -> int:
    """One table per directory (a round of the `bench` section); with several, the median ratio of each test."""
    rounds = []
    for out_dir in out_dirs:
        d = pathlib.Path(out_dir)
        rtt_table(d)
        if len(out_dirs) > 1:
            print(f"\n{d.name}:")
        print(f"{'model':<12} {'test':<6} {'fa':>2} {'native t/s':>12} {'rgpu t/s':>12} {'rgpu/native':>11}"
              f" {'median rep':>11}")
        table = ratio_table(d)
        for (model, test, fa), (n, r) in table.items():
            print(f"{model:<12} {test:<6} {fa:>2} {n[0]:>12.1f} {r[0]:>12.1f} {r[0] / n[0]:>10.1%}"
                  f" {r[1] / n[1]:>10.1%}")
        rounds.append(table)
    if len(rounds) > 1:
        print(f"\nmedian over {len(rounds)} rounds (min - max of rgpu/native; mean, then median repetition):")
        for key in rounds[0]:
            spread = []
            for i in (0, 1):
                ratios = sorted(t[key][1][i] / t[key][0][i] for t in rounds if key in t)
                spread.append(f"{statistics.median(ratios):>10.1%}  ({ratios[0]:.1%} - {ratios[-1]:.1%})")
            print(f"{key[0]:<12} {key[1]:<6} {key[2]:>2} {spread[0]}  {spread[1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] or ["."]))
