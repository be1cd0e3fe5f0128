#!/usr/bin/env bash
# Run 2 (after the review's fixes and child graphs moved into their nodes): the graph programs natively, through
# rgpu's runtime on NVIDIA's driver and through rgpu; the server's graph handlers on the cuda backend; JAX's loops
# and branches natively and through rgpu (XLA's defaults: lax.scan nests a command buffer by moving its graph into
# a child graph node), with command buffers forced onto loops and branches too.
set -uo pipefail
cd "$(dirname "$0")/../../.."
B=$OUT
source tools/gpu_setup.sh || exit 1
nvidia-smi -L > "$B/device.txt" 2>&1
{ git log --oneline -1; echo "tree $(bash tools/tree_id.sh)"; } > "$B/commit.txt" 2>/dev/null
OUT=$B/jax timeout 200 bash tests/gpu/run_on_gpu.sh jaxloops jaxloopscb 2>&1 | tail -25
RGPU_CHECK_PROGRAMS="graph_control graph_api graph_generic graphs" OUT=$B/subset \
  timeout 120 bash tests/cuda/run_on_gpu.sh > "$B/subset.txt" 2>&1
grep -E "identical on all|^graph" "$B/subset.txt"
RGPU_TEST_BACKEND=cuda timeout 90 python3 -m pytest -q -p no:cacheprovider tests/test_graph_control.py tests/test_graphs.py \
  > "$B/cuda_tests.txt" 2>&1
tail -3 "$B/cuda_tests.txt"; grep -E "^E  |Failed|line [0-9]+, in test" "$B/cuda_tests.txt" | head -12
