# run 3: final commit -- lane with launch attributes, synchronizes and graph launches; client batch ramp
R=$OUT; export OUT=/tmp/o; mkdir -p $OUT
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src
mkdir -p /tmp/cu12 && python3 -c "import sys,zstandard; zstandard.ZstdDecompressor().copy_stream(sys.stdin.buffer, sys.stdout.buffer)" < .hdr/cu12-include.tar.zst | tar -C /tmp/cu12 -xf - && export RGPU_CUDA12_INCLUDE=/tmp/cu12/include
git log --oneline -1 > $OUT/commit.txt 2>&1; python3 -c "from rgpu import shims; print(shims.build_lane())" > $OUT/lane_build.txt 2>&1
(timeout 200 bash tests/cuda/run_on_gpu.sh > $OUT/cuda_programs.txt 2>&1; echo "rc=$?" >> $OUT/cuda_programs.txt) &
cp=$!
timeout 100 bash bench/llama/run_llama.sh build > $OUT/llama_build_outer.log 2>&1
wait $cp
grep -E "identical on all|launch rate" $OUT/cuda_programs.txt
RGPU_TEST_BACKEND=cuda timeout 60 python3 -m pytest -q tests/test_graphs.py tests/test_graph_host.py tests/gpu/test_cuda_backend.py > $OUT/pytest_cuda.txt 2>&1; tail -2 $OUT/pytest_cuda.txt
timeout 40 python3 bench/dispatch_bench.py --backend cuda --records 20000 --repeat 5 > $OUT/dispatch.txt 2>&1; cat $OUT/dispatch.txt
LLAMA_BENCH_ROUNDS=2 LLAMA_RTT_US="0 500" timeout 190 bash bench/llama/run_llama.sh native rgpu trips rtt bench > $OUT/llama.txt 2>&1
grep -E "IDENTICAL|DIFFERENT" $OUT/llama.txt | awk '{print $1}' | sort | uniq -c; grep -A20 "^median" $OUT/llama.txt | head -14; cat $OUT/trips.txt | tail -4; cat $OUT/rtt_summary.txt
mkdir -p $OUT/oldramp; (export OUT=$OUT/oldramp RGPU_BATCH_FIRST=256 LLAMA_BENCH_ROUNDS=1 LLAMA_BENCH_MODELS="tiny-q4_0 small-q8_0"; timeout 60 bash bench/llama/run_llama.sh bench > $OUT/llama_oldramp.txt 2>&1); grep -E "pp128|tg32" $OUT/oldramp/bench_summary.txt 2>/dev/null | tail -8 || tail -12 $OUT/llama_oldramp.txt
timeout 100 python3 bench/workloads.py --only resnet18_b1,resnet18_b32,gpt_small_train,gpt_medium_train --steps 20 --rtt-us 0 > $OUT/wl.txt 2>&1; grep -E "^[a-z].* [0-9.]+x" $OUT/wl.txt
timeout 40 python3 bench/workloads.py --only gpt_small_train --steps 20 --rtt-us 500 > $OUT/wl500.txt 2>&1; grep -E "^[a-z].* [0-9.]+x" $OUT/wl500.txt
RGPU_BENCH_SIZES=4K,1M,256M timeout 100 bash tests/gpu/run_on_gpu.sh bench > $OUT/micro.txt 2>&1; grep -E "null call p50|launches/s|vs same-size C|native driver|rgpu batched|RGPU_BATCH" $OUT/micro.txt | head -30
cd /tmp && tar czf $R/all.tgz o
