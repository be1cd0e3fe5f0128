"""cuBLAS Level 2/3 routines and getrsBatched for the fake backend, in numpy: operands are views of emulated device
memory (their ranges already checked by the dispatcher), computed in float64/complex128 and stored back in the
operand's type."""

from __future__ import annotations

import struct

import numpy as np

from rgpu.backends.fake_blas import _LU_NUMPY, _square, solve_triangular
from rgpu.protocol import blas_wire
from rgpu.protocol.blas_routines import (DIAG_UNIT, FILL_LOWER, SIDE_LEFT, WITH_BETA, WITHOUT_ALPHA, Function,
                                         GetrsBatched, Routine)

_WIDE = {np.float32: np.float64, np.float64: np.float64, np.complex64: np.complex128, np.complex128: np.complex128}


def _op(m: np.ndarray, trans: int) -> np.ndarray:
    return m if trans == blas_wire.OP_N else m.T if trans == blas_wire.OP_T else m.conj().T


class _Operands:
    """One routine's operands as numpy arrays."""

    def __init__(self, view, r: Routine):
        self.view, self.r = view, r
        self.dtype = _LU_NUMPY[r.type]
        self.wide = _WIDE[self.dtype]

    def matrix(self, ptr: int, rows: int, cols: int, ld: int) -> np.ndarray:
        """A writable (rows, cols) view of a column-major matrix."""
        return _square(self.view, ptr, self.r.type, rows, cols, ld)

    def load(self, ptr: int, rows: int, cols: int, ld: int) -> np.ndarray:
        return self.matrix(ptr, rows, cols, ld).astype(self.wide)

    def vector(self, ptr: int, n: int, inc: int) -> tuple[np.ndarray, np.ndarray]:
        """The flat view a vector lies in and its elements' indices (a negative increment walks backwards)."""
        flat = self.view(ptr, blas_wire.vector_extent(n, inc, np.dtype(self.dtype).itemsize)).view(self.dtype)
        index = np.arange(n) * abs(inc)
        return flat, index[::-1] if inc < 0 else index

    def scalar(self, raw: bytes) -> complex | float:
        """alpha or beta, by value or (device pointer mode) from device memory; herk's are real."""
        dtype = np.dtype(self.dtype)
        if self.r.function == Function.HERK:
            dtype = np.dtype(np.float32 if dtype == np.complex64 else np.float64)
        if self.r.pointer_mode == blas_wire.POINTER_MODE_DEVICE:
            raw = self.view(struct.unpack_from("<Q", raw)[0], dtype.itemsize).tobytes()
        return np.frombuffer(raw[: dtype.itemsize], dtype)[0].astype(self.wide)

    def triangle(self, order: int) -> np.ndarray:
        """A's triangle named by uplo (the unit diagonal implied for DIAG_UNIT), op applied."""
        r = self.r
        a = self.load(r.a, order, order, r.lda)
        tri = np.tril(a) if r.uplo == FILL_LOWER else np.triu(a)
        if r.diag == DIAG_UNIT:
            np.fill_diagonal(tri, 1)
        return _op(tri, r.transa)

    def symmetric(self, order: int) -> np.ndarray:
        """The symmetric matrix A's uplo triangle describes."""
        a = self.load(self.r.a, order, order, self.r.lda)
        tri = np.tril(a) if self.r.uplo == FILL_LOWER else np.triu(a)
        return tri + tri.T - np.diag(np.diag(a))


def _in_triangle(r: Routine, c: np.ndarray, value: np.ndarray) -> None:
    """Store value into C's uplo triangle only (syrk, herk): the other triangle is left as it was."""
    mask = np.tril(np.ones(c.shape, bool)) if r.uplo == FILL_LOWER else np.triu(np.ones(c.shape, bool))
    c[mask] = value[mask]


def routine(view, r: Routine) -> None:
    o, f = _Operands(view, r), r.function
    alpha = o.scalar(r.alpha) if f not in WITHOUT_ALPHA else 1
    beta = o.scalar(r.beta) if f in WITH_BETA else 0
    m, n, k = r.m, r.n, r.k

    def plus_beta(ptr: int, rows: int, cols: int, ld: int, product: np.ndarray) -> np.ndarray:
        # As BLAS: with beta 0, C is not read (it may hold NaN).
        return alpha * product + (beta * o.load(ptr, rows, cols, ld) if beta else 0)

    if f in (Function.GEMM, Function.GEMM3M):
        product = 0
        if k:
            a = o.load(r.a, *((m, k) if r.transa == blas_wire.OP_N else (k, m)), r.lda)
            b = o.load(r.b, *((k, n) if r.transb == blas_wire.OP_N else (n, k)), r.ldb)
            product = _op(a, r.transa) @ _op(b, r.transb)
        o.matrix(r.c, m, n, r.ldc)[...] = plus_beta(r.c, m, n, r.ldc, product)
    elif f == Function.GEMV:
        rows_x, rows_y = (n, m) if r.transa == blas_wire.OP_N else (m, n)  # in r.gemv_rows(), the ranges checked
        x, ix = o.vector(r.b, rows_x, r.ldb)
        y, iy = o.vector(r.c, rows_y, r.ldc)
        product = _op(o.load(r.a, m, n, r.lda), r.transa) @ x[ix].astype(o.wide)
        y[iy] = alpha * product + (beta * y[iy].astype(o.wide) if beta else 0)
    elif f in (Function.GER, Function.GERU, Function.GERC):
        x, ix = o.vector(r.b, m, r.ldb)
        y, iy = o.vector(r.c, n, r.ldc)
        yv = y[iy].astype(o.wide)
        a = o.matrix(r.a, m, n, r.lda)
        a[...] = a + alpha * np.outer(x[ix].astype(o.wide), yv.conj() if f == Function.GERC else yv)
    elif f in (Function.TRSV, Function.TRMV):
        x, ix = o.vector(r.b, n, r.ldb)
        t, xv = o.triangle(n), x[ix].astype(o.wide)
        x[ix] = solve_triangular(t, xv) if f == Function.TRSV else t @ xv
    elif f in (Function.TRSM, Function.TRMM):
        t, b = o.triangle(r.order), o.load(r.b, m, n, r.ldb)
        if f == Function.TRSM:  # op(A) X = alpha B or X op(A) = alpha B, X over B
            x = solve_triangular(t, alpha * b) if r.side == SIDE_LEFT else solve_triangular(t.T, (alpha * b).T).T
            o.matrix(r.b, m, n, r.ldb)[...] = x
        else:  # C = alpha op(A) B or alpha B op(A)
            o.matrix(r.c, m, n, r.ldc)[...] = alpha * (t @ b if r.side == SIDE_LEFT else b @ t)
    elif f in (Function.SYRK, Function.HERK):
        product = 0
        if k:
            # herk's T (which NVIDIA accepts) is read here as C
            trans = blas_wire.OP_C if f == Function.HERK and r.transa == blas_wire.OP_T else r.transa
            a = _op(o.load(r.a, *((n, k) if trans == blas_wire.OP_N else (k, n)), r.lda), trans)
            product = a @ (a.conj().T if f == Function.HERK else a.T)
        value = plus_beta(r.c, n, n, r.ldc, product)
        if f == Function.HERK:  # C's diagonal is real
            np.fill_diagonal(value, np.diag(value).real)
        _in_triangle(r, o.matrix(r.c, n, n, r.ldc), value)
    else:  # SYMM: C = alpha A B + beta C (left) or alpha B A + beta C, A symmetric
        s, b = o.symmetric(r.order), o.load(r.b, m, n, r.ldb)
        o.matrix(r.c, m, n, r.ldc)[...] = plus_beta(r.c, m, n, r.ldc, s @ b if r.side == SIDE_LEFT else b @ s)


def _permute(pivots: np.ndarray | None, b: np.ndarray) -> np.ndarray:
    """P B: the row interchanges getrf recorded, applied in order."""
    b = b.copy()
    if pivots is not None:
        for j, p in enumerate(pivots):
            p = int(p) - 1
            if p != j:
                b[[j, p], :] = b[[p, j], :]
    return b


def getrs(lu: np.ndarray, pivots: np.ndarray | None, trans: int, b: np.ndarray) -> np.ndarray:
    """X with op(A) X = B, from getrf's factors of A (P A = L U): N solves L U X = P B; T/C solve
    U^op L^op (P X) = B."""
    n = lu.shape[0]
    lower = np.tril(lu, -1) + np.eye(n, dtype=lu.dtype)
    upper = np.triu(lu)
    if trans == blas_wire.OP_N:
        return solve_triangular(upper, solve_triangular(lower, _permute(pivots, b)))
    y = solve_triangular(_op(lower, trans), solve_triangular(_op(upper, trans), b))
    # y = P X: undo the interchanges, last first
    if pivots is not None:
        for j in reversed(range(n)):
            p = int(pivots[j]) - 1
            if p != j:
                y[[j, p], :] = y[[p, j], :]
    return y


class FakeBlasRoutines:
    """Mixed into FakeBackend (which provides `_blas_view` and, from FakeBlasBatched, `_pointer_arrays`)."""

    def blas_routine(self, ctx, handle, stream, r: Routine) -> None:
        ctx.check()
        with np.errstate(all="ignore"):  # NaNs and infinities in, or a zero pivot: quietly, as on a GPU
            routine(self._blas_view, r)

    def blas_getrs_batched(self, ctx, handle, stream, g: GetrsBatched, arrays) -> None:
        ctx.check()
        view, n = self._blas_view, g.n
        wide = _WIDE[_LU_NUMPY[g.type]]
        pivots = view(g.pivots, 4 * n * g.batch).view(np.int32).reshape(g.batch, n) if g.pivots else None
        for i, (pa, pb) in enumerate(zip(*self._pointer_arrays(g.arrays, g.batch, arrays))):
            lu = _square(view, pa, g.type, n, n, g.lda).astype(wide)
            b = _square(view, pb, g.type, n, g.nrhs, g.ldb)
            with np.errstate(all="ignore"):
                b[...] = getrs(lu, pivots[i] if pivots is not None else None, g.trans, b.astype(wide))
