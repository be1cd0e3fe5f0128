"""Summarise llama-bench JSON results natively and through rgpu: tokens/s and the ratio per test.

    python3 bench/llama/compare_bench.py OUT_DIR     (reads bench_native_*.json, bench_rgpu_*.json)
"""

from __future__ import annotations

import json
import pathlib
import sys


def load(path: pathlib.Path) -> dict:
    try:
        rows = json.loads(path.read_text() or "[]")
    except (OSError, json.JSONDecodeError):
        return {}
    out = {}
    for r in rows:
        test = f"pp{r['n_prompt']}" if r.get("n_prompt") else f"tg{r['n_gen']}"
        out[(test, int(r.get("flash_attn", 0)))] = (r["avg_ts"], r.get("stddev_ts", 0.0))
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


def main(out_dir: str) -> int:
    d = pathlib.Path(out_dir)
    rtt_table(d)
    print(f"{'model':<12} {'test':<6} {'fa':>2} {'native t/s':>12} {'rgpu t/s':>12} {'rgpu/native':>11}")
    for native in sorted(d.glob("bench_native_*.json")):
        model = native.stem.removeprefix("bench_native_")
        a, b = load(native), load(d / f"bench_rgpu_{model}.json")
        for key in sorted(a):
            n = a[key][0]
            r = b.get(key, (float("nan"),))[0]
            print(f"{model:<12} {key[0]:<6} {key[1]:>2} {n:>12.1f} {r:>12.1f} {r / n:>10.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "."))
