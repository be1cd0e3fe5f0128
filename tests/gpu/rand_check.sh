#!/usr/bin/env bash
# cuRAND and the cuBLAS additions on the GPU box (`bash tests/gpu/run_on_gpu.sh rand`): tests/cuda/rand_check.c
# (every generator type and distribution), tests/cuda/blas_more_check.c (cublasSet/Get*, batched
# getrf/getri/matinv/trsm) and tests/cuda/blas_level3_check.c (Level 2/3: trsm, trmm, syrk, herk, symm, ger*, trsv,
# trmv, complex gemm/gemm3m/gemv; getrsBatched) run natively (NVIDIA's libraries) and through rgpu (its stand-ins +
# rgpu-server --backend cuda, i.e. NVIDIA's libraries on the server); the same seeds must give identical output, line by
# line. Then their bad-input halves through rgpu only (natively a foreign pointer faults the context), and a
# PyTorch random-number probe natively and through `rgpu run`. Logs in $OUT.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/rgpu-out}
mkdir -p "$OUT"
shims=${RGPU_SHIMS:-/tmp/rgpu-shims}
[ -e $shims/libcurand.so.10 ] || python3 -m rgpu.cli build-shims --out $shims >/dev/null || exit 1
# NVIDIA's libraries as PyTorch installs them (any sys.path entry: another nvidia package may shadow the namespace)
nvlib=$(python3 -c "
import os, sys
print(next(os.path.join(e, 'nvidia', 'cu13', 'lib') for e in sys.path
           if e and os.path.exists(os.path.join(e, 'nvidia', 'cu13', 'lib', 'libcurand.so.10'))))") || exit 1
echo "--- natively: NVIDIA's libraries from $nvlib; through rgpu: the stand-ins in $shims"
gcc -O1 -Wall -o /tmp/rand_check tests/cuda/rand_check.c -L$shims -l:libcudart.so.13 -l:libcurand.so.10 -lm \
    -Wl,-rpath-link,$shims || exit 1
for prog in blas_more_check blas_level3_check; do
  gcc -O1 -Wall -o /tmp/$prog tests/cuda/$prog.c -L$shims -l:libcudart.so.13 -l:libcublas.so.13 -lm \
      -Wl,-rpath-link,$shims || exit 1
done
rc=0
port_file=$(mktemp)
python3 -m rgpu.cli server --port 0 --port-file $port_file --backend cuda --log-level info > "$OUT/rand_server.log" 2>&1 &
server=$!
for i in $(seq 150); do [ -s $port_file ] && break; sleep 0.2; done
export RGPU_SERVER=127.0.0.1:$(cat $port_file)
for prog in rand_check blas_more_check blas_level3_check; do
  LD_LIBRARY_PATH=$nvlib /tmp/$prog > "$OUT/${prog}_native.txt" 2>&1; echo "$prog native rc=$?"
  LD_LIBRARY_PATH=$shims /tmp/$prog > "$OUT/${prog}_rgpu.txt" 2>&1; echo "$prog rgpu rc=$?"
  grep -E "MISMATCH|FAIL" "$OUT/${prog}_native.txt" "$OUT/${prog}_rgpu.txt" | head -20
  if cmp -s "$OUT/${prog}_native.txt" "$OUT/${prog}_rgpu.txt" && tail -1 "$OUT/${prog}_rgpu.txt" | grep -q " OK$"; then
    echo "IDENTICAL $prog ($(wc -l < "$OUT/${prog}_rgpu.txt") lines)"
  else
    echo "DIFFERENT $prog"; rc=1; diff "$OUT/${prog}_native.txt" "$OUT/${prog}_rgpu.txt" | head -30
  fi
  LD_LIBRARY_PATH=$shims /tmp/$prog bad > "$OUT/${prog}_bad.txt" 2>&1 || rc=1
  grep -E "MISMATCH|FAIL| OK$" "$OUT/${prog}_bad.txt"
done
probe="python3 tests/gpu/rand_torch_probe.py"
timeout 300 $probe > "$OUT/rand_torch_native.txt" 2>"$OUT/rand_torch_native.err"; echo "torch native rc=$?"
RGPU_LOG=${RGPU_LOG:-warn} timeout 300 python3 -m rgpu.cli run --server $RGPU_SERVER --shims $shims -- $probe \
  > "$OUT/rand_torch_rgpu.txt" 2>"$OUT/rand_torch_rgpu.err"; echo "torch rgpu rc=$?"
if cmp -s "$OUT/rand_torch_native.txt" "$OUT/rand_torch_rgpu.txt" && [ -s "$OUT/rand_torch_rgpu.txt" ]; then
  echo "IDENTICAL torch random ($(wc -l < "$OUT/rand_torch_rgpu.txt") lines)"
else
  echo "DIFFERENT torch random"; rc=1; diff "$OUT/rand_torch_native.txt" "$OUT/rand_torch_rgpu.txt" | head -20
  grep -iE "not supported|error" "$OUT/rand_torch_rgpu.err" | sort | uniq -c | head
fi
grep -iE "not supported|curand" "$OUT/rand_torch_rgpu.err" "$OUT/rand_server.log" | sort | uniq -c | head -20
kill -TERM $server; wait $server
exit $rc
