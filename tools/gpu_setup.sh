# Sourced, from the repository's root, by every script that runs on the GPU box (bench/gpu_check.sh,
# bench/llama/run_llama.sh, tests/gpu/run_on_gpu.sh, the run scripts under bench/results): what
# tools/gpu_carry.sh carried, put to use. rgpu's missing Python packages from .whl/ go to /tmp/site (skipped with
# RGPU_SETUP_WHEELS=0: a dry run on the fake backend uses the environment it starts in), on PYTHONPATH with this
# tree's src/; the CUDA 12 headers in .hdr/ (the box's toolkit has 13's only), for building the stand-ins, unpack
# to /tmp/cu12 unless RGPU_CUDA12_INCLUDE names others. Returns non-zero when the wheels cannot be installed.
if [ "${RGPU_SETUP_WHEELS:-1}" != 0 ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || return 1
fi
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
if [ -e .hdr/cu12-include.tar.zst ] && [ -z "${RGPU_CUDA12_INCLUDE:-}" ]; then
  mkdir -p /tmp/cu12 && python3 -c "import sys,zstandard; zstandard.ZstdDecompressor().copy_stream(sys.stdin.buffer, sys.stdout.buffer)" \
    < .hdr/cu12-include.tar.zst | tar -C /tmp/cu12 -xf - && export RGPU_CUDA12_INCLUDE=/tmp/cu12/include
fi
