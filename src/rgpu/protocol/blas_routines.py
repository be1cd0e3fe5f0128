"""cuBLAS Level 2/3 routines (BLAS_ROUTINE) and batched LU solves (BLAS_GETRS_BATCHED) as the server sees them:
decoded, validated, and with every device range each one reads or writes, so a session's call can only touch its
own memory (docs/protocol.md, "Libraries").

BLAS_ROUTINE carries every routine in one request shape: the matrices in a, b, c with their leading dimensions;
a routine's vectors x and y in b and c, their increments in ldb and ldc."""

from __future__ import annotations

import enum
import struct

import attrs

from rgpu.errors import CudaError, Status
from rgpu.protocol.blas_wire import OP_C, OP_N, OP_T, POINTER_MODE_DEVICE, extent, type_size, vector_extent

R_32F, R_64F, C_32F, C_64F = 0, 1, 4, 5
TYPES = (R_32F, R_64F, C_32F, C_64F)
LETTERS = {R_32F: "S", R_64F: "D", C_32F: "C", C_64F: "Z"}
SIDE_LEFT, SIDE_RIGHT = 0, 1
FILL_LOWER, FILL_UPPER = 0, 1
DIAG_NON_UNIT, DIAG_UNIT = 0, 1
INT_MAX = 2**31 - 1


class Function(enum.IntEnum):
    GEMM = 0
    GEMM3M = 1
    GEMV = 2
    GER = 3
    GERU = 4
    GERC = 5
    TRSV = 6
    TRMV = 7
    TRSM = 8
    TRMM = 9
    SYRK = 10
    HERK = 11
    SYMM = 12


COMPLEX_ONLY = {Function.GEMM3M, Function.GERU, Function.GERC, Function.HERK}
REAL_ONLY = {Function.GER}
WITHOUT_ALPHA = {Function.TRSV, Function.TRMV}
WITH_BETA = {Function.GEMM, Function.GEMM3M, Function.GEMV, Function.SYRK, Function.HERK, Function.SYMM}
NAMES = {Function.GEMM: "gemm_v2", Function.GEMM3M: "gemm3m", Function.GEMV: "gemv_v2", Function.GER: "ger_v2",
         Function.GERU: "geru_v2", Function.GERC: "gerc_v2", Function.TRSV: "trsv_v2", Function.TRMV: "trmv_v2",
         Function.TRSM: "trsm_v2", Function.TRMM: "trmm_v2", Function.SYRK: "syrk_v2", Function.HERK: "herk_v2",
         Function.SYMM: "symm_v2"}


def is_complex(t: int) -> bool:
    return t in (C_32F, C_64F)


def _operation(value: int) -> int:
    if value not in (OP_N, OP_T, OP_C):
        raise CudaError(Status.INVALID_VALUE, f"cuBLAS operation {value}")
    return value


def _int32(value: int) -> int:
    """A u32 from the wire as the C int it was."""
    return value - 2**32 if value > INT_MAX else value


def _flag(value: int, what: str) -> int:
    if value not in (0, 1):
        raise CudaError(Status.INVALID_VALUE, f"cuBLAS {what} {value}")
    return value


@attrs.frozen(slots=True)
class Routine:
    function: Function
    type: int
    wide: bool  # the program called the _64 form
    side: int
    uplo: int
    transa: int
    transb: int
    diag: int
    m: int
    n: int
    k: int
    pointer_mode: int
    math_mode: int
    alpha: bytes
    beta: bytes
    a: int
    lda: int
    b: int
    ldb: int
    c: int
    ldc: int
    workspace: int
    workspace_size: int

    @classmethod
    def from_request(cls, r) -> Routine:
        """From a decoded BLAS_ROUTINE request (ops.BLAS_ROUTINE.decode)."""
        try:
            function = Function(r.function)
        except ValueError:
            raise CudaError(Status.NOT_SUPPORTED, f"cuBLAS routine {r.function}") from None
        if r.type not in TYPES or (function in COMPLEX_ONLY and not is_complex(r.type)) or \
                (function in REAL_ONLY and is_complex(r.type)):
            raise CudaError(Status.NOT_SUPPORTED, f"cuBLAS {NAMES[function]} on data type {r.type}")
        if min(r.m, r.n, r.k) < 0 or r.pointer_mode > 1:
            raise CudaError(Status.INVALID_VALUE, f"cuBLAS {NAMES[function]}: m {r.m}, n {r.n}, k {r.k}, pointer "
                                                  f"mode {r.pointer_mode}")
        if not (r.wide or all(-INT_MAX - 1 <= v <= INT_MAX for v in (r.m, r.n, r.k, r.lda, r.ldb, r.ldc))):
            raise CudaError(Status.INVALID_VALUE, f"cuBLAS {NAMES[function]}: a count past the 32-bit API's range")
        # NVIDIA's complex gemv takes any operation (measured on the H200: 7 returns SUCCESS)
        transa = _int32(r.transa) if function == Function.GEMV else _operation(r.transa)
        return cls(function, r.type, bool(r.wide), _flag(r.side, "side"), _flag(r.uplo, "fill mode"),
                   transa, _operation(r.transb), _flag(r.diag, "diagonal type"), r.m, r.n, r.k,
                   r.pointer_mode, r.math_mode, r.alpha, r.beta, r.a, r.lda, r.b, r.ldb, r.c, r.ldc, r.workspace,
                   r.workspace_size)

    @property
    def name(self) -> str:
        """cuBLAS's name for the call (cublasZtrsm_v2, cublasCgemm3m_64)."""
        return f"cublas{LETTERS[self.type]}{NAMES[self.function]}{'_64' if self.wide else ''}"

    @property
    def element_size(self) -> int:
        return type_size(self.type)

    @property
    def scalar_size(self) -> int:
        """Bytes of alpha and beta: herk's are real."""
        return self.element_size // 2 if self.function == Function.HERK else self.element_size

    @property
    def order(self) -> int:
        """The order of a triangular or symmetric A: m on the left, n on the right."""
        return self.m if self.side == SIDE_LEFT else self.n

    def _matrix(self, ptr: int, rows: int, cols: int, ld: int) -> tuple[int, int]:
        return ptr, extent(rows, cols, ld, self.element_size)

    def _either_way(self, ptr: int, rows: int, cols: int, ld: int) -> tuple[int, int]:
        """A (rows, cols) matrix whose routine may read it as (cols, rows) instead, over the same leading dimension
        (an operation NVIDIA accepts but does not document): the span both readings cover."""
        ptr, size = self._matrix(ptr, rows, cols, ld)  # ld >= rows >= 1 once size is not 0
        return ptr, max(size, ((rows - 1) * ld + cols) * self.element_size if size else 0)

    def gemv_rows(self) -> tuple[int, int]:
        """The elements of gemv's x and y: n and m for N, m and n for T and C, the larger of the two for any other
        operation (which NVIDIA's cuBLAS accepts), so that either reading stays in the ranges checked."""
        m, n = self.m, self.n
        if self.transa == OP_N:
            return n, m
        return (m, n) if self.transa in (OP_T, OP_C) else (max(m, n), max(m, n))

    def _vector(self, ptr: int, n: int, inc: int) -> tuple[int, int]:
        if n > 0 and inc == 0:
            raise CudaError(Status.INVALID_VALUE, f"{self.name}: a vector increment of 0")
        return ptr, vector_extent(n, inc, self.element_size)

    def _gemv_x(self, n: int) -> tuple[int, int]:
        """A real gemv's x may have increment 0, which NVIDIA's cuBLAS accepts (measured on the H200 for Dgemv; its
        reading of it is not documented): the range checked is n elements side by side, which covers both x[0]
        alone and a unit stride."""
        if self.ldb == 0 and not is_complex(self.type):
            return self.b, vector_extent(n, 1, self.element_size)
        return self._vector(self.b, n, self.ldb)

    def operand_ranges(self) -> list[tuple[int, int]]:
        """(pointer, bytes) of the matrices and vectors the routine reads or writes."""
        f, m, n, k = self.function, self.m, self.n, self.k
        if f in (Function.GEMM, Function.GEMM3M):
            if not (m and n):
                return []
            out = [self._matrix(self.c, m, n, self.ldc)]
            if k:
                out.append(self._matrix(self.a, *((m, k) if self.transa == OP_N else (k, m)), self.lda))
                out.append(self._matrix(self.b, *((k, n) if self.transb == OP_N else (n, k)), self.ldb))
            return out
        if f == Function.GEMV:
            if not (m and n):
                return []
            rows_x, rows_y = self.gemv_rows()
            return [self._matrix(self.a, m, n, self.lda), self._gemv_x(rows_x),
                    self._vector(self.c, rows_y, self.ldc)]
        if f in (Function.GER, Function.GERU, Function.GERC):
            if not (m and n):
                return []
            return [self._vector(self.b, m, self.ldb), self._vector(self.c, n, self.ldc),
                    self._matrix(self.a, m, n, self.lda)]
        if f in (Function.TRSV, Function.TRMV):
            return [self._matrix(self.a, n, n, self.lda), self._vector(self.b, n, self.ldb)] if n else []
        if f in (Function.TRSM, Function.TRMM, Function.SYMM):
            if not (m and n):
                return []
            out = [self._matrix(self.a, self.order, self.order, self.lda), self._matrix(self.b, m, n, self.ldb)]
            if f != Function.TRSM:
                out.append(self._matrix(self.c, m, n, self.ldc))
            return out
        # syrk, herk: C (n x n) = alpha op(A) op(A)^T/H + beta C, op(A) n x k
        if not n:
            return []
        out = [self._matrix(self.c, n, n, self.ldc)]
        if k and self.transa == OP_N:
            out.append(self._matrix(self.a, n, k, self.lda))
        elif k:  # herk's T, which NVIDIA accepts: read as N or as C, both are checked
            read = self._either_way if f == Function.HERK and self.transa == OP_T else self._matrix
            out.append(read(self.a, k, n, self.lda))
        return out

    def ranges(self) -> list[tuple[int, int]]:
        out = self.operand_ranges()
        if self.pointer_mode == POINTER_MODE_DEVICE:
            if self.function not in WITHOUT_ALPHA:
                out.append((struct.unpack_from("<Q", self.alpha)[0], self.scalar_size))
            if self.function in WITH_BETA:
                out.append((struct.unpack_from("<Q", self.beta)[0], self.scalar_size))
        if self.workspace_size:
            out.append((self.workspace, self.workspace_size))
        return [r for r in out if r[1]]


@attrs.frozen(slots=True)
class GetrsBatched:
    """getrsBatched: op(A_i) X_i = B_i from getrf's factors of each A_i (and its pivots), X_i over B_i; a and b
    device arrays of `batch` matrix pointers."""

    trans: int
    type: int
    n: int
    nrhs: int
    a: int
    lda: int
    pivots: int
    b: int
    ldb: int
    batch: int

    @classmethod
    def from_request(cls, r) -> GetrsBatched:
        if r.type not in TYPES:
            raise CudaError(Status.NOT_SUPPORTED, f"cublas<t>getrsBatched on data type {r.type}")
        if min(r.n, r.nrhs, r.batch) < 0 or max(r.n, r.nrhs, r.lda, r.ldb, r.batch) > INT_MAX:
            raise CudaError(Status.INVALID_VALUE, f"cublas<t>getrsBatched n {r.n}, nrhs {r.nrhs}, lda {r.lda}, ldb "
                                                  f"{r.ldb}, batch {r.batch}")  # its API is 32-bit
        return cls(_operation(r.trans), r.type, r.n, r.nrhs, r.a, r.lda, r.pivots, r.b, r.ldb, r.batch)

    @property
    def name(self) -> str:
        return f"cublas{LETTERS[self.type]}getrsBatched"

    @property
    def arrays(self) -> tuple[int, ...]:
        return (self.a, self.b)

    def ranges(self) -> list[tuple[int, int]]:
        return [(self.pivots, 4 * self.n * self.batch)] if self.pivots else []

    def matrix_ranges(self, pointers: tuple[int, ...]) -> list[tuple[int, int]]:
        size = type_size(self.type)
        pa, pb = pointers
        return [(pa, extent(self.n, self.n, self.lda, size)), (pb, extent(self.n, self.nrhs, self.ldb, size))]
