#!/usr/bin/env bash
# cuSOLVER and cuSPARSE on the GPU box, natively and through rgpu in the same run: tests/cuda/solver_check.c
# and tests/cuda/sparse_check.c (every result checked against a CPU reference by the program itself) must print
# the same lines both ways; their `hostile` modes (rgpu's refusals of bad input) run through rgpu only; then
# tests/gpu/linalg_probe.py (torch.linalg and torch.sparse.mm, output bytes hashed) both ways, compared line
# for line. Logs land in $OUT.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/rgpu-out}
mkdir -p "$OUT"
shims=${RGPU_SHIMS:-/tmp/rgpu-shims}
[ -e $shims/libcusolver.so.12 ] && [ -e $shims/libcusparse.so.12 ] || python3 -m rgpu.cli build-shims --out $shims >/dev/null || exit 1
nvlib=$(python3 -c "
import nvidia, os
print(next(os.path.join(p, 'cu13', 'lib') for p in nvidia.__path__
           if os.path.exists(os.path.join(p, 'cu13', 'lib', 'libcusolver.so.12'))))")
cudalib=$(dirname "$(readlink -f /usr/local/cuda/lib64/libcudart.so.13)")
for lib in solver sparse; do
  gcc -O1 -o /tmp/${lib}_check tests/cuda/${lib}_check.c -L$shims -l:libcudart.so.13 -l:libcu${lib}.so.12 -lm \
      -Wl,-rpath-link,$shims || exit 1
done
rc=0
port_file=$(mktemp)
python3 -m rgpu.cli server --port 0 --port-file $port_file --backend cuda --log-level info > "$OUT/linalg_server.log" 2>&1 &
server=$!
for i in $(seq 150); do [ -s $port_file ] && break; sleep 0.2; done
export RGPU_SERVER=127.0.0.1:$(cat $port_file)
for prog in solver_check sparse_check; do
  echo "--- $prog: native (NVIDIA's library from $nvlib) and through rgpu"
  LD_LIBRARY_PATH=$nvlib:$cudalib /tmp/$prog > "$OUT/${prog}_native.txt" 2>&1; echo "native rc=$?"
  # NVIDIA's libraries run twice natively: lines that differ between two native runs are the library's own
  # run-to-run variation (documented for some algorithms), not rgpu's.
  LD_LIBRARY_PATH=$nvlib:$cudalib /tmp/$prog > "$OUT/${prog}_native2.txt" 2>&1
  if cmp -s "$OUT/${prog}_native.txt" "$OUT/${prog}_native2.txt"; then echo "native twice: IDENTICAL"; else
    echo "native twice: DIFFERENT (NVIDIA's run-to-run variation)"; diff "$OUT/${prog}_native.txt" "$OUT/${prog}_native2.txt" | head -10; fi
  LD_LIBRARY_PATH=$shims /tmp/$prog > "$OUT/${prog}_rgpu.txt" 2>&1; echo "rgpu rc=$?"
  if cmp -s "$OUT/${prog}_native.txt" "$OUT/${prog}_rgpu.txt"; then echo "IDENTICAL $prog"; else
    echo "DIFFERENT $prog"; rc=1; diff "$OUT/${prog}_native.txt" "$OUT/${prog}_rgpu.txt" | head -40; fi
  grep -q "$prog OK" "$OUT/${prog}_native.txt" || { echo "native $prog FAILED"; rc=1; }
  echo "--- $prog hostile, through rgpu"
  LD_LIBRARY_PATH=$shims /tmp/$prog hostile 2>&1 | tee "$OUT/${prog}_hostile.txt"
  [ "${PIPESTATUS[0]}" = 0 ] || rc=1
done
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
