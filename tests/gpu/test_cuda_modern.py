"""VMM, stream-ordered pools, the occupancy table and pointer-array GEMMs on the real driver, through the
server's handlers in this process (the cuda backend mixins). GPU box only (RGPU_TEST_BACKEND=cuda)."""

from __future__ import annotations

import os
import pathlib
import struct

import numpy as np
import pytest

from rgpu.errors import CudaError, Status
from rgpu.protocol import ops
from rgpu.session.state import Session

from ..conftest import DEMO_PTX
from ..test_blas_batched import args as gemm_args, pointer_array, write
from ..test_occupancy import entries
from ..test_vmm import HANDLERS, call, fails, read

pytestmark = pytest.mark.skipif(os.environ.get("RGPU_TEST_BACKEND") != "cuda",
                                reason="GPU box only (RGPU_TEST_BACKEND=cuda)")


@pytest.fixture(scope="module")
def backend():
    from rgpu.backends.cuda import CudaBackend

    be = CudaBackend()
    be.init()
    yield be
    be.close()


@pytest.fixture
def s(backend):
    session = Session(1, backend, mem_limit=1 << 30)
    call(session, ops.CTX_CREATE, 0, 0)
    yield session
    session.release_all()


def test_vmm_map_alias_copy_and_teardown(s):
    (g,) = call(s, ops.MEM_GET_GRANULARITY, 0, 0, 1, 0)  # POSIX fd asked: answered like no handle type
    assert call(s, ops.MEM_GET_GRANULARITY, 0, 0, 0, 0) == (g,)
    (h,) = call(s, ops.MEM_CREATE, 2 * g, 0, 1, 0, 0, 0)
    (va,) = call(s, ops.MEM_ADDRESS_RESERVE, 4 * g, 0, 0, 0)
    call(s, ops.MEM_MAP, va, 2 * g, 0, h, 0)
    fails(Status.NOT_SUPPORTED, s, ops.MEM_MAP, va + 2 * g, g, g, h, 0)  # the driver maps from offset 0 only
    call(s, ops.MEM_MAP, va + 2 * g, 2 * g, 0, h, 0)  # the same bytes again, right after
    call(s, ops.MEM_SET_ACCESS, va, 4 * g, 1, bulk=struct.pack("<IiI", 1, 0, 3))
    call(s, ops.MEM_RELEASE, h)
    call(s, ops.MEMSET_D8, va, 0, 2 * g)  # cuMemCreate's memory is not zeroed
    call(s, ops.MEMSET_D8, va + g + 100, 0x5A, 8)
    assert read(s, va + 3 * g + 100, 8) == b"\x5a" * 8
    assert read(s, va + 2 * g - 4, 8)[4:] == b"\0" * 4  # a copy across two mappings
    assert call(s, ops.MEM_GET_ACCESS, va, 1, 0) == (3,)
    fails(Status.INVALID_VALUE, s, ops.MEM_UNMAP, va, g)
    call(s, ops.MEM_UNMAP, va, 4 * g)
    call(s, ops.MEM_ADDRESS_FREE, va, 4 * g)
    assert s.memory.allocated == 0
    fails(Status.NOT_SUPPORTED, s, ops.MEM_CREATE, g, 0, 8, 0, 0, 0)


def test_pools_allocate_in_stream_order(s):
    (stream,) = call(s, ops.STREAM_CREATE, 1)
    (pool,) = call(s, ops.MEM_POOL_GET_DEFAULT, 0)
    call(s, ops.MEM_POOL_SET_ATTRIBUTE, pool, 4, 1 << 30)
    (a,) = call(s, ops.MEM_ALLOC_ASYNC, 1 << 20, 0, stream)
    call(s, ops.MEMSET_D8_ASYNC, a, 3, 1 << 20, stream)
    call(s, ops.STREAM_SYNCHRONIZE, stream)
    assert read(s, a + 1000, 4) == b"\3" * 4
    assert call(s, ops.MEM_POOL_GET_ATTRIBUTE, pool, 7)[0] >= 1 << 20
    call(s, ops.MEM_FREE_ASYNC, a, stream)
    (mine,) = call(s, ops.MEM_POOL_CREATE, 0, 0, 0, 0)
    (b,) = call(s, ops.MEM_ALLOC_ASYNC, 4096, mine, stream)
    call(s, ops.MEM_FREE, b)
    call(s, ops.STREAM_SYNCHRONIZE, stream)
    call(s, ops.MEM_POOL_TRIM, mine, 0)
    call(s, ops.MEM_POOL_DESTROY, mine)
    assert s.memory.allocated == 0


def test_occupancy_table_and_batched_gemm(s):
    (mod,) = HANDLERS[ops.MODULE_LOAD_DATA.code].fn(s, ops.MODULE_LOAD_DATA.decode(b""), DEMO_PTX)
    op = ops.MODULE_GET_FUNCTION
    f = HANDLERS[op.code].fn(s, op.decode(op.pack_request(mod)), b"vadd").values[0]
    op = ops.OCCUPANCY_TABLE
    reply = HANDLERS[op.code].fn(s, op.decode(op.pack_request(f, 0, 2)), entries((1024, 0), (128, 0)))
    table = struct.unpack("<2i", reply.bulk)
    assert list(table) == [call(s, ops.OCCUPANCY_MAX_BLOCKS, f, b, 0, 0)[0] for b in (1024, 128)]
    assert call(s, ops.OCCUPANCY_AVAILABLE_SMEM, f, 2, 256)[0] > 0

    (blas,) = call(s, ops.BLAS_CREATE)
    mats = {name: [call(s, ops.MEM_ALLOC, 64)[0] for _ in range(3)] for name in "abc"}
    for i in range(3):
        write(s, mats["a"][i], np.full(16, i + 1, np.float32).tobytes())
        write(s, mats["b"][i], np.eye(4, dtype=np.float32).tobytes())
    arrays = [pointer_array(s, mats[x]) for x in "abc"]
    call(s, ops.BLAS_GEMM_BATCHED, *gemm_args(blas, arrays, 3))
    call(s, ops.CTX_SYNCHRONIZE)
    for i, c in enumerate(mats["c"]):
        assert (np.frombuffer(read(s, c, 64), np.float32) == 2 * (i + 1)).all()
    bad = pointer_array(s, [mats["c"][0], 0x1000, mats["c"][2]])
    with pytest.raises(CudaError):
        call(s, ops.BLAS_GEMM_BATCHED, *gemm_args(blas, (arrays[0], arrays[1], bad), 3))


def _c_strings(header: str) -> dict[str, bytes]:
    """The string constants of a C header such as tests/cuda/link_ptx.h, by name."""
    import re

    text = (pathlib.Path(__file__).parents[1] / "cuda" / header).read_text()
    out = {}
    for name, body in re.findall(r"static const char (\w+)\[\] =((?:\s*\"(?:[^\"\\]|\\.)*\")+);", text):
        parts = re.findall(r"\"((?:[^\"\\]|\\.)*)\"", body)
        out[name] = "".join(parts).encode().decode("unicode_escape").encode()
    return out


def _handled(s, op, *values, bulk=b""):
    """(reply values, reply bulk) of a request run through its handler."""
    result = HANDLERS[op.code].fn(s, op.decode(op.pack_request(*values)), bulk)
    return (result.values, bytes(result.bulk)) if hasattr(result, "values") else (result, b"")


def test_jit_link_on_the_driver(s):
    ptx = _c_strings("link_ptx.h")
    (link,) = call(s, ops.JIT_LINK_CREATE, 1, 4096, 4096, bulk=struct.pack("<IIQ", 12, 0, 1))  # LOG_VERBOSE
    (status, info, error, _), logs = _handled(s, ops.JIT_LINK_ADD, link, 1, 0, 10,
                                              bulk=b"kernel.ptx" + ptx["kernel_ptx"])
    assert status == 0 and error == 0, logs
    (status, info, error, _, size, _), logs = _handled(s, ops.JIT_LINK_COMPLETE, link)
    assert status != 0 and b"_Z7add_f32ff" in logs, (status, logs)  # the device function is nowhere
    call(s, ops.JIT_LINK_DESTROY, link)
    (link,) = call(s, ops.JIT_LINK_CREATE, 0, 4096, 4096)
    for name, text in ((b"kernel.ptx", ptx["kernel_ptx"]), (b"device.ptx", ptx["device_ptx"])):
        assert _handled(s, ops.JIT_LINK_ADD, link, 1, 0, len(name), bulk=name + text)[0][0] == 0
    (status, _, _, wall_ms, size, digest), _ = _handled(s, ops.JIT_LINK_COMPLETE, link)
    assert status == 0 and size > 0 and wall_ms >= 0
    _, image = _handled(s, ops.JIT_LINK_READ, link, 0, size)
    assert len(image) == size and image.startswith(b"\x7fELF")
    (module,) = call(s, ops.MODULE_LOAD_DATA, bulk=image)
    call(s, ops.MODULE_GET_FUNCTION, module, bulk=b"vadd")
    call(s, ops.JIT_LINK_DESTROY, link)


def test_arrays_and_texture_objects_on_the_driver(s):
    from ..test_arrays import resource, texture

    (a,) = call(s, ops.ARRAY_CREATE, 8, 4, 0, 0x20, 1, 0x02)  # 4 rows of 8 floats, surface load/store
    (b,) = call(s, ops.ARRAY_CREATE, 8, 4, 0, 0x20, 1, 0)
    rows = np.arange(32, dtype=np.float32).tobytes()
    copy = (0, 0, 0, 0, 0)
    _handled(s, ops.MEMCPY_ARRAY, 1 | 3 << 4, *copy, a, 0, 0, 0, 0, 32, 4, 0, bulk=rows)
    _handled(s, ops.MEMCPY_ARRAY, 3 | 3 << 4, a, 0, 2, 0, 0, b, 0, 0, 0, 0, 32, 2, 0)
    assert _handled(s, ops.MEMCPY_ARRAY, 3 | 1 << 4, a, 8, 1, 0, 0, *copy, 8, 2, 0)[1] == rows[40:48] + rows[72:80]
    assert _handled(s, ops.MEMCPY_ARRAY, 3 | 1 << 4, b, 0, 0, 0, 0, *copy, 32, 2, 0)[1] == rows[64:]
    (t,) = call(s, ops.TEX_OBJECT_CREATE, 0, bulk=resource(0, a) + texture())
    (surface,) = call(s, ops.SURF_OBJECT_CREATE, bulk=resource(0, a))
    assert t and surface
    fails(Status.INVALID_VALUE, s, ops.SURF_OBJECT_CREATE, bulk=resource(0, b))  # no SURFACE_LDST
    call(s, ops.TEX_OBJECT_DESTROY, t)
    call(s, ops.SURF_OBJECT_DESTROY, surface)
    call(s, ops.ARRAY_DESTROY, b)  # a goes with the session
