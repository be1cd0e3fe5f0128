"""The client tests against the real GPU (`--backend cuda`). Skipped unless RGPU_TEST_BACKEND=cuda; run on
the GPU box by tests/gpu/run_on_gpu.sh. Every test prints what it measured (pytest -s)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time

import numpy as np
import pytest
import trio

from rgpu.errors import CudaError, Status

from ..conftest import DEMO_PTX, TEST_PSK, long_kernel_vs_other_session, running_server, wait_for
from ..test_session import vadd_roundtrip

pytestmark = pytest.mark.skipif(os.environ.get("RGPU_TEST_BACKEND") != "cuda",
                                reason="GPU box only (RGPU_TEST_BACKEND=cuda)")


@pytest.fixture
async def gpu_no_pool():
    # No idle workers: each session's worker starts on demand, so device-wide free memory depends only on
    # live sessions (an idle worker holds 64-128 KiB after cuInit).
    async with running_server(isolation="process", backend="cuda", worker_pool=0) as s:
        yield s


@pytest.fixture
async def gpu():
    # Process isolation, as deployed: this test process never loads the CUDA driver itself.
    async with running_server(isolation="process", backend="cuda", worker_pool=4) as s:
        yield s


async def test_device_and_vadd_saxpy(gpu):
    c = await gpu.connect()
    name = await c.device_name(0)
    attrs = await c.device_attributes(0)
    print(f"\ndevice: {name}, cc {attrs[75]}.{attrs[76]}, {attrs[16]} SMs, driver {await c.driver_version()}")
    assert attrs[75] >= 7
    assert await vadd_roundtrip(c, 1 << 20)
    await c.aclose()


async def test_large_copy_round_trip_is_exact(gpu):
    c = await gpu.connect()
    data = np.random.default_rng(3).integers(0, 256, 256 << 20, dtype=np.uint8)
    p = await c.mem_alloc(data.nbytes)
    t0 = time.perf_counter()
    await c.memcpy_htod(p, data)
    t1 = time.perf_counter()
    out = np.empty_like(data)
    await c.memcpy_dtoh(p, data.nbytes, out=out)
    t2 = time.perf_counter()
    print(f"\n256 MiB H2D {data.nbytes / (t1 - t0) / 1e9:.2f} GB/s, D2H {data.nbytes / (t2 - t1) / 1e9:.2f} GB/s")
    assert np.array_equal(out, data)
    await c.aclose()


async def test_memset_dtod_globals_events(gpu):
    c = await gpu.connect()
    a, b = await c.mem_alloc(4096), await c.mem_alloc(4096)
    await c.memset_d32(a, 0xDEADBEEF, 1024)
    await c.memcpy_dtod(b, a, 4096)
    assert bytes(await c.memcpy_dtoh(b, 8)) == bytes.fromhex("efbeaddeefbeadde")
    mod = await c.module_load(DEMO_PTX)
    ptr, size = await c.get_global(mod, "counters")
    assert size == 16
    await c.memcpy_htod(ptr, np.arange(4, dtype=np.int32))
    assert np.frombuffer(await c.memcpy_dtoh(ptr, 16), np.int32).tolist() == [0, 1, 2, 3]
    spin = await c.get_function(mod, "spin_ns")
    s = await c.stream_create()
    e0, e1 = await c.event_create(), await c.event_create()
    await c.event_record(e0, s)
    await c.launch(spin, 1, 1, (100_000_000,), stream=s)
    await c.event_record(e1, s)
    assert await c.event_query(e1) is False
    await c.stream_synchronize(s)
    ms = await c.event_elapsed_time(e0, e1)
    print(f"\nspin_ns(100 ms) measured by events: {ms:.2f} ms")
    assert 95 <= ms <= 150
    await c.aclose()


async def settled_free_memory(gpu, observer) -> int:
    """Free GPU memory once no pool worker is starting: a worker takes ~64-128 KiB of device memory during
    its start-up, so readings taken while the pool refills are not comparable."""
    await wait_for(lambda: gpu.server.pool.settled, 60)
    return (await observer.mem_get_info())[0]


async def free_memory_back_to(gpu, observer, baseline: int, timeout: float = 10.0) -> tuple[int, float]:
    """Poll until the GPU's free memory is exactly `baseline` again (pool settled first): the driver
    releases an exited process's memory asynchronously."""
    t0 = time.monotonic()
    await wait_for(lambda: gpu.server.pool.settled, 60)
    while True:
        free, _ = await observer.mem_get_info()
        if free == baseline or time.monotonic() - t0 > timeout:
            return free, time.monotonic() - t0
        await trio.sleep(0.01)


async def test_teardown_returns_gpu_memory_exactly(gpu_no_pool):
    gpu = gpu_no_pool
    observer = await gpu.connect()
    baseline = await settled_free_memory(gpu, observer)
    for round_ in range(3):
        c = await gpu.connect()
        for _ in range(4):
            await c.mem_alloc(256 << 20)
        await c.module_load(DEMO_PTX)
        await c.stream_create()
        during, _ = await observer.mem_get_info()
        if round_ % 2:
            await c.stream.aclose()  # abrupt: no GOODBYE
        else:
            await c.aclose()
        await wait_for(lambda: len(gpu.server.sessions) == 1, 30)
        stats = gpu.server.pool.finished[-1]
        after, waited = await free_memory_back_to(gpu, observer, baseline)
        print(f"\nround {round_} ({stats['reason']}, worker exit {stats['exit_code']}): free before "
              f"{baseline} B, during {during} B, after {after} B (exact after {waited * 1000:.0f} ms)")
        assert baseline - during >= 1 << 30
        assert after == baseline
    await observer.aclose()


async def test_kernel_fault_is_isolated_to_its_session(gpu):
    a, b = await gpu.connect(), await gpu.connect()
    mod = await a.module_load(DEMO_PTX)
    fault = await a.get_function(mod, "fault")
    await a.launch(fault, 1, 1, (0x10,))
    with pytest.raises(CudaError) as e:
        await a.synchronize()
    print(f"\nfaulting session got {e.value}")
    assert e.value.code in (Status.ILLEGAL_ADDRESS, Status.LAUNCH_FAILED)
    assert await vadd_roundtrip(b, 1 << 16)
    await a.stream.aclose()
    await wait_for(lambda: len(gpu.server.sessions) == 1, 30)
    assert await vadd_roundtrip(b, 1 << 16)
    c = await gpu.connect()  # sessions opened after the fault are healthy too
    assert await vadd_roundtrip(c, 1 << 16)
    await b.aclose()
    await c.aclose()


async def test_two_second_kernel_does_not_delay_another_session(gpu):
    a, b = await gpu.connect(), await gpu.connect()
    elapsed, worst = await long_kernel_vs_other_session(a, b, 2.0)
    print(f"\nsession A's 2 s kernel took {elapsed:.2f} s; B's worst reply {worst * 1000:.1f} ms")
    assert elapsed >= 1.9 and worst < 0.25
    await a.aclose()
    await b.aclose()


async def test_cross_session_pointers_and_handles_refused(gpu):
    a, b = await gpu.connect(), await gpu.connect()
    ptr = await a.mem_alloc(4096)
    await a.memcpy_htod(ptr, b"secret")
    with pytest.raises(CudaError) as e:
        await b.memcpy_dtoh(ptr, 6)
    assert e.value.code == Status.INVALID_VALUE
    assert bytes(await a.memcpy_dtoh(ptr, 6)) == b"secret"
    await a.aclose()
    await b.aclose()


async def test_many_sessions_each_with_its_own_context(gpu_no_pool):
    gpu = gpu_no_pool
    observer = await gpu.connect()
    baseline = await settled_free_memory(gpu, observer)
    ok = []

    async def one(i):
        c = await gpu.connect()
        ok.append(await vadd_roundtrip(c, 1 << 16, seed=i))
        await c.aclose()

    async with trio.open_nursery() as n:
        for i in range(16):
            n.start_soon(one, i)
    assert ok == [True] * 16
    await wait_for(lambda: len(gpu.server.sessions) == 1, 30)
    after, waited = await free_memory_back_to(gpu, observer, baseline)
    print(f"\n16 concurrent sessions: free memory before {baseline} B, after {after} B "
          f"(exact after {waited * 1000:.0f} ms)")
    assert after == baseline
    await observer.aclose()


async def test_psk_session_on_gpu():
    async with running_server(isolation="process", backend="cuda", psk=TEST_PSK) as s:
        c = await s.connect(psk=TEST_PSK)
        assert await vadd_roundtrip(c, 1 << 20)
        await c.aclose()


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
@pytest.mark.parametrize("kind", ["cubin", "fatbin"])
async def test_cubin_and_fatbin_images(gpu, tmp_path, kind):
    src = os.path.join(os.path.dirname(DEMO_PTX_PATH()), "demo.cu")
    out = tmp_path / f"demo.{kind}"
    subprocess.run(["nvcc", f"--{kind}", "-arch=sm_90", "-o", str(out), src], check=True)
    c = await gpu.connect()
    image = out.read_bytes()
    mod = await c.module_load(image)
    vadd = await c.get_function(mod, "vadd")
    assert vadd.layout == ((0, 8), (8, 8), (16, 8), (24, 4))
    assert await vadd_roundtrip(c, 4096)
    await c.aclose()


def DEMO_PTX_PATH():
    import rgpu.kernels

    return os.path.join(os.path.dirname(rgpu.kernels.__file__), "demo.ptx")


async def test_ptx_newer_than_the_driver_gets_a_clear_error(gpu):
    c = await gpu.connect()
    future = DEMO_PTX.replace(b".version 9.0", b".version 9.9")
    with pytest.raises(CudaError) as e:
        await c.module_load(future)
    print(f"\nPTX 9.9 on this driver: {e.value}")
    assert e.value.code in (Status.UNSUPPORTED_PTX_VERSION, Status.INVALID_PTX)
    assert await vadd_roundtrip(c, 4096)
    await c.aclose()
