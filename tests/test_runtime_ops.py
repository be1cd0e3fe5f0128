"""Protocol 1.1 operations the runtime shim relies on, end to end on the fake backend: 2D copies and memsets
(with their bounds), function attributes and occupancy, stream priorities, limits, and the cross-session module
cache."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from rgpu.errors import CudaError, Status

from .conftest import DEMO_PTX, running_server


async def test_2d_copies_move_only_the_rows_and_respect_pitch(client):
    width, height, pitch = 100, 7, 128
    base = await client.mem_alloc(pitch * height)
    await client.memset_d8(base, 0xEE, pitch * height)
    rows = bytes(range(256)) * 3
    rows = rows[: width * height]
    await client.memcpy_2d_htod(base, pitch, rows, width, height)
    raw = await client.memcpy_dtoh(base, pitch * height)
    for y in range(height):
        assert raw[y * pitch : y * pitch + width] == rows[y * width : (y + 1) * width]
        assert set(raw[y * pitch + width : (y + 1) * pitch]) == {0xEE}  # padding untouched
    assert await client.memcpy_2d_dtoh(base, pitch, width, height) == rows
    other = await client.mem_alloc(width * height)
    await client.memcpy_2d_dtod(other, width, base, pitch, width, height)
    assert await client.memcpy_dtoh(other, width * height) == rows
    await client.memset_2d(base, pitch, 0xBEEF, 2, 10, height)
    raw = await client.memcpy_dtoh(base, pitch * height)
    for y in range(height):
        assert np.all(np.frombuffer(raw[y * pitch : y * pitch + 20], dtype=np.uint16) == 0xBEEF)
        assert raw[y * pitch + 20] != 0xEF or raw[y * pitch + 21] != 0xBE


async def test_2d_copies_are_bounds_checked(client):
    p = await client.mem_alloc(1000)
    with pytest.raises(CudaError) as e:  # the last row ends past the allocation
        await client.memcpy_2d_dtoh(p, 200, 100, 6)
    assert e.value.code == Status.INVALID_VALUE
    with pytest.raises(CudaError) as e:  # width wider than pitch
        await client.memcpy_2d_dtoh(p, 50, 100, 2)
    assert e.value.code == Status.INVALID_VALUE
    with pytest.raises(CudaError) as e:  # fewer host bytes than the shape says
        await client.memcpy_2d_htod(p, 100, b"x" * 99, 100, 1)
    assert e.value.code == Status.INVALID_VALUE
    with pytest.raises(CudaError):
        await client.memset_2d(p, 100, 0, 3, 10, 2)  # element size 3


async def test_function_attributes_occupancy_and_set_attribute(client):
    mod = await client.module_load(DEMO_PTX)
    fn = await client.get_function(mod, "vadd")
    attrs = await client.func_attributes(fn)
    assert len(attrs) == 16 and attrs[0] == 1024 and attrs[5] > 0  # max threads, PTX version
    assert await client.occupancy_max_blocks(fn, 256) > 0
    assert await client.occupancy_max_blocks(fn, 2048) == 0
    await client.func_set_attribute(fn, 8, 64 * 1024)  # max dynamic shared memory
    assert (await client.func_attributes(fn))[8] == 64 * 1024
    await client.func_set_attribute(fn, 0, 1)  # not settable: reported with the next reply
    with pytest.raises(CudaError) as e:
        await client.nop()
    assert e.value.deferred and e.value.code == Status.INVALID_VALUE


async def test_stream_priorities_and_limits(client):
    least, greatest = await client.stream_priority_range()
    assert greatest <= least
    s = await client.stream_create_with_priority(1, greatest)
    await client.stream_synchronize(s)
    stack = await client.ctx_get_limit(0)
    await client.ctx_set_limit(0, stack * 4)
    assert await client.ctx_get_limit(0) == stack * 4
    with pytest.raises(CudaError):
        await client.ctx_get_limit(99)


async def test_a_stream_says_what_it_was_made_with(client):
    ctx = await client.primary_ctx_retain(0)
    await client.ctx_set_current(ctx)
    least, greatest = await client.stream_priority_range()
    plain, urgent = await client.stream_create(0), await client.stream_create_with_priority(1, greatest)
    a, b = await client.stream_info(plain), await client.stream_info(urgent)
    assert a[:3] == (0, 0, ctx) and b[:3] == (1, greatest, ctx)
    assert a[3] != b[3] and (await client.stream_info(plain))[3] == a[3]
    assert (await client.stream_info(0))[2] == ctx  # the NULL stream is the current context's
    await client.stream_destroy(plain)
    for gone in (plain, 0x1234):  # destroyed, and never this session's
        with pytest.raises(CudaError) as e:
            await client.stream_info(gone)
        assert e.value.code == Status.INVALID_HANDLE


async def test_stream_attributes_travel_as_they_are(client):
    from rgpu.client import _Request
    from rgpu.protocol import ops

    ctx = await client.primary_ctx_retain(0)
    await client.ctx_set_current(ctx)
    a, b = await client.stream_create(0), await client.stream_create(0)
    policy = (2).to_bytes(4, "little").ljust(64, b"\0")  # SYNCHRONIZATION_POLICY: CU_SYNC_POLICY_SPIN
    await client._call(_Request(ops.STREAM_SET_ATTRIBUTE, (a, 3), policy))
    got = await client._call(_Request(ops.STREAM_GET_ATTRIBUTE, (a, 3), decode=lambda v, bulk: bytes(bulk)))
    assert got == policy
    await client._call(_Request(ops.STREAM_COPY_ATTRIBUTES, (b, a)))
    assert await client._call(_Request(ops.STREAM_GET_ATTRIBUTE, (b, 3), decode=lambda v, bulk: bytes(bulk))) == policy
    for op, values, bulk in ((ops.STREAM_SET_ATTRIBUTE, (a, 99), policy),  # no such attribute
                             (ops.STREAM_SET_ATTRIBUTE, (a, 3), policy[:63]),  # a value cut short
                             (ops.STREAM_GET_ATTRIBUTE, (a, 99), b""),
                             (ops.STREAM_COPY_ATTRIBUTES, (b, 0x1234), b"")):  # not this session's stream
        with pytest.raises(CudaError) as e:
            await client._call(_Request(op, values, bulk))
        assert e.value.code in (Status.INVALID_VALUE, Status.INVALID_HANDLE)


async def test_module_cache_serves_later_sessions_by_content():
    image = DEMO_PTX + b"\n// padding so the image is worth caching: " + b"x" * 20000 + b"\n"
    digest = hashlib.sha256(image).digest()
    async with running_server() as srv:
        first = await srv.connect()
        with pytest.raises(CudaError) as e:
            await first.module_load_cached(digest)
        assert e.value.code == Status.NOT_FOUND
        await first.module_load(image)
        await first.aclose()
        second = await srv.connect()
        mod = await second.module_load_cached(digest)
        assert (await second.get_function(mod, "vadd")).layout
        with pytest.raises(CudaError):  # a digest nobody uploaded
            await second.module_load_cached(hashlib.sha256(b"other").digest())
        await second.aclose()
        cache_dir = srv.server.module_cache.dir
        assert (cache_dir / digest.hex()).exists()
    assert not cache_dir.exists()  # the private cache goes with the server


async def test_module_cache_drops_a_tampered_file():
    image = DEMO_PTX + b"//" + b"y" * 20000 + b"\n"
    digest = hashlib.sha256(image).digest()
    async with running_server() as srv:
        c = await srv.connect()
        await c.module_load(image)
        (srv.server.module_cache.dir / digest.hex()).write_bytes(image.replace(b"vadd", b"vsub"))
        with pytest.raises(CudaError) as e:
            await c.module_load_cached(digest)
        assert e.value.code == Status.NOT_FOUND
        await c.aclose()
