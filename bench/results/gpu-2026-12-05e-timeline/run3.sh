#!/usr/bin/env bash
# Run 3 (one call on the GPU box, from the repository's root; $OUT set by the device tool): the C loop's changes of
# 151fe0c (c_loop_wait.patch: sleeping in poll() for the client's bytes, a bounded first read, a batch's
# synchronize owed), A/B on llama-bench's pp128 steps with the call timeline, each variant beside native:
#   1. llama.cpp builds while a few programs run natively and through rgpu on the new tree (correctness);
#   2. rounds of run_llama.sh timeline, base (the patch taken out) and new, in ABBA order.
# Everything lands in $OUT/summary.txt as it comes (the device tool brings back few files), and in results.tgz.
set -uo pipefail
cd "$(dirname "$0")/../../.."
B=$OUT; R=$B/r; mkdir -p $R
S=$B/summary.txt
source tools/gpu_setup.sh || exit 1
nvidia-smi -L | tee -a $S
{ git log --oneline -1; echo "tree $(bash tools/tree_id.sh)"; } >> $S 2>/dev/null
(timeout 330 bash bench/llama/run_llama.sh build > "$R/llama_build.log" 2>&1; echo "rc=$?" >> "$R/llama_build.log") &
build=$!
RGPU_CHECK_PROGRAMS="streams_events mixed_contexts vector_add graphs stream_memops printf" OUT=$R/subset \
  timeout 200 bash tests/cuda/run_on_gpu.sh > "$R/subset.txt" 2>&1
grep -E "identical on all|DIFF" "$R/subset.txt" | tee -a $S
wait $build; tail -2 "$R/llama_build.log" | tee -a $S
P=bench/results/gpu-2026-12-05e-timeline/c_loop_wait.patch
for v in ${RUN3_ORDER:-base new new base}; do
  [ $v = base ] && { git apply -R $P || { echo "patch did not come out" | tee -a $S; break; }; }
  n=$((${n:-0} + 1))
  OUT=$R/$n-$v LLAMA_TIMELINE_ROUNDS=1 timeout 100 bash bench/llama/run_llama.sh timeline > "$R/tl_$n-$v.log" 2>&1
  [ $v = base ] && git apply $P
  echo "== $n $v" >> $S
  grep -E "tokens/s|period|outside|in cudaMemcpyAsync|in cudaStreamSync" "$R/tl_$n-$v.log" >> $S
  tail -12 $S
done
(cd $B && tar czf results.tgz r && rm -rf r)
