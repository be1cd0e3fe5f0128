import os, subprocess, sys, json, statistics
from rgpu.cli import local_server
from rgpu import shims
PTX = "/work/main/src/rgpu/kernels/demo.ptx"
variants = [dict(RGPU_SPIN_US="300"), dict(RGPU_SPIN_US="300", XSPINPOLL="1"), dict(RGPU_SPIN_US="0")]
res = {i: [] for i in range(len(variants))}
with local_server("fake", ["--log-level", "warning"], cpus={1}) as address:
    for rnd in range(int(os.environ.get("ROUNDS", "3"))):
        order = list(range(len(variants)))
        if rnd % 2: order.reverse()
        for i in order:
            env = dict(shims.environment(__import__("pathlib").Path("/tmp/rgpu-shims")), RGPU_SERVER=address, **variants[i])
            p = subprocess.run(["taskset", "-c", "0", "/tmp/rgpu-shims/bench_calls", PTX, "2000", "2000"], env=env,
                               capture_output=True, text=True, timeout=300)
            r = json.loads(p.stdout.strip().splitlines()[-1])
            res[i].append(r)
for i, v in enumerate(variants):
    med = lambda k: statistics.median(r[k] for r in res[i])
    print(v, {k: med(k) for k in ("null_p50_us", "h2d_gbps", "h2d_1m_gbps", "d2h_gbps", "d2h_1m_gbps")}, [r["h2d_gbps"] for r in res[i]])
