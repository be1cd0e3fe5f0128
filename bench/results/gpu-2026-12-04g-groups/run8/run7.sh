#!/usr/bin/env bash
# The AEAD pipe on (new) and off (old, RGPU_AEAD_PIPE=0), the C stand-ins' copies plain and sealed, alternating.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
mkdir -p /tmp/cu12 && python3 -c "import sys,zstandard; zstandard.ZstdDecompressor().copy_stream(sys.stdin.buffer, sys.stdout.buffer)" \
  < .hdr/cu12-include.tar.zst | tar -C /tmp/cu12 -xf - && export RGPU_CUDA12_INCLUDE=/tmp/cu12/include
mkdir -p $OUT/r
python3 -m rgpu.cli build-shims --out /tmp/sh > /dev/null
for r in 1 2 3; do
  for v in new old; do
    export RGPU_AEAD_PIPE=$([ $v = new ] && echo 1 || echo 0)
    timeout 100 python3 bench/shim_bench.py --backend cuda --psk --shims /tmp/sh --calls 500 --launches 500 \
      --json $OUT/r/pipe_${r}_$v.json > $OUT/r/pipe_${r}_$v.txt 2>&1
    echo "== $r $v"; python3 -c "
import json,sys; d=json.load(open(sys.argv[1]))
for k,v in d.items(): print(f'{k:24s}', ' '.join(f'{f}={v.get(f)}' for f in ('h2d_gbps','d2h_gbps','h2d_1m_gbps','d2h_1m_gbps')))" $OUT/r/pipe_${r}_$v.json
  done
done
