#!/usr/bin/env bash
# The AEAD pipe (and with it the sealed copy up opened as it arrives) on (new) and off (RGPU_AEAD_PIPE=0), alternating.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
mkdir -p /tmp/cu12 && python3 -c "import sys,zstandard; zstandard.ZstdDecompressor().copy_stream(sys.stdin.buffer, sys.stdout.buffer)" \
  < .hdr/cu12-include.tar.zst | tar -C /tmp/cu12 -xf - && export RGPU_CUDA12_INCLUDE=/tmp/cu12/include
mkdir -p $OUT/r
for r in 1 2; do
  for v in new old; do
    export RGPU_AEAD_PIPE=$([ $v = new ] && echo 1 || echo 0)
    timeout 120 python3 bench/rpc_bench.py --backend cuda --psk --calls 1000 --launches 1000 --sizes 1M,64M --with-shim \
      > $OUT/r/pipe_${r}_$v.txt 2>&1
    echo "== $r $v"; grep -E "C stand-in .*PSK|null call p50 vs C floor \[cuda\]" $OUT/r/pipe_${r}_$v.txt
  done
done
