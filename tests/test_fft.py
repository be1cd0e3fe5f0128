"""The cuFFT stand-in against the fake backend (numpy FFTs): every plan call, exec type and layout checked against a
naive DFT by tests/cuda/fft_check.c (executions captured in CUDA graphs too), with the bad input cuFFT refuses and
what only the server can refuse; and at
the wire: plan descriptions refused with cuFFT's statuses, executions confined to the session's memory over the
extents the plan gives, plans that are another session's or another context's."""

from __future__ import annotations

import subprocess

import numpy as np
import pytest

from rgpu.cli import local_server
from rgpu.client import _Request
from rgpu.dispatch import fft as fft_dispatch
from rgpu.errors import CudaError, Status
from rgpu.protocol import fft_wire, ops
from rgpu.protocol.fft_wire import C2C, C2R, R2C, Z2Z, FftStatus

from .test_runtime import PROGRAMS, run


def _link(shim_dir, exe, source, runtime="libcudart.so.13", fft="libcufft.so.12"):
    subprocess.run(["gcc", "-O1", "-Wall", "-o", str(exe), str(source), f"-L{shim_dir}", f"-l:{runtime}",
                    f"-l:{fft}", "-lm", f"-Wl,-rpath-link,{shim_dir}"], check=True)
    return exe


# CUDA 13's soname, and CUDA 12's (a program built against nvidia-cufft-cu12).
@pytest.mark.parametrize("runtime, fft", [("libcudart.so.13", "libcufft.so.12"), ("libcudart.so.12", "libcufft.so.11")])
def test_fft_check_matches_a_cpu_reference_and_refuses_bad_input(shim_dir, tmp_path, runtime, fft):
    exe = _link(shim_dir, tmp_path / "fft_check", PROGRAMS / "fft_check.c", runtime, fft)
    with local_server("fake", ["--log-level", "warning"]) as address:
        proc = run(shim_dir, exe, "--hostile", env={"RGPU_SERVER": address}, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = {line[:40].strip(): line[40:].strip() for line in proc.stdout.splitlines()}
    for name in ("C2C 3d 4x6x5", "R2C 2d 6x8 in place (padded)", "C2R many advanced", "Z2D 2d 5x6",
                 "D2Z many64 2d own work area", "Xt R2C 2d 8x8 (R_32F -> C_32F)",
                 "Xt C2C captured in a graph, run twice", "C2C after the refusals"):
        assert lines[name].startswith("OK "), (name, proc.stdout)
    # cuFFT's own codes: INVALID_PLAN 1, INVALID_TYPE 3, INVALID_VALUE 4, INVALID_SIZE 8, NO_WORKSPACE 13.
    expected = {"exec on a handle never made": 1, "plan of size 0": 8, "plan of an unknown type": 3,
                "plan of rank 4": 4, "estimate of size 0": 8, "exec on a plan created, not made": 1,
                "exec on a destroyed plan": 1, "destroy twice": 1, "exec with a NULL input": 4,
                "exec with direction 0": 4, "exec without a work area": 13}
    for name, status in expected.items():
        assert lines[name] == f"refused (status {status})", (name, proc.stdout)
    assert lines["plan handle of another process"] == "refused (exec 1, destroy 1)"
    assert lines["exec of another type"] == "accepted (status 0)", proc.stdout  # as NVIDIA's cuFFT
    for name in ("input outside the program's memory", "output past the end of its allocation",
                 "work area smaller than the plan's"):
        assert lines[name].startswith("OK (exec 0, then synchronize 1)"), (name, proc.stdout)
    assert "fft_check OK" in proc.stdout
    assert "not supported" not in proc.stderr, proc.stderr


def test_unsupported_fft_call_logs_once(shim_dir, tmp_path):
    src = tmp_path / "unsupported.c"
    src.write_text("""
        #include <stdio.h>
        int cufftCreate(int *plan);
        int cufftXtSetGPUs(int plan, int count, int *gpus);
        int main(void) {
            int plan, gpus[2] = {0, 1};
            if (cufftCreate(&plan)) return 2;
            int a = cufftXtSetGPUs(plan, 2, gpus), b = cufftXtSetGPUs(plan, 2, gpus);
            printf("%d %d\\n", a, b);
            return 0;
        }""")
    exe = tmp_path / "unsupported"
    subprocess.run(["gcc", "-o", str(exe), str(src), f"-L{shim_dir}", "-l:libcufft.so.12",
                    f"-Wl,-rpath-link,{shim_dir}"], check=True)
    with local_server("fake", ["--log-level", "warning"]) as address:
        proc = run(shim_dir, exe, env={"RGPU_SERVER": address})
    assert proc.stdout.strip() == "16 16"  # CUFFT_NOT_SUPPORTED, both times
    assert proc.stderr.count("cufftXtSetGPUs is not supported") == 1


# -- the wire -------------------------------------------------------------------------------------------------
def describe(plan_type=C2C, n=(16,), batch=1, types=None, inembed=None, onembed=None, istride=1, idist=0,
             ostride=1, odist=0):
    types = types or fft_wire.LEGACY_TYPES[plan_type]
    dims = [*n, 0, 0, 0][:3]
    ie, oe = [*(inembed or ()), 0, 0, 0][:3], [*(onembed or ()), 0, 0, 0][:3]
    return (plan_type, *types, len(n), *dims, int(inembed is not None), *ie, istride, idist,
            int(onembed is not None), *oe, ostride, odist, batch)


async def make(client, **kw):
    plan, work_size, status = await client._call(_Request(ops.FFT_PLAN, describe(**kw)))
    assert status == 0 and plan
    return plan, work_size


async def execute(client, plan, src, dst, work, direction=fft_wire.FORWARD, kind=C2C, stream=0):
    await client._defer(_Request(ops.FFT_EXEC, (plan, stream, src, dst, work, direction, kind)))


async def expect_deferred(client, code):
    with pytest.raises(CudaError) as e:
        await client.synchronize()
    assert e.value.deferred and e.value.code == code, e.value


@pytest.mark.parametrize("kw, status", [
    (dict(n=()), FftStatus.INVALID_VALUE),                  # rank 0
    (dict(n=(4, 4, 4, 4)), FftStatus.INVALID_VALUE),        # rank 4
    (dict(n=(4,), batch=0), FftStatus.INVALID_SIZE),
    (dict(n=(0, 4)), FftStatus.INVALID_SIZE),
    (dict(n=(1 << 30, 1 << 20)), FftStatus.INVALID_SIZE),   # past 2^48 elements
    (dict(plan_type=0x33, types=(4, 4, 4)), FftStatus.INVALID_TYPE),
    (dict(plan_type=C2C, types=(0, 4, 4)), FftStatus.INVALID_TYPE),  # a cufftType with other data types
    (dict(plan_type=0, types=(0, 0, 0)), FftStatus.INVALID_TYPE),    # real to real
    (dict(plan_type=0, types=(4, 5, 5)), FftStatus.INVALID_TYPE),    # mixed precisions
    (dict(plan_type=0, types=(9, 9, 9)), FftStatus.INVALID_TYPE),    # not a type cuFFT takes
    (dict(inembed=(16,), onembed=(16,), istride=-1), FftStatus.INVALID_VALUE),
    (dict(inembed=(16,), onembed=(16,), idist=-5, batch=2), FftStatus.INVALID_VALUE),
    (dict(plan_type=0, types=(2, 15, 15)), FftStatus.INVALID_TYPE),  # half in, bfloat16 out
    (dict(plan_type=0, types=(6, 6, 6), n=(12,)), FftStatus.NOT_SUPPORTED),  # half precision: powers of two
    (dict(plan_type=0, types=(14, 15, 15)), FftStatus.NOT_SUPPORTED),  # bfloat16: the fake has no such numbers
])
async def test_plans_cufft_refuses_are_answered_with_its_status(client, kw, status):
    plan, work_size, got = await client._call(_Request(ops.FFT_PLAN, describe(**kw)))
    assert (plan, work_size, got) == (0, 0, status)
    assert await client._call(_Request(ops.FFT_ESTIMATE, describe(**kw))) == (0, status)


async def test_execution_is_confined_to_the_sessions_memory(client):
    plan, work_size = await make(client, n=(64,), batch=4)  # 2 KiB of complex64 in and out
    estimate = await client._call(_Request(ops.FFT_ESTIMATE, describe(n=(64,), batch=4)))
    assert estimate == (work_size, 0) and work_size
    src, dst, work = await client.mem_alloc(2048), await client.mem_alloc(2048), await client.mem_alloc(work_size)
    x = (np.arange(256) % 7 - 3 + 1j * (np.arange(256) % 5)).astype(np.complex64)
    await client.memcpy_htod(src, x)
    await execute(client, plan, src, dst, work)
    got = np.frombuffer(await client.memcpy_dtoh(dst, 2048), np.complex64).reshape(4, 64)
    assert np.allclose(got, np.fft.fft(x.reshape(4, 64)), atol=1e-3)
    for bad in ((src + 8, dst, work),            # input one element past its allocation's end
                (src, dst + 8, work),            # output likewise
                (src, dst, work + 8),            # a work area smaller than the plan's
                (src, dst, 0),                   # no work area at all
                (src, 0x10000, work)):           # memory that is not the session's
        await execute(client, plan, *bad)
        await expect_deferred(client, Status.INVALID_VALUE)
    # An exec function cuFFT does not have, or a complex transform without a direction, is refused. An exec
    # function of another type than the plan's runs the plan, as NVIDIA's cuFFT does (measured on the H200).
    for kind, direction in ((0x77, fft_wire.FORWARD), (C2C, 0)):
        await execute(client, plan, src, dst, work, direction, kind)
        await expect_deferred(client, Status.INVALID_VALUE)
    for kind in (R2C, Z2Z):
        await execute(client, plan, src, dst, work, fft_wire.FORWARD, kind)
        await client.synchronize()
    await execute(client, plan, src, dst, work, fft_wire.INVERSE, fft_wire.XT_EXEC)
    await client.synchronize()
    await client._call(_Request(ops.FFT_DESTROY, (plan,)))
    await execute(client, plan, src, dst, work)
    await expect_deferred(client, Status.INVALID_HANDLE)


async def test_a_plan_is_its_sessions_and_its_contexts(srv, client):
    plan, _ = await make(client)
    other = await srv.connect()
    try:
        buf = await other.mem_alloc(1 << 12)
        await execute(other, plan, buf, buf, buf)
        await expect_deferred(other, Status.INVALID_HANDLE)
        with pytest.raises(CudaError) as e:
            await other._call(_Request(ops.FFT_DESTROY, (plan,)))
        assert e.value.code == Status.INVALID_HANDLE
    finally:
        await other.aclose()
    # Destroying the context the plan was made in destroys the plan.
    ctx = await client.ctx_create()
    made, work_size = await make(client, plan_type=R2C, n=(8, 8))
    await client.ctx_destroy(ctx)
    with pytest.raises(CudaError) as e:
        await client._call(_Request(ops.FFT_DESTROY, (made,)))
    assert e.value.code == Status.INVALID_HANDLE
    await client._call(_Request(ops.FFT_DESTROY, (plan,)))


async def test_plans_per_session_are_bounded(tsrv, monkeypatch):
    monkeypatch.setattr(fft_dispatch, "MAX_PLANS", 2)
    client = await tsrv.connect()
    try:
        await make(client)
        await make(client)
        assert await client._call(_Request(ops.FFT_PLAN, describe())) == (0, 0, FftStatus.ALLOC_FAILED)
    finally:
        await client.aclose()


# -- layouts and the fake's arithmetic -----------------------------------------------------------------------
def plan_of(**kw) -> fft_wire.Plan:
    return fft_wire.Plan.from_request(ops.FFT_PLAN.decode(ops.FFT_PLAN.pack_request(*describe(**kw))))


def test_extents_follow_cufft_layouts():
    # Basic layout: dense; a real transform's complex side holds n // 2 + 1.
    assert plan_of(plan_type=R2C, n=(6, 8), batch=2).ranges(0x1000, 0x9000) == [(0x1000, 2 * 48 * 4),
                                                                               (0x9000, 2 * 30 * 8)]
    # In place: one range, the padded real rows as large as the complex ones.
    assert plan_of(plan_type=C2R, n=(6, 8)).ranges(0x1000, 0x1000) == [(0x1000, 30 * 8)]
    # Advanced: (batch - 1) * dist + stride * reach + 1 elements; embed[0] only sizes the array.
    advanced = plan_of(plan_type=Z2Z, n=(4, 5), batch=3, inembed=(0, 7), onembed=(4, 5), istride=2, idist=100,
                       odist=20)
    assert advanced.ranges(0, 1 << 20) == [(0, (2 * 100 + 2 * (3 * 7 + 4) + 1) * 16), (1 << 20, 60 * 16)]
    # One embedding NULL: both readings of cuFFT's rule are covered (here the basic one is the larger).
    mixed = plan_of(n=(8,), batch=4, onembed=(8,), ostride=1, odist=2)
    assert mixed.ranges(0, 1 << 20) == [(0, 32 * 8), (1 << 20, 32 * 8)]


@pytest.mark.parametrize("types, n, tol", [((2, 6, 6), (8, 4), 1e-2), ((0, 4, 4), (6, 10), 1e-5),
                                           ((1, 5, 5), (5, 3, 4), 1e-12)])
def test_fake_real_to_complex_in_every_precision(types, n, tol):
    from rgpu.backends import fake_fft

    plan = plan_of(plan_type=0, types=types, n=n, batch=2)
    real = {2: np.float16, 0: np.float32, 1: np.float64}[types[0]]
    x = np.random.default_rng(0).standard_normal((2, *n)).astype(real)
    out_bytes = plan.ranges(0, 1 << 16)[1][1]
    memory = np.zeros(1 << 17, np.uint8)
    memory[: x.nbytes] = x.view(np.uint8).ravel()
    work = np.zeros(fake_fft.work_size(plan), np.uint8)

    def view(ptr, size):
        return work[:size] if ptr == 1 else memory[ptr : ptr + size]

    fake_fft.execute(view, plan, 0, 1 << 16, 1, fft_wire.FORWARD)
    raw = memory[1 << 16 : (1 << 16) + out_bytes].view(real).astype(np.float64)
    got = (raw[0::2] + 1j * raw[1::2]).reshape(2, *n[:-1], n[-1] // 2 + 1)
    want = np.fft.rfftn(x.astype(np.float64), axes=tuple(range(1, len(n) + 1)))
    assert np.abs(got - want).max() <= tol * np.abs(want).max()
