#!/usr/bin/env bash
# Run 1 (one call on the GPU box, from the repository's root; $OUT set by the device tool):
#   1. graph_control natively (the parts added after the last GPU run: user objects, a child node's own graph, a host
#      function captured into a graph, a clone of a graph holding a moved child), then the graph programs on all
#      three paths, while llama.cpp builds;
#   2. where llama-bench's pp128 steps spend their time, natively against through rgpu (run_llama.sh timeline);
#   3. the build packed to travel to the next call (a fresh machine otherwise builds it again);
#   4. the C stand-in's copies against C TCP, plain and with a PSK (shim_bench --psk --c-tcp).
set -uo pipefail
cd "$(dirname "$0")/../../.."
B=$OUT
source tools/gpu_setup.sh || exit 1
nvidia-smi -L > "$B/device.txt" 2>&1; cat "$B/device.txt"
{ git log --oneline -1; echo "tree $(bash tools/tree_id.sh)"; } > "$B/commit.txt" 2>/dev/null
(timeout 420 bash bench/llama/run_llama.sh build > "$B/llama_build.log" 2>&1; echo "rc=$?" >> "$B/llama_build.log") &
build=$!
nvcc -cudart shared -o /tmp/n_graph_control tests/cuda/graph_control.cu && (timeout 60 /tmp/n_graph_control; echo "rc=$?") \
  > "$B/graph_control_native.txt" 2>&1
tail -25 "$B/graph_control_native.txt"
RGPU_CHECK_PROGRAMS="graph_control graphs graph_api" OUT=$B/subset timeout 150 bash tests/cuda/run_on_gpu.sh \
  > "$B/subset.txt" 2>&1
grep -E "identical on all|^graph|DIFF|differ" "$B/subset.txt" | head -20
wait $build; tail -2 "$B/llama_build.log"
OUT=$B/timeline LLAMA_TIMELINE_ROUNDS=${RUN1_TIMELINE_ROUNDS:-2} timeout 200 bash bench/llama/run_llama.sh timeline \
  > "$B/timeline.log" 2>&1
grep -vE "^(  |calls per)" "$B/timeline.log" | head -80
OUT=$B/pack timeout 90 bash bench/llama/run_llama.sh pack > "$B/pack.log" 2>&1; tail -4 "$B/pack.log"
timeout 120 python3 bench/shim_bench.py --backend cuda --psk --c-tcp --calls 2000 --launches 5000 > "$B/shim_bench.txt" 2>&1
cat "$B/shim_bench.txt"
