"""Process isolation (the default): each session runs in its own worker process."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from rgpu.errors import AuthenticationError, CudaError, Status

from .conftest import DEMO_PTX, TEST_PSK, long_kernel_vs_other_session, running_server, wait_for
from .test_session import vadd_roundtrip


@pytest.fixture
async def psrv():
    async with running_server(isolation="process", worker_pool=2) as s:
        yield s


def finished(s):
    return list(s.server.pool.finished)


async def test_sessions_run_in_distinct_worker_processes(psrv):
    a, b = await psrv.connect(), await psrv.connect()
    assert await vadd_roundtrip(a) and await vadd_roundtrip(b)
    await a.aclose()
    await b.aclose()
    await wait_for(lambda: len(finished(psrv)) == 2)
    stats = finished(psrv)
    assert all(s["exit_code"] == 0 and s["reason"] == "closed by GOODBYE" for s in stats)
    assert all(s["backend_bytes_in_use"] == 0 and s["contexts_alive"] == 0 for s in stats)


async def test_abrupt_disconnect_ends_the_worker_with_everything_freed(psrv):
    c = await psrv.connect()
    for _ in range(4):
        await c.mem_alloc(1 << 20)
    await c.module_load(DEMO_PTX)
    await c.stream.aclose()
    await wait_for(lambda: finished(psrv) and not psrv.server.sessions)
    (stats,) = finished(psrv)
    assert stats["exit_code"] == 0 and "closed the connection" in stats["reason"]
    await wait_for(lambda: psrv.server.pool.settled, 30)  # the used worker was replaced
    assert stats["backend_bytes_in_use"] == 0 and stats["contexts_alive"] == 0


async def test_fault_stays_in_its_process(psrv):
    a, b = await psrv.connect(), await psrv.connect()
    mod = await a.module_load(DEMO_PTX)
    fault = await a.get_function(mod, "fault")
    await a.launch(fault, 1, 1, (0x10,))
    with pytest.raises(CudaError) as e:
        await a.synchronize()
    assert e.value.code == Status.ILLEGAL_ADDRESS
    assert await vadd_roundtrip(b)
    c = await psrv.connect()  # a new session after the fault is healthy too
    assert await vadd_roundtrip(c)
    for x in (a, b, c):
        await x.aclose()


async def test_psk_keys_are_handed_to_the_worker():
    async with running_server(isolation="process", psk=TEST_PSK) as s:
        c = await s.connect(psk=TEST_PSK)
        data = np.arange(1 << 18, dtype=np.float32)
        p = await c.mem_alloc(data.nbytes)
        await c.memcpy_htod(p, data)
        assert np.array_equal(np.frombuffer(await c.memcpy_dtoh(p, data.nbytes), np.float32), data)
        with pytest.raises(AuthenticationError):
            await s.connect(psk=bytes(32))
        await c.aclose()


async def test_max_sessions_counts_worker_sessions():
    async with running_server(isolation="process", max_sessions=1, worker_pool=1) as s:
        a = await s.connect()
        with pytest.raises(CudaError) as e:
            await s.connect()
        assert e.value.code == Status.SESSION_LIMIT
        await a.aclose()
        await wait_for(lambda: not s.server.sessions)
        b = await s.connect()
        assert await b.device_count() == 1
        await b.aclose()


async def test_shutdown_stops_workers_and_tells_clients():
    async with running_server(isolation="process") as s:
        c = await s.connect()
        await c.mem_alloc(1 << 20)
        pool = s.server.pool
        s.cancel.cancel()
    with pytest.raises(CudaError) as e:
        await c.nop()
    assert e.value.code in (Status.SHUTTING_DOWN, Status.CONNECTION_LOST)
    (stats,) = pool.finished
    assert stats["reason"] == "server shutting down" and stats["backend_bytes_in_use"] == 0


async def test_long_kernel_does_not_delay_another_worker_session(psrv):
    a, b = await psrv.connect(), await psrv.connect()
    elapsed, worst = await long_kernel_vs_other_session(a, b, 1.0)
    assert elapsed >= 0.9 and worst < 0.25, (elapsed, worst)
    await a.aclose()
    await b.aclose()


def test_a_session_worker_starts_without_the_client_or_trio():
    """Every session starts a worker process, and whatever it imports is paid at every start (the client and
    trio were ~130 ms of its ~250 ms on the CI machine)."""
    code = ("import sys, rgpu.serving.worker; from rgpu.backends.factory import make_backend; make_backend('fake'); "
            "print(sorted(m for m in ('trio', 'rgpu.client') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
