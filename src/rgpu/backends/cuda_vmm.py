"""Virtual memory management on the real driver: the CudaBackend mixin (state and checks: rgpu.dispatch.vmm).

Allocations are always made without shareable handle types: the server never exports them, whatever the
client asked for (rgpu.dispatch.vmm records the request)."""

from __future__ import annotations

from cuda.bindings import driver as cu

from rgpu.backends.cuda_common import access_descriptors, check as _check


def _prop(dev: int, compression: int, usage: int):
    prop = cu.CUmemAllocationProp()
    prop.type = cu.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
    prop.requestedHandleTypes = cu.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_NONE
    prop.location.type = cu.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
    prop.location.id = dev
    prop.allocFlags.compressionType = compression
    prop.allocFlags.usage = usage
    return prop


class CudaVmm:
    """Mixed into CudaBackend (which provides `_use`)."""

    def vmm_granularity(self, dev: int, option: int, compression: int) -> int:
        flags = cu.CUmemAllocationGranularity_flags(option)
        return int(_check(cu.cuMemGetAllocationGranularity(_prop(dev, compression, 0), flags)))

    def vmm_create(self, ctx, dev: int, size: int, compression: int, usage: int):
        self._use(ctx)
        return _check(cu.cuMemCreate(size, _prop(dev, compression, usage), 0))

    def vmm_release(self, ctx, handle) -> None:
        self._use(ctx)
        _check(cu.cuMemRelease(handle))

    def vmm_address_reserve(self, ctx, size: int, alignment: int, addr: int, flags: int) -> int:
        self._use(ctx)
        return int(_check(cu.cuMemAddressReserve(size, alignment, addr, flags)))

    def vmm_address_free(self, ctx, ptr: int, size: int) -> None:
        self._use(ctx)
        _check(cu.cuMemAddressFree(ptr, size))

    def vmm_map(self, ctx, ptr: int, size: int, offset: int, handle) -> None:
        self._use(ctx)
        _check(cu.cuMemMap(ptr, size, offset, handle, 0))

    def vmm_unmap(self, ctx, ptr: int, size: int) -> None:
        self._use(ctx)
        _check(cu.cuMemUnmap(ptr, size))

    def vmm_set_access(self, ctx, ptr: int, size: int, descriptors) -> None:
        self._use(ctx)
        descs = access_descriptors(descriptors)
        _check(cu.cuMemSetAccess(ptr, size, descs, len(descs)))
