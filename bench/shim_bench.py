"""The C driver shim vs the native driver, measured in one run with the same program (bench_calls):
null-call latency (a synchronous cuMemGetInfo), kernel launch rate, batched and with RGPU_BATCH=0, and pageable
copies of 64 MiB and 1 MiB each way (with --copy-links N, copies up over N copy links too); with --c-tcp, bench/raw_tcp.c's echo and blocking copies of the same sizes
in the same run (the floor the copies are held to), as a row of its own.

    python bench/shim_bench.py --backend cuda [--psk]      # on a GPU host: native numbers + ratios
    python bench/shim_bench.py --backend fake              # anywhere: rgpu numbers only
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

from rgpu import shims
from rgpu.cli import local_server

PTX = pathlib.Path(__file__).parents[1] / "src" / "rgpu" / "kernels" / "demo.ptx"


def bench(exe: pathlib.Path, env: dict, calls: int, launches: int) -> dict:
    res = subprocess.run([str(exe), str(PTX), str(calls), str(launches)], env=env, capture_output=True, text=True,
                         timeout=600)
    if res.returncode:
        raise SystemExit(f"{exe} failed: {res.stderr[-2000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def c_tcp_row(calls: int, spin_us: float) -> dict | None:
    """bench/raw_tcp.c's numbers as a row (its echo for the null call, no launches), or None without a compiler."""
    import rpc_bench  # (beside this script: its builder of raw_tcp.c)

    floor = rpc_bench.c_raw_baselines(calls, spin_us, [1 << 20, 64 << 20]).get(int(spin_us))
    if not floor:
        return None
    copy = floor["copy"]
    return {"null_p50_us": floor["echo_p50_us"], "null_p99_us": floor["echo_p99_us"], "launches_per_s": 0,
            "h2d_gbps": copy[64 << 20][0] / 1e9, "d2h_gbps": copy[64 << 20][1] / 1e9,
            "h2d_1m_gbps": copy[1 << 20][0] / 1e9, "d2h_1m_gbps": copy[1 << 20][1] / 1e9}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", default="fake", choices=("fake", "cuda"))
    ap.add_argument("--shims", help="directory with built shims (default: build them into a temp dir)")
    ap.add_argument("--psk", action="store_true")
    ap.add_argument("--calls", type=int, default=20000)
    ap.add_argument("--launches", type=int, default=50000)
    ap.add_argument("--spin-us", type=float, default=300.0, help="polling before sleeping, server and shim")
    ap.add_argument("--json", help="also write each row's numbers here ({label: numbers})")
    ap.add_argument("--c-tcp", action="store_true", help="add a row for bench/raw_tcp.c's echo and copies")
    ap.add_argument("--copy-links", type=int, default=0, metavar="N",
                    help="add a row with RGPU_COPY_LINKS=N: big copies up over N copy links (native/src/conn_links.c)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        shim_dir = pathlib.Path(args.shims) if args.shims else pathlib.Path(tmp)
        if not (shim_dir / "bench_calls").exists():
            shims.build(shim_dir)
            shims.build_examples(shim_dir)
        exe = shim_dir / "bench_calls"
        rows = []
        native = None
        if args.backend == "cuda":
            # The examples carry RUNPATH $ORIGIN (they find the stand-ins beside them): a copy elsewhere loads
            # NVIDIA's libcuda.so.1.
            alone = pathlib.Path(tmp) / "native"
            alone.mkdir()
            shutil.copy2(exe, alone / exe.name)
            env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
            native = bench(alone / exe.name, env, args.calls, args.launches)
            rows.append(("native driver", native))
        plain = [("rgpu batched", {}), ("rgpu RGPU_BATCH=0", {"RGPU_BATCH": "0"})]
        if args.copy_links:
            plain.append((f"rgpu batched + {args.copy_links} links", {"RGPU_COPY_LINKS": str(args.copy_links)}))
        servers = [([], plain)]
        if args.psk:
            key = pathlib.Path(tmp) / "key"
            key.write_text(os.urandom(32).hex())
            key.chmod(0o600)  # a key others can read is refused
            sealed = [("rgpu batched + PSK", {"RGPU_PSK_FILE": str(key)})]
            if args.copy_links:
                sealed.append((f"rgpu batched + PSK + {args.copy_links} links",
                               {"RGPU_PSK_FILE": str(key), "RGPU_COPY_LINKS": str(args.copy_links)}))
            servers.append((["--psk-file", str(key)], sealed))
        for server_args, configs in servers:
            # No idle workers: one starting in the background would compete with the measurement.
            with local_server(args.backend, server_args + ["--log-level", "warning", "--spin-us", str(args.spin_us),
                                                           "--worker-pool", "0"]) as address:
                for label, more in configs:
                    env = shims.environment(shim_dir)
                    env.update(RGPU_SERVER=address, RGPU_SPIN_US=str(int(args.spin_us)), **more)
                    launches = args.launches if "BATCH=0" not in label else max(2000, args.launches // 10)
                    rows.append((label, bench(exe, env, args.calls, launches)))
    if args.c_tcp and (floor := c_tcp_row(args.calls, args.spin_us)):
        rows.append(("C TCP", floor))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(rows), f, indent=1)
    print(f"{'':24} {'null p50 us':>12} {'null p99 us':>12} {'launches/s':>12} {'H2D GB/s':>9} {'D2H GB/s':>9}"
          f"   vs native: p50 / launch rate / H2D / D2H")
    for label, r in rows:
        ratio = ""
        if native and label not in ("native driver", "C TCP"):
            ratio = (f"{r['null_p50_us'] / native['null_p50_us']:.0f}x / {r['launches_per_s'] / native['launches_per_s']:.1%}"
                     f" / {r['h2d_gbps'] / native['h2d_gbps']:.1%} / {r['d2h_gbps'] / native['d2h_gbps']:.1%}")
        print(f"{label:24} {r['null_p50_us']:12.2f} {r['null_p99_us']:12.2f} {r['launches_per_s']:12,.0f} "
              f"{r['h2d_gbps']:9.2f} {r['d2h_gbps']:9.2f}   {ratio}")


if __name__ == "__main__":
    sys.exit(main())
