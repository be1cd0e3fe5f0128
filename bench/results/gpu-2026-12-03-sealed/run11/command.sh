# run 11: the new polling defaults (300 us, yielding): 110 programs, token_loop, llama completions and llama-bench small+mid, 2 rounds
R=$OUT; mkdir -p $R/o; export OUT=$R/o
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src
mkdir -p /tmp/cu12 && python3 -c "import sys,zstandard; zstandard.ZstdDecompressor().copy_stream(sys.stdin.buffer, sys.stdout.buffer)" < .hdr/cu12-include.tar.zst | tar -C /tmp/cu12 -xf - && export RGPU_CUDA12_INCLUDE=/tmp/cu12/include
(timeout 170 bash tests/cuda/run_on_gpu.sh > $OUT/cuda_programs.txt 2>&1; echo "rc=$?" >> $OUT/cuda_programs.txt) &
cp=$!
timeout 100 bash bench/llama/run_llama.sh build > $OUT/llama_build.log 2>&1
wait $cp
grep -E "identical on all|launch rate|^rc=" $OUT/cuda_programs.txt | tail -3
nvcc -cudart shared -o /tmp/token_loop bench/token_loop.cu
timeout 60 python3 bench/token_loop.py --backend cuda --shims /tmp/rgpu-shims --exe /tmp/token_loop --rounds 5 --json $OUT/token_loop.json > $OUT/token_loop.txt 2>&1; cat $OUT/token_loop.txt
LLAMA_BENCH_ROUNDS=2 LLAMA_BENCH_MODELS="small-q8_0 mid-q4_0" timeout 200 bash bench/llama/run_llama.sh native rgpu bench > $OUT/llama.txt 2>&1
grep -E "IDENTICAL|DIFFERENT" $OUT/llama.txt | awk '{print $1}' | sort | uniq -c; grep -A12 "^median" $OUT/llama.txt | head -12
cd $R && tar czf run11.tgz o && rm -rf o
