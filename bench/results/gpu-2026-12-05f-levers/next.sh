#!/usr/bin/env bash
# For the next GPU session (one call, from the repository's root; $OUT set by the device tool; ~8 minutes on an
# H100): what this session could not run, in order of need.
#   1. tests/gpu/test_coded_fill_gpu.py: the device fill after the review's fixes (e266612), on the GPU
#   2. coded_copy_check through rgpu, the fill on and off
#   3. llama.cpp built; levers.sh, the fill (RGPU_RUNS_FILL=1: off by default, as its only A/B so far compared it
#      with a decoder the same change had slowed) against the committed decoder, NEXT_ROUNDS (6) rounds
#   4. run_llama.sh clientprof: where the program's own CPU goes through rgpu (the +50-60 us a pp step at fa 1
#      outside the CUDA calls: the stand-ins' share against llama.cpp's own)
#   5. run_llama.sh timeline, 2 rounds
# Everything in $OUT/summary.txt as it comes, the rest in $OUT/next.tgz.
set -uo pipefail
cd "$(dirname "$0")/../../.."
S=$OUT/summary.txt
R=/tmp/next
mkdir -p $R
source tools/gpu_setup.sh || exit 1
nvidia-smi -L | tee -a $S
RGPU_TEST_BACKEND=cuda timeout 150 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_coded_fill_gpu.py \
  > $R/gpu_test.txt 2>&1
echo "test_coded_fill_gpu: rc=$? $(tail -1 $R/gpu_test.txt)" | tee -a $S
(OUT=$R/build bash bench/llama/run_llama.sh build > $R/build.txt 2>&1; echo "build rc=$?" >> $R/build.txt) &
BUILD=$!
python3 -m rgpu.cli build-shims --out /tmp/rgpu-shims > $R/shims.txt 2>&1 || tail -20 $R/shims.txt | tee -a $S
for fill in 1 0; do
  rm -f $R/port
  RGPU_RUNS_FILL=$fill python3 -m rgpu.cli server --port 0 --port-file $R/port --backend cuda \
    > $R/server_$fill.log 2>&1 &
  SV=$!
  for i in $(seq 150); do [ -s $R/port ] && break; sleep 0.2; done
  timeout 60 python3 -m rgpu.cli run --server 127.0.0.1:$(cat $R/port) --shims /tmp/rgpu-shims -- \
    /tmp/rgpu-shims/coded_copy_check > $R/coded_$fill.txt 2>&1
  echo "fill $fill, coded_copy_check: rc=$? $(tail -1 $R/coded_$fill.txt)" | tee -a $S
  kill -TERM $SV; wait $SV
done
wait $BUILD; tail -1 $R/build.txt | tee -a $S
LEVERS="base RGPU_RUNS_FILL=1" LEVER_ROUNDS=${NEXT_ROUNDS:-6} LEVER_BUDGET_S=150 \
  bash bench/results/gpu-2026-12-05f-levers/levers.sh > $R/levers.txt 2>&1
OUT=$R/clientprof RGPU_SETUP_WHEELS=0 bash bench/llama/run_llama.sh clientprof > $R/clientprof.txt 2>&1
head -60 $R/clientprof.txt >> $S
OUT=$R/timeline RGPU_SETUP_WHEELS=0 LLAMA_TIMELINE_ROUNDS=2 bash bench/llama/run_llama.sh timeline \
  > $R/timeline.txt 2>&1
grep -E "step period|outside|in cudaMemcpyAsync\[1\]|pp128" $R/timeline.txt | tee -a $S
tar -C $R -czf $OUT/next.tgz --exclude='*.gguf' .
