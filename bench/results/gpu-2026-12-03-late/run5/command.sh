# run 5: what one llama-bench repetition asks of the server (small-q8_0): pp128 fa 0/1, tg32 fa 1
R=$OUT; export OUT=/tmp/o; mkdir -p $OUT
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src
timeout 60 bash bench/llama/run_llama.sh build > $OUT/llama_build_outer.log 2>&1
W=$(grep -m1 "^W=" bench/llama/run_llama.sh | cut -d= -f2); W=$(eval echo $W)
timeout 40 $W/build/bin/llama-bench -m $W/models/small-q8_0.gguf -p 128 -n 32 -fa 0,1 -r 5 2>/dev/null | tee $OUT/native.txt | grep -E "pp|tg"
timeout 150 bash bench/llama/run_llama.sh perrep 2>&1 | grep -v WARNING | tail -30
cd /tmp && tar czf $R/all.tgz o
