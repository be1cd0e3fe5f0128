"""Coded copies filled on the device by the worker's own kernel (rgpu.backends.runs_fill) on the real GPU: the
bytes of llama.cpp-shaped inputs, long and wrapping runs and literal words, to aligned places (the fill) and
unaligned ones (decoded), and into another context's allocation (decoded: a kernel could not write it). Sessions
in this process (isolation "thread"), so that the test can see the rings' kernel. Skipped unless
RGPU_TEST_BACKEND=cuda (tests/gpu/run_on_gpu.sh tests)."""

from __future__ import annotations

import os

import numpy as np
import pytest

from rgpu.protocol import runs

from ..conftest import running_server
from ..coded_shapes import mask as _mask, v_rows as _v_rows, words as _words

pytestmark = pytest.mark.skipif(os.environ.get("RGPU_TEST_BACKEND") != "cuda",
                                reason="GPU box only (RGPU_TEST_BACKEND=cuda)")

SHAPES = {
    "v_rows": _v_rows(128, 1024, 256),
    "mask": _mask(128, 256, np.float32),
    "long_run": _words(range(runs.MAX_COPY_BYTES // 8)),
    "wrapping": _words([(7 + k * (2**63 + 3)) % 2**64 for k in range(10000)]),
    "literal": np.random.default_rng(3).bytes(4096),
}


async def test_coded_copies_arrive_filled_on_the_device_or_decoded(monkeypatch):
    from rgpu.backends.cuda import CudaBackend

    monkeypatch.setenv("RGPU_RUNS_FILL", "1")
    backend = CudaBackend()
    backend.init()
    async with running_server(isolation="thread", backend=backend) as srv:
        c = await srv.connect()
        p = await c.mem_alloc(4 << 20)
        s = await c.stream_create()
        first = await c.ctx_get_current()
        await c.memcpy_htod_runs(p, runs.encode(SHAPES["mask"]), len(SHAPES["mask"]), s)  # (Python's: binds s)
        for name, data in SHAPES.items():
            for at in (0, 4):
                await c.memcpy_htod(p, bytes(len(data) + 8))
                await c.memcpy_htod_runs(p + at, runs.encode(data), len(data), s)
                assert await c.memcpy_dtoh_async(p + at, len(data), s) == data, (name, at)
        assert any(ring.ring.runs_fill for ring in backend._copy_rings.values())  # the kernel was loaded
        other = await c.ctx_create()
        q = await c.mem_alloc(1 << 20)
        await c.ctx_set_current(first)
        data = SHAPES["v_rows"]
        await c.memcpy_htod_runs(q, runs.encode(data), len(data), s)  # another context's memory, on s
        assert await c.memcpy_dtoh_async(q, len(data), s) == data
        await c.memcpy_htod_runs(p, runs.encode(data), len(data), s)  # and the session's context still works
        assert await c.memcpy_dtoh_async(p, len(data), s) == data
        await c.ctx_destroy(other)
        await c.aclose()
