#!/usr/bin/env bash
# Run 1: sealed copies up in 1 MiB records ("new", the default) against 256 KiB records (RGPU_SEALED_COPY_KIB=256,
# "old": the records of 58e59fe; the worker the same), and the AEAD pipe off (RGPU_AEAD_PIPE=0, 1 MiB records),
# alternating three times; then the same-run ratios against C TCP (rpc_bench --psk --with-shim).
set -uo pipefail
cd "$(dirname "$0")/../../../.."
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
mkdir -p /tmp/cu12 && python3 -c "import sys,zstandard; zstandard.ZstdDecompressor().copy_stream(sys.stdin.buffer, sys.stdout.buffer)" \
  < .hdr/cu12-include.tar.zst | tar -C /tmp/cu12 -xf - && export RGPU_CUDA12_INCLUDE=/tmp/cu12/include
python3 -m rgpu.cli build-shims --out /tmp/rgpu-shims > /dev/null || exit 1
python3 -c "from rgpu import shims; shims.build_examples(__import__('pathlib').Path('/tmp/rgpu-shims'))" || exit 1
R=$OUT/run1; mkdir -p $R
for i in 1 2 3; do
  for v in new old pipe0; do
    case $v in new) e="";; old) e="RGPU_SEALED_COPY_KIB=256";; pipe0) e="RGPU_AEAD_PIPE=0";; esac
    env $e timeout 120 python3 bench/shim_bench.py --backend cuda --psk --shims /tmp/rgpu-shims --calls 2000 \
      --launches 5000 --json $R/$v-$i.json > /dev/null 2>> $R/errors.txt || echo "$v $i failed" >> $R/errors.txt
  done
done
python3 - $R <<'PY' | tee $R/summary.txt
import json, sys, glob, os
for f in sorted(glob.glob(sys.argv[1] + "/*.json")):
    d = json.load(open(f))
    row = lambda k: " ".join(f"{d[k][x]:6.2f}" for x in ("h2d_1m_gbps", "d2h_1m_gbps", "h2d_gbps", "d2h_gbps"))
    print(f"{os.path.basename(f):14} native {row('native driver')} | plain {row('rgpu batched')} | psk {row('rgpu batched + PSK')}")
PY
timeout 150 python3 bench/rpc_bench.py --backend cuda --psk --calls 1000 --launches 2000 --sizes 1M,64M --with-shim \
  > $R/rpc_psk.txt 2>&1
grep -E "C stand-in|null call p50 vs C" $R/rpc_psk.txt
