import os, subprocess, json, pathlib, statistics
from rgpu.cli import local_server
from rgpu import shims
PTX = "/work/main/src/rgpu/kernels/demo.ptx"
res = {}
with local_server("fake", ["--log-level", "warning"], cpus={1}) as address:
    for rnd in range(int(os.environ.get("ROUNDS", "5"))):
        order = ("/tmp/rgpu-shims-old", "/tmp/rgpu-shims") if rnd % 2 == 0 else ("/tmp/rgpu-shims", "/tmp/rgpu-shims-old")
        for d in order:
            env = dict(shims.environment(pathlib.Path(d)), RGPU_SERVER=address, RGPU_SPIN_US="300")
            p = subprocess.run(["taskset", "-c", "0", f"{d}/bench_calls", PTX, "2000", "2000"], env=env,
                               capture_output=True, text=True, timeout=300)
            r = json.loads(p.stdout.strip().splitlines()[-1])
            res.setdefault(d, []).append(r)
            print(d, r["null_p50_us"], r["h2d_gbps"], r["h2d_1m_gbps"], r["d2h_gbps"], r["d2h_1m_gbps"], flush=True)
for d, rs in res.items():
    print(d, {k: round(statistics.median(r[k] for r in rs), 2) for k in ("null_p50_us", "h2d_gbps", "h2d_1m_gbps", "d2h_gbps", "d2h_1m_gbps")})
