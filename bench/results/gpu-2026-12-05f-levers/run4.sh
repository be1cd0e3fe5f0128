#!/usr/bin/env bash
# Run 4: coded copies filled on the device (rgpu_runs_fill) -- correctness, then llama-bench with and without, then
# a timeline with it. From the repository's root on the GPU box; $OUT set by the device tool.
#   1. llama.cpp built (run_llama.sh build)
#   2. native/examples/coded_copy_check through rgpu on the cuda backend, the fill on and off (RGPU_RUNS_FILL=0),
#      and whether the server loaded the kernel
#   3. llama.cpp's greedy completions natively and through rgpu, 5 models, fa on and off, compared
#   4. levers.sh: small-q8_0 pp128/tg32 fa 0/1, RGPU_RUNS_FILL=0 against the fill, rotated, RUN4_ROUNDS (5) rounds
#   5. run_llama.sh timeline, one round, with the fill
set -uo pipefail
cd "$(dirname "$0")/../../.."
S=$OUT/summary.txt
R=/tmp/run4
mkdir -p $R
OUT=$R/build bash bench/llama/run_llama.sh build > $R/build.txt 2>&1 || tail -30 $R/build.txt | tee -a $S
grep -E "^real" $R/build.txt | tee -a $S
source tools/gpu_setup.sh || exit 1
nvidia-smi -L | tee -a $S
python3 -m rgpu.cli build-shims --out /tmp/rgpu-shims > $R/shims.txt 2>&1 || tail -20 $R/shims.txt | tee -a $S
for fill in 1 0; do
  rm -f $R/port
  RGPU_RUNS_FILL=$fill python3 -m rgpu.cli server --port 0 --port-file $R/port --backend cuda --log-level info \
    > $R/server_fill$fill.log 2>&1 &
  SV=$!
  for i in $(seq 150); do [ -s $R/port ] && break; sleep 0.2; done
  for k in 1 2 3; do
    timeout 60 python3 -m rgpu.cli run --server 127.0.0.1:$(cat $R/port) --shims /tmp/rgpu-shims -- \
      /tmp/rgpu-shims/coded_copy_check > $R/coded_fill${fill}_$k.txt 2>&1
    echo "fill $fill, coded_copy_check $k: rc=$? $(tail -1 $R/coded_fill${fill}_$k.txt)" | tee -a $S
  done
  kill -TERM $SV; wait $SV
  grep -iE "fill kernel|error|traceback" $R/server_fill$fill.log | head -5 | tee -a $S
done
echo "=== completions ($SECONDS s)" | tee -a $S
OUT=$R/complete RGPU_SETUP_WHEELS=0 bash bench/llama/run_llama.sh native rgpu > $R/complete.txt 2>&1
grep -E "IDENTICAL|DIFFERENT|rc=[1-9]" $R/complete.txt | sort | uniq -c | tee -a $S
echo "=== A/B ($SECONDS s)" | tee -a $S
LEVERS="RGPU_RUNS_FILL=0 base" LEVER_ROUNDS=${RUN4_ROUNDS:-5} LEVER_BUDGET_S=${RUN4_AB_S:-150} \
  bash bench/results/gpu-2026-12-05f-levers/levers.sh > $R/levers.txt 2>&1
echo "=== timeline ($SECONDS s)" | tee -a $S
OUT=$R/timeline RGPU_SETUP_WHEELS=0 LLAMA_TIMELINE_ROUNDS=1 bash bench/llama/run_llama.sh timeline \
  > $R/timeline.txt 2>&1
grep -E "rc=|step period|outside|in cuda|pp128" $R/timeline.txt | tee -a $S
echo "done ($SECONDS s)" | tee -a $S
tar -C $R -czf $OUT/run4.tgz --exclude='*.gguf' .
