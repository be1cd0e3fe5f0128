# run 1 of session 2026-12-03 late: verify commits 4ce9356..572d4a1 on the GPU, baseline micro targets
R=$OUT; export OUT=/tmp/o; mkdir -p $OUT
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src
mkdir -p /tmp/cu12 && python3 -c "import sys,zstandard; zstandard.ZstdDecompressor().copy_stream(sys.stdin.buffer, sys.stdout.buffer)" < .hdr/cu12-include.tar.zst | tar -C /tmp/cu12 -xf - && export RGPU_CUDA12_INCLUDE=/tmp/cu12/include
git rev-parse HEAD > $OUT/commit.txt 2>/dev/null
# cuda programs run while llama builds (benchmarks start after both)
(timeout 200 bash tests/cuda/run_on_gpu.sh > $OUT/cuda_programs.txt 2>&1; echo "rc=$?" >> $OUT/cuda_programs.txt) &
cp=$!
timeout 250 bash bench/llama/run_llama.sh build > $OUT/llama_build_outer.log 2>&1
wait $cp
tail -5 $OUT/cuda_programs.txt
LLAMA_BENCH_ROUNDS=2 LLAMA_RTT_US="0 500" timeout 200 bash bench/llama/run_llama.sh native rgpu trips rtt bench > $OUT/llama.txt 2>&1
grep -E "IDENTICAL|DIFFERENT|per generated|tok/s|ratio|median|t/s" $OUT/llama.txt | tail -30
timeout 120 python3 bench/workloads.py --only resnet18_b1,resnet18_b32,gpt_small_train --steps 20 --rtt-us 0 > $OUT/wl.txt 2>&1; tail -12 $OUT/wl.txt
timeout 60 python3 bench/dispatch_bench.py --backend cuda > $OUT/dispatch.txt 2>&1; tail -20 $OUT/dispatch.txt
RGPU_BENCH_SIZES=4K,1M,256M timeout 100 bash tests/gpu/run_on_gpu.sh bench > $OUT/micro.txt 2>&1; tail -40 $OUT/micro.txt
cd /tmp && tar czf $R/all.tgz o
