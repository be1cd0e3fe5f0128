#!/usr/bin/env bash
# Everything that needs the GPU, in one command on the GPU box (device tool), with the missing Python
# packages carried as wheels in .whl/ (see /work/.library/device/README.md). Logs land in $OUT.
#   bash tests/gpu/run_on_gpu.sh [sections...]
#   sections: info tests suite demo bench bridge shim runtime math linalg torch jax torchgraphs expandable llama\n#   (default: all but math, linalg, torch, jax, torchgraphs, expandable and llama)
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/rgpu-out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
# CUDA 12 headers for building the stand-ins (the box's toolkit has 13's only): .hdr/ carries them compressed.
if [ -e .hdr/cu12-include.tar.zst ] && [ -z "${RGPU_CUDA12_INCLUDE:-}" ]; then
  mkdir -p /tmp/cu12 && python3 -c "import sys,zstandard; zstandard.ZstdDecompressor().copy_stream(sys.stdin.buffer, sys.stdout.buffer)" \
    < .hdr/cu12-include.tar.zst | tar -C /tmp/cu12 -xf - && export RGPU_CUDA12_INCLUDE=/tmp/cu12/include
fi
sections=${*:-info tests suite demo bench bridge shim runtime}
rc=0
for s in $sections; do
  echo "=== $s ==="
  case $s in
    info)
      nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv
      python3 -c "import cuda.bindings, sys; print('cuda-bindings', cuda.bindings.__version__, 'python', sys.version.split()[0])"
      nvcc --version | tail -1 ;;
    tests)
      RGPU_TEST_BACKEND=cuda python3 -m pytest -s -v -p no:cacheprovider tests/gpu 2>&1 | tee "$OUT/gpu_tests.log" | grep -vE "^$"
      [ "${PIPESTATUS[0]}" = 0 ] || rc=1 ;;
    suite)
      python3 -m pytest -q -p no:cacheprovider tests --ignore=tests/gpu 2>&1 | tail -3
      [ "${PIPESTATUS[0]}" = 0 ] || rc=1 ;;
    demo)
      python3 -m rgpu.cli demo --backend cuda 2>&1 | tee "$OUT/demo.log" || rc=1 ;;
    bench)
      python3 bench/rpc_bench.py --backend cuda --sizes ${RGPU_BENCH_SIZES:-4K,64K,1M,16M,256M} --psk --with-shim \
        --json "$OUT/bench.json" 2>&1 | tee "$OUT/bench.log" || rc=1 ;;
    shim)
      bash native/run_on_gpu.sh 2>&1 | tee "$OUT/shim.log"
      [ "${PIPESTATUS[0]}" = 0 ] || rc=1 ;;
    runtime)
      bash tests/cuda/run_on_gpu.sh 2>&1 | tee "$OUT/runtime.log"
      [ "${PIPESTATUS[0]}" = 0 ] || rc=1
      RGPU_TEST_BACKEND=cuda python3 -m pytest -q -p no:cacheprovider tests/test_runtime.py tests/test_cuda_programs.py tests/test_graphs.py 2>&1 | tail -3
      [ "${PIPESTATUS[0]}" = 0 ] || rc=1 ;;
    math)
      bash tests/hw/math_check.sh 2>&1 | tee "$OUT/math_check.log"
      [ "${PIPESTATUS[0]}" = 0 ] || rc=1 ;;
    linalg)  # cuSOLVER's C check and torch.linalg / torch.sparse, natively and through rgpu, compared
      bash tests/hw/linalg_check.sh 2>&1 | tee "$OUT/linalg_check.log"
      [ "${PIPESTATUS[0]}" = 0 ] || rc=1 ;;
    torch)
      shims=/tmp/rgpu-shims
      [ -e $shims/libcublas.so.13 ] || python3 -m rgpu.cli build-shims --out $shims >/dev/null
      port_file=$(mktemp)
      python3 -m rgpu.cli server --port 0 --port-file $port_file --backend cuda --log-level info > "$OUT/torch_server.log" 2>&1 &
      server=$!
      for i in $(seq 150); do [ -s $port_file ] && break; sleep 0.2; done
      export RGPU_PROBE_NO_CUDNN=${RGPU_PROBE_NO_CUDNN:-1}
      echo "--- native (cuDNN off: ${RGPU_PROBE_NO_CUDNN})"; timeout 300 python3 tests/gpu/torch_probe.py 2>&1 | grep -E " (OK|FAIL) "
      echo "--- through rgpu (rgpu run: its libcuda, libcudart, libcublasLt, libcublas, libcudnn preloaded)"
      RGPU_LOG=${RGPU_LOG:-info} timeout 400 python3 -m rgpu.cli run --server 127.0.0.1:$(cat $port_file) --shims $shims -- \
        python3 tests/gpu/torch_probe.py > "$OUT/torch_probe.log" 2>&1
      grep -E " (OK|FAIL) |not supported" "$OUT/torch_probe.log" | sort | uniq -c | sort -rn | head -40
      kill -TERM $server; wait $server ;;
    jax|torchgraphs|expandable)  # the same program natively and through rgpu; outputs must be identical
      shims=/tmp/rgpu-shims
      [ -e $shims/libcublas.so.13 ] || python3 -m rgpu.cli build-shims --out $shims >/dev/null
      case $s in
        jax) probe="python3 tests/gpu/jax_probe.py" ;;
        torchgraphs) probe="python3 tests/gpu/torch_graphs_probe.py" ;;
        expandable) probe="env PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python3 tests/gpu/torch_graphs_probe.py" ;;
      esac
      port_file=$(mktemp)
      python3 -m rgpu.cli server --port 0 --port-file $port_file --backend cuda --log-level info > "$OUT/${s}_server.log" 2>&1 &
      server=$!
      for i in $(seq 150); do [ -s $port_file ] && break; sleep 0.2; done
      timeout 300 $probe > "$OUT/${s}_native.txt" 2>"$OUT/${s}_native.err"; echo "native rc=$?"
      RGPU_LOG=${RGPU_LOG:-warn} timeout 300 python3 -m rgpu.cli run --server 127.0.0.1:$(cat $port_file) --shims $shims -- \
        $probe > "$OUT/${s}_rgpu.txt" 2>"$OUT/${s}_rgpu.err"; echo "rgpu rc=$?"
      kill -TERM $server; wait $server
      if cmp -s "$OUT/${s}_native.txt" "$OUT/${s}_rgpu.txt"; then echo "IDENTICAL $s"; else
        echo "DIFFERENT $s"; rc=1; diff "$OUT/${s}_native.txt" "$OUT/${s}_rgpu.txt" | head -20
        grep -iE "not supported|error" "$OUT/${s}_rgpu.err" "$OUT/${s}_server.log" | sort | uniq -c | sort -rn | head -15; fi ;;
    llama)
      bash bench/llama/run_llama.sh ${LLAMA_SECTIONS:-build native rgpu bench server} || rc=1 ;;
    bridge)
      if [ -d bridge ] && python3 -c "import rgpu.bridge" 2>/dev/null; then
        bash bridge/run_on_gpu.sh 2>&1 | tee "$OUT/bridge.log" || rc=1
      else
        echo "bridge not built yet"
      fi ;;
  esac
done
echo "overall rc=$rc"
exit $rc
