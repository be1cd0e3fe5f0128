# run 9: where a token's round trip goes (bench/token_loop.py, counters read at marks inside one session) and how
# polling changes it: spin 50 / 300 us, with and without RGPU_SPIN_YIELD, interleaved; llama-bench small tg likewise
R=$OUT; mkdir -p $R/o; export OUT=$R/o
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src
mkdir -p /tmp/cu12 && python3 -c "import sys,zstandard; zstandard.ZstdDecompressor().copy_stream(sys.stdin.buffer, sys.stdout.buffer)" < .hdr/cu12-include.tar.zst | tar -C /tmp/cu12 -xf - && export RGPU_CUDA12_INCLUDE=/tmp/cu12/include
python3 -m rgpu.cli build-shims --out /tmp/rgpu-shims > $OUT/shims_build.txt 2>&1
timeout 100 bash bench/llama/run_llama.sh build > $OUT/llama_build.log 2>&1 &
bp=$!
nvcc -cudart shared -o /tmp/token_loop bench/token_loop.cu
for round in 1 2 3 4; do
  for cfg in spin50 spin300 yield300 yield50; do
    case $cfg in spin50) y=0 a="";; spin300) y=0 a="--spin-us 300";; yield300) y=1 a="--spin-us 300";; yield50) y=1 a="";; esac
    RGPU_SPIN_YIELD=$y timeout 60 python3 bench/token_loop.py --backend cuda --shims /tmp/rgpu-shims --exe /tmp/token_loop --rounds 1 $a --json $OUT/tl_${cfg}_$round.json > $OUT/tl_${cfg}_$round.txt 2>&1
    echo "r$round $cfg: $(grep -E 'us per token' $OUT/tl_${cfg}_$round.txt) | $(grep -o "worker loop us.*" $OUT/tl_${cfg}_$round.txt)"
  done
done
wait $bp
for r in 1 2; do
  timeout 60 /tmp/llama/build/bin/llama-bench -m /tmp/llama/models/small-q8_0.gguf -p 0 -n 32 -fa 1 -r 3 -o json > $OUT/native_small_tg_$r.json 2>/dev/null
  echo "native small tg32 fa1 round $r: $(python3 -c "import json,sys; print(round(json.load(open(sys.argv[1]))[0]['avg_ts'], 1), 'tokens/s')" $OUT/native_small_tg_$r.json 2>&1)"
  for y in 0 1; do
    mkdir -p $OUT/llama_y${y}_$r
    (export OUT=$OUT/llama_y${y}_$r RGPU_SPIN_YIELD=$y; LLAMA_SPIN_MODEL=small-q8_0 LLAMA_SPIN_US="50 300" timeout 80 bash bench/llama/run_llama.sh spin > $OUT/spin.txt 2>&1; grep "^spin" $OUT/spin.txt | sed "s/^/yield=$y: /")
  done
done
cd $R && tar czf run9.tgz o && rm -rf o
