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


def test_protocol_1_8_operations_survive_arbitrary_arguments(tmp_path):
    """JIT links, arrays, texture and surface objects and IPC handles, called with the session's real handles and
    addresses mixed with arbitrary values and bulk: never an internal error, and teardown returns every byte and
    every object (another session's export among the handles)."""
    from rgpu.session.ipc import Export, IpcRegistry

    from .test_arrays import resource, texture
    from .test_jit_link import DEVICE, KERNEL

    rng = random.Random(1808)
    be = FakeBackend()
    s = session(limit=64 * G, backend=be)
    s.ipc = IpcRegistry(tmp_path)
    other = s.ipc.new_handle()  # another session's export (what it names is gone: opening it must fail cleanly)
    s.ipc.publish(other, Export("memory", s.id + 1, b'{"path": "/nonexistent", "size": 64}'))
    (dptr,) = call(s, ops.MEM_ALLOC, 4096)
    (array,) = call(s, ops.ARRAY_CREATE, 8, 4, 0, 0x20, 1, 0x02)
    (link,) = call(s, ops.JIT_LINK_CREATE, 0, 256, 256)
    (event,) = call(s, ops.EVENT_CREATE, 0x6)
    (tex,) = call(s, ops.TEX_OBJECT_CREATE, 0, bulk=resource(0, array) + texture())
    (handle,) = call(s, ops.IPC_GET_MEM_HANDLE, dptr)
    interesting = [0, 1, 7, 64, 4096, dptr, dptr + 8, array, link, event, tex, 2**63, 2**64 - 1, 2**32]
    small = [0, 1, 2, 3, 4, 5, 6, 0x20, 0x22, 0x33, 64, 4096, 2**31 - 1, 2**32 - 1]
    codes = [op for op in ops.OPS.values() if 0x005B <= op.code <= 0x005F or 0x0084 <= op.code <= 0x008B
             or 0x0100 <= op.code <= 0x0104]
    bulks = [b"", resource(0, array) + texture(), resource(2, dptr, a=4096) + texture(), resource(0, array),
             rng.randbytes(144), rng.randbytes(248), rng.randbytes(360), struct.pack("<IIQ", 12, 0, 1),
             b"k.ptx" + KERNEL, b"d.ptx" + DEVICE, rng.randbytes(128), bytes(32)]
    for i in range(4000):
        op = rng.choice(codes)
        values = []
        for f in op.request_fields:
            if f.type.startswith("b"):
                values.append(rng.choice([handle, other, rng.randbytes(f.size)]))
            else:
                bits = f.size * 8
                v = rng.choice(interesting if bits == 64 else small) if rng.random() < 0.8 else rng.getrandbits(bits)
                values.append(v & (2**bits - 1))
        frame = Frame(opcode=op.code, request_id=i, args=op.pack_request(*values), bulk=rng.choice(bulks))
        status, message, _ = dispatcher.call(s, frame)
        assert status != Status.UNKNOWN, (op.name, values, message)
    s.release_all()
    assert be.used == 0 and s.memory.allocated == 0 and len(s.memory) == 0
    assert be._textures == {} and not any(tmp_path.glob("*.data"))


def test_protocol_1_8_calls_with_one_field_changed(tmp_path):
    """Each 1.8 operation from a call that would succeed, with one field replaced by a boundary value: never an
    internal error, and teardown returns every byte, object and shared file."""
    from rgpu.session.ipc import IpcRegistry

    from .test_arrays import resource, texture
    from .test_jit_link import DEVICE, KERNEL

    rng = random.Random(18)
    be = FakeBackend()
    s = session(limit=64 * G, backend=be)
    s.ipc = IpcRegistry(tmp_path)
    (dptr,) = call(s, ops.MEM_ALLOC, 4096)
    (a,) = call(s, ops.ARRAY_CREATE, 8, 4, 0, 0x20, 1, 0x02)
    (b,) = call(s, ops.ARRAY_CREATE, 8, 4, 2, 0x20, 1, 0x01)
    (link,) = call(s, ops.JIT_LINK_CREATE, 1, 256, 256, bulk=struct.pack("<IIQ", 12, 0, 1))
    (event,) = call(s, ops.EVENT_CREATE, 0x6)
    none = (0, 0, 0, 0, 0)
    valid = [
        (ops.ARRAY_CREATE, (8, 4, 0, 0x20, 1, 0x02), b""),
        (ops.MEMCPY_ARRAY, (1 | 3 << 4, *none, a, 0, 0, 0, 0, 32, 4, 0), bytes(128)),
        (ops.MEMCPY_ARRAY, (3 | 1 << 4, a, 4, 1, 0, 0, *none, 16, 2, 0), b""),
        (ops.MEMCPY_ARRAY_ASYNC, (3 | 2 << 4, a, 0, 0, 0, 0, dptr, 0, 0, 0, 64, 32, 4, 0), b""),
        (ops.MEMCPY_ARRAY_ASYNC, (3 | 3 << 4, a, 0, 0, 0, 0, b, 0, 1, 1, 0, 32, 2, 0), b""),
        (ops.TEX_OBJECT_CREATE, (0,), resource(0, a) + texture()),
        (ops.TEX_OBJECT_CREATE, (0,), resource(3, dptr, a=8, b=4, c=64) + texture()),
        (ops.SURF_OBJECT_CREATE, (), resource(0, a)),
        (ops.JIT_LINK_ADD, (link, 1, 0, 5), b"k.ptx" + KERNEL),
        (ops.JIT_LINK_ADD, (link, 1, 0, 5), b"d.ptx" + DEVICE),
        (ops.JIT_LINK_COMPLETE, (link,), b""),
        (ops.JIT_LINK_READ, (link, 0, 16), b""),
        (ops.IPC_GET_MEM_HANDLE, (dptr,), b""),
        (ops.IPC_GET_EVENT_HANDLE, (event,), b""),
    ]
    edges = [0, 1, 3, 4, 2**31 - 1, 2**31, 2**32 - 1, 2**63, 2**64 - 1, 4095, 4097]
    for i in range(3000):
        op, values, bulk = rng.choice(valid)
        values = list(values)
        if values and rng.random() < 0.9:
            j = rng.randrange(len(values))
            values[j] = rng.choice(edges) & ((1 << (8 * op.request_fields[j].size)) - 1)
        if rng.random() < 0.1:
            bulk = bulk[: rng.randrange(len(bulk) + 1)]
        frame = Frame(opcode=op.code, request_id=i, args=op.pack_request(*values), bulk=bulk)
        status, message, _ = dispatcher.call(s, frame)
        assert status != Status.UNKNOWN, (op.name, values, message)
    s.release_all()
    assert be.used == 0 and s.memory.allocated == 0 and len(s.memory) == 0
    assert be._textures == {} and not any(tmp_path.glob("*.data"))
