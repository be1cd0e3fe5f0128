"""cuSOLVER dense for the fake backend, in numpy, with LAPACK's conventions as cuSOLVER keeps them: column-major
operands in emulated device memory, pivoted LU with 1-based pivots, Householder QR as reflectors plus tau, only
the referenced triangle read or written, `info` the 1-based index of the failing pivot or minor (0: success).
Real float and double only. Workspace sizes are the fake's own (an n x n scratch), checked like the GPU's."""

from __future__ import annotations

import numpy as np

from rgpu.errors import CudaError, Status
from rgpu.protocol import blas_wire
from rgpu.protocol.solver_wire import BATCHED, EIGEN, FILL_UPPER, NO_WORKSPACE, OP_N, POINTER_ARRAYS, SIDE_LEFT, \
    Function, Solve

_DTYPES = {0: np.float32, 1: np.float64}


class _Memory:
    """Matrices and vectors of one request, as float64 copies in and typed stores out."""

    def __init__(self, view, s: Solve):
        if s.data_type not in _DTYPES:
            raise CudaError(Status.NOT_SUPPORTED, f"fake cuSOLVER: data type {s.data_type} (float and double only)")
        self.view, self.dtype = view, _DTYPES[s.data_type]

    def _strided(self, ptr: int, rows: int, cols: int, ld: int, writeable: bool = False) -> np.ndarray:
        item = np.dtype(self.dtype).itemsize
        flat = self.view(ptr, blas_wire.extent(rows, cols, ld, item)).view(self.dtype)
        return np.lib.stride_tricks.as_strided(flat, (rows, cols), (item, ld * item), writeable=writeable)

    def matrix(self, ptr: int, rows: int, cols: int, ld: int) -> np.ndarray:
        if rows <= 0 or cols <= 0:
            return np.zeros((max(rows, 0), max(cols, 0)))
        return self._strided(ptr, rows, cols, ld).astype(np.float64)

    def store(self, ptr: int, ld: int, values: np.ndarray) -> None:
        if values.size:
            self._strided(ptr, *values.shape, ld, writeable=True)[...] = values.astype(self.dtype)

    def vector(self, ptr: int, count: int, dtype=None) -> np.ndarray:
        dtype = dtype or self.dtype
        return self.view(ptr, count * np.dtype(dtype).itemsize).view(dtype)

    def store_vector(self, ptr: int, values, dtype=None) -> None:
        if len(values):
            self.vector(ptr, len(values), dtype)[...] = values

    def info(self, ptr: int, values) -> None:
        self.store_vector(ptr, np.asarray(values, np.int32), np.int32)


# -- the factorizations, LAPACK's way ---------------------------------------------------------------------
def getrf(a: np.ndarray, pivot: bool) -> tuple[np.ndarray, np.ndarray, int]:
    """Row-pivoted LU in place of `a` (L unit lower, U upper), 1-based pivots, info = first zero pivot."""
    a = a.copy()
    m, n = a.shape
    ipiv, info = np.arange(1, min(m, n) + 1), 0
    for j in range(min(m, n)):
        p = j + int(np.argmax(np.abs(a[j:, j]))) if pivot else j
        ipiv[j] = p + 1
        if a[p, j] == 0:
            info = info or j + 1
            continue
        if p != j:
            a[[j, p]] = a[[p, j]]
        a[j + 1:, j] /= a[j, j]
        a[j + 1:, j + 1:] -= np.outer(a[j + 1:, j], a[j, j + 1:])
    return a, ipiv, info


def getrs(lu: np.ndarray, ipiv, b: np.ndarray, trans: int) -> np.ndarray:
    n = lu.shape[0]
    lower, upper = np.tril(lu, -1) + np.eye(n), np.triu(lu)
    b = b.copy()
    if trans == OP_N:
        for i, p in enumerate(ipiv):
            b[[i, p - 1]] = b[[p - 1, i]]
        return np.linalg.solve(upper, np.linalg.solve(lower, b))
    x = np.linalg.solve(lower.T, np.linalg.solve(upper.T, b))
    for i in reversed(range(n)):
        p = ipiv[i] - 1
        x[[i, p]] = x[[p, i]]
    return x


def potrf(a: np.ndarray, uplo: int) -> tuple[np.ndarray, int]:
    """Cholesky of the referenced triangle; the other triangle is left as it was. info = failing minor."""
    n = a.shape[0]
    full = np.triu(a) + np.triu(a, 1).T if uplo == FILL_UPPER else np.tril(a) + np.tril(a, -1).T
    low = np.zeros_like(full)
    for j in range(n):
        d = full[j, j] - low[j, :j] @ low[j, :j]
        if not d > 0:
            return a, j + 1
        low[j, j] = np.sqrt(d)
        low[j + 1:, j] = (full[j + 1:, j] - low[j + 1:, :j] @ low[j, :j]) / low[j, j]
    out = a.copy()
    if uplo == FILL_UPPER:
        out[np.triu_indices(n)] = low.T[np.triu_indices(n)]
    else:
        out[np.tril_indices(n)] = low[np.tril_indices(n)]
    return out, 0


def cholesky_factor(a: np.ndarray, uplo: int) -> np.ndarray:
    """The lower factor L (A = L L^T) from potrf's output."""
    return np.triu(a).T if uplo == FILL_UPPER else np.tril(a)


def geqrf(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Householder QR (LAPACK's dgeqrf): R on and above the diagonal, reflectors v (v[0] = 1 implied) below."""
    a = a.copy()
    m, n = a.shape
    tau = np.zeros(min(m, n))
    for j in range(min(m, n)):
        x = a[j:, j]
        alpha, sigma = x[0], x[1:] @ x[1:]
        if sigma == 0:
            continue  # H = I: tau 0
        beta = -np.copysign(np.sqrt(alpha * alpha + sigma), alpha)
        tau[j] = (beta - alpha) / beta
        v = x[1:] / (alpha - beta)
        a[j + 1:, j] = v
        a[j, j] = beta
        w = np.concatenate(([1.0], v))
        a[j:, j + 1:] -= tau[j] * np.outer(w, w @ a[j:, j + 1:])
    return a, tau


def _reflector(a: np.ndarray, tau, j: int) -> np.ndarray:
    m = a.shape[0]
    v = np.zeros(m)
    v[j], v[j + 1:] = 1.0, a[j + 1:, j]
    return np.eye(m) - tau[j] * np.outer(v, v)


def form_q(a: np.ndarray, tau, k: int) -> np.ndarray:
    """Q = H(0) H(1) ... H(k-1), m x m."""
    q = np.eye(a.shape[0])
    for j in range(k):
        q = q @ _reflector(a, tau, j)
    return q


def orgqr(a: np.ndarray, tau, k: int) -> np.ndarray:
    return form_q(a, tau, k)[:, : a.shape[1]]


def ormqr(a: np.ndarray, tau, k: int, c: np.ndarray, side: int, trans: int) -> np.ndarray:
    q = form_q(a, tau, k)
    q = q if trans == OP_N else q.T
    return q @ c if side == SIDE_LEFT else c @ q


def _symmetric(a: np.ndarray, uplo: int) -> np.ndarray:
    return np.triu(a) + np.triu(a, 1).T if uplo == FILL_UPPER else np.tril(a) + np.tril(a, -1).T


# -- requests --------------------------------------------------------------------------------------------
def buffer_size(s: Solve) -> tuple[int, int, int]:
    """(status, device workspace, host workspace): the fake asks for an n x n scratch (X API: in bytes)."""
    if s.function in NO_WORKSPACE:
        return 0, 0, 0
    if s.function.base in BATCHED:
        elements = max(s.m, s.n) ** 2 * s.batch
    else:
        elements = max(s.m, s.n, 1) ** 2
    size = elements * (s.esize if s.function.x_api else 1)
    if size >= 1 << 63:
        raise CudaError(Status.INVALID_VALUE, f"fake cuSOLVER: a workspace of {size} for {s.function.name}")
    return 0, size, 0


def run(view, s: Solve, arrays=None) -> None:
    """`arrays`: potrfBatched's and potrsBatched's pointers as the server read them, or None: read them here."""
    mem = _Memory(view, s)
    f, m, n = s.function.base, s.m, s.n
    if f in POINTER_ARRAYS:
        if arrays is None:
            arrays = tuple(tuple(mem.vector(p, s.batch, np.uint64).tolist()) if p else () for p in (s.a, s.b))
        return _cholesky_batched(mem, s, *arrays)
    if f == Function.GESVDJ_BATCHED:
        return _gesvdj_batched(mem, s)
    if f in EIGEN:
        return _eigen(mem, s)
    square = (n, n, s.lda)
    if f == Function.GETRF:
        lu, ipiv, info = getrf(mem.matrix(s.a, m, n, s.lda), pivot=bool(s.ipiv))
        mem.store(s.a, s.lda, lu)
        if s.ipiv:
            mem.store_vector(s.ipiv, ipiv, np.int64 if s.function.x_api else np.int32)
        mem.info(s.info, [info])
    elif f == Function.GETRS:
        ipiv = mem.vector(s.ipiv, n, np.int64 if s.function.x_api else np.int32)
        if np.any(ipiv < 1) or np.any(ipiv > n):
            raise CudaError(Status.INVALID_VALUE, "getrs: pivot out of range")
        x = getrs(mem.matrix(s.a, *square), ipiv, mem.matrix(s.b, n, s.nrhs, s.ldb), s.trans)
        mem.store(s.b, s.ldb, x)
        mem.info(s.info, [0])
    elif f == Function.POTRF:
        out, info = potrf(mem.matrix(s.a, *square), s.uplo)
        mem.store(s.a, s.lda, out)
        mem.info(s.info, [info])
    elif f == Function.POTRS:
        low = cholesky_factor(mem.matrix(s.a, *square), s.uplo)
        b = mem.matrix(s.b, n, s.nrhs, s.ldb)
        mem.store(s.b, s.ldb, np.linalg.solve(low.T, np.linalg.solve(low, b)) if n else b)
        mem.info(s.info, [0])
    elif f == Function.GEQRF:
        qr, tau = geqrf(mem.matrix(s.a, m, n, s.lda))
        mem.store(s.a, s.lda, qr)
        mem.store_vector(s.tau, tau)
        mem.info(s.info, [0])
    elif f == Function.ORGQR:
        a = mem.matrix(s.a, m, n, s.lda)
        mem.store(s.a, s.lda, orgqr(a, mem.vector(s.tau, s.k), s.k))
        mem.info(s.info, [0])
    elif f == Function.ORMQR:
        rows = m if s.side == SIDE_LEFT else n
        a = mem.matrix(s.a, rows, s.k, s.lda)
        c = ormqr(a, mem.vector(s.tau, s.k), s.k, mem.matrix(s.b, m, n, s.ldb), s.side, s.trans)
        mem.store(s.b, s.ldb, c)
        mem.info(s.info, [0])
    elif f == Function.GESVD:
        _gesvd(mem, s)
    elif f == Function.GESVDJ:
        _gesvdj(mem, s, s.a, s.u, s.v, s.w, s.econ)
        mem.info(s.info, [0])


def _cholesky_batched(mem: _Memory, s: Solve, a_pointers, b_pointers) -> None:
    n, infos = s.n, []
    for i, a in enumerate(a_pointers):
        if s.function == Function.POTRF_BATCHED:
            out, info = potrf(mem.matrix(a, n, n, s.lda), s.uplo)
            mem.store(a, s.lda, out)
            infos.append(info)
        else:
            low = cholesky_factor(mem.matrix(a, n, n, s.lda), s.uplo)
            b = mem.matrix(b_pointers[i], n, s.nrhs, s.ldb)
            mem.store(b_pointers[i], s.ldb, np.linalg.solve(low.T, np.linalg.solve(low, b)) if n else b)
    mem.info(s.info, infos or [0])


def _eigen(mem: _Memory, s: Solve) -> None:
    """syevd, syevj and their batches: eigenvalues ascending (the fake's Jacobi sorts, as syevj's default does)."""
    n, batch = s.n, s.batch if s.function.base in BATCHED else 1
    for i in range(batch):
        a, w = s.a + i * s.lda * n * s.esize, s.w + i * n * s.rsize
        values, vectors = np.linalg.eigh(_symmetric(mem.matrix(a, n, n, s.lda), s.uplo))
        mem.store_vector(w, values)
        if s.jobz:
            mem.store(a, s.lda, vectors)
    mem.info(s.info, [0] * batch)


def _gesvd(mem: _Memory, s: Solve) -> None:
    m, n, mn = s.m, s.n, s.min_mn
    ju, jv = chr(s.jobu), chr(s.jobvt)
    if "O" in (ju, jv):
        raise CudaError(Status.NOT_SUPPORTED, "fake cuSOLVER: gesvd with jobu or jobvt 'O'")
    u, sv, vt = np.linalg.svd(mem.matrix(s.a, m, n, s.lda), full_matrices=True)
    mem.store_vector(s.w, sv)
    if ju in "AS":
        mem.store(s.u, s.ldu, u if ju == "A" else u[:, :mn])
    if jv in "AS":
        mem.store(s.v, s.ldv, vt if jv == "A" else vt[:mn])
    if s.rwork and mn > 1:
        mem.store_vector(s.rwork, np.zeros(mn - 1), mem.dtype)
    mem.info(s.info, [0])


def _gesvdj(mem: _Memory, s: Solve, a: int, u: int, v: int, w: int, econ: int) -> None:
    m, n, mn = s.m, s.n, s.min_mn
    uu, sv, vt = np.linalg.svd(mem.matrix(a, m, n, s.lda), full_matrices=not econ)
    mem.store_vector(w, sv)
    if s.jobz:
        mem.store(u, s.ldu, uu[:, :mn] if econ else uu)
        mem.store(v, s.ldv, (vt.T[:, :mn] if econ else vt.T))


def _gesvdj_batched(mem: _Memory, s: Solve) -> None:
    e, r, mn = s.esize, s.rsize, s.min_mn
    for i in range(s.batch):
        _gesvdj(mem, s, s.a + i * s.lda * s.n * e, s.u + i * s.ldu * s.m * e, s.v + i * s.ldv * s.n * e,
                s.w + i * mn * r, econ=0)
    mem.info(s.info, [0] * s.batch)


class FakeSolver:
    """Mixed into FakeBackend (which provides `_blas_view`)."""

    def solver_create(self, ctx):
        ctx.check()
        return object()

    def solver_destroy(self, ctx, handle) -> None:
        pass

    def solver_buffer_size(self, ctx, handle, solve: Solve) -> tuple[int, int, int]:
        ctx.check()
        return buffer_size(solve)

    def solver_run(self, ctx, handle, stream, solve: Solve, arrays=None) -> None:
        ctx.check()
        run(self._blas_view, solve, arrays)
