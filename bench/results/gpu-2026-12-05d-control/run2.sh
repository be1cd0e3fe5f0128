#!/usr/bin/env bash
# Run 2 (the call right after run1.sh, on the same warm machine, where llama.cpp is built): every program of
# tests/cuda natively and through rgpu, then llama-bench's pp and tg natively and through rgpu in alternating A/B
# rounds of RGPU_BATCH_GRAPH 0/1 (2 rounds), each ratio taken beside native in the same round.
set -uo pipefail
cd "$(dirname "$0")/../../.."
B=$OUT
source tools/gpu_setup.sh || exit 1
nvidia-smi -L > "$B/device.txt" 2>&1
{ git log --oneline -1; echo "tree $(bash tools/tree_id.sh)"; } > "$B/commit.txt" 2>/dev/null
[ -x /tmp/llama/build/bin/llama-bench ] && echo "llama.cpp: built by run1" || echo "llama.cpp: building now"
RGPU_CHECK_NO_BUILD=1 RGPU_CHECK_PROGRAMS_TIMEOUT=250 OUT=$B/all timeout 260 bash bench/gpu_check.sh programs
RGPU_CHECK_AB=RGPU_BATCH_GRAPH RGPU_CHECK_LLAMA_ROUNDS=2 OUT=$B/graph timeout 200 bash bench/gpu_check.sh ab
