#!/usr/bin/env bash
# One GPU run (under 10 minutes on the H200 box) that checks the worker's C request loop end to end and measures
# it against Python's loop in the same run, beside the PyTorch workloads and llama.cpp; every output lands in
# $OUT/check-<sections>.tgz (the device tool returns few files: one archive). Carry .whl .hdr .llama
# (tools/gpu_carry.sh). All of it takes more than one call may (10 minutes): two calls on the same warm machine,
#   bash bench/gpu_check.sh programs loop        (llama.cpp builds meanwhile, for the second call)
#   bash bench/gpu_check.sh llama workloads      (llama-bench, completions and what one repetition asks; clientprof:
#                                                 where the program's own time goes, RGPU_CLIENT_PROFILE)
# or, without llama.cpp, RGPU_CHECK_NO_BUILD=1 bash bench/gpu_check.sh programs copies (the C loop's copies against
# Python's: decode steps, 600 KB logits back, 512 KiB prompt inputs, the Python client's 1 and 64 MiB copies).
# Section rtt: ResNet-18 b1 and the GPT step at 0, 100, 500 and 2000 us of injected round-trip time; psk: the
# Python client's copies with a pre-shared key; psktoken: bench/token_loop.py's shapes through the C stand-ins with
# a PSK (the C loop, then Python's) beside plain (RGPU_CHECK_PSKTOKEN_SHAPES: which of decode logits prompt bulk;
# RGPU_CHECK_TOKEN_ROUNDS: rounds of each token_loop run); RGPU_CHECK_LLAMA_PSK=1: llama.cpp through rgpu with a
# PSK; dispatch: bench/dispatch_bench.py (the worker's cost per deferred
# record, cuDNN's batch norm among them, against the backend's call alone; RGPU_CHECK_DISPATCH_ARGS adds options,
# e.g. "--only DNN_BN_INFERENCE --profile"). RGPU_CHECK_LLAMA_ROUNDS (1): llama-bench rounds; RGPU_CHECK_PERREP=1
# adds run_llama.sh perrep (its operation counts per repetition hold, its times are differences between two
# sessions and have come out negative). Section streams: bench/tcp_streams.c, one upload split over 1, 2, 4 and 8
# connections (512 KiB, 1 and 8 MiB; without and with polling): the ceiling of copy links. Section links: token_loop's
# prompt-shaped steps without and with RGPU_COPY_LINKS=4 (RGPU_CHECK_COPY_LINKS), plain and with a PSK, two rounds;
# then llama.cpp through rgpu with the links, natively beside it (section llama is the run without). Section ab:
# llama-bench with a client setting ($RGPU_CHECK_AB: RGPU_CODED_COPIES, the default, or RGPU_BATCH_GRAPH) 0, then 1,
# alternating rounds. Section peers: bench/workloads.py's gpt_decode_graph (a token a step from a CUDA graph, as vLLM
# decodes) and jax_mlp_train, at 0 and 500 us of injected round-trip time.
set -uo pipefail
cd "$(dirname "$0")/.."
FINAL=${OUT:-/tmp/rgpu-out}
sections=${*:-programs loop workloads llama}
BACKEND=${RGPU_CHECK_BACKEND:-cuda}  # (fake: a dry run of the loop section on a machine without a GPU)
name=check-$(echo $sections | tr ' ' '-')
export OUT=$FINAL/$name
mkdir -p "$OUT"
# (a dry run on the fake backend uses the Python environment it is started in)
RGPU_SETUP_WHEELS=$([ "$BACKEND" = fake ] && echo 0 || echo 1) source tools/gpu_setup.sh || exit 1
# (the box's copy of .git may be older than the tree it runs: tools/tree_id.sh names the code itself)
{ git log --oneline -1; echo "tree $(bash tools/tree_id.sh)"; } > "$OUT/commit.txt" 2>/dev/null
build=
if [[ " $sections " == *" programs "* ]]; then
  # llama.cpp builds (16 cores, ~270 s alone) while the CUDA programs run through rgpu; the loop section waits for
  # it (a build beside it would swamp its timings), and a later call finds it built.
  if [ "${RGPU_CHECK_NO_BUILD:-0}" != 1 ]; then
    (timeout 420 bash bench/llama/run_llama.sh build > "$OUT/llama_build.log" 2>&1; echo "rc=$?" >> "$OUT/llama_build.log") &
    build=$!
  fi
  (timeout ${RGPU_CHECK_PROGRAMS_TIMEOUT:-300} bash tests/cuda/run_on_gpu.sh > "$OUT/cuda_programs.txt" 2>&1; echo "rc=$?" >> "$OUT/cuda_programs.txt")
  grep -E "identical on all|launch rate|^rc=" "$OUT/cuda_programs.txt" | tail -3
fi
[ -n "$build" ] && { wait $build; tail -2 "$OUT/llama_build.log"; }
# bench/token_loop.py through RGPU_NATIVE_LOOP=$1 (1: the C loop, 0: Python's), with its options after that. The
# stand-ins and token_loop are built from this tree once per call: a warm machine may hold an older tree's.
token_loop_built=
token_loop() {
  if [ -z "$token_loop_built" ]; then
    python3 -m rgpu.cli build-shims --out /tmp/rgpu-shims > /dev/null && nvcc -cudart shared -o /tmp/token_loop \
      bench/token_loop.cu && token_loop_built=1
  fi
  local nl=$1; shift
  RGPU_NATIVE_LOOP=$nl timeout 60 python3 bench/token_loop.py --backend $BACKEND --shims /tmp/rgpu-shims \
    --exe /tmp/token_loop --rounds ${RGPU_CHECK_TOKEN_ROUNDS:-1} "$@"
}
if [[ " $sections " == *" loop "* ]]; then  # the C loop against Python's, alternating
  for round in 1 2; do
    for nl in 1 0; do
      # the Python client's null call against the C echo floor, then the C stand-ins' (cuMemGetInfo) beside it
      RGPU_NATIVE_LOOP=$nl timeout 120 python3 bench/rpc_bench.py --backend $BACKEND --calls 5000 --launches 20000 \
        --sizes 4K,1M --with-shim > "$OUT/rpc_nl${nl}_r$round.txt" 2>&1
      token_loop $nl > "$OUT/token_nl${nl}_r$round.txt" 2>&1
      # prompt-shaped (512 KiB of input per step, as llama.cpp's pp128 on the small model), and 64 MiB steps
      token_loop $nl --tokens 300 --prompt-bytes 524288 > "$OUT/prompt_nl${nl}_r$round.txt" 2>&1
      token_loop $nl --tokens 10 --prompt-bytes 67108864 > "$OUT/bulk_nl${nl}_r$round.txt" 2>&1
    done
  done
  grep -H "null call p50 vs C\|^rgpu batched " "$OUT"/rpc_nl*; grep -H "us per token" "$OUT"/token_nl* "$OUT"/prompt_nl* "$OUT"/bulk_nl*
fi
if [[ " $sections " == *" copies "* ]]; then  # copies through the C loop against Python's: one round each
  for nl in 1 0 1 0; do
    for shape in "decode --tokens 1000" "logits --logits-bytes 607744" "prompt --tokens 300 --prompt-bytes 524288"; do
      token_loop $nl ${shape#* } >> "$OUT/${shape%% *}_nl$nl.txt" 2>&1
    done
  done
  grep -H "us per token" "$OUT"/decode_nl* "$OUT"/logits_nl* "$OUT"/prompt_nl*
  for nl in 1 0; do  # the Python client's copies (synchronous: streamed in C since 51402ca) against C TCP
    RGPU_NATIVE_LOOP=$nl timeout 90 python3 bench/rpc_bench.py --backend $BACKEND --calls 2000 --launches 5000 \
      --sizes 1M,64M > "$OUT/copies_rpc_nl$nl.txt" 2>&1
  done
  grep -H "vs same-size C copy" "$OUT"/copies_rpc_nl*
fi
if [[ " $sections " == *" streams "* ]]; then  # an upload split over 1-8 TCP connections (bench/tcp_streams.c)
  gcc -O2 -pthread -o /tmp/tcp_streams bench/tcp_streams.c && for spin in 0 300; do
    for size in 524288 1048576 8388608; do /tmp/tcp_streams $size $spin 1 2 4 8; done
  done > "$OUT/streams.txt" 2>&1; cat "$OUT/streams.txt"
fi
if [[ " $sections " == *" workloads "* ]]; then
  timeout 300 python3 bench/workloads.py --only resnet18_b1,resnet18_b32,gpt_small_train --steps 20 --rounds 3 --rtt-us 0 \
    > "$OUT/workloads.txt" 2>&1; grep -E "^(resnet|gpt)|rounds \(" "$OUT/workloads.txt"
fi
if [[ " $sections " == *" peers "* ]]; then  # what the peers are measured on: a CUDA-graph decode (vLLM's way), JAX
  timeout 400 python3 bench/workloads.py --only gpt_decode_graph,jax_mlp_train --steps 200 --warmup 20 --rounds 3 \
    --rtt-us 0,500 > "$OUT/peers.txt" 2>&1; grep -E "^(gpt|jax)|rounds \(|error" "$OUT/peers.txt"
fi
if [[ " $sections " == *" rtt "* ]]; then  # the issue's RTT sweep: native + 3 round trips at 500 us is the bar
  timeout 400 python3 bench/workloads.py --only gpt_small_train,resnet18_b1 --steps 20 --rtt-us 0,100,500,2000 \
    > "$OUT/rtt.txt" 2>&1; grep -E "^(gpt|resnet)" "$OUT/rtt.txt"
fi
if [[ " $sections " == *" psktoken "* ]]; then  # the C stand-ins with a PSK: C's loop sealed, against plain
  for shape in "decode --tokens 1000" "logits --tokens 300 --logits-bytes 607744" \
               "prompt --tokens 300 --prompt-bytes 524288" "bulk --tokens 10 --prompt-bytes 67108864"; do
    [[ " ${RGPU_CHECK_PSKTOKEN_SHAPES:-decode logits prompt bulk} " == *" ${shape%% *} "* ]] || continue
    for run in "1 " "1 --psk" "0 --psk"; do
      token_loop $run ${shape#* } > "$OUT/psktoken_${shape%% *}_nl${run%% *}${run#* }.txt" 2>&1
    done
  done
  grep -H "us per token" "$OUT"/psktoken_*
fi
if [[ " $sections " == *" llama "* ]]; then
  [ -x /tmp/llama/build/bin/llama-bench ] || timeout 420 bash bench/llama/run_llama.sh build > "$OUT/llama_build.log" 2>&1
  if [ "${RGPU_CHECK_LLAMA_PSK:-0}" = 1 ]; then  # through rgpu with a pre-shared key (record protection)
    python3 -c "import os; print(os.urandom(32).hex())" > /tmp/rgpu-check.psk && chmod 600 /tmp/rgpu-check.psk
    export RGPU_PSK_FILE=/tmp/rgpu-check.psk RGPU_SERVER_ARGS="--psk-file /tmp/rgpu-check.psk"
  fi
  # RGPU_CHECK_LLAMA_ROUNDS rounds of llama-bench (native and rgpu alternating; about 20 s a round)
  LLAMA_BENCH_ROUNDS=${RGPU_CHECK_LLAMA_ROUNDS:-1} LLAMA_BENCH_MODELS="small-q8_0" timeout 200 \
    bash bench/llama/run_llama.sh native rgpu bench > "$OUT/llama.txt" 2>&1
  grep -E "IDENTICAL|DIFFERENT" "$OUT/llama.txt" | awk '{print $1}' | sort | uniq -c; grep -A6 "^median" "$OUT/llama.txt" | head -6
  grep -A5 "^model" "$OUT/llama.txt" | tail -5
  if [ "${RGPU_CHECK_PERREP:-0}" = 1 ]; then  # (its operation counts hold; its times are differences of sessions)
    timeout 200 bash bench/llama/run_llama.sh perrep > "$OUT/perrep_run.log" 2>&1
    grep -E "^==|per repetition|us by op|loop us" "$OUT/perrep.txt"
  fi
fi
if [[ " $sections " == *" ab "* ]]; then  # (alternating rounds, each against its own native: the box drifts by
  # more than some settings change, so only a ratio taken beside native in the same round compares)
  ab=${RGPU_CHECK_AB:-RGPU_CODED_COPIES}
  [ -x /tmp/llama/build/bin/llama-bench ] || timeout 420 bash bench/llama/run_llama.sh build > "$OUT/llama_build.log" 2>&1
  for round in $(seq ${RGPU_CHECK_LLAMA_ROUNDS:-1}); do
    for v in 0 1; do
      env $ab=$v OUT=$OUT/$ab$v/round$round LLAMA_BENCH_MODELS="small-q8_0" timeout 200 \
        bash bench/llama/run_llama.sh bench > "$OUT/$ab${v}_r$round.txt" 2>&1
    done
  done
  for v in 0 1; do
    echo "$ab=$v"; python3 bench/llama/compare_bench.py "$OUT"/$ab$v/round* > "$OUT/$ab$v.txt"
    grep -A5 "^median" "$OUT/$ab$v.txt" || tail -5 "$OUT/$ab$v.txt"
  done
fi
if [[ " $sections " == *" dispatch "* ]]; then  # the worker's cost per deferred record against the call alone
  timeout 120 python3 bench/dispatch_bench.py --backend $BACKEND --records 5000 --repeat 5 ${RGPU_CHECK_DISPATCH_ARGS:-} \
    > "$OUT/dispatch.txt" 2>&1
  tail -7 "$OUT/dispatch.txt"
fi
if [[ " $sections " == *" psk "* ]]; then  # the Python client and (--with-shim) the C stand-ins with a PSK against C TCP
  timeout 200 python3 bench/rpc_bench.py --backend $BACKEND --psk --calls 1000 --launches 2000 --sizes 1M,64M --with-shim \
    > "$OUT/psk_rpc.txt" 2>&1
  grep -E "vs same-size C copy|null call p50|^rgpu|^native" "$OUT/psk_rpc.txt"
fi
if [[ " $sections " == *" links "* ]]; then  # copy links: prompt-shaped steps with and without, then llama-bench with
  for round in 1 2; do  # (512 KiB up per step, as llama.cpp's pp128 on the small model; plain, then with a PSK)
    for links in 0 ${RGPU_CHECK_COPY_LINKS:-4}; do
      for psk in "" --psk; do
        RGPU_COPY_LINKS=$links token_loop 1 --tokens 300 --prompt-bytes 524288 $psk \
          > "$OUT/links_prompt_l${links}${psk}_r$round.txt" 2>&1
      done
    done
  done
  grep -H "us per token" "$OUT"/links_prompt_*
  [ -x /tmp/llama/build/bin/llama-bench ] || timeout 420 bash bench/llama/run_llama.sh build > "$OUT/llama_build.log" 2>&1
  RGPU_COPY_LINKS=${RGPU_CHECK_COPY_LINKS:-4} OUT=$OUT/links LLAMA_BENCH_ROUNDS=${RGPU_CHECK_LLAMA_ROUNDS:-1} \
    LLAMA_BENCH_MODELS="small-q8_0" timeout 200 bash bench/llama/run_llama.sh native rgpu bench > "$OUT/llama_links.txt" 2>&1
  grep -E "IDENTICAL|DIFFERENT" "$OUT/llama_links.txt" | awk '{print $1}' | sort | uniq -c
  grep -A6 "^median" "$OUT/llama_links.txt" | head -6; grep -A5 "^model" "$OUT/llama_links.txt" | tail -5
  grep -c "copy link . joined" "$OUT"/links/rgpu_server_*.log
fi
if [[ " $sections " == *" clientprof "* ]]; then
  LLAMA_PROFILE_REPS=200 timeout 100 bash bench/llama/run_llama.sh clientprof > "$OUT/clientprof.txt" 2>&1
  grep -E "rgpu client (stats|profile)" "$OUT/clientprof.txt" | head -6
fi
cd "$FINAL" && tar czf "$name.tgz" "$name" && rm -rf "$name"
