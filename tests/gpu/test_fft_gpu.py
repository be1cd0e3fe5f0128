"""cuFFT on the real GPU (`--backend cuda`, NVIDIA's libcufft through cffi), at the wire: plans made and refused
by cuFFT itself, executions of every kind compared with numpy, and the same range checks as on the fake backend.
Skipped unless RGPU_TEST_BACKEND=cuda; run on the GPU box by tests/gpu/run_on_gpu.sh (section "tests")."""

from __future__ import annotations

import os

import numpy as np
import pytest

from rgpu.client import _Request
from rgpu.errors import Status
from rgpu.protocol import fft_wire, ops
from rgpu.protocol.fft_wire import C2C, C2R, D2Z, R2C, Z2D

from ..conftest import running_server
from ..test_fft import describe, execute, expect_deferred, make

pytestmark = pytest.mark.skipif(os.environ.get("RGPU_TEST_BACKEND") != "cuda",
                                reason="GPU box only (RGPU_TEST_BACKEND=cuda)")


@pytest.fixture
async def gpu_client():
    async with running_server(isolation="process", backend="cuda") as s:
        c = await s.connect()
        yield c
        await c.aclose()


async def run(c, plan_type, n, batch, x: np.ndarray, out_dtype, out_shape, direction=fft_wire.FORWARD,
              types=None, kind=None):
    plan, work_size = await make(c, plan_type=plan_type, n=n, batch=batch, types=types)
    out_bytes = int(np.prod(out_shape)) * np.dtype(out_dtype).itemsize
    src, dst = await c.mem_alloc(x.nbytes), await c.mem_alloc(out_bytes)
    work = await c.mem_alloc(work_size) if work_size else 0
    await c.memcpy_htod(src, np.ascontiguousarray(x))
    await execute(c, plan, src, dst, work, direction, plan_type if kind is None else kind)
    got = np.frombuffer(await c.memcpy_dtoh(dst, out_bytes), out_dtype).reshape(out_shape)
    await c._call(_Request(ops.FFT_DESTROY, (plan,)))
    print(f"\n{hex(plan_type)} {n} x{batch}: work area {work_size} bytes")
    return got


async def test_transforms_match_numpy(gpu_client):
    c, rng = gpu_client, np.random.default_rng(5)
    z = (rng.standard_normal((3, 8, 12)) + 1j * rng.standard_normal((3, 8, 12))).astype(np.complex64)
    got = await run(c, C2C, (8, 12), 3, z, np.complex64, z.shape)
    assert np.allclose(got, np.fft.fft2(z), atol=1e-3)
    got = await run(c, C2C, (8, 12), 3, z, np.complex64, z.shape, fft_wire.INVERSE)
    assert np.allclose(got, np.fft.ifft2(z) * 96, atol=1e-3)  # cuFFT's inverse is not normalized
    r = rng.standard_normal((2, 1009))  # a prime size: Bluestein, with a work area
    got = await run(c, D2Z, (1009,), 2, r, np.complex128, (2, 505))
    assert np.allclose(got, np.fft.rfft(r), atol=1e-9)
    half_spectrum = np.fft.rfft(r).astype(np.complex128)
    got = await run(c, Z2D, (1009,), 2, half_spectrum, np.float64, (2, 1009))
    assert np.allclose(got, r * 1009, atol=1e-7)
    h = rng.standard_normal((4, 64)).astype(np.float16)  # half precision through cufftXt, as PyTorch does
    raw = await run(c, 0, (64,), 4, h, np.float16, (4, 33, 2), types=(2, 6, 6), kind=fft_wire.XT_EXEC)
    got = raw[..., 0].astype(np.float64) + 1j * raw[..., 1]
    assert np.allclose(got, np.fft.rfft(h.astype(np.float64)), atol=0.2)


async def test_cufft_refusals_come_back_and_operands_are_checked(gpu_client):
    c = gpu_client
    # cuFFT's own answer, whatever it is, comes back as an answer: half precision needs powers of two.
    plan, work_size, status = await c._call(_Request(ops.FFT_PLAN, describe(plan_type=0, types=(6, 6, 6), n=(12,))))
    print(f"\nhalf-precision plan of size 12: cuFFT status {status}")
    assert plan == 0 and status != 0
    plan, work_size = await make(c, plan_type=R2C, n=(64,), batch=4)
    buf = await c.mem_alloc(4 * 33 * 8)
    work = await c.mem_alloc(work_size) if work_size else 0
    await execute(c, plan, buf, buf + 8, work, kind=R2C)  # the output runs 8 bytes past the allocation
    await expect_deferred(c, Status.INVALID_VALUE)
    await execute(c, plan, buf, buf, work, kind=C2R)  # an exec function of another type
    await expect_deferred(c, Status.INVALID_VALUE)
    await execute(c, plan, buf, buf, work, kind=R2C)  # in place, padded: exactly the allocation
    await c.synchronize()
