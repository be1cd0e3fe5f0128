"""CUDA arrays, texture and surface objects (protocol 1.8) from the wire, on the fake backend: copies between every
pair of ends, bounded by the array and the session's memory; the quota; every wrong request refused with a clear
status; a session's end frees its arrays and objects (tests/cuda/textures.cu runs the APIs through the stand-ins)."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from rgpu.client import _Request
from rgpu.errors import CudaError, Status
from rgpu.protocol import ops

from .conftest import running_server

HOST, DEVICE, ARRAY = 1, 2, 3
FLOAT, SURFACE_LDST = 0x20, 0x02


async def _context(client):
    await client.ctx_set_current(await client.primary_ctx_retain(0))


async def create(client, width, height=0, depth=0, fmt=FLOAT, channels=1, flags=0) -> int:
    return await client._call(_Request(ops.ARRAY_CREATE, (width, height, depth, fmt, channels, flags)))


async def copy(client, kind, src=(0, 0, 0, 0, 0), dst=(0, 0, 0, 0, 0), width=0, height=1, bulk=b"", sync=True):
    """src/dst: (at, x, y, z, pitch)"""
    op = ops.MEMCPY_ARRAY if sync else ops.MEMCPY_ARRAY_ASYNC
    values = (kind, *src, *dst, width, height, 0)
    return await client._call(_Request(op, values, bulk, decode=lambda v, b: bytes(b)))


def resource(kind: int, where: int, fmt: int = FLOAT, channels: int = 1, a: int = 0, b: int = 0, c: int = 0,
             flags: int = 0) -> bytes:
    head = struct.pack("<I4xQIIQQQ", kind, where, fmt, channels, a, b, c)
    return head.ljust(136, b"\0") + struct.pack("<I", flags).ljust(8, b"\0")


def texture(address=(1, 1, 1), filter_mode=0, flags=0, anisotropy=0) -> bytes:
    return struct.pack("<3IIIIIfff4f", *address, filter_mode, flags, anisotropy, 0, 0, 0, 0, 0, 0, 0, 0).ljust(104,
                                                                                                            b"\0")


async def test_copies_between_every_pair_of_ends(client):
    await _context(client)
    a = await create(client, 8, 4)  # 4 rows of 8 floats
    b = await create(client, 8, 4)
    rows = np.arange(32, dtype=np.float32).tobytes()
    await copy(client, HOST | ARRAY << 4, dst=(a, 0, 0, 0, 0), width=32, height=4, bulk=rows)
    assert await copy(client, ARRAY | HOST << 4, src=(a, 0, 0, 0, 0), width=32, height=4) == rows
    assert await copy(client, ARRAY | HOST << 4, src=(a, 8, 1, 0, 0), width=8, height=2) == rows[40:48] + rows[72:80]
    dev = await client.mem_alloc(256)
    await copy(client, ARRAY | DEVICE << 4, src=(a, 0, 0, 0, 0), dst=(dev, 0, 0, 0, 64), width=32, height=4,
               sync=False)
    raw = await client.memcpy_dtoh(dev, 256)
    assert all(raw[y * 64 : y * 64 + 32] == rows[y * 32 : (y + 1) * 32] for y in range(4))
    await copy(client, DEVICE | ARRAY << 4, src=(dev, 0, 0, 0, 64), dst=(b, 0, 0, 0, 0), width=32, height=4)
    await copy(client, ARRAY | ARRAY << 4, src=(b, 0, 2, 0, 0), dst=(a, 0, 0, 0, 0), width=32, height=2)
    assert await copy(client, ARRAY | HOST << 4, src=(a, 0, 0, 0, 0), width=32, height=4) == rows[64:] + rows[64:]


@pytest.mark.parametrize("values, status", [
    ((8, 0, 0, 0x50, 1, 0), Status.NOT_SUPPORTED),  # a format rgpu does not take
    ((8, 0, 0, FLOAT, 3, 0), Status.INVALID_VALUE),  # 3 channels
    ((0, 0, 0, FLOAT, 1, 0), Status.INVALID_VALUE),
    ((8, 0, 0, FLOAT, 1, 0x100), Status.INVALID_VALUE),  # an unknown flag
    ((8, 0, 0, FLOAT, 1, 0x40), Status.NOT_SUPPORTED),  # a sparse array
    ((8, 0, 4, FLOAT, 1, 0), Status.INVALID_VALUE),  # depth without height, not layered
    ((1 << 40, 1 << 10, 0, FLOAT, 4, 0), Status.OUT_OF_MEMORY),
])
async def test_a_wrong_array_is_refused(client, values, status):
    await _context(client)
    with pytest.raises(CudaError) as e:
        await client._call(_Request(ops.ARRAY_CREATE, values))
    assert e.value.code == status


async def test_wrong_copies_are_refused(client):
    await _context(client)
    a = await create(client, 8, 4)
    dev = await client.mem_alloc(64)
    whole = dict(width=32, height=4)
    for kind, src, dst, kw, bulk in (
            (HOST | HOST << 4, (0,) * 5, (0,) * 5, whole, bytes(128)),
            (DEVICE | DEVICE << 4, (dev, 0, 0, 0, 32), (dev, 0, 0, 0, 32), dict(width=8, height=1), b""),  # no array
            (ARRAY | 5 << 4, (a, 0, 0, 0, 0), (0,) * 5, whole, b""),
            (HOST | ARRAY << 4, (0,) * 5, (a, 0, 0, 0, 0), whole, bytes(127)),  # rows cut short
            (HOST | ARRAY << 4, (0,) * 5, (a, 4, 0, 0, 0), whole, bytes(128)),  # past the row's end
            (HOST | ARRAY << 4, (0,) * 5, (a, 0, 1, 0, 0), whole, bytes(128)),  # past the last row
            (HOST | ARRAY << 4, (0,) * 5, (a, 0, 0, 1, 0), whole, bytes(128)),  # no second slice
            (HOST | ARRAY << 4, (0,) * 5, (a, 0, 0, 0, 0), dict(width=0, height=4), b""),
            (HOST | ARRAY << 4, (0,) * 5, (0x1234, 0, 0, 0, 0), whole, bytes(128)),  # not this session's
            (ARRAY | DEVICE << 4, (a, 0, 0, 0, 0), (dev, 0, 0, 0, 32), whole, b""),  # past the device memory
            (ARRAY | DEVICE << 4, (a, 0, 0, 0, 0), (dev, 0, 0, 0, 16), dict(width=32, height=2), b"")):  # pitch
        with pytest.raises(CudaError) as e:
            await copy(client, kind, src, dst, bulk=bulk, **kw)
        assert e.value.code in (Status.INVALID_VALUE, Status.INVALID_HANDLE), (kind, src, dst)
    with pytest.raises(CudaError) as e:  # an asynchronous copy cannot bring rows back (reported later, deferred)
        await copy(client, ARRAY | HOST << 4, src=(a, 0, 0, 0, 0), width=32, height=1, sync=False)
        await client.ctx_synchronize()
    assert e.value.code == Status.INVALID_VALUE


async def test_arrays_count_against_the_session_s_memory():
    async with running_server(session_mem_limit=1 << 20) as srv:
        client = await srv.connect()
        await _context(client)
        a = await create(client, 256, 256, fmt=FLOAT, channels=2)  # 512 KiB
        with pytest.raises(CudaError) as e:
            await create(client, 256, 256, fmt=FLOAT, channels=4)  # 1 MiB more
        assert e.value.code == Status.OUT_OF_MEMORY
        await client._call(_Request(ops.ARRAY_DESTROY, (a,)))
        await create(client, 256, 256, fmt=FLOAT, channels=4)
        await client.aclose()


async def test_texture_and_surface_objects_are_checked(client):
    await _context(client)
    a = await create(client, 8, 4)
    surfaceable = await create(client, 8, 4, flags=SURFACE_LDST)
    dev = await client.mem_alloc(64)
    tex = texture()
    t = await client._call(_Request(ops.TEX_OBJECT_CREATE, (0,), resource(0, a) + tex))
    s = await client._call(_Request(ops.SURF_OBJECT_CREATE, (), resource(0, surfaceable)))
    lin = await client._call(_Request(ops.TEX_OBJECT_CREATE, (0,), resource(2, dev, a=64) + tex))
    assert len({t, s, lin}) == 3 and 0 not in {t, s, lin}
    for op, values, bulk, status in (
            (ops.TEX_OBJECT_CREATE, (0,), resource(0, a) + tex[:-1], Status.INVALID_VALUE),
            (ops.TEX_OBJECT_CREATE, (1,), resource(0, a) + tex, Status.INVALID_VALUE),  # a view it does not carry
            (ops.TEX_OBJECT_CREATE, (0,), resource(1, a) + tex, Status.NOT_SUPPORTED),  # mipmapped
            (ops.TEX_OBJECT_CREATE, (0,), resource(9, a) + tex, Status.INVALID_VALUE),
            (ops.TEX_OBJECT_CREATE, (0,), resource(0, a, flags=1) + tex, Status.INVALID_VALUE),
            (ops.TEX_OBJECT_CREATE, (0,), resource(0, 0x1234) + tex, Status.INVALID_HANDLE),
            (ops.TEX_OBJECT_CREATE, (0,), resource(2, dev, a=128) + tex, Status.INVALID_VALUE),  # past the memory
            (ops.TEX_OBJECT_CREATE, (0,), resource(2, dev, a=2) + tex, Status.INVALID_VALUE),  # not one element
            (ops.TEX_OBJECT_CREATE, (0,), resource(3, dev, a=4, b=4, c=8) + tex, Status.INVALID_VALUE),  # pitch
            (ops.TEX_OBJECT_CREATE, (0,), resource(3, dev, a=4, b=5, c=16) + tex, Status.INVALID_VALUE),
            (ops.TEX_OBJECT_CREATE, (0,), resource(0, a) + texture(address=(7, 1, 1)), Status.INVALID_VALUE),
            (ops.TEX_OBJECT_CREATE, (0,), resource(0, a) + texture(flags=0x100), Status.INVALID_VALUE),
            (ops.SURF_OBJECT_CREATE, (), resource(0, a), Status.INVALID_VALUE),  # no SURFACE_LDST
            (ops.SURF_OBJECT_CREATE, (), resource(2, dev, a=64), Status.INVALID_VALUE),
            (ops.TEX_OBJECT_DESTROY, (s,), b"", Status.INVALID_VALUE),  # a surface, not a texture
            (ops.SURF_OBJECT_DESTROY, (t,), b"", Status.INVALID_VALUE),
            (ops.TEX_OBJECT_DESTROY, (987654,), b"", Status.INVALID_VALUE)):
        with pytest.raises(CudaError) as e:
            await client._call(_Request(op, values, bulk))
        assert e.value.code == status, (op.name, values)
    await client._call(_Request(ops.TEX_OBJECT_DESTROY, (t,)))
    with pytest.raises(CudaError):
        await client._call(_Request(ops.TEX_OBJECT_DESTROY, (t,)))  # once only
    await client._call(_Request(ops.SURF_OBJECT_DESTROY, (s,)))


async def test_a_session_s_end_frees_its_arrays_and_objects(tsrv):
    client = await tsrv.connect()
    await _context(client)
    a = await create(client, 8, 4, flags=SURFACE_LDST)
    await client._call(_Request(ops.TEX_OBJECT_CREATE, (0,), resource(0, a) + texture()))
    await client._call(_Request(ops.SURF_OBJECT_CREATE, (), resource(0, a)))
    assert len(tsrv.backend._textures) == 2
    await client.aclose()
    assert tsrv.backend._textures == {}
