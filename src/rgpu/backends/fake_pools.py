"""Stream-ordered memory on the fake backend: the FakeBackend mixin (state and checks: rgpu.dispatch.pools).

The fake runs work when it is queued, so a stream-ordered allocation is an ordinary one made at once and a
stream-ordered free happens at once; a pool keeps nothing cached (reserved == used)."""

from __future__ import annotations

import attrs

from rgpu.errors import CudaError, Status


@attrs.define(eq=False)
class FakePool:
    dev: int
    max_size: int
    attributes: dict = attrs.Factory(lambda: {1: 1, 2: 1, 3: 1, 4: 0})
    sizes: dict = attrs.Factory(dict)  # pointer -> size
    high: int = 0


class FakePools:
    """Mixed into FakeBackend (which provides mem_alloc, mem_free, _dev)."""

    def pool_create(self, ctx, dev: int, max_size: int, usage: int) -> FakePool:
        ctx.check()
        self._dev(dev)
        return FakePool(dev, max_size)

    def pool_destroy(self, ctx, pool: FakePool) -> None:
        pass  # what it handed out stays valid until freed, as on a GPU

    def pool_alloc(self, ctx, pool: FakePool, size: int, stream) -> int:
        used = sum(pool.sizes.values())
        if pool.max_size and used + size > pool.max_size:
            raise CudaError(Status.OUT_OF_MEMORY, f"pool limit of {pool.max_size} bytes")
        ptr = self.mem_alloc(ctx, size)
        pool.sizes[ptr] = size
        pool.high = max(pool.high, used + size)
        return ptr

    def pool_free(self, ctx, pool: FakePool, ptr: int, stream) -> None:
        pool.sizes.pop(ptr, None)
        self.mem_free(ctx, ptr)

    def pool_trim(self, ctx, pool: FakePool, keep: int) -> None:
        ctx.check()

    def pool_set_attribute(self, ctx, pool: FakePool, attrib: int, value: int) -> None:
        ctx.check()
        if attrib in (6, 8):
            pool.high = sum(pool.sizes.values())
        else:
            pool.attributes[attrib] = value

    def pool_get_attribute(self, ctx, pool: FakePool, attrib: int) -> int:
        ctx.check()
        if attrib in (5, 7):
            return sum(pool.sizes.values())
        if attrib in (6, 8):
            return pool.high
        return pool.attributes[attrib]

    def pool_set_access(self, ctx, pool: FakePool, descriptors) -> None:
        ctx.check()
