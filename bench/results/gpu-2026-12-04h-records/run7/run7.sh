#!/usr/bin/env bash
# Run 7: where the worker's receiving time goes for 1 MiB copies up, plain and sealed (run7/trace_recv.patch: time
# in recv calls that brought bytes and in polls that did not, and for sealed records in handing pieces to the pipe
# and helping it), from shim_bench's copies.
set -u
cd "$(dirname "$0")/../../../.."
source tools/gpu_setup.sh || exit 1
R=$OUT/run7; mkdir -p $R; rm -f /tmp/rgpu-trace-recv.txt
P=bench/results/gpu-2026-12-04h-records/run7/trace_recv.patch
git apply $P && python3 -m rgpu.cli build-shims --out /tmp/tsh > /dev/null && \
  python3 -c "from rgpu import shims; shims.build_examples(__import__('pathlib').Path('/tmp/tsh'))" > /dev/null && \
  timeout 100 python3 bench/shim_bench.py --backend cuda --psk --shims /tmp/tsh --calls 500 --launches 500 > $R/trace_shim.txt 2>&1
git apply -R $P
cp /tmp/rgpu-trace-recv.txt $R/trace-recv.txt
tail -4 $R/trace_shim.txt; grep "^plain 1048576" $R/trace-recv.txt | tail -6; grep "^rec 1048576" $R/trace-recv.txt | tail -8
