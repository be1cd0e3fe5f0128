# run 2: the fast lane on the GPU (correctness, per-record cost, llama, workloads, micro targets)
R=$OUT; export OUT=/tmp/o; mkdir -p $OUT
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src
mkdir -p /tmp/cu12 && python3 -c "import sys,zstandard; zstandard.ZstdDecompressor().copy_stream(sys.stdin.buffer, sys.stdout.buffer)" < .hdr/cu12-include.tar.zst | tar -C /tmp/cu12 -xf - && export RGPU_CUDA12_INCLUDE=/tmp/cu12/include
python3 -c "from rgpu import shims; print(shims.build_lane())" > $OUT/lane_build.txt 2>&1; cat $OUT/lane_build.txt
(timeout 200 bash tests/cuda/run_on_gpu.sh > $OUT/cuda_programs.txt 2>&1; echo "rc=$?" >> $OUT/cuda_programs.txt) &
cp=$!
timeout 100 bash bench/llama/run_llama.sh build > $OUT/llama_build_outer.log 2>&1
wait $cp
tail -4 $OUT/cuda_programs.txt; grep -c "fast lane" $OUT/runtime_server.log
(timeout 40 python3 bench/dispatch_bench.py --backend cuda --records 20000 --repeat 5; RGPU_LANE=0 timeout 40 python3 bench/dispatch_bench.py --backend cuda --records 20000 --repeat 5) > $OUT/dispatch.txt 2>&1; cat $OUT/dispatch.txt
LLAMA_BENCH_ROUNDS=2 LLAMA_RTT_US="0 500" timeout 190 bash bench/llama/run_llama.sh native rgpu trips rtt bench > $OUT/llama.txt 2>&1
grep -E "IDENTICAL|DIFFERENT|per generated|per token|%|t/s" $OUT/llama.txt | grep -v "^round" | tail -34
timeout 110 python3 bench/workloads.py --only resnet18_b1,resnet18_b32,gpt_small_train,gpt_medium_train --steps 20 --rtt-us 0 > $OUT/wl.txt 2>&1; grep -E "x  |ratio|workload" $OUT/wl.txt | head -12
RGPU_BENCH_SIZES=4K,1M,256M timeout 100 bash tests/gpu/run_on_gpu.sh bench > $OUT/micro.txt 2>&1; grep -E "null call p50|launches/s|256 MiB vs same-size C|native driver|rgpu batched|RGPU_BATCH|PSK" $OUT/micro.txt | head -24
cd /tmp && tar czf $R/all.tgz o
