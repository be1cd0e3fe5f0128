# run 6: f7a76fc -- sealed records in pieces (C and Python), worker loop counters
export OUT=$OUT/o; mkdir -p $OUT
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src
mkdir -p /tmp/cu12 && python3 -c "import sys,zstandard; zstandard.ZstdDecompressor().copy_stream(sys.stdin.buffer, sys.stdout.buffer)" < .hdr/cu12-include.tar.zst | tar -C /tmp/cu12 -xf - && export RGPU_CUDA12_INCLUDE=/tmp/cu12/include
python3 -c "from rgpu import shims; print(shims.build_lane())" > $OUT/lane_build.txt 2>&1
(timeout 170 bash tests/cuda/run_on_gpu.sh > $OUT/cuda_programs.txt 2>&1; echo "rc=$?" >> $OUT/cuda_programs.txt) &
cp=$!
timeout 100 bash bench/llama/run_llama.sh build > $OUT/llama_build_outer.log 2>&1
wait $cp
grep -E "identical on all|launch rate|rc=" $OUT/cuda_programs.txt | tail -5
RGPU_BENCH_SIZES=4K,1M,256M timeout 120 bash tests/gpu/run_on_gpu.sh bench > $OUT/micro.txt 2>&1; grep -E "null call p50|vs same-size C|native driver|rgpu batched|RGPU_BATCH" $OUT/micro.txt | head -30
LLAMA_BENCH_ROUNDS=1 LLAMA_BENCH_MODELS="small-q8_0 mid-q4_0" timeout 230 bash bench/llama/run_llama.sh native rgpu bench perrep > $OUT/llama.txt 2>&1
grep -E "IDENTICAL|DIFFERENT" $OUT/llama.txt | awk '{print $1}' | sort | uniq -c; grep -E "pp128|tg32" $OUT/bench_summary.txt | tail -8; cat $OUT/perrep.txt 2>/dev/null | grep -E "==|loop|wait"
echo done
