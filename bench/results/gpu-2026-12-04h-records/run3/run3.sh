#!/usr/bin/env bash
# Run 3: 9edb0ea ("new": staging memory, 16 KiB pieces) against 0c5b9cc ("old": run3/staging.patch undone), three
# times each, alternating, shim_bench --psk; then the CPU and one core's AES-256-GCM rate (openssl speed).
set -uo pipefail
cd "$(dirname "$0")/../../../.."
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
mkdir -p /tmp/cu12 && python3 -c "import sys,zstandard; zstandard.ZstdDecompressor().copy_stream(sys.stdin.buffer, sys.stdout.buffer)" \
  < .hdr/cu12-include.tar.zst | tar -C /tmp/cu12 -xf - && export RGPU_CUDA12_INCLUDE=/tmp/cu12/include
P=bench/results/gpu-2026-12-04h-records/run3/staging.patch
R=$OUT/run3; mkdir -p $R
build() { python3 -m rgpu.cli build-shims --out /tmp/sh-$1 > /dev/null && \
  python3 -c "from rgpu import shims; shims.build_examples(__import__('pathlib').Path('/tmp/sh-$1'))" > /dev/null; }
for i in 1 2 3; do
  for v in new old; do
    [ $v = old ] && git apply -R $P
    build $v && timeout 120 python3 bench/shim_bench.py --backend cuda --psk --shims /tmp/sh-$v --calls 2000 \
      --launches 5000 --json $R/$v-$i.json > /dev/null 2>> $R/errors.txt || echo "$v $i failed" >> $R/errors.txt
    [ $v = old ] && git apply $P
  done
done
git status --short | head -3
python3 - $R <<'PY' > $R/summary.txt
import json, sys, glob, os
for f in sorted(glob.glob(sys.argv[1] + "/*.json")):
    d = json.load(open(f))
    row = lambda k: " ".join(f"{d[k][x]:6.2f}" for x in ("h2d_1m_gbps", "d2h_1m_gbps", "h2d_gbps", "d2h_gbps"))
    print(f"{os.path.basename(f):10} native {row('native driver')} | plain {row('rgpu batched')} | psk {row('rgpu batched + PSK')}")
PY
(lscpu | grep -E "Model name|^CPU\(s\)|Flags" | sed 's/Flags:.*\(avx512f\|vaes\).*/& [flags trimmed]/' | cut -c1-200
 openssl version; openssl speed -evp aes-256-gcm -seconds 1 -bytes 65536 2>/dev/null | tail -2
 python3 -c "import ctypes.util; print(ctypes.util.find_library('crypto'))"; grep -o -w "vaes\|vpclmulqdq\|avx512f" /proc/cpuinfo | sort | uniq -c) >> $R/summary.txt 2>&1
cat $R/summary.txt
