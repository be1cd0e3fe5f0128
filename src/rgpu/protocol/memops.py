"""Stream memory operations on the wire (STREAM_MEM_OP, STREAM_BATCH_MEM_OP; protocol 1.8): cuStreamWaitValue32/64,
cuStreamWriteValue32/64 and cuStreamBatchMemOp's entries.

An operation travels as one record `operation:u32 flags:u32 address:u64 value:u64` (ops.MEM_OP), its operation
numbered as CUstreamBatchMemOpType is. This module says what a well-formed record is, with the driver's rules that
need nothing but the record (known operations and flags, 4- or 8-byte alignment, a 32-bit operation's value in 32
bits); whether the address is the session's own is the server's check (rgpu.dispatch.memops), and whether the device
offers an operation (64-bit ones, NOR, remote-write flushes) the backend's.
"""

from __future__ import annotations

import attrs

from rgpu.errors import CudaError, Status
from rgpu.protocol import ops

WAIT_VALUE_32, WRITE_VALUE_32, FLUSH_REMOTE_WRITES, WAIT_VALUE_64, WRITE_VALUE_64, BARRIER = 1, 2, 3, 4, 5, 6
NAMES = {WAIT_VALUE_32: "WAIT_VALUE_32", WRITE_VALUE_32: "WRITE_VALUE_32", FLUSH_REMOTE_WRITES: "FLUSH_REMOTE_WRITES",
         WAIT_VALUE_64: "WAIT_VALUE_64", WRITE_VALUE_64: "WRITE_VALUE_64", BARRIER: "BARRIER"}
# The operations that are calls of their own (STREAM_MEM_OP); a batch may hold every operation.
SINGLE = frozenset({WAIT_VALUE_32, WRITE_VALUE_32, WAIT_VALUE_64, WRITE_VALUE_64})
WIDTH = {WAIT_VALUE_32: 4, WRITE_VALUE_32: 4, WAIT_VALUE_64: 8, WRITE_VALUE_64: 8}

# CUstreamWaitValue_flags: a condition in the low two bits, FLUSH beside it.
WAIT_GEQ, WAIT_EQ, WAIT_AND, WAIT_NOR = 0, 1, 2, 3
WAIT_CONDITION = 3
WAIT_FLUSH = 1 << 30
WRITE_NO_MEMORY_BARRIER = 1  # CUstreamWriteValue_flags
BARRIER_SYS, BARRIER_GPU = 0, 1  # CUstreamMemoryBarrier_flags
# The flags each operation takes. A write takes none: cuda.h says NO_MEMORY_BARRIER "is not supported in the v2
# API", which is the one CUDA 12 and 13 programs reach, and CUDA 13's driver refuses it (measured on the H200).
FLAGS = {WAIT_VALUE_32: WAIT_FLUSH | WAIT_CONDITION, WAIT_VALUE_64: WAIT_FLUSH | WAIT_CONDITION,
         WRITE_VALUE_32: 0, WRITE_VALUE_64: 0, BARRIER: BARRIER_GPU,
         FLUSH_REMOTE_WRITES: 0}

# cuStreamBatchMemOp's count "must be less than 256".
MAX_BATCH = 255


@attrs.frozen(slots=True)
class MemOp:
    operation: int
    flags: int
    address: int
    value: int

    @property
    def width(self) -> int:
        """Bytes the operation reads or writes at its address (0: it names no memory)."""
        return WIDTH.get(self.operation, 0)

    @property
    def is_wait(self) -> bool:
        return self.operation in (WAIT_VALUE_32, WAIT_VALUE_64)

    def describe(self) -> str:
        return (f"{NAMES.get(self.operation, self.operation)} flags 0x{self.flags:x} at 0x{self.address:x} "
                f"value 0x{self.value:x}")


def check(op: MemOp) -> MemOp:
    """`op` if it is a well-formed operation, else INVALID_VALUE saying what is wrong."""
    allowed = FLAGS.get(op.operation)
    if allowed is None:
        raise CudaError(Status.INVALID_VALUE, f"stream memory operation {op.operation} is not one of CUDA's")
    if op.flags & ~allowed:
        raise CudaError(Status.INVALID_VALUE, f"{op.describe()}: flags outside 0x{allowed:x}")
    if not op.width:
        if op.address or op.value:
            raise CudaError(Status.INVALID_VALUE, f"{op.describe()}: this operation takes no address or value")
        return op
    if op.address % op.width:
        raise CudaError(Status.INVALID_VALUE, f"{op.describe()}: the address is not {op.width}-byte aligned")
    if op.value >> (8 * op.width):
        raise CudaError(Status.INVALID_VALUE, f"{op.describe()}: the value does not fit {8 * op.width} bits")
    return op


def single(operation: int, flags: int, address: int, value: int) -> MemOp:
    """STREAM_MEM_OP's operation, checked: one that is a call of its own."""
    if operation not in SINGLE:
        raise CudaError(Status.INVALID_VALUE, f"stream memory operation {operation} is not a call of its own")
    return check(MemOp(operation, flags, address, value))


def batch(count: int, flags: int, bulk) -> list[MemOp]:
    """STREAM_BATCH_MEM_OP's operations, checked: exactly `count` records in the bulk."""
    item = ops.STREAM_BATCH_MEM_OP.request_item
    if flags:
        raise CudaError(Status.INVALID_VALUE, f"cuStreamBatchMemOp flags 0x{flags:x} (reserved: must be 0)")
    if not 0 < count <= MAX_BATCH:
        raise CudaError(Status.INVALID_VALUE, f"{count} operations in a batch (1 to {MAX_BATCH})")
    if len(bulk) != count * item.size:
        raise CudaError(Status.INVALID_VALUE, f"{len(bulk)} bytes of operations for a count of {count}")
    return [check(MemOp(*values)) for values in item.iter_unpack(bulk)]
