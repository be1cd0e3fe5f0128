"""Occupancy on the real driver: the CudaBackend mixin (requests are checked in rgpu.dispatch.occupancy)."""

from __future__ import annotations

from cuda.bindings import driver as cu

from rgpu.backends.cuda_common import check as _check


class CudaOccupancy:
    """Mixed into CudaBackend."""

    def occupancy_available_smem(self, ctx, func, blocks: int, block_size: int) -> int:
        self._use(ctx)
        return int(_check(cu.cuOccupancyAvailableDynamicSMemPerBlock(func, blocks, block_size)))
