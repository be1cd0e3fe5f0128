R=$OUT; export OUT=/tmp/o; mkdir -p $OUT
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src
nvidia-smi --query-compute-apps=pid,used_memory --format=csv
RGPU_TEST_BACKEND=cuda timeout 80 python3 -m pytest -q -s -p no:cacheprovider tests/gpu/test_cuda_backend.py -k "teardown_returns or many_sessions" 2>&1 | grep -vE "^\s*$" | tail -25
RGPU_LANE=0 RGPU_TEST_BACKEND=cuda timeout 60 python3 -m pytest -q -s -p no:cacheprovider tests/gpu/test_cuda_backend.py -k "teardown_returns" 2>&1 | grep -E "round|passed|failed|assert" | tail -8
