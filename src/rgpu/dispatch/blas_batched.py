"""cublasGemmBatchedEx and cublas{S,D,H}gemmBatched: GEMMs whose operands are arrays of device pointers.

The arrays are in device memory and usually written by the program's own kernel on the same stream just
before the call (llama.cpp does that), so the server reads them once the stream has reached the call -- the
call blocks on the stream -- and checks every pointer against the session's memory before cuBLAS runs. cuBLAS
then reads the same arrays; a program that rewrites them from another stream in between can only point cuBLAS
at memory of its own process, which is the malicious-kernel case of SECURITY.md.
"""

from __future__ import annotations

import struct

import attrs

from rgpu.protocol import blas_wire
from rgpu.dispatch.registry import handles
from rgpu.errors import CudaError, Status
from rgpu.protocol import ops
from rgpu.session.handles import Kind
from rgpu.session.state import Session

MAX_BATCH = 1 << 20  # pointers per array; a larger batch is refused rather than read


@attrs.frozen(slots=True)
class PointerArrays:
    a: tuple[int, ...]
    b: tuple[int, ...]
    c: tuple[int, ...]


def _read_pointers(s: Session, ctx, stream, address: int, batch: int) -> tuple[int, ...]:
    s.memory.check(address, 8 * batch)
    raw = bytes(s.backend.memcpy_dtoh(ctx.obj, address, 8 * batch, stream))
    return struct.unpack(f"<{batch}Q", raw)


def check_arrays(s: Session, g: blas_wire.Gemm, arrays: PointerArrays) -> None:
    """Every matrix each array names must lie in the session's memory."""
    one = attrs.evolve(g, batch=1, a=attrs.evolve(g.a, stride=0), b=attrs.evolve(g.b, stride=0),
                       c=attrs.evolve(g.c, stride=0), workspace_size=0)
    for pa, pb, pc in zip(arrays.a, arrays.b, arrays.c):
        item = attrs.evolve(one, a=attrs.evolve(one.a, ptr=pa), b=attrs.evolve(one.b, ptr=pb),
                            c=attrs.evolve(one.c, ptr=pc))
        for ptr, nbytes in item.ranges():
            s.memory.check(ptr, nbytes)


@handles(ops.BLAS_GEMM_BATCHED, blocking=True)
def _gemm_batched(s: Session, args, bulk):
    handle, stream = args.handle, args.stream
    ctx, entry = s.object(handle, Kind.BLAS)
    g = blas_wire.Gemm.from_request(args)
    if g.batch > MAX_BATCH:
        raise CudaError(Status.INVALID_VALUE, f"batch of {g.batch} (at most {MAX_BATCH})")
    if g.workspace_size:
        s.memory.check(g.workspace, g.workspace_size)
    if g.pointer_mode == blas_wire.POINTER_MODE_DEVICE:
        size = blas_wire.scalar_size(g.compute)
        for raw in (g.alpha, g.beta):
            s.memory.check(struct.unpack_from("<Q", raw)[0], size)
    if not (g.m and g.n and g.batch):
        return
    stream_ctx, strm = s.stream(stream)
    if stream_ctx is not ctx:
        raise CudaError(Status.INVALID_HANDLE, "cuBLAS handle and stream belong to different contexts")
    if s.backend.stream_is_capturing(ctx.obj, strm):
        # Captured, the call runs at each replay, with whatever the arrays hold then: reading them now would
        # both check the wrong pointers and wait on a capturing stream (which ends the capture). The arrays
        # themselves must be the session's; what they point at is the malicious-kernel case (see above).
        for p in (g.a.ptr, g.b.ptr, g.c.ptr):
            s.memory.check(p, 8 * g.batch)
        s.backend.blas_gemm_batched(ctx.obj, entry.obj, strm, g, None)
        return
    arrays = PointerArrays(*(_read_pointers(s, ctx, strm, p, g.batch) for p in (g.a.ptr, g.b.ptr, g.c.ptr)))
    check_arrays(s, g, arrays)
    s.backend.blas_gemm_batched(ctx.obj, entry.obj, strm, g, arrays)
