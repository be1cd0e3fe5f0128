#!/usr/bin/env bash
# A against B on the GPU box: the C stand-ins' shim_bench (null call, launches, copies; with a PSK too) on this
# tree ("base") and with each patch given applied in turn, ROUNDS times (3) alternating, each variant's stand-ins
# built from its own tree; then bench/ab_summary.py's table of the copies' rates by variant and round (GB/s: H2D
# and D2H at 1 MiB, then 64 MiB, for the native driver, rgpu batched, rgpu batched + PSK, C TCP) and each
# variant's medians, with how far a patch's lie from base's. Outputs under $OUT/ab. Patches are undone with
# git apply -R (the box's copy of .git may be older than the tree). About 10 s per variant and round: the box's
# rates drift by 20-30% between runs, so ROUNDS=10 is not too many.
#   B=$OUT; OUT=$B bash bench/shim_ab.sh path/to/one.patch [path/to/other.patch ...]
# SHIM_AB_ARGS sets shim_bench options (default: --psk --c-tcp --copy-links 4 --calls 2000 --launches 5000).
set -uo pipefail
cd "$(dirname "$0")/.."
source tools/gpu_setup.sh || exit 1
R=${OUT:-/tmp/rgpu-out}/ab; mkdir -p "$R"
variants=(base "$@")
applied=
variant() {  # the tree as variant $1 (its patch applied, the last one undone), its stand-ins built into /tmp/sh-<n>
  if [ -n "$applied" ]; then git apply -R "$applied" || return 1; applied=; fi
  if [ "$1" != base ]; then git apply "$1" || return 1; applied=$1; fi
  python3 -m rgpu.cli build-shims --out /tmp/sh-$2 > /dev/null && \
    python3 -c "from rgpu import shims; shims.build_examples(__import__('pathlib').Path('/tmp/sh-$2'))" > /dev/null
}
for round in $(seq 1 ${ROUNDS:-3}); do
  for n in "${!variants[@]}"; do
    v=${variants[$n]}
    variant "$v" $n && timeout 120 python3 bench/shim_bench.py --backend cuda --shims /tmp/sh-$n \
      ${SHIM_AB_ARGS:---psk --c-tcp --copy-links 4 --calls 2000 --launches 5000} --json "$R/v$n-r$round.json" > /dev/null 2>> "$R/errors.txt" \
      || echo "variant $n ($v) round $round failed" >> "$R/errors.txt"
  done
done
variant base 0 > /dev/null
python3 bench/ab_summary.py "$R" "${variants[@]}" | tee "$R/summary.txt"
