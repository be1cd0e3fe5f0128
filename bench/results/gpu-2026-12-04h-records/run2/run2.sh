#!/usr/bin/env bash
# Run 2: timestamps (CLOCK_MONOTONIC, ns) of sealed 1 MiB copy-up records on both ends (run2/trace.patch), from
# shim_bench's 64 MiB and 1 MiB copies.
set -u
cd "$(dirname "$0")/../../../.."
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
mkdir -p /tmp/cu12 && python3 -c "import sys,zstandard; zstandard.ZstdDecompressor().copy_stream(sys.stdin.buffer, sys.stdout.buffer)" \
  < .hdr/cu12-include.tar.zst | tar -C /tmp/cu12 -xf - && export RGPU_CUDA12_INCLUDE=/tmp/cu12/include
R=$OUT/run2; mkdir -p $R; rm -f /tmp/rgpu-trace-*.txt
git apply bench/results/gpu-2026-12-04h-records/run2/trace.patch && python3 -m rgpu.cli build-shims --out /tmp/tsh > /dev/null && \
  python3 -c "from rgpu import shims; shims.build_examples(__import__('pathlib').Path('/tmp/tsh'))" > /dev/null && \
  timeout 100 python3 bench/shim_bench.py --backend cuda --psk --shims /tmp/tsh --calls 500 --launches 500 > $R/trace_shim.txt 2>&1
git apply -R bench/results/gpu-2026-12-04h-records/run2/trace.patch
cat /tmp/rgpu-trace-srv.txt > $R/trace-srv.txt; cat /tmp/rgpu-trace-cli.txt > $R/trace-cli.txt
tail -4 $R/trace_shim.txt; wc -l $R/trace-*.txt
