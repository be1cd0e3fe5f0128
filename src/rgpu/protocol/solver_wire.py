"""The server's view of cuSOLVER dense requests (SOLVER_BUFFER_SIZE, SOLVER_RUN): decoded, validated, and with
the device ranges each routine reads or writes, so a session's factorization can only touch its own memory.

One request shape serves every routine; `function` says which, in which API: the classic one (cusolverDnSgetrf:
32-bit sizes, int pivots, workspaces counted in elements) or the 64-bit X one (cusolverDnXgetrf: int64 pivots,
workspaces in bytes, a data type per array). The client fills only the fields its routine has."""

from __future__ import annotations

import enum

import attrs

from rgpu.errors import CudaError, Status
from rgpu.protocol import blas_wire

X_API = 0x100  # set in `function` for the 64-bit API


class Function(enum.IntEnum):
    GETRF = 1
    GETRS = 2
    POTRF = 3
    POTRS = 4
    GEQRF = 5
    ORGQR = 6
    ORMQR = 7
    SYEVD = 8
    GESVD = 9
    GESVDJ = 10
    GESVDJ_BATCHED = 11
    SYEVJ = 12
    SYEVJ_BATCHED = 13
    SYEV_BATCHED = 14  # the X API's only (XSYEV_BATCHED)
    POTRF_BATCHED = 15
    POTRS_BATCHED = 16
    XGETRF = X_API | 1
    XGETRS = X_API | 2
    XPOTRF = X_API | 3
    XPOTRS = X_API | 4
    XGEQRF = X_API | 5
    XSYEVD = X_API | 8
    XGESVD = X_API | 9
    XSYEV_BATCHED = X_API | 14

    @property
    def base(self) -> Function:
        return Function(self & ~X_API)

    @property
    def x_api(self) -> bool:
        return bool(self & X_API)


# Routines with no workspace of their own.
NO_WORKSPACE = {Function.GETRS, Function.POTRS, Function.XGETRS, Function.XPOTRS, Function.POTRF_BATCHED,
                Function.POTRS_BATCHED}
# Batches as arrays of `batch` device pointers to the matrices (`a` and `b` are the arrays' addresses).
POINTER_ARRAYS = {Function.POTRF_BATCHED, Function.POTRS_BATCHED}
SOLVES = {Function.GETRS, Function.POTRS, Function.POTRS_BATCHED}  # with right-hand sides B (n x nrhs)
# Strided batches: `batch` matrices `ld * cols` elements apart, their vectors and info arrays one after another.
BATCHED = {Function.GESVDJ_BATCHED, Function.SYEVJ_BATCHED, Function.SYEV_BATCHED}
EIGEN = {Function.SYEVD, Function.SYEVJ, Function.SYEVJ_BATCHED, Function.SYEV_BATCHED}
# cudaDataType: the real type of each precision (eigenvalues and singular values are real).
REAL_OF = {0: 0, 1: 1, 4: 0, 5: 1}
SOLVER_TYPES = frozenset(REAL_OF)  # float, double, complex float, complex double
OP_N, OP_T, OP_C = 0, 1, 2
FILL_LOWER, FILL_UPPER = 0, 1
SIDE_LEFT, SIDE_RIGHT = 0, 1
MAX_BATCH = 1 << 20
# No dimension or leading dimension beyond this (far past any matrix a GPU holds): extents stay far inside u64.
MAX_DIMENSION = 1 << 40


def _extent(rows: int, cols: int, ld: int, esize: int, batch: int = 1, stride: int = 0) -> int:
    return blas_wire.extent(rows, cols, ld, esize, batch, stride)


@attrs.frozen(slots=True)
class Solve:
    """A decoded SOLVER_BUFFER_SIZE / SOLVER_RUN request (field meanings: rgpu.protocol.ops._SOLVE)."""

    function: Function
    data_type: int
    compute_type: int
    algo: int
    m: int
    n: int
    k: int
    nrhs: int
    uplo: int
    trans: int
    side: int
    jobz: int
    jobu: int
    jobvt: int
    econ: int
    sort: int
    max_sweeps: int
    tol: float
    a: int
    lda: int
    b: int
    ldb: int
    ipiv: int
    tau: int
    w: int
    u: int
    ldu: int
    v: int
    ldv: int
    rwork: int
    work: int
    work_size: int
    info: int
    batch: int

    @classmethod
    def from_request(cls, r) -> Solve:
        try:
            function = Function(r.function)
        except ValueError:
            function = None
        if function is None or function == Function.SYEV_BATCHED:
            raise CudaError(Status.NOT_SUPPORTED, f"cuSOLVER routine {r.function}")
        if r.data_type not in SOLVER_TYPES:
            raise CudaError(Status.NOT_SUPPORTED, f"cuSOLVER data type {r.data_type}")
        fields = {f.name: getattr(r, f.name) for f in attrs.fields(cls) if f.name != "function"}
        s = cls(function=function, **fields)
        s.validate()
        return s

    @property
    def esize(self) -> int:
        return blas_wire.type_size(self.data_type)

    @property
    def rsize(self) -> int:
        return blas_wire.type_size(REAL_OF[self.data_type])

    @property
    def ipiv_size(self) -> int:
        return 8 if self.function.x_api else 4

    @property
    def min_mn(self) -> int:
        return min(self.m, self.n)

    def validate(self) -> None:
        """What cuSOLVER refuses as CUSOLVER_STATUS_INVALID_VALUE, refused here before anything runs."""
        f = self.function.base
        if min(self.m, self.n, self.k, self.nrhs, self.batch, self.work_size) < 0:
            raise CudaError(Status.INVALID_VALUE, f"{self.function.name}: a negative size")
        if max(self.m, self.n, self.k, self.nrhs, self.lda, self.ldb, self.ldu, self.ldv) > MAX_DIMENSION:
            raise CudaError(Status.INVALID_VALUE, f"{self.function.name}: a dimension above {MAX_DIMENSION}")
        if f in SOLVES and self.ldb < max(1, self.n):
            raise CudaError(Status.INVALID_VALUE, f"{self.function.name}: ldb {self.ldb} < n {self.n}")
        if f == Function.ORMQR and self.ldb < max(1, self.m):
            raise CudaError(Status.INVALID_VALUE, f"ormqr: ldc {self.ldb} < m {self.m}")
        if f == Function.GETRS and self.trans not in (OP_N, OP_T, OP_C):
            raise CudaError(Status.INVALID_VALUE, f"getrs: operation {self.trans}")
        if (f in (Function.POTRF, Function.POTRS) or f in EIGEN or f in POINTER_ARRAYS) and \
                self.uplo not in (FILL_LOWER, FILL_UPPER):
            raise CudaError(Status.INVALID_VALUE, f"{self.function.name}: fill mode {self.uplo}")
        if f == Function.ORMQR and (self.side not in (SIDE_LEFT, SIDE_RIGHT) or self.trans not in (OP_N, OP_T, OP_C)):
            raise CudaError(Status.INVALID_VALUE, f"ormqr: side {self.side}, operation {self.trans}")
        if f == Function.ORGQR and not (self.m >= self.n >= self.k):
            raise CudaError(Status.INVALID_VALUE, f"orgqr: needs m >= n >= k ({self.m}, {self.n}, {self.k})")
        if (f in BATCHED or f in POINTER_ARRAYS) and not (1 <= self.batch <= MAX_BATCH):
            raise CudaError(Status.INVALID_VALUE, f"{self.function.name}: batch of {self.batch}")
        if f == Function.GESVD and (chr(self.jobu) not in "ASON" or chr(self.jobvt) not in "ASON"):
            raise CudaError(Status.INVALID_VALUE, f"gesvd: jobu {self.jobu}, jobvt {self.jobvt}")
        for rows, cols, ld, name in self._matrices():
            if rows > 0 and cols > 0 and ld < rows:
                raise CudaError(Status.INVALID_VALUE, f"{self.function.name}: {name} leading dimension {ld} < {rows}")

    def _matrices(self) -> list[tuple[int, int, int, str]]:
        """(rows, cols, leading dimension, name) of each matrix operand present."""
        f, m, n, k = self.function.base, self.m, self.n, self.k
        if f in (Function.GETRF, Function.GEQRF, Function.GESVD, Function.GESVDJ, Function.GESVDJ_BATCHED):
            out = [(m, n, self.lda, "A")]
        elif f == Function.ORGQR:
            out = [(m, n, self.lda, "A")]
        elif f == Function.ORMQR:
            out = [(m if self.side == SIDE_LEFT else n, k, self.lda, "A"), (m, n, self.ldb, "C")]
        else:  # square: getrs, potrf, potrs, their batches, the eigensolvers
            out = [(n, n, self.lda, "A")]
        if f in SOLVES:
            out.append((n, self.nrhs, self.ldb, "B"))
        out += [(r, c, ld, name) for r, c, ld, name in self._singular_vectors()]
        return out

    def _singular_vectors(self) -> list[tuple[int, int, int, str]]:
        f, m, n, mn = self.function.base, self.m, self.n, self.min_mn
        out = []
        if f == Function.GESVD:
            ju, jv = chr(self.jobu), chr(self.jobvt)
            if ju in "AS":
                out.append((m, m if ju == "A" else mn, self.ldu, "U"))
            if jv in "AS":
                out.append((n if jv == "A" else mn, n, self.ldv, "VT"))
        elif f in (Function.GESVDJ, Function.GESVDJ_BATCHED) and self.jobz:
            econ = self.econ and f == Function.GESVDJ
            out += [(m, mn if econ else m, self.ldu, "U"), (n, mn if econ else n, self.ldv, "V")]
        return out

    def work_bytes(self, required: int) -> int:
        """The device workspace in bytes this call may use: what the caller passed (classic: elements), which
        must be at least what the library asks for (`required`, in the same unit)."""
        if self.function in NO_WORKSPACE:
            return 0
        given = self.work_size if self.function.base != Function.GETRF or self.function.x_api else required
        if given < required:
            raise CudaError(Status.INVALID_VALUE, f"{self.function.name}: workspace of {given} "
                            f"{'bytes' if self.function.x_api else 'elements'}, the library needs {required}")
        return given if self.function.x_api else given * self.esize

    def array_ranges(self, a_pointers, b_pointers) -> list[tuple[int, int]]:
        """(pointer, bytes) of every matrix the pointer arrays name (potrfBatched, potrsBatched)."""
        (_, _, lda, _), *rest = self._matrices()
        out = [(p, _extent(self.n, self.n, lda, self.esize)) for p in a_pointers]
        if rest:
            (rows, cols, ldb, _), = rest
            out += [(p, _extent(rows, cols, ldb, self.esize)) for p in b_pointers]
        return [x for x in out if x[1]]

    def ranges(self, required_work: int) -> list[tuple[int, int]]:
        """(pointer, bytes) of everything the routine reads or writes, given the library's workspace need."""
        f, e, r, mn = self.function.base, self.esize, self.rsize, self.min_mn
        batch = self.batch if f in BATCHED or f in POINTER_ARRAYS else 1
        if f in POINTER_ARRAYS:  # the arrays themselves here; what they name: array_ranges
            if not self.info:
                raise CudaError(Status.INVALID_VALUE, f"{self.function.name}: no info array")
            arrays = [(self.a, 8 * batch)] + ([(self.b, 8 * batch)] if f == Function.POTRS_BATCHED else [])
            return arrays + [(self.info, 4 * batch if f == Function.POTRF_BATCHED else 4)]
        out = []
        for rows, cols, ld, name in self._matrices():
            ptr = {"A": self.a, "B": self.b, "C": self.b, "U": self.u, "VT": self.v, "V": self.v}[name]
            out.append((ptr, _extent(rows, cols, ld, e, batch, ld * cols)))
        if f == Function.GETRF and self.ipiv:
            out.append((self.ipiv, mn * self.ipiv_size))
        if f == Function.GETRS:
            out.append((self.ipiv, self.n * self.ipiv_size))
        if f in (Function.GEQRF, Function.ORGQR, Function.ORMQR):
            out.append((self.tau, (mn if f == Function.GEQRF else self.k) * e))
        if f in EIGEN:
            out.append((self.w, self.n * r * batch))
        if f in (Function.GESVD, Function.GESVDJ, Function.GESVDJ_BATCHED):
            out.append((self.w, mn * r * batch))
        if f == Function.GESVD and self.rwork:
            out.append((self.rwork, max(mn - 1, 0) * r))
        if not self.info:
            raise CudaError(Status.INVALID_VALUE, f"{self.function.name}: no info array")
        out.append((self.info, 4 * batch))
        work = self.work_bytes(required_work)
        if work:
            out.append((self.work, work))
        return [x for x in out if x[1]]
