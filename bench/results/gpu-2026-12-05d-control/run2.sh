#!/usr/bin/env bash
# Run 2 (the call right after run1.sh, on the same warm machine, where llama.cpp is built): llama-bench's pp and
# tg natively and through rgpu, alternating A/B rounds, each ratio taken beside native in the same round, with
# RGPU_CODED_COPIES 0/1 (3 rounds), then RGPU_BATCH_GRAPH 0/1 (2 rounds).
set -uo pipefail
cd "$(dirname "$0")/../../.."
B=$OUT
source tools/gpu_setup.sh || exit 1
nvidia-smi -L > "$B/device.txt" 2>&1
{ git log --oneline -1; echo "tree $(bash tools/tree_id.sh)"; } > "$B/commit.txt" 2>/dev/null
[ -x /tmp/llama/build/bin/llama-bench ] && echo "llama.cpp: built by run1" || echo "llama.cpp: building now"
RGPU_CHECK_AB=RGPU_CODED_COPIES RGPU_CHECK_LLAMA_ROUNDS=3 OUT=$B/coded timeout 270 bash bench/gpu_check.sh ab
RGPU_CHECK_AB=RGPU_BATCH_GRAPH RGPU_CHECK_LLAMA_ROUNDS=2 OUT=$B/graph timeout 200 bash bench/gpu_check.sh ab
