#!/usr/bin/env bash
# Timestamps of sealed 256 KiB copy-up records on both ends (tmp_ab/trace_psk.patch), the pipe on.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
mkdir -p /tmp/cu12 && python3 -c "import sys,zstandard; zstandard.ZstdDecompressor().copy_stream(sys.stdin.buffer, sys.stdout.buffer)" \
  < .hdr/cu12-include.tar.zst | tar -C /tmp/cu12 -xf - && export RGPU_CUDA12_INCLUDE=/tmp/cu12/include
mkdir -p $OUT/r
git apply tmp_ab/trace_psk.patch && python3 -m rgpu.cli build-shims --out /tmp/sh > /dev/null && \
  timeout 100 python3 bench/shim_bench.py --backend cuda --psk --shims /tmp/sh --calls 500 --launches 500 > $OUT/r/trace_shim.txt 2>&1
git apply -R tmp_ab/trace_psk.patch
tail -5 $OUT/r/trace_shim.txt; cp /tmp/rgpu-trace-arr.txt /tmp/rgpu-trace-cli.txt $OUT/r/ 2>/dev/null
echo SRV; tail -12 /tmp/rgpu-trace-arr.txt; echo CLI; tail -12 /tmp/rgpu-trace-cli.txt
