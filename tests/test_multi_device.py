"""Several devices of one server (fake backend emulating N): a context per device, peer access, peer copies done
on the server, per-device memory, and the --devices subset."""

from __future__ import annotations

import numpy as np
import pytest

from rgpu.backends import factory
from rgpu.backends.base import BackendUnavailable
from rgpu.backends.fake import FakeBackend
from rgpu.errors import CudaError, Status
from tests.conftest import DEMO_PTX, running_server


def _fake(count: int, visible=None) -> FakeBackend:
    return FakeBackend(total_mem=1 << 30, device_count=count, visible=visible)


async def _two_contexts(c):
    ctx0 = await c.ctx_get_current()
    ctx1 = await c.primary_ctx_retain(1)
    return ctx0, ctx1


async def test_each_device_has_its_own_context_memory_and_kernels():
    # Thread isolation: the test reads the backend's per-device accounting.
    async with running_server(isolation="thread", backend=_fake(2)) as srv:
        c = await srv.connect()
        assert await c.device_count() == 2
        assert await c.device_name(1) == "rgpu fake GPU 1"
        ctx0, ctx1 = await _two_contexts(c)
        n = 4096
        a = np.arange(n, dtype=np.float32)
        bufs = {}
        for ctx in (ctx0, ctx1):
            await c.ctx_set_current(ctx)
            mod = await c.module_load(DEMO_PTX)
            vadd = await c.get_function(mod, "vadd")
            da, dc = await c.mem_alloc(a.nbytes), await c.mem_alloc(a.nbytes)
            await c.memcpy_htod(da, a)
            await c.launch(vadd, n // 256, 256, (da, da, dc, n))
            bufs[ctx] = dc
            assert np.array_equal(np.frombuffer(await c.memcpy_dtoh(dc, a.nbytes), np.float32), 2 * a)
        used = srv.backend.used_by_device
        assert used[0] >= 2 * a.nbytes and used[1] >= 2 * a.nbytes
        (session,) = srv.server.sessions.values()
        by_device = session.memory_by_device()
        assert by_device[0] >= 2 * a.nbytes and by_device[1] >= 2 * a.nbytes
        (row,) = srv.server.status()["sessions"]
        assert row["memory_by_device"] == {"0": by_device[0], "1": by_device[1]}
        # Free memory is the device's own.
        await c.ctx_set_current(ctx1)
        free1, total1 = await c.mem_get_info()
        assert total1 - free1 == used[1]
        await c.aclose()
        assert srv.backend.used == 0 and srv.backend.contexts_alive == 0


async def test_peer_access_and_peer_copies():
    async with running_server(isolation="thread", backend=_fake(2)) as srv:
        c = await srv.connect()
        ctx0, ctx1 = await _two_contexts(c)
        assert await c.device_can_access_peer(0, 1) and await c.device_can_access_peer(1, 0)
        assert not await c.device_can_access_peer(0, 0)
        with pytest.raises(CudaError) as e:
            await c.device_can_access_peer(0, 2)
        assert e.value.code == Status.INVALID_DEVICE

        await c.ctx_set_current(ctx0)
        await c.ctx_enable_peer_access(ctx1)
        with pytest.raises(CudaError) as e:
            await c.ctx_enable_peer_access(ctx1)
        assert e.value.code == Status.PEER_ACCESS_ALREADY_ENABLED
        with pytest.raises(CudaError) as e:
            await c.ctx_enable_peer_access(ctx0)  # its own device
        assert e.value.code == Status.PEER_ACCESS_UNSUPPORTED
        with pytest.raises(CudaError) as e:
            await c.ctx_enable_peer_access(0)
        assert e.value.code == Status.INVALID_CONTEXT
        await c.ctx_disable_peer_access(ctx1)
        with pytest.raises(CudaError) as e:
            await c.ctx_disable_peer_access(ctx1)
        assert e.value.code == Status.PEER_ACCESS_NOT_ENABLED

        data = np.arange(1000, dtype=np.uint32)
        src = await c.mem_alloc(data.nbytes)  # on device 0
        await c.memcpy_htod(src, data)
        await c.ctx_set_current(ctx1)
        dst = await c.mem_alloc(data.nbytes)
        await c.memcpy_peer(dst, ctx1, src, ctx0, data.nbytes)
        assert np.array_equal(np.frombuffer(await c.memcpy_dtoh(dst, data.nbytes), np.uint32), data)
        stream = await c.stream_create()
        await c.memset_d32(dst, 0, data.size)
        await c.memcpy_peer_async(dst, ctx1, src, ctx0, data.nbytes, stream)
        await c.stream_synchronize(stream)
        assert np.array_equal(np.frombuffer(await c.memcpy_dtoh(dst, data.nbytes), np.uint32), data)

        # The contexts must be those the ranges were allocated in; foreign pointers are refused.
        for bad in ((dst, ctx0, src, ctx0), (dst, ctx1, src, ctx1), (dst + 4096, ctx1, src, ctx0),
                    (0xDEAD0000, ctx1, src, ctx0)):
            with pytest.raises(CudaError) as e:
                await c.memcpy_peer(*bad, data.nbytes)
            assert e.value.code == Status.INVALID_VALUE
        with pytest.raises(CudaError) as e:
            await c.memcpy_peer(dst, 0, src, ctx0, data.nbytes)
        assert e.value.code == Status.INVALID_CONTEXT
        # Another session's memory is not this one's, whatever context is named.
        other = await srv.connect()
        theirs = await other.mem_alloc(data.nbytes)
        with pytest.raises(CudaError) as e:
            await c.memcpy_peer(dst, ctx1, theirs, ctx0, data.nbytes)
        assert e.value.code == Status.INVALID_VALUE
        await other.aclose()
        await c.aclose()


async def test_the_device_ordinal_is_checked():
    async with running_server(isolation="thread", backend=_fake(2)) as srv:
        c = await srv.connect()
        for call in (c.primary_ctx_retain(2), c.ctx_create(-1), c.device_get(2), c.device_name(5)):
            with pytest.raises(CudaError) as e:
                await call
            assert e.value.code == Status.INVALID_DEVICE
        await c.aclose()


def test_a_subset_of_devices_is_renumbered_from_zero():
    backend = _fake(4, visible=(1, 3))
    assert backend.device_count() == 2
    assert backend.device_name(0) == "rgpu fake GPU 1" and backend.device_name(1) == "rgpu fake GPU 3"
    assert backend.device_uuid(1) == _fake(4).device_uuid(3)
    with pytest.raises(ValueError):
        _fake(2, visible=(0, 2))
    with pytest.raises(ValueError):
        _fake(2, visible=(1, 1))


def test_device_options_from_the_environment(monkeypatch):
    monkeypatch.setenv(factory.FAKE_DEVICES_ENV, "3")
    monkeypatch.setenv(factory.DEVICES_ENV, "2,0")
    backend = factory.make_backend("fake")
    assert [backend.device_name(d) for d in range(backend.device_count())] == ["rgpu fake GPU 2",
                                                                                 "rgpu fake GPU 0"]
    monkeypatch.setenv(factory.DEVICES_ENV, "0,3")
    with pytest.raises(BackendUnavailable):
        factory.make_backend("fake")
    for bad in ("", "x", "0,0", "-1"):
        with pytest.raises(ValueError):
            factory.parse_devices(bad)
    for bad in ("0", "65", "two"):
        with pytest.raises(ValueError):
            factory.parse_fake_devices(bad)


def test_cuda_visible_devices_is_composed(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5,7")
    factory._restrict_cuda((2, 0))
    import os

    assert os.environ["CUDA_VISIBLE_DEVICES"] == "7,3"
    with pytest.raises(BackendUnavailable):
        factory._restrict_cuda((4,))



@pytest.mark.parametrize("args", [["--devices", "0,x"], ["--devices", "1,1"], ["--fake-devices", "0"],
                                  ["--fake-devices", "many"]])
def test_bad_device_options_stop_the_server_with_a_message(monkeypatch, capsys, args):
    from rgpu.cli import server_main

    for name in ("RGPU_LOG_FORMAT", factory.FAKE_DEVICES_ENV, factory.DEVICES_ENV):
        monkeypatch.delenv(name, raising=False)  # (restored afterwards, whatever server_main sets)
    assert server_main(["--backend", "fake", "--port", "0", *args]) == 2
    assert args[0] in capsys.readouterr().err
