#!/usr/bin/env bash
# A/B, alternating three times: "new" = the AEAD pipe on and the Python client's lone-call path; "old" = RGPU_AEAD_PIPE=0
# and tmp_ab/py_new.patch undone (the rows each change touches differ: PSK copies / the Python client's null call).
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
mkdir -p /tmp/cu12 && python3 -c "import sys,zstandard; zstandard.ZstdDecompressor().copy_stream(sys.stdin.buffer, sys.stdout.buffer)" \
  < .hdr/cu12-include.tar.zst | tar -C /tmp/cu12 -xf - && export RGPU_CUDA12_INCLUDE=/tmp/cu12/include
mkdir -p $OUT/r
for r in 1 2 3; do
  for v in new old; do
    if [ $v = old ]; then git apply -R tmp_ab/py_new.patch; export RGPU_AEAD_PIPE=0; else export RGPU_AEAD_PIPE=1; fi
    timeout 150 python3 bench/rpc_bench.py --backend cuda --psk --calls 2000 --launches 2000 --sizes 1M,64M --with-shim \
      > $OUT/r/ab_${r}_$v.txt 2>&1
    [ $v = old ] && git apply tmp_ab/py_new.patch
    echo "== $r $v"; grep -E "vs same-size C copy|null call p50 vs C" $OUT/r/ab_${r}_$v.txt
  done
done
