"""OCCUPANCY_TABLE and OCCUPANCY_AVAILABLE_SMEM on the fake backend, and their bad input."""

from __future__ import annotations

import struct

from rgpu.errors import Status
from rgpu.protocol import ops

from .conftest import DEMO_PTX
from .test_vmm import HANDLERS, call, fails, session


def function(s):
    (mod,) = HANDLERS[ops.MODULE_LOAD_DATA.code].fn(s, ops.MODULE_LOAD_DATA.decode(b""), DEMO_PTX)
    op = ops.MODULE_GET_FUNCTION
    return HANDLERS[op.code].fn(s, op.decode(op.pack_request(mod)), b"vadd").values[0]


def entries(*pairs):
    return b"".join(struct.pack("<IQ", b, m) for b, m in pairs)


def test_table_matches_single_queries():
    s = session()
    f = function(s)
    pairs = [(1024, 0), (256, 0), (96, 4096), (32, 100_000)]
    op = ops.OCCUPANCY_TABLE
    reply = HANDLERS[op.code].fn(s, op.decode(op.pack_request(f, 0, len(pairs))), entries(*pairs))
    table = struct.unpack(f"<{len(pairs)}i", reply.bulk)
    assert reply.values == (len(pairs),)
    assert list(table) == [call(s, ops.OCCUPANCY_MAX_BLOCKS, f, b, m, 0)[0] for b, m in pairs]
    assert table[3] == 2  # shared memory, not threads, limits the last one


def test_bad_tables_and_handles():
    s = session()
    f = function(s)
    fails(Status.INVALID_VALUE, s, ops.OCCUPANCY_TABLE, f, 0, 2, bulk=entries((32, 0)))
    fails(Status.INVALID_VALUE, s, ops.OCCUPANCY_TABLE, f, 0, 0)
    fails(Status.INVALID_VALUE, s, ops.OCCUPANCY_TABLE, f, 0, 1, bulk=entries((0, 0)))
    fails(Status.INVALID_VALUE, s, ops.OCCUPANCY_TABLE, f, 0, 2000, bulk=entries(*[(32, 0)] * 2000))
    fails(Status.INVALID_HANDLE, s, ops.OCCUPANCY_TABLE, 0x1234, 0, 1, bulk=entries((32, 0)))
    assert call(s, ops.OCCUPANCY_AVAILABLE_SMEM, f, 2, 256)[0] > 0
    fails(Status.INVALID_VALUE, s, ops.OCCUPANCY_AVAILABLE_SMEM, f, 0, 256)
