"""Inputs shaped like what the C stand-ins send coded (MEMCPY_HTOD_RUNS), for tests/test_coded_copies.py and
tests/gpu/test_coded_fill_gpu.py (which must not need the CPU tests' own dependencies, hypothesis among them)."""

from __future__ import annotations

import math

import numpy as np


def words(values) -> bytes:
    return np.array(values, dtype=np.uint64).tobytes()


def v_rows(tokens: int, rows: int, kv_size: int) -> bytes:
    """llama.cpp's V row indices at flash attention off (llama_kv_cache::set_input_v_idxs)."""
    return words([j * kv_size + i for i in range(tokens) for j in range(rows)])


def mask(tokens: int, n_kv: int, dtype) -> bytes:
    """llama.cpp's causal KQ mask: 0 where a token may look, -inf where not."""
    return np.array([[0.0 if j <= i else -math.inf for j in range(n_kv)] for i in range(tokens)], dtype=dtype).tobytes()
