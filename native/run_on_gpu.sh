#!/usr/bin/env bash
# The driver shim on the GPU box: build it there, run the examples through rgpu (cuda backend) and natively,
# with PTX, cubin and fatbin images built by nvcc, then the native-vs-rgpu benchmark.
set -uo pipefail
rc=0
shims=/tmp/rgpu-shims
python3 -m rgpu.cli build-shims --out $shims || exit 1
img=/tmp/rgpu-images; mkdir -p $img
src=src/rgpu/kernels/demo.cu
cp src/rgpu/kernels/demo.ptx $img/demo.ptx
nvcc --cubin -arch=sm_90 -o $img/demo.cubin $src
nvcc --fatbin -gencode arch=compute_90,code=sm_90 -gencode arch=compute_75,code=compute_75 -o $img/demo.fatbin $src
nvcc --fatbin -Xfatbin --compress-all -gencode arch=compute_90,code=sm_90 -o $img/demo_compressed.fatbin $src
port_file=$(mktemp)
python3 -m rgpu.cli server --port 0 --port-file $port_file --backend cuda --log-level warning &
server=$!
for i in $(seq 100); do [ -s $port_file ] && break; sleep 0.2; done
export RGPU_SERVER=127.0.0.1:$(cat $port_file)
LD_LIBRARY_PATH=$shims $shims/rpc_smoke || rc=1
for image in $img/*; do
  echo "--- $(basename $image): native, then through rgpu"
  env -u LD_LIBRARY_PATH $shims/vecadd $image 4194304 || rc=1
  LD_LIBRARY_PATH=$shims $shims/vecadd $image 4194304 || rc=1
done
python3 -m rgpu.cli doctor --shims $shims -- $shims/rpc_smoke || rc=1
kill -TERM $server; wait $server; echo "rgpu-server exit code $?"
python3 bench/shim_bench.py --backend cuda --psk --shims $shims || rc=1
exit $rc
