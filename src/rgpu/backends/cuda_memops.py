"""Stream memory operations on a real GPU (a mixin of CudaBackend): the driver's own calls, the one the program
made -- cuStreamWaitValue32/64 or cuStreamWriteValue32/64 (the _v2 entry points cuda.h 12 and 13 name), or
cuStreamBatchMemOp_v2 with its CUstreamBatchMemOpParams built from the checked records. The driver decides what the
device offers (64-bit operations, the NOR wait, remote-write flushes) and refuses the rest itself; on a capturing
stream it captures them, as a batch memory operation node.
"""

from __future__ import annotations

import struct

import cffi

from rgpu.backends.cuda_common import check_code, driver, handle
from rgpu.protocol import memops

_ffi = cffi.FFI()
_ffi.cdef("""
    int cuCtxSetCurrent(uintptr_t ctx);
    int cuStreamWaitValue32_v2(uintptr_t stream, unsigned long long addr, uint32_t value, unsigned flags);
    int cuStreamWaitValue64_v2(uintptr_t stream, unsigned long long addr, uint64_t value, unsigned flags);
    int cuStreamWriteValue32_v2(uintptr_t stream, unsigned long long addr, uint32_t value, unsigned flags);
    int cuStreamWriteValue64_v2(uintptr_t stream, unsigned long long addr, uint64_t value, unsigned flags);
    int cuStreamBatchMemOp_v2(uintptr_t stream, unsigned count, void *params, unsigned flags);
""")
_SINGLE = {memops.WAIT_VALUE_32: "cuStreamWaitValue32_v2", memops.WAIT_VALUE_64: "cuStreamWaitValue64_v2",
           memops.WRITE_VALUE_32: "cuStreamWriteValue32_v2", memops.WRITE_VALUE_64: "cuStreamWriteValue64_v2"}
# CUstreamBatchMemOpParams: a union of six u64. A wait or write is (operation, address at 8, value -- value64 for
# 8-byte ones, the same little-endian bytes -- at 16, flags at 24, the driver's own alias at 32, left 0); a flush or
# barrier (operation, flags at 4).
PARAMS_SIZE = 48
_VALUE_PARAMS = struct.Struct("<I4xQQI")
_FLAG_PARAMS = struct.Struct("<II")


def batch_params(operations: list) -> bytes:
    out = bytearray(PARAMS_SIZE * len(operations))
    for i, op in enumerate(operations):
        if op.width:
            _VALUE_PARAMS.pack_into(out, PARAMS_SIZE * i, op.operation, op.address, op.value, op.flags)
        else:
            _FLAG_PARAMS.pack_into(out, PARAMS_SIZE * i, op.operation, op.flags)
    return bytes(out)


class CudaMemOps:
    """Mixed into CudaBackend."""

    def stream_mem_ops(self, ctx, stream, operations: list, batch: bool) -> None:
        lib = driver(_ffi)
        err = lib.cuCtxSetCurrent(int(ctx))
        if not err and batch:
            params = _ffi.new("char[]", batch_params(operations))
            err = lib.cuStreamBatchMemOp_v2(handle(stream), len(operations), params, 0)
        elif not err:
            (op,) = operations
            err = getattr(lib, _SINGLE[op.operation])(handle(stream), op.address, op.value, op.flags)
        check_code(err)
