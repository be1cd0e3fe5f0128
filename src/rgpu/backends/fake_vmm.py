"""Virtual memory management on the fake backend: the FakeBackend mixin (state and checks: rgpu.dispatch.vmm).

A physical allocation is a numpy buffer; mapping it puts a *view* of that buffer at the mapped address in
the fake's address space, so two mappings of one allocation alias the same bytes, as on a GPU. (A single
access that straddles two mappings faults here; on a GPU the pages are contiguous.)"""

from __future__ import annotations

import bisect

import attrs
import numpy as np

from rgpu.errors import CudaError, Status

GRANULARITY = 2 << 20  # what NVIDIA's driver reports for device memory on current GPUs


@attrs.define(eq=False)
class FakePhysical:
    buf: np.ndarray
    dev: int


def _aligned(*values: int) -> bool:
    return all(v % GRANULARITY == 0 for v in values)


class FakeVmm:
    """Mixed into FakeBackend (which provides `_lock`, `_memory`, `_starts`, `_next`, `_take`, `_give_back`)."""

    def vmm_granularity(self, dev: int, option: int, compression: int) -> int:
        self._dev(dev)
        return GRANULARITY

    def vmm_create(self, ctx, dev: int, size: int, compression: int, usage: int) -> FakePhysical:
        ctx.check()
        self._dev(dev)
        if not _aligned(size):
            raise CudaError(Status.INVALID_VALUE, f"size {size} is not a multiple of the granularity")
        if compression:
            raise CudaError(Status.NOT_SUPPORTED, "the fake device has no compressible memory")
        with self._lock:
            self._take(dev, size)
        return FakePhysical(np.zeros(size, dtype=np.uint8), dev)

    def vmm_release(self, ctx, phys: FakePhysical) -> None:
        with self._lock:
            self._give_back(phys.dev, phys.buf.size)

    def vmm_address_reserve(self, ctx, size: int, alignment: int, addr: int, flags: int) -> int:
        ctx.check()
        if not _aligned(size, alignment):
            raise CudaError(Status.INVALID_VALUE, f"size {size} or alignment {alignment} is not a multiple of "
                                                  "the granularity")
        step = max(alignment, GRANULARITY)
        with self._lock:
            # Like every fake address, never reused: a stale pointer faults instead of hitting new data.
            ptr = (self._next + step - 1) // step * step
            self._next = ptr + size + GRANULARITY
        return ptr

    def vmm_address_free(self, ctx, ptr: int, size: int) -> None:
        pass  # addresses are never handed out again

    def vmm_map(self, ctx, ptr: int, size: int, offset: int, phys: FakePhysical) -> None:
        ctx.check()
        if offset:  # what CUDA 13's driver answers (measured on the H200); its documentation says "must be zero"
            raise CudaError(Status.NOT_SUPPORTED, "cuMemMap: a mapping starts at offset 0 of its allocation")
        if not _aligned(ptr, size, offset):
            raise CudaError(Status.INVALID_VALUE, "address, size and offset must be multiples of the granularity")
        with self._lock:
            self._memory[ptr] = phys.buf[offset : offset + size]
            bisect.insort(self._starts, ptr)

    def vmm_unmap(self, ctx, ptr: int, size: int) -> None:
        with self._lock:
            del self._memory[ptr]
            del self._starts[bisect.bisect_left(self._starts, ptr)]

    def vmm_set_access(self, ctx, ptr: int, size: int, descriptors) -> None:
        ctx.check()
        for _, lid, _ in descriptors:
            self._dev(lid)
