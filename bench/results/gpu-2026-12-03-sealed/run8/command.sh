# run 8: the per-token round trip -- bench/token_loop.py natively and through rgpu at three polling times; llama-bench small tg at the same
R=$OUT; mkdir -p $R/o; export OUT=$R/o
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src
mkdir -p /tmp/cu12 && python3 -c "import sys,zstandard; zstandard.ZstdDecompressor().copy_stream(sys.stdin.buffer, sys.stdout.buffer)" < .hdr/cu12-include.tar.zst | tar -C /tmp/cu12 -xf - && export RGPU_CUDA12_INCLUDE=/tmp/cu12/include
git log --oneline -1 > $OUT/commit.txt 2>&1
python3 -m rgpu.cli build-shims --out /tmp/rgpu-shims > $OUT/shims_build.txt 2>&1
timeout 100 bash bench/llama/run_llama.sh build > $OUT/llama_build.log 2>&1 &
bp=$!
for spin in default 300 1000; do
  a=""; [ $spin = default ] || a="--spin-us $spin"
  timeout 100 python3 bench/token_loop.py --backend cuda --shims /tmp/rgpu-shims --rounds 3 $a --json $OUT/token_loop_$spin.json > $OUT/token_loop_$spin.txt 2>&1; cat $OUT/token_loop_$spin.txt
done
timeout 100 python3 bench/token_loop.py --backend cuda --shims /tmp/rgpu-shims --rounds 3 --psk > $OUT/token_loop_psk.txt 2>&1; cat $OUT/token_loop_psk.txt
wait $bp
for r in 1 2; do
  timeout 60 /tmp/llama/build/bin/llama-bench -m /tmp/llama/models/small-q8_0.gguf -p 0 -n 32 -fa 1 -r 3 -o json > $OUT/native_small_tg_$r.json 2>/dev/null
  echo "native small tg32 fa1 round $r: $(python3 -c "import json,sys; print(round(json.load(open(sys.argv[1]))[0]['avg_ts'], 1), 'tokens/s')" $OUT/native_small_tg_$r.json 2>&1)"
  LLAMA_SPIN_MODEL=small-q8_0 LLAMA_SPIN_US="50 300 1000" timeout 150 bash bench/llama/run_llama.sh spin > $OUT/spin_$r.txt 2>&1; grep "spin" $OUT/spin_$r.txt
done
cd $R && tar czf run8.tgz o && rm -rf o
