"""Occupancy on the fake backend: the FakeBackend mixin (requests are checked in rgpu.dispatch.occupancy)."""

from __future__ import annotations


class FakeOccupancy:
    """Mixed into FakeBackend: the dynamic shared memory left per block when `blocks` share a multiprocessor."""

    def occupancy_available_smem(self, ctx, func, blocks: int, block_size: int) -> int:
        from rgpu.dispatch.fake import ATTRIBUTES, FUNC_ATTRIBUTES, MAX_SHARED_PER_BLOCK_OPTIN

        ctx.check()
        if block_size > ATTRIBUTES[1] or blocks * ((block_size + 31) // 32) > 64:
            return 0
        static = func.attributes.get(1, FUNC_ATTRIBUTES[1])
        return max(0, min(MAX_SHARED_PER_BLOCK_OPTIN, ATTRIBUTES[81] // blocks) - static)
