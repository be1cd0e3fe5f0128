"""JIT linking (protocol 1.8) end to end on the fake backend, from the wire: a link's life, its logs within what
was asked, its image read in parts and loaded by digest, and every wrong request refused with a clear status
(tests/cuda/jit_link.cu runs the driver API through the stand-in; test_modern_hostile_replies turns the server
hostile)."""

from __future__ import annotations

import hashlib
import struct

import pytest

from rgpu.backends import ptx
from rgpu.client import _Request
from rgpu.errors import CudaError, Status
from rgpu.protocol import ops

from .conftest import running_server

PTX_INPUT, LIBRARY_INPUT = 1, 4
KERNEL = b"""\
.version 9.0
.target sm_75
.address_size 64
.extern .func  (.param .b32 func_retval0) add_f32
(
\t.param .b32 add_f32_param_0,
\t.param .b32 add_f32_param_1
)
;
.visible .entry vadd(
\t.param .u64 vadd_param_0,
\t.param .u64 vadd_param_1,
\t.param .u64 vadd_param_2,
\t.param .u32 vadd_param_3
)
{
\tret;
}
"""
DEVICE = b"""\
.version 9.0
.target sm_75
.address_size 64
.visible .func  (.param .b32 func_retval0) add_f32(
\t.param .b32 add_f32_param_0,
\t.param .b32 add_f32_param_1
)
{
\tret;
}
"""


def option(ident: int, value: int, pad: int = 0) -> bytes:
    return struct.pack("<IIQ", ident, pad, value)


async def _context(client):
    await client.ctx_set_current(await client.primary_ctx_retain(0))


async def create(client, options: bytes = b"", info: int = 4096, error: int = 4096) -> int:
    return await client._call(_Request(ops.JIT_LINK_CREATE, (len(options) // 16, info, error), options))


async def add(client, link: int, data: bytes, name: bytes = b"in.ptx", kind: int = PTX_INPUT, options: bytes = b""):
    """(status, info log, error log)"""
    def decode(values, bulk):
        return values.status, bytes(bulk[: values.info_size]), bytes(bulk[values.info_size :])
    return await client._call(_Request(ops.JIT_LINK_ADD, (link, kind, len(options) // 16, len(name)),
                                       options + name + data, decode=decode))


async def complete(client, link: int):
    return await client._call(_Request(ops.JIT_LINK_COMPLETE, (link,), decode=lambda v, bulk: (v, bytes(bulk))))


async def read(client, link: int, offset: int, size: int) -> bytes:
    return await client._call(_Request(ops.JIT_LINK_READ, (link, offset, size), decode=lambda v, bulk: bytes(bulk)))


async def test_a_link_of_two_inputs_gives_an_image_that_loads_by_its_digest(client):
    await _context(client)
    link = await create(client, option(12, 1))  # LOG_VERBOSE
    status, info, error = await add(client, link, KERNEL + b"\0", b"kernel.ptx")
    assert (status, error) == (0, b"") and info.endswith(b"\0") and b"kernel.ptx" in info
    padded = DEVICE + b"// worth caching: " + b"x" * 20000 + b"\n"  # (images under 16 KiB go up again instead)
    assert (await add(client, link, padded, b"device.ptx"))[0] == 0
    reply, logs = await complete(client, link)
    assert reply.status == 0 and reply.error_size == 0 and reply.image_size > len(KERNEL) + len(padded)
    image = b"".join([await read(client, link, off, min(4000, reply.image_size - off))
                      for off in range(0, reply.image_size, 4000)])
    assert hashlib.sha256(image).digest() == reply.sha256
    assert b".entry vadd" in ptx.fatbin_ptx(image)
    module = await client.module_load_cached(reply.sha256)  # the server cached the image: no upload
    await client.get_function(module, "vadd")
    await client._call(_Request(ops.JIT_LINK_DESTROY, (link,)))
    with pytest.raises(CudaError) as e:
        await read(client, link, 0, 1)
    assert e.value.code == Status.INVALID_HANDLE


async def test_the_linker_s_refusals_are_answers_with_their_logs_within_what_was_asked(client):
    await _context(client)
    link = await create(client, error=40)
    status, _, error = await add(client, link, b".version 9.0\n.target sm_75\nnot PTX;\n", b"bad.ptx")
    assert status == Status.INVALID_PTX and len(error) == 40 and error.endswith(b"\0") and b"bad.ptx" in error
    assert (await add(client, link, KERNEL))[0] == 0
    reply, logs = await complete(client, link)  # add_f32 is defined nowhere
    assert reply.status == Status.INVALID_PTX and reply.image_size == 0 and reply.sha256 == bytes(32)
    assert len(logs) == reply.info_size + reply.error_size <= 40
    quiet = await create(client, info=0, error=0)
    status, info, error = await add(client, quiet, b"garbage", kind=PTX_INPUT)
    assert status == Status.INVALID_IMAGE and info == error == b""  # not even PTX
    assert (await add(client, quiet, b"!<arch>\n", kind=LIBRARY_INPUT))[0] == Status.NOT_SUPPORTED
    assert (await add(client, quiet, DEVICE, options=option(9, 90)))[0] == Status.INVALID_VALUE  # TARGET: links only
    with pytest.raises(CudaError) as e:
        await read(client, quiet, 0, 1)  # not completed
    assert e.value.code == Status.INVALID_VALUE


@pytest.mark.parametrize("options, info, error", [
    (option(3, 0x7FFF0000), 100, 100),  # INFO_LOG_BUFFER: a pointer of the client's, never sent
    (option(17, 1), 100, 100),  # GLOBAL_SYMBOL_NAMES
    (option(0, 1 << 32), 100, 100),  # a value wider than the driver's int
    (option(0, 32, pad=1), 100, 100),
    (option(0, 32)[:-1], 100, 100),  # a record cut short
    (option(0, 32) * (ops.MAX_JIT_OPTIONS + 1), 100, 100),
    (b"", ops.MAX_JIT_LOG + 1, 0),
])
async def test_a_wrong_creation_is_refused(client, options, info, error):
    await _context(client)
    count = max(len(options) // 16, 1) if options else 0
    with pytest.raises(CudaError) as e:
        await client._call(_Request(ops.JIT_LINK_CREATE, (count, info, error), options))
    assert e.value.code == Status.INVALID_VALUE


async def test_wrong_inputs_and_reads_are_refused(client):
    await _context(client)
    link = await create(client)
    for values, bulk in (((link, 9, 0, 0), DEVICE),  # no such input type
                         ((link, PTX_INPUT, 0, 100), b"short"),  # a name longer than the bulk
                         ((link, PTX_INPUT, 0, 4), b"name"),  # a name and no input
                         ((link, PTX_INPUT, 0, 5000), bytes(6000)),  # a name beyond the limit
                         ((link, PTX_INPUT, 2, 0), option(0, 32)),  # options past the bulk
                         ((0x1234, PTX_INPUT, 0, 0), DEVICE)):  # not a link of this session
        with pytest.raises(CudaError) as e:
            await client._call(_Request(ops.JIT_LINK_ADD, values, bulk))
        assert e.value.code in (Status.INVALID_VALUE, Status.INVALID_HANDLE), values
    assert (await add(client, link, DEVICE))[0] == 0
    reply, _ = await complete(client, link)
    for offset, size in ((reply.image_size, 1), (0, reply.image_size + 1), (1 << 63, 1), (0, 16 << 20 | 1)):
        with pytest.raises(CudaError) as e:
            await read(client, link, offset, size)
        assert e.value.code == Status.INVALID_VALUE
    with pytest.raises(CudaError) as e:
        await add(client, link, DEVICE)  # the link is complete
    assert e.value.code == Status.INVALID_VALUE


async def test_a_session_holds_a_bounded_number_of_links_and_its_end_frees_them():
    async with running_server() as srv:
        client = await srv.connect()
        await _context(client)
        links = [await create(client) for _ in range(ops.MAX_JIT_LINKS)]
        with pytest.raises(CudaError) as e:
            await create(client)
        assert e.value.code == Status.OUT_OF_MEMORY
        await client._call(_Request(ops.JIT_LINK_DESTROY, (links[0],)))
        await create(client)
        await client.aclose()  # with 16 links open: the session's teardown destroys them
        again = await srv.connect()
        await _context(again)
        await create(again)
        await again.aclose()
