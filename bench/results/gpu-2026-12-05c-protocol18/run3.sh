#!/usr/bin/env bash
# Run 3 (one call on the GPU box, from the repository's root, $OUT set by the device tool): what run 1 left open,
# most telling first, so that a call cut short still brings back the first parts.
#   1. the programs that differed, and managed.cu, natively with their whole output (textures' was cut);
#   2. those programs and vmm through tests/cuda/run_on_gpu.sh (natively, rgpu's runtime on the driver, rgpu);
#   3. the cuda backend's in-process tests that failed, and the managed-memory threads test through rgpu;
#   4. every program (gpu_check.sh programs); llama.cpp builds in the background from the start, for run4.sh.
#      RUN3_ALL=0 leaves out both (a short call: steps 1 to 3).
set -uo pipefail
cd "$(dirname "$0")/../../.."
B=$OUT
source tools/gpu_setup.sh || exit 1
mkdir -p "$B/native"
nvidia-smi -L > "$B/device.txt" 2>&1
# llama.cpp builds meanwhile (~270 s on 16 cores), for run4.sh on the same warm machine
build=
if [ "${RUN3_ALL:-1}" = 1 ]; then
  (timeout 420 bash bench/llama/run_llama.sh build > "$B/llama_build.log" 2>&1; echo "rc=$?" >> "$B/llama_build.log") &
  build=$!
fi
{ git log --oneline -1; echo "tree $(bash tools/tree_id.sh)"; } > "$B/commit.txt" 2>/dev/null
P="textures clusters legacy_launch stream_memops managed managed_vars managed_reset graph_api"
compiles=
for p in $P; do nvcc -cudart shared -o /tmp/n_$p tests/cuda/$p.cu -lcuda -lcublas & compiles="$compiles $!"; done
wait $compiles
for p in $P; do (timeout 60 /tmp/n_$p; echo "rc=$?") > "$B/native/$p.txt" 2>&1; done
cat "$B/native/textures.txt" "$B/native/managed.txt"
RGPU_CHECK_PROGRAMS="$P vmm" OUT=$B/subset timeout 200 bash tests/cuda/run_on_gpu.sh > "$B/subset.txt" 2>&1
grep -E "identical on all|^(textures|clusters|legacy_launch|stream_memops|managed|managed_vars|managed_reset|graph_api|vmm) " "$B/subset.txt"
RGPU_TEST_BACKEND=cuda timeout 120 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_cuda_modern.py \
  tests/test_graphs.py tests/test_vmm.py tests/test_stream_memops.py tests/test_managed.py > "$B/cuda_tests.txt" 2>&1
tail -3 "$B/cuda_tests.txt"
[ "${RUN3_ALL:-1}" = 1 ] && RGPU_CHECK_NO_BUILD=1 OUT=$B/all bash bench/gpu_check.sh programs
if [ -n "$build" ]; then wait $build; tail -2 "$B/llama_build.log"; fi
