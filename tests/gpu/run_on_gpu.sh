#!/usr/bin/env bash
# Everything that needs the GPU, in one command on the GPU box (device tool), with the missing Python
# packages carried as wheels in .whl/ (`bash tools/gpu_carry.sh` makes it, with .hdr/ and .llama/). Logs land in $OUT.
#   bash tests/gpu/run_on_gpu.sh [sections...]
#   sections: info tests suite demo bench bridge shim runtime printf math torch jax torchgraphs expandable llama
#             multigpu multigpu2 fft rand linalg sdpa jaxauto jaxloops jaxloopscb
#   (default: info tests suite demo bench bridge shim runtime printf)
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/rgpu-out}
mkdir -p "$OUT"
source tools/gpu_setup.sh || exit 1
sections=${*:-info tests suite demo bench bridge shim runtime printf}
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
      RGPU_TEST_BACKEND=cuda python3 -m pytest -q -p no:cacheprovider tests/test_runtime.py tests/test_cuda_programs.py tests/test_graphs.py tests/test_graph_host.py 2>&1 | tail -3
      [ "${PIPESTATUS[0]}" = 0 ] || rc=1 ;;
    printf)  # kernel printf reaches the program: its stdout (a file: C's stdout fully buffered) native vs rgpu
      shims=/tmp/rgpu-shims
      [ -e $shims/libcudart.so.13 ] || python3 -m rgpu.cli build-shims --out $shims >/dev/null
      nvcc -cudart shared -o /tmp/rgpu-printf tests/cuda/printf.cu || rc=1
      port_file=$(mktemp)
      python3 -m rgpu.cli server --port 0 --port-file $port_file --backend cuda --log-level info > "$OUT/printf_server.log" 2>&1 &
      server=$!
      for i in $(seq 150); do [ -s $port_file ] && break; sleep 0.2; done
      timeout 120 /tmp/rgpu-printf > "$OUT/printf_native.txt"; echo "native rc=$?"
      timeout 120 python3 -m rgpu.cli run --server 127.0.0.1:$(cat $port_file) --shims $shims -- /tmp/rgpu-printf \
        > "$OUT/printf_rgpu.txt"; echo "rgpu rc=$?"
      nvcc -ptx -o /tmp/rgpu-printf.ptx tests/cuda/printf.cu && timeout 120 python3 - 127.0.0.1:$(cat $port_file) <<'PY' || rc=1
import sys, rgpu
out = []
with rgpu.connect(sys.argv[1], output=out.append) as c:  # the Python client: output to a callable
    f = c.get_function(c.module_load(open("/tmp/rgpu-printf.ptx", "rb").read()), "_Z11printf_demoi")
    c.launch(f, 1, 2, (5,))
    c.synchronize()
got = b"".join(out).decode()
ok = got == "".join(f"printf_demo: block 0 thread {t} tag 5\n" for t in range(2))
print("python client:", "OK" if ok else f"WRONG {got!r}")
sys.exit(0 if ok else 1)
PY
      kill -TERM $server; wait $server
      cat "$OUT/printf_rgpu.txt"
      if cmp -s "$OUT/printf_native.txt" "$OUT/printf_rgpu.txt" && grep -q "printf_demo: block 0 thread 3 tag 7" "$OUT/printf_rgpu.txt"
      then echo "IDENTICAL printf"; else echo "DIFFERENT printf"; rc=1; diff "$OUT/printf_native.txt" "$OUT/printf_rgpu.txt"; fi
      if grep -q printf_demo "$OUT/printf_server.log"; then echo "kernel output also in the server's log"; rc=1; fi ;;
    math)
      bash tests/hw/math_check.sh 2>&1 | tee "$OUT/math_check.log"
      [ "${PIPESTATUS[0]}" = 0 ] || rc=1 ;;
    rand)  # cuRAND and the cuBLAS additions: C checks and a torch probe, natively and through rgpu, compared
      OUT=$OUT bash tests/gpu/rand_check.sh 2>&1 | tee "$OUT/rand.log"
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
    jax|jaxloops|jaxloopscb|torchgraphs|expandable|sdpa)  # the same program natively and through rgpu; outputs must be identical
      shims=/tmp/rgpu-shims
      [ -e $shims/libcublas.so.13 ] || python3 -m rgpu.cli build-shims --out $shims >/dev/null
      xla=${XLA_FLAGS:-}
      case $s in
        # XLA's autotuner picks GEMM algorithms by timing, so even two native runs may differ in the last bits:
        # byte-for-byte with it off; `jaxauto` runs the default configuration and compares within a tolerance.
        jax) probe="python3 tests/gpu/jax_probe.py" xla="--xla_gpu_autotune_level=0" ;;
        # jaxloopscb: XLA's command buffers forced onto every kind of command, loops and branches included
        # (CUDA graph conditional nodes), and onto graphs of any size
        jaxloops) probe="python3 tests/gpu/jax_loops_probe.py" xla="--xla_gpu_autotune_level=0" ;;
        jaxloopscb) probe="python3 tests/gpu/jax_loops_probe.py"
          xla="--xla_gpu_autotune_level=0 --xla_gpu_graph_min_graph_size=1"
          xla="$xla --xla_gpu_enable_command_buffer=FUSION,CUBLAS,CUBLASLT,CUSTOM_CALL,CUDNN,WHILE,CONDITIONAL" ;;
        torchgraphs) probe="python3 tests/gpu/torch_graphs_probe.py" ;;
        expandable) probe="env PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python3 tests/gpu/torch_graphs_probe.py" ;;
        sdpa) probe="python3 tests/gpu/sdpa_probe.py" ;;
      esac
      port_file=$(mktemp)
      python3 -m rgpu.cli server --port 0 --port-file $port_file --backend cuda --log-level info > "$OUT/${s}_server.log" 2>&1 &
      server=$!
      for i in $(seq 150); do [ -s $port_file ] && break; sleep 0.2; done
      XLA_FLAGS=$xla timeout 300 $probe > "$OUT/${s}_native.txt" 2>"$OUT/${s}_native.err"; echo "native rc=$?"
      XLA_FLAGS=$xla RGPU_LOG=${RGPU_LOG:-warn} timeout 300 python3 -m rgpu.cli run --server 127.0.0.1:$(cat $port_file) \
        --shims $shims -- $probe > "$OUT/${s}_rgpu.txt" 2>"$OUT/${s}_rgpu.err"; echo "rgpu rc=$?"
      kill -TERM $server; wait $server
      if cmp -s "$OUT/${s}_native.txt" "$OUT/${s}_rgpu.txt"; then echo "IDENTICAL $s"; else
        echo "DIFFERENT $s"; rc=1; diff "$OUT/${s}_native.txt" "$OUT/${s}_rgpu.txt" | head -20
        grep -iE "not supported|error" "$OUT/${s}_rgpu.err" "$OUT/${s}_server.log" | sort | uniq -c | sort -rn | head -15; fi ;;
    jaxauto)  # JAX's default configuration (autotuning on: kernels given page-locked memory, the delay kernel)
      shims=/tmp/rgpu-shims
      [ -e $shims/libcublas.so.13 ] || python3 -m rgpu.cli build-shims --out $shims >/dev/null
      port_file=$(mktemp)
      python3 -m rgpu.cli server --port 0 --port-file $port_file --backend cuda --log-level info > "$OUT/jaxauto_server.log" 2>&1 &
      server=$!
      for i in $(seq 150); do [ -s $port_file ] && break; sleep 0.2; done
      for run in native native2; do timeout 300 python3 tests/gpu/jax_probe.py > "$OUT/jaxauto_$run.txt" 2>/dev/null; done
      RGPU_LOG=${RGPU_LOG:-warn} timeout 300 python3 -m rgpu.cli run --server 127.0.0.1:$(cat $port_file) --shims $shims -- \
        python3 tests/gpu/jax_probe.py > "$OUT/jaxauto_rgpu.txt" 2>"$OUT/jaxauto_rgpu.err"; echo "rgpu rc=$?"
      kill -TERM $server; wait $server
      python3 - "$OUT" <<'PY' || rc=1
import re, sys
def losses(name):
    return [float(x) for x in re.findall(r"loss (\S+)", open(f"{sys.argv[1]}/jaxauto_{name}.txt").read())]
a, a2, b = losses("native"), losses("native2"), losses("rgpu")
rel = lambda x, y: max((abs(p - q) / abs(p) for p, q in zip(x, y)), default=float("inf"))
print(f"jaxauto: {len(b)} of {len(a)} steps through rgpu; max relative difference native/native {rel(a, a2):.2e}, "
      f"native/rgpu {rel(a, b):.2e}")
sys.exit(0 if a and len(a) == len(b) and rel(a, b) < 1e-5 else 1)
PY
      ;;
    multigpu|multigpu2)  # two devices natively and through rgpu, compared (tests/gpu/multigpu_check.sh):
      # multigpu: two rgpu-servers on this GPU make the two devices; multigpu2: one server exposing two GPUs
      # where there are two (the nvidia-h200-x2 run), else the same as multigpu
      OUT=$OUT bash tests/gpu/multigpu_check.sh $([ $s = multigpu ] && echo two) || rc=1 ;;
    fft)  # cuFFT: tests/cuda/fft_check.c and torch.fft natively (NVIDIA's libcufft) and through rgpu, identical
      shims=/tmp/rgpu-shims
      python3 -m rgpu.cli build-shims --out $shims >/dev/null || { rc=1; continue; }
      nvlib=$(python3 -c "import nvidia, os; print(next(os.path.join(p, 'cu13', 'lib') for p in nvidia.__path__ if os.path.exists(os.path.join(p, 'cu13', 'lib', 'libcufft.so.12'))))")
      gcc -O1 -Wall -o /tmp/fft_check tests/cuda/fft_check.c -L$shims -l:libcudart.so.13 -l:libcufft.so.12 -lm \
        -Wl,-rpath-link,$shims || { rc=1; continue; }
      port_file=$(mktemp)
      python3 -m rgpu.cli server --port 0 --port-file $port_file --backend cuda --log-level info > "$OUT/fft_server.log" 2>&1 &
      server=$!
      for i in $(seq 150); do [ -s $port_file ] && break; sleep 0.2; done
      rgpu_run="python3 -m rgpu.cli run --server 127.0.0.1:$(cat $port_file) --shims $shims --"
      for probe in fft_check torch; do
        case $probe in fft_check) cmd=/tmp/fft_check ;; torch) cmd="python3 tests/gpu/fft_probe.py" ;; esac
        LD_LIBRARY_PATH=$nvlib:${LD_LIBRARY_PATH:-} timeout 300 $cmd > "$OUT/fft_${probe}_native.txt" 2>"$OUT/fft_${probe}_native.err"
        echo "$probe native rc=$?"
        RGPU_LOG=${RGPU_LOG:-warn} timeout 300 $rgpu_run $cmd > "$OUT/fft_${probe}_rgpu.txt" 2>"$OUT/fft_${probe}_rgpu.err"
        echo "$probe rgpu rc=$?"
        if cmp -s "$OUT/fft_${probe}_native.txt" "$OUT/fft_${probe}_rgpu.txt"; then echo "IDENTICAL $probe"; else
          echo "DIFFERENT $probe"; rc=1; diff "$OUT/fft_${probe}_native.txt" "$OUT/fft_${probe}_rgpu.txt" | head -30; fi
        grep -E " (OK|FAIL|MISMATCH|ACCEPTED)|fft_(check|probe)" "$OUT/fft_${probe}_rgpu.txt" | tail -3
      done
      echo "--- fft_check --hostile through rgpu (what only the server can refuse)"
      timeout 300 $rgpu_run /tmp/fft_check --hostile > "$OUT/fft_hostile.txt" 2>&1 || rc=1
      tail -8 "$OUT/fft_hostile.txt"
      kill -TERM $server; wait $server
      grep -iE "not supported|error|refused" "$OUT/fft_server.log" "$OUT"/fft_*_rgpu.err | sort | uniq -c | sort -rn | head -15 ;;
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
