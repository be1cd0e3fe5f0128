#!/usr/bin/env bash
# cuSOLVER (and, through PyTorch, cuSPARSE) on the GPU box, natively and through rgpu in the same run:
# tests/cuda/solver_check.c (every result checked against a CPU reference by the program itself) must print the
# same lines both ways; `solver_check hostile` (rgpu's refusals of bad input) runs through rgpu only; then
# tests/gpu/linalg_probe.py (torch.linalg and torch.sparse.mm, output bytes hashed) both ways, compared line
# for line. Logs land in $OUT.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/rgpu-out}
mkdir -p "$OUT"
shims=${RGPU_SHIMS:-/tmp/rgpu-shims}
[ -e $shims/libcusolver.so.12 ] || python3 -m rgpu.cli build-shims --out $shims >/dev/null || exit 1
nvlib=$(python3 -c "
import nvidia, os
print(next(os.path.join(p, 'cu13', 'lib') for p in nvidia.__path__
           if os.path.exists(os.path.join(p, 'cu13', 'lib', 'libcusolver.so.12'))))")
cudalib=$(dirname "$(readlink -f /usr/local/cuda/lib64/libcudart.so.13)")
gcc -O1 -o /tmp/solver_check tests/cuda/solver_check.c -L$shims -l:libcudart.so.13 -l:libcusolver.so.12 -lm \
    -Wl,-rpath-link,$shims || exit 1
rc=0
port_file=$(mktemp)
python3 -m rgpu.cli server --port 0 --port-file $port_file --backend cuda --log-level info > "$OUT/linalg_server.log" 2>&1 &
server=$!
for i in $(seq 150); do [ -s $port_file ] && break; sleep 0.2; done
export RGPU_SERVER=127.0.0.1:$(cat $port_file)
echo "--- solver_check: native (NVIDIA cuSOLVER from $nvlib) and through rgpu"
LD_LIBRARY_PATH=$nvlib:$cudalib /tmp/solver_check > "$OUT/solver_native.txt" 2>&1; echo "native rc=$?"
LD_LIBRARY_PATH=$shims /tmp/solver_check > "$OUT/solver_rgpu.txt" 2>&1; echo "rgpu rc=$?"
if cmp -s "$OUT/solver_native.txt" "$OUT/solver_rgpu.txt"; then echo "IDENTICAL solver_check"; else
  echo "DIFFERENT solver_check"; rc=1; diff "$OUT/solver_native.txt" "$OUT/solver_rgpu.txt" | head -40; fi
grep -q "solver_check OK" "$OUT/solver_native.txt" || { echo "native solver_check FAILED"; rc=1; }
echo "--- solver_check hostile, through rgpu"
LD_LIBRARY_PATH=$shims /tmp/solver_check hostile 2>&1 | tee "$OUT/solver_hostile.txt"
[ "${PIPESTATUS[0]}" = 0 ] || rc=1
echo "--- torch.linalg / torch.sparse: native and through rgpu"
timeout 300 python3 tests/gpu/linalg_probe.py > "$OUT/linalg_native.txt" 2>"$OUT/linalg_native.err"; echo "native rc=$?"
RGPU_LOG=${RGPU_LOG:-warn} timeout 400 python3 -m rgpu.cli run --shims $shims -- python3 tests/gpu/linalg_probe.py \
  > "$OUT/linalg_rgpu.txt" 2>"$OUT/linalg_rgpu.err"; echo "rgpu rc=$?"
kill -TERM $server; wait $server
if cmp -s "$OUT/linalg_native.txt" "$OUT/linalg_rgpu.txt"; then echo "IDENTICAL linalg_probe"; else
  echo "DIFFERENT linalg_probe"; rc=1; diff "$OUT/linalg_native.txt" "$OUT/linalg_rgpu.txt" | head -60; fi
echo "--- calls rgpu does not support (client), and server-side failures"
grep -hiE "not supported|failed" "$OUT/linalg_rgpu.err" "$OUT/linalg_server.log" | sed -E 's/^[0-9-]+ [0-9:,]+ //' \
  | sort | uniq -c | sort -rn | head -30
exit $rc
