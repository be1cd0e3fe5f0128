# run 7 (same warm machine as run 6): PSK copies, the commit before (2c82f73, in .old) and f7a76fc, alternating
R=$OUT; mkdir -p $R/o; export OUT=$R/o
export PYTHONPATH=/tmp/site:$PWD/src
for round in 1 2; do
  for tree in old new; do
    if [ $tree = old ]; then dir=$PWD/.old; else dir=$PWD; fi
    (cd $dir && PYTHONPATH=/tmp/site:$dir/src RGPU_CUDA12_INCLUDE=/tmp/cu12/include timeout 100 python3 bench/rpc_bench.py --backend cuda --sizes 1M,256M --psk --with-shim --calls 2000 > $OUT/psk_${tree}_$round.txt 2>&1)
    echo "== $tree round $round"; grep -E "MiB vs same-size C copy|rgpu batched" $OUT/psk_${tree}_$round.txt
  done
done
cd $R && tar czf run7.tgz o && rm -rf o
