#!/usr/bin/env bash
# The C-loop levers of gpu-2026-12-05e-timeline, measured on llama-bench itself (small-q8_0, pp128 and tg32, fa 0
# and 1, 30 repetitions), natively beside each through rgpu (`run_llama.sh bench`, a fresh server per variant so
# that it builds the lane from that variant's tree), the variants in a rotated order each round against drift.
#   LEVERS        variants, each `base` or patch names and NAME=VALUE settings for the server joined by + (default:
#                 base and the four patches alone)
#   LEVER_ROUNDS  rounds (3); LEVER_BUDGET_S: no round starts after this many seconds of the script (470)
#   LEVER_BUILD=1 build llama.cpp first (run_llama.sh build; ~270 s on the box)
# From the repository's root on the GPU box, $OUT set by the device tool; summary in $OUT/summary.txt, every
# round's JSON in $OUT/levers.tgz (the device tool brings back at most 8 files).
set -uo pipefail
cd "$(dirname "$0")/../../.."
P=bench/results/gpu-2026-12-05e-timeline
S=$OUT/summary.txt
R=/tmp/levers
mkdir -p $R
if [ "${LEVER_BUILD:-0}" = 1 ]; then
  OUT=$R/build bash bench/llama/run_llama.sh build > $R/build.txt 2>&1 || { tail -30 $R/build.txt | tee -a $S; exit 1; }
  grep -E "^real|unpacked" $R/build.txt | tee -a $S
fi
source tools/gpu_setup.sh || exit 1
nvidia-smi -L | tee -a $S
read -ra levers <<< "${LEVERS:-base block head_read owed_sync packed_slots}"
n=${#levers[@]}
apply() {
  local p
  for p in ${1//+/ }; do [ $p = base ] || [[ $p == *=* ]] || git apply ${2:-} $P/c_loop_$p.patch || return 1; done
}
settings() { local p; for p in ${1//+/ }; do [[ $p == *=* ]] && echo "$p"; done; }
for round in $(seq ${LEVER_ROUNDS:-3}); do
  [ $SECONDS -gt ${LEVER_BUDGET_S:-470} ] && { echo "budget spent before round $round" | tee -a $S; break; }
  for i in $(seq 0 $((n - 1))); do
    v=${levers[$(( (i + round - 1) % n ))]}
    apply $v || { echo "$v: a patch did not apply" | tee -a $S; git checkout -- native src tests; continue; }
    d=$R/$v/round$round; mkdir -p $d
    env $(settings $v) OUT=$d RGPU_SETUP_WHEELS=0 LLAMA_BENCH_MODELS=small-q8_0 bash bench/llama/run_llama.sh bench \
      > $d/log.txt 2>&1
    echo "round $round $v ($SECONDS s): $(grep -c rc=0 $d/log.txt) runs rc 0" | tee -a $S
    apply $v -R || { echo "$v: could not take it out" | tee -a $S; git checkout -- native src tests; }
  done
done
for v in "${levers[@]}"; do
  [ -d $R/$v ] || continue
  echo "=== $v" >> $S
  if [ $(ls -d $R/$v/round* | wc -l) -gt 1 ]; then
    python3 bench/llama/compare_bench.py $R/$v/round* | sed -n '/^median over/,$p' >> $S
  else python3 bench/llama/compare_bench.py $R/$v/round* >> $S; fi
done
cat $S
tar -C $R -czf $OUT/levers.tgz .
