#!/usr/bin/env bash
# The runtime shim on the GPU box. Every program in tests/cuda and tests/cuda/gpu, built with
# `nvcc -cudart shared` in several flavours, runs three ways and must print the same thing each time:
#   native  CUDA's own runtime and driver
#   ourrt   rgpu's libcudart on the real driver (checks the runtime apart from the wire)
#   rgpu    rgpu's libcudart + libcuda.so.1 shim + rgpu-server --backend cuda over loopback
# Then runtime_abi.c against both sonames, and bench/cudart_launch.cu natively vs through rgpu.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/rgpu-out}
mkdir -p "$OUT"
shims=/tmp/rgpu-shims rtonly=/tmp/rgpu-rtonly bin=/tmp/rgpu-cuda-bin
python3 -m rgpu.cli build-shims --out $shims >/dev/null || exit 1
mkdir -p $rtonly $bin
cp $shims/libcudart.so.12 $shims/libcudart.so.13 $rtonly/
native_lib=$(dirname "$(readlink -f /usr/local/cuda/lib64/libcudart.so.13)")
declare -A flavours=(
  [default]=""
  [sm90]="-arch=sm_90"
  [sass_only]="-gencode arch=compute_90,code=sm_90"
  [compressed]="-arch=sm_90 -Xfatbin --compress-all"
  [per_thread]="--default-stream per-thread"
)
# (RGPU_CHECK_PROGRAMS: a subset, to check a fix without the whole run)
programs=${RGPU_CHECK_PROGRAMS:-"vector_add streams_events mixed_params memory_2d device_info big_params vmm mixed_contexts occupancy blas_batched pools library launch_attributes graphs graph_api graph_generic graph_host graph_memory graph_control pinned_uva tensor_map cooperative stream_info memory_3d clusters stream_attributes stream_memops jit_link textures ipc memcpy_batch legacy_launch managed managed_vars gpu/templates gpu/many_kernels"}
for p in $programs; do
  for f in "${!flavours[@]}"; do
    nvcc -cudart shared ${flavours[$f]} -o $bin/$(basename $p).$f tests/cuda/$p.cu -lcuda -lcublas &  # (some call the driver, cuBLAS)
  done
done
nvcc -cudart shared -arch=sm_90 -o $bin/cudart_launch bench/cudart_launch.cu &
wait
port_file=$(mktemp)
# (RGPU_SERVER_ARGS: more server options; with "--psk-file F" and RGPU_PSK_FILE=F every session is sealed)
python3 -m rgpu.cli server --port 0 --port-file $port_file --backend cuda --log-level info ${RGPU_SERVER_ARGS:-} \
  > "$OUT/runtime_server.log" 2>&1 &
server=$!
for i in $(seq 150); do [ -s $port_file ] && break; sleep 0.2; done
export RGPU_SERVER=127.0.0.1:$(cat $port_file)
rc=0 same=0 total=0
printf "%-16s %-11s %6s %6s %6s  %s\n" program flavour native ourrt rgpu "identical output"
for p in $programs; do
  for f in $(echo "${!flavours[@]}" | tr ' ' '\n' | sort); do
    exe=$bin/$(basename $p).$f
    n_out=$(LD_LIBRARY_PATH=$native_lib timeout 120 $exe 2>&1); n_rc=$?
    o_out=$(LD_LIBRARY_PATH=$rtonly:$native_lib timeout 120 $exe 2>&1); o_rc=$?  # (NVIDIA cuBLAS for blas_batched)
    r_out=$(LD_LIBRARY_PATH=$shims timeout 120 $exe 2>&1); r_rc=$?
    total=$((total + 1))
    if [ "$n_out" = "$o_out" ] && [ "$n_out" = "$r_out" ] && [ $n_rc = 0 ]; then verdict=yes; same=$((same + 1)); else verdict=NO; rc=1; fi
    printf "%-16s %-11s %6s %6s %6s  %s\n" $(basename $p) $f $n_rc $o_rc $r_rc $verdict
    if [ $verdict = NO ]; then
      echo "   native: $n_out" | head -5; echo "   ourrt:  $o_out" | head -5; echo "   rgpu:   $r_out" | head -5
    fi
  done
done
echo "identical on all three paths: $same of $total"
for major in 12 13; do
  gcc -O1 -Wno-deprecated-declarations -I"$(python3 -c "from rgpu import shims; print(shims.cuda_include($major))")" \
      -I"$(python3 -c "from rgpu import shims; print(shims.crt_include())")" -o $bin/runtime_abi$major \
      tests/cuda/runtime_abi.c -L$shims -l:libcudart.so.$major -Wl,-rpath-link,$shims || rc=1
  echo "--- runtime_abi against libcudart.so.$major: rgpu's runtime on the real driver, then through rgpu"
  LD_LIBRARY_PATH=$rtonly $bin/runtime_abi$major src/rgpu/kernels/demo.ptx || rc=1
  LD_LIBRARY_PATH=$shims $bin/runtime_abi$major src/rgpu/kernels/demo.ptx || rc=1
done
echo "--- cudart launch benchmark (same binary, 20000 empty launches)"
nat=$(LD_LIBRARY_PATH=$native_lib $bin/cudart_launch 20000); echo "native: $nat"
rg=$(LD_LIBRARY_PATH=$shims $bin/cudart_launch 20000); echo "rgpu:   $rg"
python3 - "$nat" "$rg" <<'PY'
import re, sys
def f(s, k): return float(re.search(k + r"=([\d.]+)", s).group(1))
n, r = sys.argv[1], sys.argv[2]
print(f"launch rate rgpu/native: {f(r, 'launches_per_s') / f(n, 'launches_per_s'):.1%}; "
      f"sync round trip {f(r, 'sync_us'):.1f} us vs {f(n, 'sync_us'):.2f} us native")
PY
kill -TERM $server; wait $server; echo "rgpu-server exit code $?"
grep -E "WARNING|ERROR|not supported" "$OUT/runtime_server.log" | head -20
exit $rc
