#!/usr/bin/env bash
# Run 2 (one call on the GPU box, from the repository's root; $OUT set by the device tool; the device tool brings
# back at most 8 files, so everything but the packed build goes into one archive):
#   1. every program of tests/cuda natively and through rgpu (gpu_check.sh programs), llama.cpp building beside it;
#   2. llama-bench pp128 (fa 0 and 1) natively and through rgpu with the client's call timeline (call_timeline.c)
#      and the C loop's own timestamps (lane_trace.patch, applied for this step only);
#   3. the build packed in 15 MB parts for the next call.
set -uo pipefail
cd "$(dirname "$0")/../../.."
B=$OUT
R=$B/r; mkdir -p $R
source tools/gpu_setup.sh || exit 1
nvidia-smi -L > "$R/device.txt" 2>&1; cat "$R/device.txt"
{ git log --oneline -1; echo "tree $(bash tools/tree_id.sh)"; } > "$R/commit.txt" 2>/dev/null
OUT=$R timeout 330 bash bench/gpu_check.sh programs > "$R/programs.log" 2>&1; tail -5 "$R/programs.log"
git apply bench/results/gpu-2026-12-05e-timeline/lane_trace.patch && echo "lane trace applied"
rm -f /tmp/rgpu-lane-trace.*
OUT=$R/timeline LLAMA_TIMELINE_ROUNDS=1 timeout 150 bash bench/llama/run_llama.sh timeline > "$R/timeline.log" 2>&1
git apply -R bench/results/gpu-2026-12-05e-timeline/lane_trace.patch && echo "lane trace taken out"
mkdir -p $R/lane && cp /tmp/rgpu-lane-trace.* $R/lane/ 2>/dev/null; ls -la $R/lane | head
grep -E "tokens/s|period|outside|in cuda" "$R/timeline.log"
(cd $B && tar czf results.tgz r && rm -rf r)
OUT=$B timeout 100 bash bench/llama/run_llama.sh pack > /dev/null 2>&1; ls -la $B
