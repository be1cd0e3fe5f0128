#!/usr/bin/env bash
# A/B of the grouped copy back (new) against per-slot copies (old), alternating; then a trace of 1 MiB copies up.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
mkdir -p /tmp/cu12 && python3 -c "import sys,zstandard; zstandard.ZstdDecompressor().copy_stream(sys.stdin.buffer, sys.stdout.buffer)" \
  < .hdr/cu12-include.tar.zst | tar -C /tmp/cu12 -xf - && export RGPU_CUDA12_INCLUDE=/tmp/cu12/include
mkdir -p $OUT/r
for r in 1 2 3; do
  for v in new old; do
    [ $v = old ] && git apply -R tmp_ab/new_lane.patch
    timeout 120 python3 bench/rpc_bench.py --backend cuda --psk --calls 1000 --launches 2000 --sizes 1M --with-shim \
      > $OUT/r/ab_${r}_$v.txt 2>&1
    [ $v = old ] && git apply tmp_ab/new_lane.patch
    echo "== $r $v"; grep -E "vs same-size C copy|C stand-in" $OUT/r/ab_${r}_$v.txt | head -12
  done
done
git apply tmp_ab/trace_up.patch && python3 -m rgpu.cli build-shims --out /tmp/sh > /dev/null && \
  timeout 100 python3 bench/shim_bench.py --backend cuda --shims /tmp/sh --calls 1000 --launches 1000 > $OUT/r/trace_shim.txt 2>&1
cp /tmp/rgpu-trace-up.txt $OUT/r/ 2>/dev/null; git apply -R tmp_ab/trace_up.patch
cat $OUT/r/trace_shim.txt | tail -8; head -30 /tmp/rgpu-trace-up.txt
