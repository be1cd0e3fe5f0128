import os, subprocess, sys, json
from rgpu.cli import local_server
from rgpu import shims
PTX = "/work/main/src/rgpu/kernels/demo.ptx"
with local_server("fake", ["--log-level", "warning"], cpus={1}) as address:
    for rnd in range(int(os.environ.get("ROUNDS", "3"))):
        for spin in (("300", "0") if rnd % 2 == 0 else ("0", "300")):
            env = dict(shims.environment(__import__("pathlib").Path("/tmp/rgpu-shims")), RGPU_SERVER=address, RGPU_SPIN_US=spin)
            p = subprocess.run(["taskset", "-c", "0", "/tmp/rgpu-shims/bench_calls", PTX, "2000", "2000"], env=env,
                               capture_output=True, text=True, timeout=300)
            r = json.loads(p.stdout.strip().splitlines()[-1])
            print(f"client on core 0, RGPU_SPIN_US={spin}: null p50 {r['null_p50_us']} us, D2H 64 MiB {r['d2h_gbps']} GB/s, 1 MiB {r['d2h_1m_gbps']} GB/s; H2D 64 MiB {r['h2d_gbps']}, 1 MiB {r['h2d_1m_gbps']}", flush=True)
