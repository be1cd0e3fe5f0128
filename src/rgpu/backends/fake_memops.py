"""Stream memory operations on the fake backend (a mixin of FakeBackend): cuStreamWriteValue32/64,
cuStreamWaitValue32/64 and cuStreamBatchMemOp.

The fake runs a session's stream work in order on one thread, when it is queued. A write stores its value then,
and notes when it lands on the emulated clock (once its stream's earlier work is done), so that a wait it satisfies
keeps the waiting stream busy until that moment, as a wait on an event recorded there would. A wait whose condition
holds when it is queued completes. One whose condition does not hold can never be released here: whatever would
release it on a GPU -- a write queued later on another stream, a kernel -- has not run yet, and the fake cannot hold
the waiting stream's later work back. So such a wait fails with NOT_SUPPORTED (reported at the next synchronizing
call like any deferred failure, and logged, the first time with this explanation); the operations after it in its
batch do not run, and the stream's later work runs as if it had passed. A program that queues the releasing write
first (or orders it before the wait with an event) runs here as it does on a GPU.

The emulated device offers 32- and 64-bit operations and the NOR condition (device attributes 92-94, 122, 123 say
so); remote-write flushes (FLUSH_REMOTE_WRITES, a wait's FLUSH flag) need platform hardware it does not have
(attribute 98 is 0) and are NOT_SUPPORTED, as a driver answers there. Memory barriers change
nothing where every operation runs in order.
"""

from __future__ import annotations

import functools
import logging
import time

from rgpu.errors import CudaError, Status
from rgpu.protocol import memops

log = logging.getLogger("rgpu.fake")

CAN_USE_64_BIT_STREAM_MEM_OPS, CAN_USE_STREAM_WAIT_VALUE_NOR = 122, 123  # CUdevice_attribute
_LANDED_KEPT = 4096  # writes remembered: then those already landed are forgotten, else the oldest half


def _holds(condition: int, current: int, value: int, width: int) -> bool:
    """CUstreamWaitValue_flags' conditions, on `width`-byte values."""
    bits = 8 * width
    mask = (1 << bits) - 1
    if condition == memops.WAIT_GEQ:  # (int32_t)(*addr - value) >= 0: greater or equal, cyclically
        return (current - value) & mask < 1 << (bits - 1)
    if condition == memops.WAIT_EQ:
        return current == value
    if condition == memops.WAIT_AND:
        return current & value != 0
    return ~(current | value) & mask != 0  # NOR


class FakeMemOps:
    """Mixed into FakeBackend (its device attributes, memory views and streams' clocks)."""

    _told_cannot_wait = False

    @functools.cached_property
    def _landed(self) -> dict[int, float]:
        """Address -> when the last stream write to it lands on the emulated clock."""
        return {}

    def stream_mem_ops(self, ctx, stream, operations: list, batch: bool) -> None:
        ctx.check()
        for op in operations:  # (what the device cannot do fails the whole call, before any of it runs)
            self._offered(ctx, op)
        target = stream if stream is not None else ctx
        for op in operations:
            if op.operation in (memops.WRITE_VALUE_32, memops.WRITE_VALUE_64):
                self._write(target, op)
            elif op.is_wait:
                self._wait(target, op)

    def _offered(self, ctx, op: memops.MemOp) -> None:
        if op.operation == memops.FLUSH_REMOTE_WRITES or (op.is_wait and op.flags & memops.WAIT_FLUSH):
            raise CudaError(Status.NOT_SUPPORTED, f"{op.describe()}: the device cannot flush remote writes")
        if op.width == 8 and not self.device_attribute(CAN_USE_64_BIT_STREAM_MEM_OPS, ctx.dev):
            raise CudaError(Status.NOT_SUPPORTED, f"{op.describe()}: the device has no 64-bit stream memory operations")
        if op.is_wait and op.flags & memops.WAIT_CONDITION == memops.WAIT_NOR and \
                not self.device_attribute(CAN_USE_STREAM_WAIT_VALUE_NOR, ctx.dev):
            raise CudaError(Status.NOT_SUPPORTED, f"{op.describe()}: the device has no NOR wait")

    def _word(self, op: memops.MemOp):
        return self._checked_view(op.address, op.width)

    def _write(self, target, op: memops.MemOp) -> None:
        self._word(op)[:] = list(op.value.to_bytes(op.width, "little"))
        now = time.monotonic()
        landed = self._landed
        landed.pop(op.address, None)
        if len(landed) >= _LANDED_KEPT:  # (a wait on a forgotten write only lets its stream run on a little early)
            for address in [a for a, t in landed.items() if t <= now] or list(landed)[:_LANDED_KEPT // 2]:
                del landed[address]
        landed[op.address] = max(now, target.busy_until)

    def _wait(self, target, op: memops.MemOp) -> None:
        current = int.from_bytes(bytes(self._word(op)), "little")
        if not _holds(op.flags & memops.WAIT_CONDITION, current, op.value, op.width):
            if not self._told_cannot_wait:
                self._told_cannot_wait = True
                log.warning("fake backend: a stream memory wait whose condition does not hold when it is queued "
                            "fails with NOT_SUPPORTED: the fake runs stream work as it is queued, so nothing queued "
                            "later can release it (queue the releasing write first)")
            raise CudaError(Status.NOT_SUPPORTED, f"{op.describe()}: the memory holds 0x{current:x}; the fake "
                                                  "backend cannot wait for work queued later")
        target.busy_until = max(target.busy_until, self._landed.get(op.address, 0.0))
