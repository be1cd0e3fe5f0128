#!/usr/bin/env bash
# Run 4 (outputs in ../run4). The C stand-ins' sealed copies
# on this tree ("base": 1 MiB records), with next/groups.patch ("groups": the branch sealed-groups, sealed pieces
# sent four or more at a time) and with next/staging.patch ("staging": the branch sealed-staging, groups plus the
# staging memory and 16 KiB pieces), alternating three times (shim_bench --psk); then each against C TCP in the
# same command (rpc_bench --psk --with-shim). About 7 minutes.
#   B=$OUT; OUT=$B bash bench/results/gpu-2026-12-04h-records/next/run_next.sh
set -uo pipefail
cd "$(dirname "$0")/../../../.."
source tools/gpu_setup.sh || exit 1
N=bench/results/gpu-2026-12-04h-records/next
R=$OUT/next; mkdir -p $R
# (patches are undone with git apply -R, not git checkout: the box's copy of .git may be older than the tree)
applied=
variant() {  # the tree as variant $1 (its patch applied, the last one undone), its stand-ins built into /tmp/sh-$1
  [ -n "$applied" ] && { git apply -R $N/$applied.patch || return 1; applied=; }
  if [ $1 != base ]; then git apply $N/$1.patch || return 1; applied=$1; fi
  python3 -m rgpu.cli build-shims --out /tmp/sh-$1 > /dev/null && \
    python3 -c "from rgpu import shims; shims.build_examples(__import__('pathlib').Path('/tmp/sh-$1'))" > /dev/null
}
for i in 1 2 3; do
  for v in base groups staging; do
    variant $v && timeout 120 python3 bench/shim_bench.py --backend cuda --psk --shims /tmp/sh-$v --calls 2000 \
      --launches 5000 --json $R/$v-$i.json > /dev/null 2>> $R/errors.txt || echo "$v $i failed" >> $R/errors.txt
  done
done
for v in base groups staging; do
  variant $v && timeout 150 python3 bench/rpc_bench.py --backend cuda --psk --calls 1000 --launches 2000 --sizes 1M,64M \
    --with-shim 2>&1 | grep -E "C stand-in|null call p50 vs C" | sed "s/^/$v: /" >> $R/ratios.txt
done
variant base > /dev/null
python3 - $R <<'PY' | tee $R/summary.txt
import json, sys, glob, os
for f in sorted(glob.glob(sys.argv[1] + "/*.json")):
    d = json.load(open(f))
    row = lambda k: " ".join(f"{d[k][x]:6.2f}" for x in ("h2d_1m_gbps", "d2h_1m_gbps", "h2d_gbps", "d2h_gbps"))
    print(f"{os.path.basename(f):14} native {row('native driver')} | plain {row('rgpu batched')} | psk {row('rgpu batched + PSK')}")
PY
grep "PSK\]" $R/ratios.txt
