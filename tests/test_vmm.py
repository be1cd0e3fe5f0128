"""Virtual memory management handlers on the fake backend: ownership, aliasing, range checks, quota, teardown,
and the bad input CUDA programs send (double release, bogus handles, unmapping what is not mapped)."""

from __future__ import annotations

import struct

import pytest

from rgpu.dispatch import vmm
from rgpu.backends.fake import FakeBackend
from rgpu.backends.fake_vmm import GRANULARITY as G
from rgpu.dispatch.handlers import HANDLERS
from rgpu.errors import CudaError, Status
from rgpu.protocol import ops
from rgpu.session.state import Session


def call(s: Session, op: ops.Op, *values, bulk=b""):
    result = HANDLERS[op.code].fn(s, op.decode(op.pack_request(*values)), bulk)
    return result.values if hasattr(result, "values") else result


def read(s: Session, ptr: int, n: int) -> bytes:
    op = ops.MEMCPY_DTOH
    return bytes(HANDLERS[op.code].fn(s, op.decode(op.pack_request(ptr, n)), b"").bulk)


def fails(status: Status, s: Session, op: ops.Op, *values, bulk=b""):
    with pytest.raises(CudaError) as e:
        call(s, op, *values, bulk=bulk)
    assert e.value.code == status, e.value
    return e.value


def session(limit=None, backend=None) -> Session:
    s = Session(1, backend or FakeBackend(), mem_limit=limit)
    call(s, ops.CTX_CREATE, 0, 0)
    return s


def create(s, size, handle_types=0):
    return call(s, ops.MEM_CREATE, size, 0, handle_types, 0, 0, 0)[0]


def rw(ptr, size):
    return (ptr, size, 1), struct.pack("<IiI", 1, 0, 3)


def map_rw(s, ptr, size, offset, handle):
    call(s, ops.MEM_MAP, ptr, size, offset, handle, 0)
    args, bulk = rw(ptr, size)
    call(s, ops.MEM_SET_ACCESS, *args, bulk=bulk)


def test_granularity_answers_for_every_handle_type():
    s = session()
    for types in (0, vmm.HANDLE_POSIX_FD, vmm.HANDLE_FABRIC, vmm.HANDLE_WIN32):
        for option in (0, 1):
            assert call(s, ops.MEM_GET_GRANULARITY, 0, option, types, 0) == (G,)
    fails(Status.INVALID_DEVICE, s, ops.MEM_GET_GRANULARITY, 5, 0, 0, 0)
    fails(Status.INVALID_VALUE, s, ops.MEM_GET_GRANULARITY, 0, 7, 0, 0)
    fails(Status.INVALID_VALUE, s, ops.MEM_GET_GRANULARITY, 0, 0, 0x100, 0)


def test_map_alias_copy_and_teardown_order():
    be = FakeBackend()
    s = session(backend=be)
    h = create(s, 2 * G)
    (va,) = call(s, ops.MEM_ADDRESS_RESERVE, 8 * G, 0, 0, 0)
    # the same physical bytes at two addresses
    map_rw(s, va, 2 * G, 0, h)
    fails(Status.NOT_SUPPORTED, s, ops.MEM_MAP, va + 4 * G, G, G, h, 0)  # NVIDIA's driver maps from offset 0 only
    map_rw(s, va + 4 * G, 2 * G, 0, h)
    call(s, ops.MEM_RELEASE, h)  # as llama.cpp does: the mappings keep the memory alive
    call(s, ops.MEMSET_D8, va + G + 10, 0x5A, 4)
    assert read(s, va + 5 * G + 8, 8) == b"\0\0\x5a\x5a\x5a\x5a\0\0"
    assert s.memory.allocated == 2 * G and be.used == 2 * G
    # unmapped holes and the ends of the reservation stay unchecked memory
    fails(Status.INVALID_VALUE, s, ops.MEMSET_D8, va + 2 * G, 0, 1)
    fails(Status.INVALID_VALUE, s, ops.MEMSET_D8, va + 2 * G - 1, 0, 2)
    assert call(s, ops.MEM_GET_ACCESS, va + 4 * G, 1, 0) == (3,)
    assert call(s, ops.MEM_GET_ACCESS, va + 4 * G, 1, 1) == (0,)
    s.release_all()
    assert be.used == 0 and s.memory.allocated == 0 and len(s.memory) == 0 and be.contexts_alive == 0


def test_adjacent_mappings_form_one_checked_span():
    s = session()
    a, b = create(s, G), create(s, G)
    (va,) = call(s, ops.MEM_ADDRESS_RESERVE, 4 * G, 0, 0, 0)
    map_rw(s, va, G, 0, a)
    map_rw(s, va + G, G, 0, b)
    s.memory.check(va + G - 8, 16)  # a buffer straddling two mappings is the session's own
    call(s, ops.MEM_UNMAP, va + G, G)
    with pytest.raises(CudaError):
        s.memory.check(va + G - 8, 16)
    s.memory.check(va, G)


def test_unmap_covers_whole_mappings_only_and_only_reserved_ranges():
    s = session()
    h = create(s, 2 * G)
    (va,) = call(s, ops.MEM_ADDRESS_RESERVE, 4 * G, 0, 0, 0)
    call(s, ops.MEM_UNMAP, va, G)  # reserved, never mapped: a no-op, as NVIDIA's driver answers
    fails(Status.INVALID_VALUE, s, ops.MEM_UNMAP, va + 8 * G, G)  # not reserved
    map_rw(s, va, 2 * G, 0, h)
    fails(Status.INVALID_VALUE, s, ops.MEM_UNMAP, va, G)  # half a mapping
    fails(Status.INVALID_VALUE, s, ops.MEM_MAP, va + G, G, 0, h, 0)  # over an existing mapping
    fails(Status.INVALID_VALUE, s, ops.MEM_ADDRESS_FREE, va, 4 * G)  # still mapped
    call(s, ops.MEM_UNMAP, va, 4 * G)  # the whole reservation: every mapping in it
    call(s, ops.MEM_ADDRESS_FREE, va, 4 * G)
    fails(Status.INVALID_VALUE, s, ops.MEM_ADDRESS_FREE, va, 4 * G)


def test_release_twice_bogus_handles_and_bad_maps():
    s = session()
    h = create(s, G)
    (va,) = call(s, ops.MEM_ADDRESS_RESERVE, 2 * G, 0, 0, 0)
    fails(Status.INVALID_VALUE, s, ops.MEM_MAP, va, 2 * G, 0, h, 0)  # beyond the allocation
    fails(Status.INVALID_VALUE, s, ops.MEM_MAP, va + 2 * G, G, 0, h, 0)  # beyond the reservation
    fails(Status.INVALID_VALUE, s, ops.MEM_MAP, va, G, 0, 0xDEAD_BEEF, 0)
    fails(Status.INVALID_VALUE, s, ops.MEM_RELEASE, 0xDEAD_BEEF)
    call(s, ops.MEM_RELEASE, h)
    fails(Status.INVALID_VALUE, s, ops.MEM_RELEASE, h)
    fails(Status.INVALID_VALUE, s, ops.MEM_MAP, va, G, 0, h, 0)
    fails(Status.INVALID_VALUE, s, ops.MEM_GET_ALLOCATION_PROPERTIES, h)
    assert s.memory.allocated == 0


def test_another_sessions_handles_and_addresses_are_foreign():
    be = FakeBackend()
    s1, s2 = session(backend=be), session(backend=be)
    h = create(s1, G)
    (va,) = call(s1, ops.MEM_ADDRESS_RESERVE, 2 * G, 0, 0, 0)
    map_rw(s1, va, G, 0, h)
    fails(Status.INVALID_VALUE, s2, ops.MEM_RELEASE, h)
    (va2,) = call(s2, ops.MEM_ADDRESS_RESERVE, 2 * G, 0, 0, 0)
    fails(Status.INVALID_VALUE, s2, ops.MEM_MAP, va2, G, 0, h, 0)
    fails(Status.INVALID_VALUE, s2, ops.MEM_UNMAP, va, G)
    fails(Status.INVALID_VALUE, s2, ops.MEMSET_D8, va, 0, 1)
    fails(Status.INVALID_VALUE, s2, ops.MEM_RETAIN_ALLOCATION_HANDLE, va)


def test_quota_counts_physical_memory_until_it_is_really_gone():
    s = session(limit=3 * G)
    a = create(s, 2 * G)
    fails(Status.OUT_OF_MEMORY, s, ops.MEM_CREATE, 2 * G, 0, 0, 0, 0, 0)
    fails(Status.OUT_OF_MEMORY, s, ops.MEM_ALLOC, 2 * G)  # one quota for both kinds of allocation
    (va,) = call(s, ops.MEM_ADDRESS_RESERVE, 2 * G, 0, 0, 0)
    map_rw(s, va, 2 * G, 0, a)
    call(s, ops.MEM_RELEASE, a)
    fails(Status.OUT_OF_MEMORY, s, ops.MEM_CREATE, 2 * G, 0, 0, 0, 0, 0)  # still mapped: still counted
    call(s, ops.MEM_UNMAP, va, 2 * G)
    create(s, 2 * G)


def test_retain_and_properties():
    s = session()
    h = create(s, 2 * G, vmm.HANDLE_POSIX_FD)
    assert call(s, ops.MEM_GET_ALLOCATION_PROPERTIES, h) == (0, vmm.HANDLE_POSIX_FD, 0, 0)
    (va,) = call(s, ops.MEM_ADDRESS_RESERVE, 2 * G, 0, 0, 0)
    map_rw(s, va, 2 * G, 0, h)
    assert call(s, ops.MEM_RETAIN_ALLOCATION_HANDLE, va + 100) == (h, 2 * G)
    call(s, ops.MEM_RELEASE, h)
    call(s, ops.MEM_RELEASE, h)  # the retained reference
    fails(Status.INVALID_VALUE, s, ops.MEM_RELEASE, h)
    assert s.memory.allocated == 2 * G  # mapped
    call(s, ops.MEM_UNMAP, va, 2 * G)
    assert s.memory.allocated == 0
    fails(Status.INVALID_VALUE, s, ops.MEM_RETAIN_ALLOCATION_HANDLE, va)


def test_shareable_handle_types_and_host_locations_are_refused():
    s = session()
    fails(Status.NOT_SUPPORTED, s, ops.MEM_CREATE, G, 0, vmm.HANDLE_FABRIC, 0, 0, 0)
    fails(Status.NOT_SUPPORTED, s, ops.MEM_CREATE, G, 0, vmm.HANDLE_WIN32, 0, 0, 0)
    fails(Status.INVALID_VALUE, s, ops.MEM_CREATE, G, 0, 0x40, 0, 0, 0)
    fails(Status.INVALID_VALUE, s, ops.MEM_CREATE, G + 1, 0, 0, 0, 0, 0)
    h = create(s, G)
    (va,) = call(s, ops.MEM_ADDRESS_RESERVE, G, 0, 0, 0)
    call(s, ops.MEM_MAP, va, G, 0, h, 0)
    fails(Status.NOT_SUPPORTED, s, ops.MEM_SET_ACCESS, va, G, 1, bulk=struct.pack("<IiI", 2, 0, 3))
    fails(Status.INVALID_VALUE, s, ops.MEM_SET_ACCESS, va, G, 2, bulk=struct.pack("<IiI", 1, 0, 3))
    fails(Status.INVALID_VALUE, s, ops.MEM_SET_ACCESS, va, 2 * G, 1, bulk=struct.pack("<IiI", 1, 0, 3))
    assert s.memory.allocated == G
    assert call(s, ops.DEVICE_GET_ATTRIBUTE, 102, 0) == (1,)


def test_context_destroy_frees_its_vmm_objects():
    be = FakeBackend()
    s = Session(1, be)
    (primary,) = call(s, ops.CTX_CREATE, 0, 0)
    (other,) = call(s, ops.CTX_CREATE, 0, 0)  # current now
    h = create(s, G)
    call(s, ops.CTX_SET_CURRENT, primary)
    (va,) = call(s, ops.MEM_ADDRESS_RESERVE, 2 * G, 0, 0, 0)
    map_rw(s, va, G, 0, h)  # memory of `other` mapped in `primary`'s reservation
    call(s, ops.CTX_DESTROY, other)
    fails(Status.INVALID_VALUE, s, ops.MEMSET_D8, va, 0, 1)
    assert be.used == 0 and s.memory.allocated == 0
    call(s, ops.MEM_ADDRESS_FREE, va, 2 * G)

