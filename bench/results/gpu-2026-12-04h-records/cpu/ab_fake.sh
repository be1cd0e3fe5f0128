#!/usr/bin/env bash
# A/B on the fake backend: $1 rounds; trees /tmp/wt-old (sh-old) and /work/main (sh-new)
. /work/venv/bin/activate
for i in $(seq 1 $1); do
  for v in new old; do
    if [ $v = new ]; then dir=/work/main; else dir=/tmp/wt-old; fi
    (cd $dir && PYTHONPATH=$dir/src timeout 300 python bench/shim_bench.py --backend fake --psk --shims /tmp/sh-$v --calls 300 --launches 300 --json /tmp/ab-$v-$i.json > /dev/null 2>&1)
  done
done
python3 - $1 <<'PY'
import json, sys
n = int(sys.argv[1])
for v in ("new", "old"):
    rows = [json.load(open(f"/tmp/ab-{v}-{i}.json"))["rgpu batched + PSK"] for i in range(1, n + 1)]
    plain = [json.load(open(f"/tmp/ab-{v}-{i}.json"))["rgpu batched"] for i in range(1, n + 1)]
    for k in ("h2d_1m_gbps", "d2h_1m_gbps", "h2d_gbps", "d2h_gbps"):
        xs = [r[k] for r in rows]
        print(f"{v} psk {k:12} mean {sum(xs)/n:5.2f}  {' '.join(f'{x:5.2f}' for x in xs)}   plain mean {sum(r[k] for r in plain)/n:5.2f}")
PY
