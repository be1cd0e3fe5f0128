#!/usr/bin/env bash
# After gpu_check's sections (its setup done): the AEAD pipe on (new) and off (RGPU_AEAD_PIPE=0), alternating twice.
set -u
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1 RGPU_CUDA12_INCLUDE=/tmp/cu12/include
mkdir -p $OUT/r
for r in 1 2; do
  for v in new old; do
    export RGPU_AEAD_PIPE=$([ $v = new ] && echo 1 || echo 0)
    timeout 150 python3 bench/rpc_bench.py --backend cuda --psk --calls 1000 --launches 1000 --sizes 1M,64M --with-shim \
      > $OUT/r/pipe_${r}_$v.txt 2>&1
    echo "== $r $v"; grep -E "C stand-in .*PSK|null call p50 vs C floor \[cuda\]" $OUT/r/pipe_${r}_$v.txt
  done
done
