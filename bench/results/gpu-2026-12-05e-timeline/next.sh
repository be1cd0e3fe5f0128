#!/usr/bin/env bash
# For the next GPU session (one call, from the repository's root; $OUT set by the device tool): the three C-loop
# levers of 151fe0c (reverted in 519c9bc after run 3b measured the three together slower), and the ring's packed
# slots, each alone against the committed loop, on token_loop's prompt shape (512 KiB of input a step, as llama.cpp's pp128) and its decode shape,
# natively beside each, alternating; then, if llama.cpp is built, the timeline A/B of any that won.
#   c_loop_block.patch      C sleeps in poll() after its spin instead of handing back to Python's wait
#   c_loop_head_read.patch  16 KiB first read while no frame's head is in (a copy's bytes straight into the ring)
#   c_loop_owed_sync.patch  a batch's synchronize without a reply owed, settled before other streams' work
#   c_loop_packed_slots.patch  small copies of one stream share a ring slot (the ring's working set stays small)
# NEXT_ROUNDS (3) rounds (NEXT_BACKEND=fake: a dry run here, with the lane exported); everything in $OUT/summary.txt as it comes.
set -uo pipefail
cd "$(dirname "$0")/../../.."
D=bench/results/gpu-2026-12-05e-timeline
S=$OUT/summary.txt
RGPU_SETUP_WHEELS=$([ "${NEXT_BACKEND:-cuda}" = fake ] && echo 0 || echo 1) source tools/gpu_setup.sh || exit 1
nvidia-smi -L 2>&1 | tee -a $S
python3 -m rgpu.cli build-shims --out /tmp/rgpu-shims > /dev/null && nvcc -cudart shared -o /tmp/token_loop bench/token_loop.cu
for round in $(seq ${NEXT_ROUNDS:-3}); do
  for v in base block head_read owed_sync packed_slots; do
    [ $v = base ] || git apply $D/c_loop_$v.patch || { echo "$v: patch did not apply" | tee -a $S; continue; }
    # (a fake-backend server takes the lane exported to it, built here from this variant's tree; the cuda one builds
    # its own when the sources changed)
    [ "${NEXT_BACKEND:-cuda}" = fake ] && python3 -c "import pathlib, sys; from rgpu import shims
shims.build_lane(pathlib.Path(sys.argv[1]))" "$(dirname "$RGPU_LANE_LIBRARY")" > /dev/null
    for shape in "prompt --tokens 300 --prompt-bytes 524288" "decode --tokens 1000"; do
      # (with the server's figures per token: frames, the loop's receive/run/reply, time by operation -- whether a
      # difference is the worker's or the client's, per token or one stall; and any word of the lane not loading)
      { echo "round $round $v ${shape%% *}:"; timeout 60 python3 bench/token_loop.py --backend ${NEXT_BACKEND:-cuda} \
          --shims /tmp/rgpu-shims --exe /tmp/token_loop --rounds 1 ${shape#* } 2>&1 \
          | grep -E -A2 "us per token|fast lane|lane.*not" | tr -s ' '; } | tee -a $S
    done
    [ $v = base ] || git apply -R $D/c_loop_$v.patch
  done
done
