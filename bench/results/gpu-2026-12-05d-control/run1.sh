#!/usr/bin/env bash
# Run 1 (one call on the GPU box, from the repository's root; $OUT set by the device tool): protocol 1.9's graph
# control flow on the real driver, most telling first, so that a call cut short still brings back the first parts.
#   1. graph_control (conditional nodes, capture into a graph, node enabling, event and child setters, graph
#      memory) and the other graph programs: natively, through rgpu's runtime on NVIDIA's driver, and through rgpu;
#   2. the cuda backend's graph handlers in-process (test_graphs, test_graph_host, graph_control through rgpu);
#   3. JAX's loops and branches natively and through rgpu, with XLA's defaults and with command buffers forced
#      onto loops and branches (conditional nodes);
#   4. llama.cpp (built in the background from the start): llama-bench natively and through rgpu, alternating
#      A/B rounds of RGPU_CODED_COPIES 0/1, each ratio beside native in the same round (RUN1_AB_ROUNDS, 2).
#   Every program of tests/cuda (gpu_check.sh programs) is run2.sh's, with RGPU_BATCH_GRAPH rounds.
set -uo pipefail
cd "$(dirname "$0")/../../.."
B=$OUT
source tools/gpu_setup.sh || exit 1
nvidia-smi -L > "$B/device.txt" 2>&1
(timeout 420 bash bench/llama/run_llama.sh build > "$B/llama_build.log" 2>&1; echo "rc=$?" >> "$B/llama_build.log") &
build=$!
{ git log --oneline -1; echo "tree $(bash tools/tree_id.sh)"; } > "$B/commit.txt" 2>/dev/null
nvcc -cudart shared -o /tmp/n_graph_control tests/cuda/graph_control.cu && (timeout 60 /tmp/n_graph_control; echo "rc=$?") \
  > "$B/graph_control_native.txt" 2>&1
cat "$B/graph_control_native.txt"
RGPU_CHECK_PROGRAMS="graph_control graphs graph_api graph_generic graph_host graph_memory vector_add managed_vars" OUT=$B/subset \
  timeout 150 bash tests/cuda/run_on_gpu.sh > "$B/subset.txt" 2>&1
grep -E "identical on all|^graph" "$B/subset.txt"
RGPU_TEST_BACKEND=cuda timeout 120 python3 -m pytest -q -p no:cacheprovider tests/test_graphs.py tests/test_graph_host.py tests/test_graph_control.py \
  "tests/test_cuda_programs.py::test_program_runs_unchanged_through_rgpu[graph_control]" > "$B/cuda_tests.txt" 2>&1
tail -3 "$B/cuda_tests.txt"
OUT=$B/jax timeout 200 bash tests/gpu/run_on_gpu.sh jaxloops jaxloopscb 2>&1 | tail -30
wait $build; tail -2 "$B/llama_build.log"
RGPU_CHECK_AB=RGPU_CODED_COPIES RGPU_CHECK_LLAMA_ROUNDS=${RUN1_AB_ROUNDS:-2} OUT=$B/coded timeout 200 bash bench/gpu_check.sh ab
