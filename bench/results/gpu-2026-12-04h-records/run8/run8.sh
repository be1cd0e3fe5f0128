#!/usr/bin/env bash
# Run 8: the staging memory fed while the worker's receive waits ("new": run8/idle_staging.patch applied, as the
# tree was given) against a1447c8 ("old": the patch undone), three rounds each, alternating, shim_bench --psk.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
source tools/gpu_setup.sh || exit 1
P=bench/results/gpu-2026-12-04h-records/run8/idle_staging.patch
R=$OUT/run8; mkdir -p $R
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
python3 - $R <<'PY' | tee $R/summary.txt
import json, sys, glob, os
for f in sorted(glob.glob(sys.argv[1] + "/*.json")):
    d = json.load(open(f))
    row = lambda k: " ".join(f"{d[k][x]:6.2f}" for x in ("h2d_1m_gbps", "d2h_1m_gbps", "h2d_gbps", "d2h_gbps"))
    print(f"{os.path.basename(f):10} native {row('native driver')} | plain {row('rgpu batched')} | psk {row('rgpu batched + PSK')}")
PY
