#!/usr/bin/env bash
# What a GPU run carries beside the checkout (the device tool's `carry`), made again here from PyPI: the box's
# Python lacks some of rgpu's dependencies, its toolkit has no CUDA 12 headers, and llama.cpp's sources come from
# an sdist. The three folders are git-ignored (.git/info/exclude) and are lost with a machine, so a session
# remakes them with this one command:
#   bash tools/gpu_carry.sh            -> .whl/ (wheels), .hdr/cu12-include.tar.zst, .llama/llama-src.tar.zst
# then every run names ".whl" ".hdr" ".llama" in carry (tests/gpu/run_on_gpu.sh and bench/llama/run_llama.sh
# install and unpack them there).
set -euo pipefail
cd "$(dirname "$0")/.."
for d in .whl .hdr .llama; do grep -qx "/$d/" .git/info/exclude 2>/dev/null || echo "/$d/" >> .git/info/exclude; done
mkdir -p .whl .hdr .llama
PY=${PYTHON:-python3}
platforms=""
for n in 2_28 2_27 2_17 2_5 2014 1; do
  case $n in 2014|1) platforms="$platforms --platform manylinux${n}_x86_64" ;; *) platforms="$platforms --platform manylinux_${n}_x86_64" ;; esac
done
# Missing on the box (NOTES.md): trio and its needs, cffi, cryptography, zstandard, pytest-trio. One version each.
rm -f .whl/*.whl
$PY -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp $platforms -d .whl \
  "trio==0.32.0" "outcome==1.3.0.post0" "sniffio==1.3.1" "sortedcontainers==2.4.0" "idna==3.11" "attrs==25.4.0" \
  "cffi==2.0.0" "pycparser==2.23" "cryptography==47.0.0" "zstandard==0.25.0" "pytest-trio==0.8.0"
ls .whl
# CUDA 12 headers (the stand-ins build for CUDA 12 and 13; the box's toolkit is 13 only).
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
$PY -m pip download -q --no-deps --only-binary=:all: -d "$tmp" "nvidia-cuda-runtime-cu12==12.9.79"
(cd "$tmp" && $PY -m zipfile -e nvidia_cuda_runtime_cu12-*.whl w)
tar -C "$tmp/w/nvidia/cuda_runtime" -cf "$tmp/cu12.tar" include
$PY -c "import sys, zstandard; zstandard.ZstdCompressor(level=19).copy_stream(open(sys.argv[1], 'rb'), open(sys.argv[2], 'wb'))" \
  "$tmp/cu12.tar" .hdr/cu12-include.tar.zst
# llama.cpp as vendored in llama-cpp-python's sdist (NOTES.md), less its docs, media and vocabulary files
# (what a build does not read).
if [ ! -e .llama/llama-src.tar.zst ]; then
  $PY -m pip download -q --no-deps --no-binary :all: -d "$tmp" "llama-cpp-python==0.3.36"
  tar -C "$tmp" -xzf "$tmp"/llama_cpp_python-0.3.36.tar.gz
  src="$tmp/llama_cpp_python-0.3.36/vendor/llama.cpp"
  rm -rf "$src"/{docs,media,.github,gguf-py} "$src"/models/*.gguf
  tar -C "$(dirname "$src")" -cf "$tmp/llama.tar" llama.cpp
  $PY -c "import sys, zstandard; zstandard.ZstdCompressor(level=19).copy_stream(open(sys.argv[1], 'rb'), open(sys.argv[2], 'wb'))" \
    "$tmp/llama.tar" .llama/llama-src.tar.zst
fi
du -sh .whl .hdr .llama
