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


_LU_NUMPY = {0: np.float32, 1: np.float64, 4: np.complex64, 5: np.complex128}


def _square(view, ptr: int, dtype: int, rows: int, cols: int, ld: int) -> np.ndarray:
    """A writable (rows, cols) view of a column-major matrix of an S/D/C/Z type."""
    item = np.dtype(_LU_NUMPY[dtype]).itemsize
    flat = view(ptr, blas_wire.extent(rows, cols, ld, item)).view(_LU_NUMPY[dtype])
    return np.lib.stride_tricks.as_strided(flat, (rows, cols), (item, ld * item))


def _getrf(a: np.ndarray, pivoting: bool) -> tuple[np.ndarray, int]:
    """LU in place as LAPACK's getrf lays it out (L below the diagonal, unit diagonal implied; U on and above):
    1-based pivot rows, and info = k when U(k,k) is exactly zero (the first such k)."""
    n = a.shape[0]
    pivots, info = np.arange(1, n + 1, dtype=np.int32), 0
    for j in range(n):
        if pivoting:
            p = j + int(np.argmax(np.abs(a[j:, j])))
            pivots[j] = p + 1
            if p != j:
                a[[j, p], :] = a[[p, j], :]
        if a[j, j] == 0:
            info = info or j + 1
            continue
        a[j + 1 :, j] /= a[j, j]
        a[j + 1 :, j + 1 :] -= np.outer(a[j + 1 :, j], a[j, j + 1 :])
    return pivots, info


def _from_factors(lu: np.ndarray, pivots: np.ndarray | None) -> np.ndarray:
    """The matrix whose getrf gave `lu` and `pivots` (row swaps undone in reverse)."""
    a = (np.tril(lu, -1) + np.eye(lu.shape[0], dtype=lu.dtype)) @ np.triu(lu)
    if pivots is not None:
        for j in reversed(range(len(pivots))):
            p = int(pivots[j]) - 1
            if p != j:
                a[[j, p], :] = a[[p, j], :]
    return a


def solve_triangular(t: np.ndarray, b: np.ndarray) -> np.ndarray:
    """X with t X = b, t triangular (lower or upper), by substitution as BLAS solves it: a zero on the diagonal
    gives infinities and NaNs, not an error."""
    n = t.shape[0]
    lower = not np.triu(t, 1).any()
    x = b.astype(np.result_type(t, b))
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        for i in range(n) if lower else reversed(range(n)):
            done = slice(0, i) if lower else slice(i + 1, n)
            x[i] = (x[i] - t[i, done] @ x[done]) / t[i, i]
    return x


def _triangular(a: np.ndarray, t: blas_wire.TrsmBatched) -> np.ndarray:
    tri = np.tril(a) if t.uplo == blas_wire.FILL_LOWER else np.triu(a)
    if t.diag == blas_wire.DIAG_UNIT:
        np.fill_diagonal(tri, 1)
    return tri if t.trans == blas_wire.OP_N else tri.T if t.trans == blas_wire.OP_T else tri.conj().T


def level1(view, c: blas_wire.Level1) -> bytes | None:
    """One Level-1 call on float32/float64 vectors (computed in float64); a host-mode reduction's result as bytes."""
    dtype = (np.float32, np.float64)[c.type]
    size = np.dtype(dtype).itemsize
    device = c.pointer_mode == blas_wire.POINTER_MODE_DEVICE

    def vector(ptr, inc):
        flat = view(ptr, blas_wire.vector_extent(c.n, inc, size)).view(dtype)
        index = np.arange(c.n) * abs(inc)
        return flat, index[::-1] if inc < 0 else index

    if c.func in (blas_wire.AXPY, blas_wire.SCAL):
        raw = view(struct.unpack_from("<Q", c.alpha)[0], size).tobytes() if device else c.alpha[:size]
        alpha = float(np.frombuffer(raw, dtype)[0])
    value = 0
    if c.touches_x:
        x, ix = vector(c.x, c.incx)
        if c.func in (blas_wire.AXPY, blas_wire.COPY, blas_wire.SWAP, blas_wire.DOT):
            y, iy = vector(c.y, c.incy)
        if c.func == blas_wire.AXPY:
            y[iy] = alpha * x[ix].astype(np.float64) + y[iy]
        elif c.func == blas_wire.SCAL:
            x[ix] = alpha * x[ix].astype(np.float64)
        elif c.func == blas_wire.COPY:
            y[iy] = x[ix]
        elif c.func == blas_wire.SWAP:
            y[iy], x[ix] = x[ix].copy(), y[iy].copy()
        elif c.func == blas_wire.DOT:
            value = float(np.dot(x[ix].astype(np.float64), y[iy]))
        elif c.func == blas_wire.NRM2:
            value = float(np.sqrt(np.sum(np.square(x[ix].astype(np.float64)))))
        elif c.func == blas_wire.ASUM:
            value = float(np.sum(np.abs(x[ix].astype(np.float64))))
        else:  # iamax/iamin: the first extreme |x|, 1-based
            magnitudes = np.abs(x[ix])
            value = 1 + int(np.argmax(magnitudes) if c.func in (blas_wire.IAMAX, blas_wire.IAMAX64) else
                            np.argmin(magnitudes))
    if not c.reduction:
        return None
    if c.func >= blas_wire.IAMAX:
        result = np.array(value, np.int32 if c.result_size == 4 else np.int64).tobytes()
    else:
        result = np.array(value, dtype).tobytes()
    if device:
        view(c.result, len(result))[:] = np.frombuffer(result, np.uint8)
        return None
    return result


class FakeBlasBatched:
    """Mixed into FakeBackend: the work per entry of the (already read and checked) pointer arrays."""

    def _pointer_arrays(self, addresses, batch: int, arrays):
        """`arrays`: the pointers the server read and checked, or None (a captured call): then read here, when
        the work runs, as cuBLAS reads them on a GPU."""
        if arrays is not None:
            return arrays
        return [struct.unpack(f"<{batch}Q", self._blas_view(p, 8 * batch).tobytes()) for p in addresses]

    def blas_level1(self, ctx, handle, stream, call: blas_wire.Level1) -> bytes | None:
        ctx.check()
        return level1(self._blas_view, call)

    def blas_lu_batched(self, ctx, handle, stream, lu: blas_wire.LuBatched, arrays) -> None:
        ctx.check()
        view, n = self._blas_view, lu.n
        info = view(lu.info, 4 * lu.batch).view(np.int32)
        pivots = view(lu.pivots, 4 * n * lu.batch).view(np.int32).reshape(lu.batch, n) if lu.pivots else None
        for i, pointers in enumerate(zip(*self._pointer_arrays(lu.arrays, lu.batch, arrays))):
            a = _square(view, pointers[0], lu.type, n, n, lu.lda)
            if lu.which == blas_wire.GETRF:
                piv, info[i] = _getrf(a, pivots is not None)
                if pivots is not None:
                    pivots[i] = piv
                continue
            if lu.which == blas_wire.GETRI:
                original = _from_factors(a.copy(), pivots[i] if pivots is not None else None)
                info[i] = next((k + 1 for k in range(n) if a[k, k] == 0), 0)
            else:
                original = a.copy()
                info[i] = _getrf(a.copy(), True)[1]
            if not info[i]:
                _square(view, pointers[1], lu.type, n, n, lu.ldc)[...] = np.linalg.inv(original.astype(np.complex128
                                                                                   if lu.type > 1 else np.float64))

    def blas_trsm_batched(self, ctx, handle, stream, t: blas_wire.TrsmBatched, arrays) -> None:
        ctx.check()
        if t.pointer_mode == blas_wire.POINTER_MODE_DEVICE:
            raise CudaError(Status.NOT_SUPPORTED, "fake backend: device pointer mode")
        dtype = _LU_NUMPY[t.type]
        alpha = np.frombuffer(t.alpha[: np.dtype(dtype).itemsize], dtype)[0]
        for pa, pb in zip(*self._pointer_arrays(t.arrays, t.batch, arrays)):
            a = _triangular(_square(self._blas_view, pa, t.type, t.k, t.k, t.lda), t)
            b = _square(self._blas_view, pb, t.type, t.m, t.n, t.ldb)
            with np.errstate(all="ignore"):
                if t.side == blas_wire.SIDE_LEFT:
                    b[...] = solve_triangular(a, alpha * b)
                else:
                    b[...] = solve_triangular(a.T, (alpha * b).T).T

    def blas_gemm_batched(self, ctx, handle, stream, g: blas_wire.Gemm, arrays) -> None:
        ctx.check()
        if arrays is not None:
            arrays = (arrays.a, arrays.b, arrays.c)
        for pa, pb, pc in zip(*self._pointer_arrays((g.a.ptr, g.b.ptr, g.c.ptr), g.batch, arrays)):
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
