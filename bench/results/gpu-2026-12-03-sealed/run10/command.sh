# run 10 (same warm machine as run 9): llama-bench small tg32 fa1, native / rgpu default (spin 50) / RGPU_SPIN_YIELD=1 with spin 300, interleaved, 5 rounds
R=$OUT; mkdir -p $R/o; export OUT=$R/o
export PYTHONPATH=/tmp/site:$PWD/src RGPU_CUDA12_INCLUDE=/tmp/cu12/include
for r in 1 2 3 4 5; do
  timeout 60 /tmp/llama/build/bin/llama-bench -m /tmp/llama/models/small-q8_0.gguf -p 0 -n 32 -fa 1 -r 3 -o json > $OUT/native_$r.json 2>/dev/null
  echo "r$r native: $(python3 -c "import json,sys; print(round(json.load(open(sys.argv[1]))[0]['avg_ts'], 1))" $OUT/native_$r.json 2>&1)"
  for cfg in "0 50" "1 300"; do
    set -- $cfg
    mkdir -p $OUT/y$1_s$2_$r
    (export OUT=$OUT/y$1_s$2_$r RGPU_SPIN_YIELD=$1; LLAMA_SPIN_MODEL=small-q8_0 LLAMA_SPIN_US="$2" timeout 60 bash bench/llama/run_llama.sh spin > $OUT/spin.txt 2>&1; grep "^spin" $OUT/spin.txt | sed "s/^/r$r yield=$1: /")
  done
done
cd $R && tar czf run10.tgz o && rm -rf o
