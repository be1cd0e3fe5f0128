"""cublasGemmBatchedEx and cublas{S,D,H}gemmBatched, and cublas{S,D,C,Z}{getrf,getri,matinv,trsm,getrs}Batched: calls
whose operands are arrays of device pointers.

The arrays are in device memory and usually written by the program's own kernel on the same stream just
before the call (llama.cpp does that), so the server reads them once the stream has reached the call -- the
call blocks on the stream -- and checks every pointer against the session's memory before cuBLAS runs. cuBLAS
then reads the same arrays; a program that rewrites them from another stream in between can only point cuBLAS
at memory of its own process, which is the malicious-kernel case of SECURITY.md.
"""

from __future__ import annotations

import struct

import attrs

from rgpu.protocol import blas_routines, blas_wire
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


def _run(s: Session, handle: int, stream: int, batch: int, addresses: tuple[int, ...], matrix_ranges, run) -> None:
    """The part every pointer-array call shares: the handle and stream of one context; the arrays read once the
    stream has reached the call; every entry's matrices (`matrix_ranges(pointers)`) checked; then
    `run(ctx, handle, stream, arrays)`, with arrays None when the stream is capturing (see above)."""
    ctx, entry = s.object(handle, Kind.BLAS)
    if batch > MAX_BATCH:
        raise CudaError(Status.INVALID_VALUE, f"batch of {batch} (at most {MAX_BATCH})")
    stream_ctx, strm = s.stream(stream)
    if stream_ctx is not ctx:
        raise CudaError(Status.INVALID_HANDLE, "cuBLAS handle and stream belong to different contexts")
    if s.backend.stream_is_capturing(ctx.obj, strm):
        # Captured, the call runs at each replay, with whatever the arrays hold then: reading them now would
        # both check the wrong pointers and wait on a capturing stream (which ends the capture). The arrays
        # themselves must be the session's; what they point at is the malicious-kernel case (see above).
        for p in addresses:
            s.memory.check(p, 8 * batch)
        run(ctx.obj, entry.obj, strm, None)
        return
    arrays = tuple(_read_pointers(s, ctx, strm, p, batch) for p in addresses)
    for pointers in zip(*arrays):
        for ptr, nbytes in matrix_ranges(pointers):
            s.memory.check(ptr, nbytes)
    run(ctx.obj, entry.obj, strm, arrays)


@handles(ops.BLAS_GEMM_BATCHED, blocking=True)
def _gemm_batched(s: Session, args, bulk):
    s.object(args.handle, Kind.BLAS)
    g = blas_wire.Gemm.from_request(args)
    if g.workspace_size:
        s.memory.check(g.workspace, g.workspace_size)
    if g.pointer_mode == blas_wire.POINTER_MODE_DEVICE:
        size = blas_wire.scalar_size(g.compute)
        for raw in (g.alpha, g.beta):
            s.memory.check(struct.unpack_from("<Q", raw)[0], size)
    if not (g.m and g.n and g.batch):
        return
    one = attrs.evolve(g, batch=1, a=attrs.evolve(g.a, stride=0), b=attrs.evolve(g.b, stride=0),
                       c=attrs.evolve(g.c, stride=0), workspace_size=0)

    def ranges(pointers):
        pa, pb, pc = pointers
        return attrs.evolve(one, a=attrs.evolve(one.a, ptr=pa), b=attrs.evolve(one.b, ptr=pb),
                            c=attrs.evolve(one.c, ptr=pc)).ranges()

    _run(s, args.handle, args.stream, g.batch, (g.a.ptr, g.b.ptr, g.c.ptr), ranges,
         lambda ctx, h, strm, arrays: s.backend.blas_gemm_batched(ctx, h, strm, g,
                                                                   PointerArrays(*arrays) if arrays else None))


@handles(ops.BLAS_LU_BATCHED, blocking=True)
def _lu_batched(s: Session, args, bulk):
    s.object(args.handle, Kind.BLAS)
    lu = blas_wire.LuBatched.from_request(args)
    if not (lu.n and lu.batch):
        return
    for ptr, nbytes in lu.ranges():
        s.memory.check(ptr, nbytes)
    _run(s, args.handle, args.stream, lu.batch, lu.arrays, lu.matrix_ranges,
         lambda ctx, h, strm, arrays: s.backend.blas_lu_batched(ctx, h, strm, lu, arrays))


@handles(ops.BLAS_TRSM_BATCHED, blocking=True)
def _trsm_batched(s: Session, args, bulk):
    s.object(args.handle, Kind.BLAS)
    t = blas_wire.TrsmBatched.from_request(args)
    for ptr, nbytes in t.ranges():
        s.memory.check(ptr, nbytes)
    if not (t.m and t.n and t.batch):
        return
    _run(s, args.handle, args.stream, t.batch, t.arrays, t.matrix_ranges,
         lambda ctx, h, strm, arrays: s.backend.blas_trsm_batched(ctx, h, strm, t, arrays))


@handles(ops.BLAS_GETRS_BATCHED, blocking=True)
def _getrs_batched(s: Session, args, bulk):
    s.object(args.handle, Kind.BLAS)
    g = blas_routines.GetrsBatched.from_request(args)
    if not (g.n and g.nrhs and g.batch):
        return
    for ptr, nbytes in g.ranges():
        s.memory.check(ptr, nbytes)
    _run(s, args.handle, args.stream, g.batch, g.arrays, g.matrix_ranges,
         lambda ctx, h, strm, arrays: s.backend.blas_getrs_batched(ctx, h, strm, g, arrays))
