#!/usr/bin/env bash
# The bridge on a real GPU: self-test, mutation test, bench, and the bridge inside rgpu-server fed by an
# external producer. Called by tests/gpu/run_on_gpu.sh (which sets PYTHONPATH); exits non-zero on failure.
set -uo pipefail
rc=0
python3 -m rgpu.cli bridge --backend cuda --self-test --mutation-test --bench || rc=1
tmp=$(mktemp -d)
python3 - "$tmp" <<'PY' || rc=1
import os, signal, subprocess, sys, time
import numpy as np
from rgpu.bridge.selftest import V2Producer
from rgpu.bridge.records import Op, DoneStatus
prod = V2Producer(sys.argv[1], in_size=8 << 24, out_size=4 << 24)
f = prod.files
server = subprocess.Popen([sys.executable, "-m", "rgpu.cli", "server", "--port", "0", "--backend", "cuda",
                           "--bridge-job", f.job, "--bridge-in", f.inp, "--bridge-out", f.out, "--bridge-done", f.done],
                          stdout=subprocess.PIPE, text=True)
try:
    rng = np.random.default_rng(5)
    for i, n in enumerate((1 << 10, 1 << 20, 1 << 24)):
        a, b = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
        op = Op.VADD_MUTATED if i == 1 else Op.VADD
        seq = prod.submit(op=op, n=n, payload=a.tobytes() + b.tobytes())
        deadline = time.monotonic() + 60
        while not (os.path.getsize(f.done) and prod.done()["seq"] == seq):
            assert time.monotonic() < deadline, "no done record"
            time.sleep(0.002)
        done = prod.done()
        want = a + b + (np.float32(1) if op == Op.VADD_MUTATED else np.float32(0))
        ok = done["status"] == DoneStatus.OK and np.array_equal(np.frombuffer(prod.output(4 * n), np.float32), want)
        print(f"server-hosted bridge: {op.name} n={n} status={DoneStatus(done['status']).name} "
              f"kernel_ns={done['kernel_ns']} output {'correct' if ok else 'WRONG'}")
        assert ok
finally:
    server.send_signal(signal.SIGTERM)
    out, _ = server.communicate(timeout=60)
print(out, end="")
print(f"rgpu-server exit code {server.returncode}")
sys.exit(server.returncode)
PY
rm -rf "$tmp"
exit $rc
