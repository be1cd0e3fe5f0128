"""cuBLAS and cuBLASLt for the fake backend, in numpy: column-major operands as strided views of emulated
device memory, computed in float64 and stored back in each operand's type (bf16 rounded to nearest even)."""

from __future__ import annotations

import struct

import attrs
import numpy as np

from rgpu.protocol import blas_wire
from rgpu.errors import CudaError, Status

_NUMPY = {0: np.float32, 1: np.float64, 2: np.float16, 10: np.int32, 3: np.int8}
_BF16 = 14


def _load(view, ptr: int, dtype: int, rows: int, cols: int, ld: int, batch: int, stride: int) -> np.ndarray:
    """(batch, rows, cols) float64 copy of a column-major matrix in device memory."""
    esize = blas_wire.type_size(dtype)
    raw = view(ptr, blas_wire.extent(rows, cols, ld, esize, batch, stride))
    if dtype == _BF16:
        flat = (raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
    elif dtype in _NUMPY:
        flat = raw.view(_NUMPY[dtype])
    else:
        raise CudaError(Status.NOT_SUPPORTED, f"fake backend: GEMM on data type {dtype}")
    item = flat.itemsize
    m = np.lib.stride_tricks.as_strided(flat, (batch, rows, cols), (stride * item, item, ld * item), writeable=False)
    return m.astype(np.float64)


def _store(view, ptr: int, dtype: int, ld: int, stride: int, values: np.ndarray) -> None:
    batch, rows, cols = values.shape
    esize = blas_wire.type_size(dtype)
    raw = view(ptr, blas_wire.extent(rows, cols, ld, esize, batch, stride))
    if dtype == _BF16:
        bits = values.astype(np.float32).view(np.uint32)
        out = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
        flat = raw.view(np.uint16)
    else:
        out = values.astype(_NUMPY[dtype])
        flat = raw.view(_NUMPY[dtype])
    item = flat.itemsize
    target = np.lib.stride_tricks.as_strided(flat, (batch, rows, cols), (stride * item, item, ld * item))
    target[...] = out


def _load_layout(view, ptr: int, lay: blas_wire.Layout) -> np.ndarray:
    if lay.row_major:
        return np.swapaxes(_load(view, ptr, lay.type, lay.cols, lay.rows, lay.ld, lay.batch, lay.stride), 1, 2)
    return _load(view, ptr, lay.type, lay.rows, lay.cols, lay.ld, lay.batch, lay.stride)


def _store_layout(view, ptr: int, lay: blas_wire.Layout, values: np.ndarray) -> None:
    _store(view, ptr, lay.type, lay.ld, lay.stride, np.swapaxes(values, 1, 2) if lay.row_major else values)


def _scalar(raw: bytes, compute: int) -> float:
    size = blas_wire.scalar_size(compute)
    return float(np.frombuffer(raw[:size], {2: np.float16, 4: np.float32, 8: np.float64}[size])[0])


def _op(m: np.ndarray, trans: int) -> np.ndarray:
    return m if trans == blas_wire.OP_N else np.swapaxes(m, 1, 2)


def gemm(view, g: blas_wire.Gemm) -> None:
    if g.pointer_mode == blas_wire.POINTER_MODE_DEVICE:
        raise CudaError(Status.NOT_SUPPORTED, "fake backend: device pointer mode")
    if not (g.m and g.n and g.batch):
        return
    ar, ac = (g.m, g.k) if g.transa == blas_wire.OP_N else (g.k, g.m)
    br, bc = (g.k, g.n) if g.transb == blas_wire.OP_N else (g.n, g.k)
    alpha, beta = _scalar(g.alpha, g.compute), _scalar(g.beta, g.compute)
    c = _load(view, g.c.ptr, g.c.type, g.m, g.n, g.c.ld, g.batch, g.c.stride) if beta else 0.0
    product = 0.0
    if g.k:
        a = _load(view, g.a.ptr, g.a.type, ar, ac, g.a.ld, g.batch, g.a.stride)
        b = _load(view, g.b.ptr, g.b.type, br, bc, g.b.ld, g.batch, g.b.stride)
        product = _op(a, g.transa) @ _op(b, g.transb)
    result = alpha * product + beta * c
    _store(view, g.c.ptr, g.c.type, g.c.ld, g.c.stride, np.broadcast_to(result, (g.batch, g.m, g.n)))


class FakeBlasBatched:
    """Mixed into FakeBackend: a GEMM per entry of the (already read and checked) pointer arrays."""

    def blas_gemm_batched(self, ctx, handle, stream, g: blas_wire.Gemm, arrays) -> None:
        """`arrays`: the pointers the server read and checked, or None (a captured call): then read here, when
        the work runs, as cuBLAS reads them on a GPU."""
        ctx.check()
        if arrays is None:
            arrays = [struct.unpack(f"<{g.batch}Q", self._blas_view(p, 8 * g.batch).tobytes())
                      for p in (g.a.ptr, g.b.ptr, g.c.ptr)]
        else:
            arrays = (arrays.a, arrays.b, arrays.c)
        for pa, pb, pc in zip(*arrays):
            gemm(self._blas_view, attrs.evolve(g, batch=1, a=attrs.evolve(g.a, ptr=pa, stride=0),
                                               b=attrs.evolve(g.b, ptr=pb, stride=0),
                                               c=attrs.evolve(g.c, ptr=pc, stride=0)))


def _gelu(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))


def lt_matmul(view, op: blas_wire.LtOperation, pointers, alpha: bytes, beta: bytes) -> None:
    pa, pb, pc, pd = pointers
    if op.scalar_pointers():
        raise CudaError(Status.NOT_SUPPORTED, "cuBLASLt scale and amax pointers (FP8) on the fake backend")
    ta, tb = op.int_attr(3), op.int_attr(4)
    scale = {0: 68, 1: 70, 2: 64}.get(op.scale, 68)  # the scalars' type, as a compute type for _scalar
    al, be = _scalar(alpha, scale), _scalar(beta, scale)
    a = _op(_load_layout(view, pa, op.a), ta)
    b = _op(_load_layout(view, pb, op.b), tb)
    if a.shape[2] != b.shape[1] or (a.shape[1], b.shape[2]) != (op.d.rows, op.d.cols):
        raise CudaError(Status.INVALID_VALUE, f"matmul shapes {a.shape} x {b.shape} -> {op.d.rows}x{op.d.cols}")
    result = al * (a @ b)
    if be:
        result = result + be * _load_layout(view, pc, op.c)
    epilogue = op.epilogue
    if epilogue in (4, 6, 36):
        bias_type = op.int_attr(26, op.d.type)
        result = result + _load(view, op.bias, bias_type, op.d.rows, 1, op.d.rows, 1, 0)
    if epilogue in (2, 6):
        result = np.maximum(result, 0)
    elif epilogue in (32, 36):
        result = _gelu(result)
    batch = max(op.d.batch, result.shape[0])
    _store_layout(view, pd, op.d, np.broadcast_to(result, (batch, op.d.rows, op.d.cols)))


def heuristic(requested: int) -> list[bytes]:
    """One "algorithm": the fake has a single way to multiply. workspaceSize 0, state success, 1 wave."""
    algo = b"rgpu-fake-matmul".ljust(64, b"\0")
    return [algo + struct.pack("<QIf16x", 0, 0, 1.0)][:requested]
