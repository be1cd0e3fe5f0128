"""Stream-ordered memory on the real driver: the CudaBackend mixin (state and checks: rgpu.dispatch.pools).

Pools are always created by the server for one session (never the device's default pool, which every
context of the process shares)."""

from __future__ import annotations

from cuda.bindings import driver as cu

from rgpu.backends.cuda_common import access_descriptors, check as _check, stream as _stream

_INT_ATTRIBUTES = {1, 2, 3}


class CudaPools:
    """Mixed into CudaBackend (which provides `_use`)."""

    def pool_create(self, ctx, dev: int, max_size: int, usage: int):
        self._use(ctx)
        props = cu.CUmemPoolProps()
        props.allocType = cu.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
        props.handleTypes = cu.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_NONE
        props.location.type = cu.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
        props.location.id = dev
        props.maxSize = max_size
        props.usage = usage
        return _check(cu.cuMemPoolCreate(props))

    def pool_destroy(self, ctx, pool) -> None:
        self._use(ctx)
        _check(cu.cuMemPoolDestroy(pool))

    def pool_alloc(self, ctx, pool, size: int, stream) -> int:
        self._use(ctx)
        return int(_check(cu.cuMemAllocFromPoolAsync(size, pool, _stream(stream))))

    def pool_free(self, ctx, pool, ptr: int, stream) -> None:
        self._use(ctx)
        _check(cu.cuMemFreeAsync(ptr, _stream(stream)))

    def pool_trim(self, ctx, pool, keep: int) -> None:
        self._use(ctx)
        _check(cu.cuMemPoolTrimTo(pool, keep))

    def pool_set_attribute(self, ctx, pool, attrib: int, value: int) -> None:
        self._use(ctx)
        raw = value if attrib in _INT_ATTRIBUTES else cu.cuuint64_t(value)
        _check(cu.cuMemPoolSetAttribute(pool, cu.CUmemPool_attribute(attrib), raw))

    def pool_get_attribute(self, ctx, pool, attrib: int) -> int:
        self._use(ctx)
        return int(_check(cu.cuMemPoolGetAttribute(pool, cu.CUmemPool_attribute(attrib))))

    def pool_set_access(self, ctx, pool, descriptors) -> None:
        self._use(ctx)
        descs = access_descriptors(descriptors)
        _check(cu.cuMemPoolSetAccess(pool, descs, len(descs)))
