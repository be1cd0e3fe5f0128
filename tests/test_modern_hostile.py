"""Hostile input to the VMM, pool, occupancy and pointer-array GEMM operations: arguments mixing the session's
real handles and addresses with arbitrary values never cause an internal error, and the session's accounting
stays consistent (teardown returns every byte)."""

from __future__ import annotations

import random
import struct

from rgpu.dispatch import dispatcher
from rgpu.backends.fake import FakeBackend
from rgpu.backends.fake_vmm import GRANULARITY as G
from rgpu.errors import Status
from rgpu.protocol import ops
from rgpu.protocol.frames import Frame

from .test_occupancy import function
from .test_vmm import call, session

NEW_OPS = [op for op in ops.OPS.values() if 0x0093 <= op.code <= 0x009F or 0x00C0 <= op.code <= 0x00DF
           or 0x0110 <= op.code <= 0x011F]


def test_new_operations_survive_arbitrary_arguments():
    rng = random.Random(1234)
    be = FakeBackend()
    s = session(limit=64 * G, backend=be)
    (phys,) = call(s, ops.MEM_CREATE, 2 * G, 0, 0, 0, 0, 0)
    (va,) = call(s, ops.MEM_ADDRESS_RESERVE, 8 * G, 0, 0, 0)
    (pool,) = call(s, ops.MEM_POOL_GET_DEFAULT, 0)
    (blas,) = call(s, ops.BLAS_CREATE)
    (stream,) = call(s, ops.STREAM_CREATE, 0)
    func = function(s)
    (dptr,) = call(s, ops.MEM_ALLOC, 4096)
    interesting = [0, 1, G, 2 * G, 8 * G, va, va + G, va + 7 * G, phys, pool, blas, stream, func, dptr,
                   2**63, 2**64 - 1, 4096, 24]
    small = [0, 1, 3, 4, 5, 8, 32, 256, 1024, 2**31 - 1]
    for i in range(4000):
        op = rng.choice(NEW_OPS)
        values = []
        for f in op.request_fields:
            if f.type.startswith("b"):
                values.append(rng.randbytes(f.size))
            else:
                bits = f.size * 8
                pool_of_values = interesting if bits == 64 else small
                v = rng.choice(pool_of_values) if rng.random() < 0.8 else rng.getrandbits(bits)
                if f.type[0] == "i":
                    v = (v & (2**bits - 1)) - (2**bits if v & (1 << (bits - 1)) else 0)
                values.append(v & (2**bits - 1) if f.type[0] != "i" else v)
        bulk = rng.choice([b"", struct.pack("<IiI", 1, 0, 3), struct.pack("<IQ", 256, 0) * 2, rng.randbytes(36)])
        frame = Frame(opcode=op.code, request_id=i, args=op.pack_request(*values), bulk=bulk)
        status, message, _ = dispatcher.call(s, frame)
        assert status != Status.UNKNOWN, (op.name, values, message)
    s.release_all()
    assert be.used == 0 and s.memory.allocated == 0 and len(s.memory) == 0


def test_valid_calls_with_one_field_changed():
    """Each operation from a call that would succeed, with one field replaced by a boundary value."""
    rng = random.Random(99)
    be = FakeBackend()
    s = session(limit=64 * G, backend=be)
    (phys,) = call(s, ops.MEM_CREATE, G, 0, 0, 0, 0, 0)
    (va,) = call(s, ops.MEM_ADDRESS_RESERVE, 4 * G, 0, 0, 0)
    (pool,) = call(s, ops.MEM_POOL_GET_DEFAULT, 0)
    func = function(s)
    access = struct.pack("<IiI", 1, 0, 3)
    valid = [
        (ops.MEM_GET_GRANULARITY, (0, 0, 0, 0), b""), (ops.MEM_CREATE, (G, 0, 1, 0, 0, 0), b""),
        (ops.MEM_ADDRESS_RESERVE, (2 * G, 0, 0, 0), b""), (ops.MEM_MAP, (va, G, 0, phys, 0), b""),
        (ops.MEM_SET_ACCESS, (va, G, 1), access), (ops.MEM_GET_ACCESS, (va, 1, 0), b""),
        (ops.MEM_RETAIN_ALLOCATION_HANDLE, (va,), b""), (ops.MEM_UNMAP, (va, G), b""),
        (ops.MEM_GET_ALLOCATION_PROPERTIES, (phys,), b""), (ops.MEM_ALLOC_ASYNC, (4096, 0, 0), b""),
        (ops.MEM_POOL_SET_ATTRIBUTE, (pool, 4, 1 << 20), b""), (ops.MEM_POOL_GET_ATTRIBUTE, (pool, 7), b""),
        (ops.MEM_POOL_SET_ACCESS, (pool, 1), access), (ops.MEM_POOL_TRIM, (pool, 0), b""),
        (ops.MEM_POOL_CREATE, (0, 0, 0, 0), b""), (ops.OCCUPANCY_AVAILABLE_SMEM, (func, 2, 256), b""),
        (ops.OCCUPANCY_TABLE, (func, 0, 1), struct.pack("<IQ", 256, 0)),
    ]
    edges = [0, 1, 2**31 - 1, 2**31, 2**32 - 1, 2**63, 2**64 - 1, G - 1, G + 1, 3 * G]
    for i in range(3000):
        op, values, bulk = rng.choice(valid)
        values = list(values)
        if values and rng.random() < 0.9:
            j = rng.randrange(len(values))
            f = op.request_fields[j]
            v = rng.choice(edges) & ((1 << (8 * f.size)) - 1)
            if f.type[0] == "i" and v >= 1 << (8 * f.size - 1):
                v -= 1 << (8 * f.size)
            values[j] = v
        frame = Frame(opcode=op.code, request_id=i, args=op.pack_request(*values), bulk=bulk)
        status, message, _ = dispatcher.call(s, frame)
        assert status != Status.UNKNOWN, (op.name, values, message)
    s.release_all()
    assert be.used == 0 and s.memory.allocated == 0 and len(s.memory) == 0
