"""Stream-ordered memory on the fake backend: per-session default pools, explicit pools, quota, attributes,
teardown, and bad input."""

from __future__ import annotations

import struct

from rgpu.backends.fake import FakeBackend
from rgpu.errors import Status
from rgpu.protocol import ops
from rgpu.session.state import Session

from .test_vmm import call, fails, read, session


def test_default_pool_is_the_sessions_own_and_allocations_are_device_memory():
    be = FakeBackend()
    s1, s2 = session(backend=be), session(backend=be)
    (p1,) = call(s1, ops.MEM_POOL_GET_DEFAULT, 0)
    (p2,) = call(s2, ops.MEM_POOL_GET_DEFAULT, 0)
    assert p1 != p2 and call(s1, ops.MEM_POOL_GET_DEFAULT, 0) == (p1,)
    assert call(s1, ops.MEM_POOL_GET_CURRENT, 0) == (p1,)
    (stream,) = call(s1, ops.STREAM_CREATE, 0)
    (ptr,) = call(s1, ops.MEM_ALLOC_ASYNC, 4096, 0, stream)
    call(s1, ops.MEMSET_D8, ptr, 7, 4096)
    assert read(s1, ptr + 4090, 6) == b"\x07" * 6
    fails(Status.INVALID_VALUE, s2, ops.MEMSET_D8, ptr, 0, 1)
    fails(Status.INVALID_VALUE, s2, ops.MEM_FREE_ASYNC, ptr, 0)
    assert call(s1, ops.MEM_POOL_GET_ATTRIBUTE, p1, 7) == (4096,)
    call(s1, ops.MEM_FREE_ASYNC, ptr, stream)
    fails(Status.INVALID_VALUE, s1, ops.MEMSET_D8, ptr, 0, 1)  # freed: a use after free is refused
    fails(Status.INVALID_VALUE, s1, ops.MEM_FREE_ASYNC, ptr, stream)  # freed twice
    assert call(s1, ops.MEM_POOL_GET_ATTRIBUTE, p1, 7) == (0,)
    assert call(s1, ops.MEM_POOL_GET_ATTRIBUTE, p1, 8) == (4096,)
    call(s1, ops.MEM_POOL_SET_ATTRIBUTE, p1, 8, 0)
    assert call(s1, ops.MEM_POOL_GET_ATTRIBUTE, p1, 8) == (0,)


def test_explicit_pool_current_pool_and_attributes():
    s = session()
    (pool,) = call(s, ops.MEM_POOL_CREATE, 0, 0, 1 << 20, 0)
    call(s, ops.MEM_POOL_SET_CURRENT, 0, pool)
    assert call(s, ops.MEM_POOL_GET_CURRENT, 0) == (pool,)
    (a,) = call(s, ops.MEM_ALLOC_ASYNC, 1 << 19, 0, 0)  # from the current pool
    fails(Status.OUT_OF_MEMORY, s, ops.MEM_ALLOC_ASYNC, 1 << 20, pool, 0)  # past the pool's max size
    call(s, ops.MEM_POOL_SET_ATTRIBUTE, pool, 4, 1 << 40)  # release threshold
    assert call(s, ops.MEM_POOL_GET_ATTRIBUTE, pool, 4) == (1 << 40,)
    fails(Status.INVALID_VALUE, s, ops.MEM_POOL_SET_ATTRIBUTE, pool, 7, 5)
    fails(Status.INVALID_VALUE, s, ops.MEM_POOL_SET_ATTRIBUTE, pool, 1, 2)
    fails(Status.INVALID_VALUE, s, ops.MEM_POOL_GET_ATTRIBUTE, pool, 9)
    call(s, ops.MEM_POOL_SET_ACCESS, pool, 1, bulk=struct.pack("<IiI", 1, 0, 3))
    assert call(s, ops.MEM_POOL_GET_ACCESS, pool, 1, 0) == (3,)
    fails(Status.NOT_SUPPORTED, s, ops.MEM_POOL_SET_ACCESS, pool, 1, bulk=struct.pack("<IiI", 2, 0, 3))
    call(s, ops.MEM_FREE, a)  # cuMemFree may free pool memory
    call(s, ops.MEM_POOL_TRIM, pool, 0)
    call(s, ops.MEM_POOL_DESTROY, pool)
    assert call(s, ops.MEM_POOL_GET_CURRENT, 0) == call(s, ops.MEM_POOL_GET_DEFAULT, 0)
    fails(Status.INVALID_VALUE, s, ops.MEM_POOL_DESTROY, pool)
    fails(Status.INVALID_VALUE, s, ops.MEM_ALLOC_ASYNC, 64, pool, 0)
    fails(Status.INVALID_VALUE, s, ops.MEM_POOL_DESTROY, call(s, ops.MEM_POOL_GET_DEFAULT, 0)[0])
    fails(Status.NOT_SUPPORTED, s, ops.MEM_POOL_CREATE, 0, 1, 0, 0)  # exportable: refused
    fails(Status.INVALID_DEVICE, s, ops.MEM_POOL_CREATE, 3, 0, 0, 0)


def test_pool_memory_counts_in_the_quota_and_goes_at_teardown():
    be = FakeBackend()
    s = session(limit=1 << 20, backend=be)
    (a,) = call(s, ops.MEM_ALLOC_ASYNC, 600_000, 0, 0)
    fails(Status.OUT_OF_MEMORY, s, ops.MEM_ALLOC_ASYNC, 600_000, 0, 0)
    fails(Status.OUT_OF_MEMORY, s, ops.MEM_ALLOC, 600_000)
    call(s, ops.MEM_FREE_ASYNC, a, 0)
    call(s, ops.MEM_ALLOC_ASYNC, 600_000, 0, 0)
    (pool,) = call(s, ops.MEM_POOL_CREATE, 0, 0, 0, 0)
    call(s, ops.MEM_ALLOC_ASYNC, 1000, pool, 0)
    s.release_all()
    assert be.used == 0 and s.memory.allocated == 0 and len(s.memory) == 0


def test_destroying_a_context_frees_its_pools():
    be = FakeBackend()
    s = Session(1, be)
    (keep,) = call(s, ops.CTX_CREATE, 0, 0)
    (gone,) = call(s, ops.CTX_CREATE, 0, 0)
    (pool,) = call(s, ops.MEM_POOL_GET_DEFAULT, 0)
    (ptr,) = call(s, ops.MEM_ALLOC_ASYNC, 512, 0, 0)
    call(s, ops.CTX_DESTROY, gone)
    call(s, ops.CTX_SET_CURRENT, keep)
    assert call(s, ops.MEM_POOL_GET_DEFAULT, 0) != (pool,)  # a new default pool, in the living context
    fails(Status.INVALID_VALUE, s, ops.MEMSET_D8, ptr, 0, 1)
    assert be.used == 0 and s.memory.allocated == 0
