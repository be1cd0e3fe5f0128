#!/usr/bin/env bash
# Two devices natively and through rgpu, compared (issue 19; tests/gpu/run_on_gpu.sh sections multigpu, multigpu2).
#   bash tests/gpu/multigpu_check.sh [one|two]
#   one: one rgpu-server exposing every GPU of this machine (the nvidia-h200-x2 run: needs two GPUs)
#   two: two rgpu-servers on this machine's GPU make the client's two devices (what a one-GPU box can run;
#        natively there, device 0 stands in for device 1, so the programs print the same)
#   default: one where nvidia-smi lists two or more GPUs, else two.
# Runs tests/cuda/multi_device.cu (peer access, cudaMemcpyPeerAsync, a kernel on each device),
# tests/gpu/multigpu_probe.py and tests/gpu/pipeline_probe.py (a model's halves on cuda:0 and cuda:1, trained a
# few steps) natively and through rgpu, whose outputs must be identical, then bench/peer_bandwidth.py (GB/s
# natively and through rgpu, the ratio, and free memory per device equal to the byte after killed sessions).
# Outputs land in $OUT/multigpu_*; the summary is printed and written to $OUT/multigpu_summary.txt.
# Exit status 1 if anything failed. MULTIGPU_SERVER_ARGS: more rgpu-server options (a dry run of the plumbing
# without a GPU: MULTIGPU_SERVER_ARGS="--backend fake --fake-devices 2"; the native runs then fail).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/rgpu-out}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0  # never NVLink multicast (the x2 machines' rule)
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
mode=${1:-$([ "$gpus" -ge 2 ] && echo one || echo two)}
shims=/tmp/rgpu-shims
[ -e $shims/libcublas.so.13 ] || python3 -m rgpu.cli build-shims --out $shims >/dev/null || exit 1
rc=0
summary="$OUT/multigpu_summary.txt"
echo "multigpu check, mode $mode ($gpus GPU(s) here): $(date -u +%FT%TZ)" > "$summary"
say() { echo "$*" | tee -a "$summary"; }

servers=() pids=()
start_server() {  # a cuda-backend rgpu-server; appends its address to servers
  local pf log="$OUT/multigpu_server_${#servers[@]}.log"
  pf=$(mktemp -u)
  python3 -m rgpu.cli server --port 0 --port-file "$pf" --backend cuda --log-level info ${MULTIGPU_SERVER_ARGS:-} \
    > "$log" 2>&1 &
  pids+=($!)
  for _ in $(seq 300); do [ -s "$pf" ] && break; sleep 0.2; done
  [ -s "$pf" ] || { cat "$log"; say "FAIL: server did not start"; exit 1; }
  servers+=("127.0.0.1:$(cat "$pf")")
}
start_server
[ "$mode" = two ] && start_server
server=$(IFS=,; echo "${servers[*]}")
rgpu_run=(python3 -m rgpu.cli run --server "$server" --shims $shims --)
python3 -m rgpu.cli info --server "$server" | tee -a "$summary" || rc=1
if [ "$mode" = two ]; then  # device addresses name their server on the client: the servers' must not overlap
  python3 -c "
import rgpu, sys
a, b = (rgpu.connect(s) for s in sys.argv[1].split(','))
pa, pb = a.mem_alloc(1 << 20), b.mem_alloc(1 << 20)
print('first allocations', hex(pa), hex(pb), 'disjoint' if abs(pa - pb) >= 1 << 20 else 'OVERLAP')
" "$server" | tee -a "$summary"
  grep -q "disjoint$" "$summary" || rc=1
fi

# compare NAME PATTERN MUST -- COMMAND...: COMMAND natively and through rgpu; the lines matching PATTERN must be
# identical, and the rgpu run must print MUST on stdout and "devices: 2" or "devices=2" somewhere.
compare() {
  local name=$1 pattern=$2 must=$3 base="$OUT/multigpu_$1"
  shift 4
  timeout 600 "$@" > "$base.native.txt" 2> "$base.native.err"
  local native_rc=$?
  RGPU_LOG=${RGPU_LOG:-warn} timeout 600 "${rgpu_run[@]}" "$@" > "$base.rgpu.txt" 2> "$base.rgpu.err"
  local rgpu_rc=$?
  if [ $native_rc = 0 ] && [ $rgpu_rc = 0 ] && grep -q "$must" "$base.rgpu.txt" \
      && grep -qE "devices(: |=)2" "$base.rgpu.txt" "$base.rgpu.err" \
      && cmp -s <(grep -E "$pattern" "$base.native.txt") <(grep -E "$pattern" "$base.rgpu.txt"); then
    say "IDENTICAL $name ($(grep -cE "$pattern" "$base.rgpu.txt") lines)"
  else
    say "DIFFERENT $name (native rc=$native_rc, rgpu rc=$rgpu_rc)"
    rc=1
    diff <(grep -E "$pattern" "$base.native.txt") <(grep -E "$pattern" "$base.rgpu.txt") | head -20
    tail -5 "$base.rgpu.err"
    grep -hiE "not supported|error|overlaps" "$base.rgpu.err" "$OUT"/multigpu_server_*.log | sort | uniq -c \
      | sort -rn | head -15
  fi
}

nvcc -cudart shared -o /tmp/multi_device tests/cuda/multi_device.cu || { say "FAIL: nvcc"; exit 1; }
compare cuda_program "result" "multi_device OK devices=2" -- /tmp/multi_device
compare torch_devices "." "multigpu probe done" -- python3 tests/gpu/multigpu_probe.py
compare torch_pipeline "." "pipeline probe done" -- python3 tests/gpu/pipeline_probe.py
grep "^step" "$OUT/multigpu_torch_pipeline.rgpu.txt" | tail -2 | tee -a "$summary"

python3 bench/peer_bandwidth.py --server "$server" --shims $shims --teardown \
  --json "$OUT/multigpu_peer_bandwidth.json" > "$OUT/multigpu_peer_bandwidth.txt" 2>&1 || rc=1
grep -vE "^devices:" "$OUT/multigpu_peer_bandwidth.txt" | tee -a "$summary"

kill -TERM "${pids[@]}"
wait "${pids[@]}"
if grep -E " ERROR |Traceback" "$OUT"/multigpu_server_*.log; then say "FAIL: errors in the server logs"; rc=1; fi
say "multigpu check ($mode): $([ $rc = 0 ] && echo OK || echo FAILED)"
exit $rc
