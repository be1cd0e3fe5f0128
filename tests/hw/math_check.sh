#!/usr/bin/env bash
# Standalone math-library checks on the GPU box, once natively (NVIDIA's cuBLAS/cuBLASLt) and once through rgpu
# (its stand-ins + rgpu-server --backend cuda), every result compared with a CPU reference by the program itself
# (tests/cuda/blas_check.c: GEMM family and cuBLASLt; tests/cuda/dnn_check.c: a backend-graph convolution,
# batch norm: inference, training, and training fused with an addition and ReLU in half NHWC).
set -uo pipefail
cd "$(dirname "$0")/../.."
shims=${RGPU_SHIMS:-/tmp/rgpu-shims}
[ -e $shims/libcudnn.so.9 ] || python3 -m rgpu.cli build-shims --out $shims >/dev/null || exit 1
nvlib=$(python3 -c "
import nvidia, os
print(next(os.path.join(p, 'cu13', 'lib') for p in nvidia.__path__
           if os.path.exists(os.path.join(p, 'cu13', 'lib', 'libcublas.so.13'))))")
dnnlib=$(python3 -c "
import nvidia, os
print(next(os.path.join(p, 'cudnn', 'lib') for p in nvidia.__path__
           if os.path.exists(os.path.join(p, 'cudnn', 'lib', 'libcudnn.so.9'))))")
cudalib=$(dirname "$(readlink -f /usr/local/cuda/lib64/libcudart.so.13)")
gcc -O1 -o /tmp/blas_check tests/cuda/blas_check.c -L$shims -l:libcudart.so.13 -l:libcublas.so.13 \
    -l:libcublasLt.so.13 -lm -Wl,-rpath-link,$shims || exit 1
gcc -O1 -Inative/gen -o /tmp/dnn_check tests/cuda/dnn_check.c -L$shims -l:libcudart.so.13 -l:libcudnn.so.9 -lm \
    -Wl,-rpath-link,$shims || exit 1
rc=0
echo "--- native: NVIDIA cuBLAS from $nvlib, cuDNN from $dnnlib"
LD_LIBRARY_PATH=$nvlib:$dnnlib:$cudalib /tmp/blas_check || rc=1
LD_LIBRARY_PATH=$nvlib:$dnnlib:$cudalib /tmp/dnn_check || rc=1
port_file=$(mktemp)
python3 -m rgpu.cli server --port 0 --port-file $port_file --backend cuda --log-level warning &
server=$!
for i in $(seq 150); do [ -s $port_file ] && break; sleep 0.2; done
echo "--- through rgpu"
RGPU_SERVER=127.0.0.1:$(cat $port_file) LD_LIBRARY_PATH=$shims /tmp/blas_check || rc=1
RGPU_SERVER=127.0.0.1:$(cat $port_file) LD_LIBRARY_PATH=$shims /tmp/dnn_check || rc=1
kill -TERM $server; wait $server
exit $rc
