# The 2-core CPU machine, fake backend, from the repository root (a checkout with the venv active).
# Fake servers run no fast lane unless told where it is (rgpu-server builds it for GPU backends only).
set -u
R=${R:-bench/results/cpu-2026-12-04-native-loop}
export RGPU_LANE_LIBRARY=$(python -c "from rgpu import shims; print(shims.build_lane())") RGPU_LANE_HEADER=$PWD/native/src/lane/lane.h
python -m rgpu.cli build-shims --out /tmp/shims-nl >/dev/null
for round in 1 2 3; do
  for nl in 1 0; do
    RGPU_NATIVE_LOOP=$nl python bench/rpc_bench.py --backend fake --calls 20000 --launches 20000 --sizes 4K > $R/rpc_nl${nl}_r${round}.txt 2>&1
    RGPU_NATIVE_LOOP=$nl python bench/token_loop.py --backend fake --shims /tmp/shims-nl --rounds 1 --tokens 2000 > $R/token_nl${nl}_r${round}.txt 2>&1
  done
done
