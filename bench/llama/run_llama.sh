#!/usr/bin/env bash
# llama.cpp (vendored in the llama-cpp-python sdist) natively and through rgpu, in one run on the GPU box.
#   bash bench/llama/run_llama.sh [sections...]      sections: build pack native rgpu bench rtt spin trips perrep profile clientprof timeline server
# Inputs: .llama/llama-src.tar.zst (the sdist's vendor/llama.cpp, trimmed) or .llama/build-*.part (a build made
# by `pack` in an earlier run); .whl/ (rgpu's Python deps); `bash tools/gpu_carry.sh` makes both. Results land in $OUT.
# The build is llama.cpp's default CUDA configuration for sm_90 (VMM, CUDA graphs, PDL, flash attention on).
# LLAMA_SERVER_CPUS / LLAMA_BENCH_CPUS (taskset lists, e.g. 12-15 and 0-11, with LLAMA_BENCH_ARGS="-t 12"): the
# server and its workers, and llama-bench in both modes, on cores of their own, as on two hosts -- on one box
# llama.cpp's threads and the worker's polling otherwise share the same 16 cores.
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
OUT=${OUT:-/tmp/rgpu-out}
W=${LLAMA_WORK:-/tmp/llama}
mkdir -p "$OUT" "$W"
source tools/gpu_setup.sh || exit 1
BIN=$W/build/bin
MODELS=$W/models
N_PREDICT=${N_PREDICT:-48}
PROMPT="Once upon a time there were"
rc=0
unzstd() { python3 -c "import sys,zstandard; zstandard.ZstdDecompressor().copy_stream(sys.stdin.buffer, sys.stdout.buffer)"; }

start_server() {  # rgpu-server on the GPU, loopback, port in $W/port
  rm -f $W/port
  ${LLAMA_SERVER_CPUS:+taskset -c $LLAMA_SERVER_CPUS} python3 -m rgpu.cli server --port 0 --port-file $W/port --backend cuda ${RGPU_SERVER_ARGS:-} \
    > "$OUT/rgpu_server_$1.log" 2>&1 &
  SERVER=$!
  for i in $(seq 150); do [ -s $W/port ] && break; sleep 0.2; done
  export RGPU_SERVER=127.0.0.1:$(cat $W/port)
}
stop_server() { kill -TERM $SERVER 2>/dev/null; wait $SERVER 2>/dev/null; }
# Shims built on the client machine may travel in .shims/ (the box has no CUDA 12 header wheel by itself).
shims() {
  [ -e /tmp/rgpu-shims/libcuda.so.1 ] && return
  if [ -e .shims/libcuda.so.1 ]; then mkdir -p /tmp/rgpu-shims && cp .shims/* /tmp/rgpu-shims/;
  else python3 -m rgpu.cli build-shims --out /tmp/rgpu-shims >/dev/null; fi
}
# A command prefix (not a function: `timeout` must be able to run it).
through_rgpu() { RUN="env RGPU_LOG=${RGPU_LOG:-warn} python3 -m rgpu.cli run --server $RGPU_SERVER --shims /tmp/rgpu-shims --"; }

complete() {  # model fa -> greedy completion text on stdout
  timeout 90 $RUN $BIN/llama-completion -m $MODELS/$1.gguf -p "$PROMPT" -n $N_PREDICT --temp 0 --seed 1 -fa $2 -no-cnv \
    -ngl 99 --no-warmup 2>>"$OUT/llama_stderr_${TAG}.log" </dev/null
}

for s in ${*:-build native rgpu bench}; do
  echo "=== $s ($(date +%T))"
  case $s in
    build)
      if ls .llama/build-*.part >/dev/null 2>&1; then
        cat .llama/build-*.part | unzstd | tar -C $W -xf - || exit 1
        echo "unpacked a carried build"; ls $BIN | head -20
      else
        unzstd < .llama/llama-src.tar.zst | tar -C $W -xf - || exit 1
        cmake -S $W/llama.cpp -B $W/build -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON \
          -DCMAKE_CUDA_ARCHITECTURES=90 -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF \
          > "$OUT/llama_cmake.log" 2>&1 || { tail -30 "$OUT/llama_cmake.log"; exit 1; }
        grep -iE "nccl|CUDA Toolkit|graphs|vmm" "$OUT/llama_cmake.log" | head
        time cmake --build $W/build -j16 --target llama-completion llama-simple llama-bench llama-server \
          > "$OUT/llama_build.log" 2>&1 || { tail -40 "$OUT/llama_build.log"; exit 1; }
      fi
      python3 bench/llama/make_gguf.py $MODELS mid ;;
    pack)  # the build, compressed in pieces small enough to come back from $OUT and travel again
      (cd $W && tar -cf - build/bin) | python3 -c "import sys,zstandard; zstandard.ZstdCompressor(level=19, threads=16).copy_stream(sys.stdin.buffer, sys.stdout.buffer)" \
        | split -b 15m -d - "$OUT/build-" && for f in "$OUT"/build-*; do mv "$f" "$f.part"; done; ls -la "$OUT" ;;
    native|rgpu)
      TAG=$s; RUN=""
      if [ $s = rgpu ]; then shims; start_server llama; through_rgpu; fi
      for m in tiny-f16 tiny-q8_0 tiny-q4_0 small-q8_0 mid-q4_0; do
        for fa in on off; do
          complete $m $fa > "$OUT/completion_${s}_${m}_fa${fa}.txt"; crc=$?
          echo "$m fa=$fa rc=$crc $(wc -c < "$OUT/completion_${s}_${m}_fa${fa}.txt") bytes"
          [ $crc = 124 ] && { echo "timed out: skipping the other models"; break 2; }
        done
      done
      if [ $s = rgpu ]; then
        stop_server
        for f in "$OUT"/completion_native_*.txt; do
          g=${f/completion_native_/completion_rgpu_}
          if cmp -s "$f" "$g" && [ -s "$f" ]; then echo "IDENTICAL $(basename $f)"; else echo "DIFFERENT $(basename $f)"; rc=1; fi
        done
        grep -iE "not supported|error|unsupported" "$OUT/rgpu_server_llama.log" "$OUT/llama_stderr_rgpu.log" | sort | uniq -c | sort -rn | head -30
      fi ;;
    bench)  # LLAMA_BENCH_ROUNDS rounds, native and rgpu alternating, so that drift of the box hits both alike;
      # LLAMA_BENCH_REPS repetitions per test: llama-bench's first timed repetition runs 1.5-4x slower than the
      # rest, natively too (gpu-2026-12-04e-bench-reps), and with 3 it swung the mean of one round by 15 points
      rounds=${LLAMA_BENCH_ROUNDS:-1}; dirs=""
      for round in $(seq $rounds); do
        D=$OUT; [ $rounds -gt 1 ] && D=$OUT/round$round && mkdir -p $D; dirs="$dirs $D"
        for mode in native rgpu; do
          RUN=""; [ $mode = rgpu ] && { shims; start_server bench; through_rgpu; }
          for m in ${LLAMA_BENCH_MODELS:-tiny-q4_0 small-q8_0 mid-q4_0}; do
            timeout 240 ${LLAMA_BENCH_CPUS:+taskset -c $LLAMA_BENCH_CPUS} $RUN $BIN/llama-bench -m $MODELS/$m.gguf -p 128 -n 32 -fa 0,1 -r ${LLAMA_BENCH_REPS:-30} -o json ${LLAMA_BENCH_ARGS:-} > "$D/bench_${mode}_$m.json" 2>>"$OUT/bench_stderr_$mode.log"
            echo "round $round $mode $m rc=$?"
          done
          [ $mode = rgpu ] && { grep -E "ended:" "$OUT/rgpu_server_bench.log" | tail -4; stop_server; }
        done
      done
      python3 bench/llama/compare_bench.py $dirs | tee "$OUT/bench_summary.txt" ;;
    rtt)  # token generation through rgpu as the network gets slower: the server delays every blocking reply
      shims
      for us in ${LLAMA_RTT_US:-0 100 500 2000}; do
        RGPU_SERVER_ARGS="--inject-rtt-us $us" start_server rtt$us; through_rgpu
        timeout 120 $RUN $BIN/llama-bench -m $MODELS/tiny-q4_0.gguf -p 0 -n 32 -fa 1 -r 3 -o json \
          > "$OUT/rtt_$us.json" 2>>"$OUT/bench_stderr_rtt.log"
        echo "injected RTT $us us: rc=$?"; stop_server
      done
      python3 bench/llama/compare_bench.py "$OUT" | tee "$OUT/rtt_summary.txt" ;;
    spin)  # token generation as both ends poll longer before sleeping in recv (client RGPU_SPIN_US, server --spin-us);
      # LLAMA_SPIN_US: the values, LLAMA_SPIN_MODEL: the model (tiny-q4_0)
      shims
      for us in ${LLAMA_SPIN_US:-50 200 1000}; do
        RGPU_SERVER_ARGS="--spin-us $us" start_server spin$us; through_rgpu
        RGPU_SPIN_US=$us timeout 120 $RUN $BIN/llama-bench -m $MODELS/${LLAMA_SPIN_MODEL:-tiny-q4_0}.gguf -p 0 -n 32 -fa 1 -r 3 -o json \
          > "$OUT/spin_$us.json" 2>>"$OUT/bench_stderr_spin.log"
        echo "spin $us us: rc=$? $(python3 -c "import json,sys; print(round(json.load(open(sys.argv[1]))[0]['avg_ts'], 1), 'tokens/s')" "$OUT/spin_$us.json" 2>&1)"
        stop_server
      done ;;
    trips)  # blocking round trips per generated token: two greedy runs of different lengths, the difference
      shims; RGPU_SERVER_ARGS="--stats-file $W/stats.jsonl" start_server trips; through_rgpu; rm -f $W/stats.jsonl
      for n in 4 16 80; do  # the first fills the server's module cache, so that the two measured ones load alike
        RGPU_CLIENT_STATS=1 timeout 150 $RUN $BIN/llama-completion -m $MODELS/tiny-q4_0.gguf -p "$PROMPT" -n $n --temp 0 -fa on -no-cnv \
          -ngl 99 --no-warmup --ignore-eos > /dev/null 2>>"$OUT/llama_stderr_trips.log" </dev/null; echo "n=$n rc=$?"
        sleep 1
      done
      stop_server
      python3 - "$W/stats.jsonl" "$OUT/llama_stderr_trips.log" <<'PY' | tee "$OUT/trips.txt"
import json, re, sys
client = [float(x) for x in re.findall(r"rgpu client stats: .*?, ([\d.]+) s waiting", open(sys.argv[2]).read())]
if len(client) >= 2:
    print(f"client us per token waiting for replies: {(client[-1] - client[-2]) / 64 * 1e6:.1f}")
rows = [json.loads(l) for l in open(sys.argv[1])]
a, b = sorted(rows[-2:], key=lambda r: r["calls"])  # the shorter run made fewer calls
per = {k: (b[k] - a[k]) / 64 for k in ("blocking", "deferred", "graph_launches", "bytes_in", "bytes_out", "cpu_s")}
print("per generated token (tiny-q4_0, fa on, graphs on):", {k: round(v, 3) for k, v in per.items()})
ops = {k: (b["blocking_by_op"].get(k, 0) - a["blocking_by_op"].get(k, 0)) / 64 for k in b["blocking_by_op"]}
print("blocking round trips per token by operation:", {k: round(v, 2) for k, v in sorted(ops.items(), key=lambda x: -x[1]) if v})
calls = {k: (b.get("calls_by_op", {}).get(k, 0) - a.get("calls_by_op", {}).get(k, 0)) / 64 for k in b.get("calls_by_op", {})}
print("operations per token:", {k: round(v, 2) for k, v in sorted(calls.items(), key=lambda x: -x[1]) if v})
# Only the operations a token makes: start-up ones (module loads, context creation) run once in each session but
# take times that vary by milliseconds between sessions, which would swamp a per-token figure.
us = {k: (b.get("seconds_by_op", {}).get(k, 0) - a.get("seconds_by_op", {}).get(k, 0)) / 64 * 1e6
      for k in b.get("seconds_by_op", {}) if calls.get(k, 0) >= 0.5}
print("worker us per token in each operation:", {k: round(v, 1) for k, v in sorted(us.items(), key=lambda x: -x[1]) if v})
if "wall_s" in b:
    print(f"worker us per token in those operations: {sum(us.values()):.1f}; frames per token {(b['frames'] - a['frames']) / 64:.2f}")
PY
      ;;
    perrep)  # what one llama-bench repetition asks of the server (small-q8_0): two sessions of 5 and 25 repetitions
      # per test, the difference over 20 (start-up costs vary by milliseconds between sessions, so only operations
      # a repetition makes count); the server's counters by operation, and the client's wait for replies
      shims; RGPU_SERVER_ARGS="--stats-file $W/perrep.jsonl" start_server perrep; through_rgpu; rm -f $W/perrep.jsonl
      for t in "-p 128 -n 0 -fa 0" "-p 128 -n 0 -fa 1" "-p 0 -n 32 -fa 1"; do
        for r in 5 25; do
          RGPU_CLIENT_STATS=1 timeout 120 $RUN $BIN/llama-bench -m $MODELS/small-q8_0.gguf $t -r $r -o json \
            > "$OUT/perrep_$r.json" 2>"$OUT/perrep_stderr_$r.log"; echo "$t -r $r: rc=$?"
          grep -h "rgpu client stats" "$OUT/perrep_stderr_$r.log" >> $W/perrep_client.txt
          sleep 1
        done
        python3 - "$W/perrep.jsonl" "$W/perrep_client.txt" "$OUT/perrep_25.json" "$t" <<'PY' | tee -a "$OUT/perrep.txt"
import json, re, sys
rows = [json.loads(l) for l in open(sys.argv[1])][-2:]
a, b = sorted(rows, key=lambda r: r["calls"])
waits = [float(x) for x in re.findall(r"([\d.]+) s waiting", open(sys.argv[2]).read())][-2:]
bench = json.load(open(sys.argv[3]))[0]
R = 20
d = lambda key: {k: (b[key].get(k, 0) - a[key].get(k, 0)) / R for k in b[key]}
calls = d("calls_by_op")
print(f"== {sys.argv[4]}: {bench['avg_ns'] / 1e3:.0f} us per repetition through rgpu (llama-bench avg)")
print("  per repetition: frames %.1f, calls %.1f, blocking %.1f, worker wait for the client %.0f us, client wait for replies %.0f us"
      % ((b["frames"] - a["frames"]) / R, (b["calls"] - a["calls"]) / R, (b["blocking"] - a["blocking"]) / R,
         (b["wait_s"] - a["wait_s"]) / R * 1e6, (waits[1] - waits[0]) / R * 1e6 if len(waits) == 2 else float("nan")))
print("  blocking by op:", {k: round(v, 1) for k, v in sorted(d("blocking_by_op").items(), key=lambda x: -x[1]) if v >= 0.1})
print("  calls by op:", {k: round(v, 1) for k, v in sorted(calls.items(), key=lambda x: -x[1]) if v >= 0.5})
print("  worker us by op:", {k: round(v * 1e6) for k, v in sorted(d("seconds_by_op").items(), key=lambda x: -x[1])
                             if calls.get(k, 0) >= 0.5})
print("  worker loop us (receive incl. waiting, run, reply):", {k: round(v * 1e6) for k, v in d("loop_s").items()})
PY
      done
      stop_server ;;
    profile)  # where the server worker's time goes during generation: cProfile of one 80-token session
      shims; mkdir -p $W/prof && rm -f $W/prof/*
      RGPU_PROFILE_DIR=$W/prof start_server profile; through_rgpu
      timeout 150 $RUN $BIN/llama-completion -m $MODELS/tiny-q4_0.gguf -p "$PROMPT" -n 80 --temp 0 -fa on -no-cnv \
        -ngl 99 --no-warmup --ignore-eos > /dev/null 2>>"$OUT/llama_stderr_profile.log" </dev/null; echo "rc=$?"
      sleep 1; stop_server
      for f in $W/prof/*.prof; do cp "$f" "$OUT/"; python3 -c "import pstats,sys; s=pstats.Stats(sys.argv[1]); s.sort_stats('tottime').print_stats(30); s.sort_stats('cumulative').print_stats(40)" "$f"; done \
        > "$OUT/profile.txt" 2>&1; head -80 "$OUT/profile.txt" ;;
    clientprof)  # where the program's own CPU time goes through rgpu (RGPU_CLIENT_PROFILE, native/src/client_profile.c):
      # llama-bench small-q8_0, LLAMA_PROFILE_REPS repetitions per test; the stand-ins' share against llama.cpp's,
      # beside the client's wait for replies (RGPU_CLIENT_STATS). The kernel samples CPU time at its tick (4 ms at
      # HZ=250), so a test needs some hundreds of repetitions of pp128 for a few hundred samples.
      shims; start_server clientprof; through_rgpu
      for t in "-p 128 -n 0 -fa 0" "-p 128 -n 0 -fa 1" "-p 0 -n 32 -fa 1"; do
        name=$(echo "$t" | tr -d ' -'); rm -f "$OUT/clientprof_$name.txt"
        RGPU_CLIENT_PROFILE="$OUT/clientprof_$name.txt" RGPU_CLIENT_STATS=1 timeout 150 $RUN $BIN/llama-bench \
          -m $MODELS/small-q8_0.gguf $t -r ${LLAMA_PROFILE_REPS:-300} -o json > "$OUT/clientprof_$name.json" \
          2>"$OUT/clientprof_stderr_$name.log"; echo "$t: rc=$?"
        grep -h "rgpu client stats" "$OUT/clientprof_stderr_$name.log"
        head -45 "$OUT/clientprof_$name.txt"
      done
      stop_server ;;
    timeline)  # when llama-bench (small-q8_0) enters and leaves its CUDA runtime calls, natively and through rgpu
      # alternating (bench/llama/call_timeline.c, preloaded ahead of whichever libcudart is loaded), then per step
      # (graph launch to graph launch) the time inside each call beside the program's own (timeline_summary.py);
      # LLAMA_TIMELINE_TESTS: the llama-bench tests, separated by ';'; LLAMA_TIMELINE_ROUNDS (2)
      gcc -O2 -shared -fPIC -I/usr/local/cuda/include -o $W/call_timeline.so bench/llama/call_timeline.c -ldl || exit 1
      shims; start_server timeline; through_rgpu; RGPU_RUN=$RUN
      IFS=';' read -ra tests <<< "${LLAMA_TIMELINE_TESTS:--p 128 -n 0 -fa 0;-p 128 -n 0 -fa 1}"
      for round in $(seq ${LLAMA_TIMELINE_ROUNDS:-2}); do
        for t in "${tests[@]}"; do
          name=$(echo "$t" | tr -d ' -')_r$round
          for mode in native rgpu; do
            RUN=""; [ $mode = rgpu ] && RUN=$RGPU_RUN
            rm -f $W/tl_$mode.*
            CALL_TIMELINE_FILE=$W/tl_$mode LLAMA_PRELOAD=$W/call_timeline.so timeout 120 $RUN sh -c \
              'LD_PRELOAD="$LLAMA_PRELOAD${LD_PRELOAD:+ $LD_PRELOAD}" exec "$@"' sh $BIN/llama-bench \
              -m $MODELS/small-q8_0.gguf $t -r ${LLAMA_TIMELINE_REPS:-30} -o json > "$OUT/timeline_${mode}_$name.json" \
              2>"$OUT/timeline_stderr_${mode}_$name.log"; echo "$t round $round $mode: rc=$?"
            cp $W/tl_$mode.* "$OUT/timeline_${mode}_$name.txt" 2>/dev/null
          done
          python3 bench/llama/timeline_summary.py "$OUT/timeline_native_$name.txt" "$OUT/timeline_rgpu_$name.txt" \
            --bench "$OUT/timeline_native_$name.json" "$OUT/timeline_rgpu_$name.json" | tee "$OUT/timeline_$name.summary"
        done
      done
      stop_server ;;
    server)
      for mode in native rgpu; do
        RUN=""; [ $mode = rgpu ] && { shims; start_server http; through_rgpu; }
        $RUN $BIN/llama-server -m $MODELS/tiny-q8_0.gguf --host 127.0.0.1 --port 18080 -ngl 99 -np 1 \
          > "$OUT/llama_server_$mode.log" 2>&1 &
        LS=$!
        for i in $(seq 100); do curl -sf http://127.0.0.1:18080/health >/dev/null && break; sleep 0.3; done
        curl -s -m 120 http://127.0.0.1:18080/v1/completions -H 'Content-Type: application/json' \
          -d "{\"prompt\": \"$PROMPT\", \"max_tokens\": 32, \"temperature\": 0, \"seed\": 1}" \
          | python3 -c "import json,sys; print(json.load(sys.stdin)['choices'][0]['text'])" > "$OUT/server_$mode.txt"
        echo "$mode: $(cat "$OUT/server_$mode.txt" | head -c 200)"
        kill $LS; wait $LS 2>/dev/null
        [ $mode = rgpu ] && stop_server
      done
      cmp -s "$OUT/server_native.txt" "$OUT/server_rgpu.txt" && [ -s "$OUT/server_native.txt" ] \
        && echo "IDENTICAL server completion" || { echo "DIFFERENT server completion"; rc=1; } ;;
  esac
done
echo "overall rc=$rc"
exit $rc
