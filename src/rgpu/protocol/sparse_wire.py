"""The server's view of cuSPARSE requests (SPARSE_BUFFER_SIZE, SPARSE_RUN): the operation with its sparse
matrix A and dense operands B and C decoded from fixed fields, validated the way cuSPARSE validates them, and
the device ranges each one spans, so a session's SpMM reads and writes only its own memory.

What the ranges cannot cover: the *contents* of A's index arrays. cuSPARSE follows them without checking, so an
out-of-range index makes it read B (or, for COO, write C) outside the operand -- within the session's worker on
the GPU, the malicious-kernel case of SECURITY.md. The fake backend checks every index."""

from __future__ import annotations

import enum
import struct

import attrs

from rgpu.errors import CudaError, Status
from rgpu.protocol import blas_wire


class Function(enum.IntEnum):
    SPMV = 1
    SPMM = 2
    XCOO2CSR = 3


FORMAT_CSR, FORMAT_CSC, FORMAT_COO = 1, 2, 3
INDEX_SIZES = {1: 2, 2: 4, 3: 8}  # cusparseIndexType_t: 16U, 32I, 64I
ORDER_COL, ORDER_ROW = 1, 2
OP_N, OP_T, OP_C = 0, 1, 2
POINTER_MODE_DEVICE = 1
INDEX_32I = 2
MAX_BATCH = 1 << 20
MAX_DIMENSION = 1 << 40  # rows, columns, non-zeros, leading dimensions: products stay far inside u64


def _array(count: int, esize: int, batch: int = 1, stride: int = 0) -> int:
    """Bytes of `batch` arrays of `count` elements, `stride` elements apart."""
    if count <= 0:
        return 0
    if stride < 0:
        raise CudaError(Status.INVALID_VALUE, "a negative batch stride")
    return ((batch - 1) * stride + count) * esize


@attrs.frozen(slots=True)
class Sparse:
    """A sparse matrix descriptor: `offsets` are CSR row offsets, CSC column offsets or COO row indices;
    `indices` CSR column indices, CSC row indices or COO column indices."""

    format: int
    rows: int
    cols: int
    nnz: int
    offsets: int
    indices: int
    values: int
    offsets_type: int
    indices_type: int
    base: int
    value_type: int
    batch: int
    offsets_stride: int
    values_stride: int

    def validate(self) -> None:
        if self.format not in (FORMAT_CSR, FORMAT_CSC, FORMAT_COO):
            raise CudaError(Status.NOT_SUPPORTED, f"cuSPARSE sparse format {self.format} (CSR, CSC and COO only)")
        if min(self.rows, self.cols, self.nnz, self.offsets_stride, self.values_stride) < 0 or \
                max(self.rows, self.cols, self.nnz, self.offsets_stride, self.values_stride) > MAX_DIMENSION:
            raise CudaError(Status.INVALID_VALUE, "sparse matrix: a negative or too large size or stride")
        if not 1 <= self.batch <= MAX_BATCH or self.base not in (0, 1):
            raise CudaError(Status.INVALID_VALUE, f"sparse matrix: batch {self.batch}, index base {self.base}")
        if self.offsets_type not in INDEX_SIZES or self.indices_type not in INDEX_SIZES:
            raise CudaError(Status.INVALID_VALUE, f"index types {self.offsets_type}, {self.indices_type}")
        blas_wire.type_size(self.value_type)

    def ranges(self) -> list[tuple[int, int]]:
        isz, osz, vsz = INDEX_SIZES[self.indices_type], INDEX_SIZES[self.offsets_type], \
            blas_wire.type_size(self.value_type)
        if self.format == FORMAT_COO:
            offsets = _array(self.nnz, isz, self.batch, self.values_stride)
        else:
            count = (self.rows if self.format == FORMAT_CSR else self.cols) + 1
            offsets = _array(count, osz, self.batch, self.offsets_stride)
        return [(self.offsets, offsets), (self.indices, _array(self.nnz, isz, self.batch, self.values_stride)),
                (self.values, _array(self.nnz, vsz, self.batch, self.values_stride))]


@attrs.frozen(slots=True)
class Dense:
    """A dense matrix (a vector: cols 1, ld rows, column order)."""

    rows: int
    cols: int
    ld: int
    values: int
    type: int
    order: int
    batch: int
    stride: int

    def validate(self, name: str) -> None:
        sizes = (self.rows, self.cols, self.ld, self.stride)
        if min(sizes) < 0 or max(sizes) > MAX_DIMENSION or not 1 <= self.batch <= MAX_BATCH:
            raise CudaError(Status.INVALID_VALUE, f"dense {name}: {self.rows} x {self.cols}, batch {self.batch}")
        if self.order not in (ORDER_COL, ORDER_ROW):
            raise CudaError(Status.INVALID_VALUE, f"dense {name}: order {self.order}")
        inner = self.rows if self.order == ORDER_COL else self.cols
        if self.ld < max(inner, 1):
            raise CudaError(Status.INVALID_VALUE, f"dense {name}: leading dimension {self.ld} < {inner}")
        blas_wire.type_size(self.type)

    def nbytes(self) -> int:
        if self.rows == 0 or self.cols == 0:
            return 0
        outer, inner = (self.cols, self.rows) if self.order == ORDER_COL else (self.rows, self.cols)
        return ((outer - 1) * self.ld + inner + self.stride * (self.batch - 1)) * blas_wire.type_size(self.type)


_SPARSE_FIELDS = ("format", "rows", "cols", "nnz", "offsets", "indices", "values", "offsets_type", "indices_type",
                  "base", "value_type", "batch", "offsets_stride", "values_stride")


def _sparse(r, p: str) -> Sparse:
    return Sparse(*(getattr(r, f"{p}_{name}") for name in _SPARSE_FIELDS))


def _dense(r, p: str) -> Dense:
    return Dense(*(getattr(r, f"{p}_{name}") for name in ("rows", "cols", "ld", "values", "type", "order", "batch",
                                                         "stride")))


@attrs.frozen(slots=True)
class _Operation:
    """What every operation's request carries besides its operands."""

    op_a: int
    op_b: int
    compute_type: int
    alg: int
    pointer_mode: int
    alpha: bytes
    beta: bytes
    buffer: int

    @staticmethod
    def _common(r) -> dict:
        return {"op_a": r.op_a, "op_b": r.op_b, "compute_type": r.compute_type, "alg": r.alg,
                "pointer_mode": r.pointer_mode, "alpha": bytes(r.alpha), "beta": bytes(r.beta), "buffer": r.buffer}

    @property
    def scalar_size(self) -> int:
        return blas_wire.type_size(self.compute_type)

    def scalars(self) -> tuple[int, int]:
        """Device pointer mode: the device addresses of alpha and beta."""
        return struct.unpack_from("<Q", self.alpha)[0], struct.unpack_from("<Q", self.beta)[0]

    def scalar_ranges(self) -> list[tuple[int, int]]:
        return [(p, self.scalar_size) for p in self.scalars()] if self.pointer_mode == POINTER_MODE_DEVICE else []


@attrs.frozen(slots=True)
class SparseOp(_Operation):
    function: Function
    a: Sparse
    b: Dense
    c: Dense

    @classmethod
    def from_request(cls, r) -> SparseOp:
        try:
            function = Function(r.function)
        except ValueError:
            raise CudaError(Status.NOT_SUPPORTED, f"cuSPARSE operation {r.function}") from None
        op = cls(**cls._common(r), function=function, a=_sparse(r, "a"), b=_dense(r, "b"), c=_dense(r, "c"))
        op.validate()
        return op

    def validate(self) -> None:
        a = self.a
        if self.function == Function.XCOO2CSR:
            if not (0 <= a.nnz <= MAX_DIMENSION and 0 <= a.rows <= MAX_DIMENSION) or a.base not in (0, 1):
                raise CudaError(Status.INVALID_VALUE, f"coo2csr: nnz {a.nnz}, m {a.rows}, base {a.base}")
            return
        a.validate()
        self.b.validate("B")
        self.c.validate("C")
        if self.op_a not in (OP_N, OP_T, OP_C) or self.op_b not in (OP_N, OP_T, OP_C):
            raise CudaError(Status.INVALID_VALUE, f"operations {self.op_a}, {self.op_b}")
        blas_wire.type_size(self.compute_type)
        m, k = (a.rows, a.cols) if self.op_a == OP_N else (a.cols, a.rows)
        b, c = self.b, self.c
        if self.function == Function.SPMV:
            shapes_ok = b.rows == k and c.rows == m and b.cols == c.cols == 1
        else:
            kb, n = (b.rows, b.cols) if self.op_b == OP_N else (b.cols, b.rows)
            shapes_ok = kb == k and (c.rows, c.cols) == (m, n)
        if not shapes_ok:
            raise CudaError(Status.INVALID_VALUE, f"{self.function.name}: op(A) {m}x{k}, B {b.rows}x{b.cols}, "
                            f"C {c.rows}x{c.cols}")

    def ranges(self, required_buffer: int) -> list[tuple[int, int]]:
        """(pointer, bytes) of everything the operation reads or writes; the external buffer must hold what the
        library needs (`required_buffer`: cuSPARSE's API passes the buffer without a size)."""
        if self.function == Function.XCOO2CSR:
            out = [(self.a.offsets, 4 * self.a.nnz), (self.c.values, 4 * (self.a.rows + 1))]
            return [r for r in out if r[1]]
        out = self.a.ranges() + [(self.b.values, self.b.nbytes()), (self.c.values, self.c.nbytes()),
                                 (self.buffer, required_buffer)] + self.scalar_ranges()
        return [r for r in out if r[1]]


class Phase(enum.IntEnum):
    WORK_ESTIMATION = 1
    COMPUTE = 2
    COPY = 3


@attrs.frozen(slots=True)
class SpGemm(_Operation):
    """One phase of C = alpha op(A) op(B), all three CSR (what cuSPARSE's SpGEMM computes)."""

    phase: Phase
    buffer_size: int
    a: Sparse
    b: Sparse
    c: Sparse

    @classmethod
    def from_request(cls, r) -> SpGemm:
        try:
            phase = Phase(r.phase)
        except ValueError:
            raise CudaError(Status.INVALID_VALUE, f"SpGEMM phase {r.phase}") from None
        g = cls(**cls._common(r), phase=phase, buffer_size=r.buffer_size, a=_sparse(r, "a"), b=_sparse(r, "b"),
                c=_sparse(r, "c"))
        g.validate()
        return g

    def validate(self) -> None:
        for m in (self.a, self.b, self.c):
            m.validate()
            if m.format != FORMAT_CSR or m.batch != 1:
                raise CudaError(Status.NOT_SUPPORTED, "SpGEMM: CSR matrices, not batched, only")
        if self.op_a != OP_N or self.op_b != OP_N:
            raise CudaError(Status.NOT_SUPPORTED, "SpGEMM: non-transposed operands only")
        if self.buffer_size < 0:
            raise CudaError(Status.INVALID_VALUE, "SpGEMM: a negative buffer size")
        if (self.a.cols, self.a.rows, self.b.cols) != (self.b.rows, self.c.rows, self.c.cols):
            raise CudaError(Status.INVALID_VALUE, f"SpGEMM: A {self.a.rows}x{self.a.cols}, B {self.b.rows}x"
                            f"{self.b.cols}, C {self.c.rows}x{self.c.cols}")
        blas_wire.type_size(self.compute_type)

    def ranges(self, required_buffer: int, c_nnz: int) -> list[tuple[int, int]]:
        """(pointer, bytes) this phase may touch: A and B, the phase's buffer (at least what the library needs),
        and in the copy phase C's arrays for its `c_nnz` non-zeros."""
        out = self.a.ranges() + self.b.ranges()
        if self.phase == Phase.COPY:
            out += attrs.evolve(self.c, nnz=c_nnz).ranges()
        elif self.buffer:
            if self.buffer_size < required_buffer:
                raise CudaError(Status.INVALID_VALUE, f"SpGEMM {self.phase.name}: buffer of {self.buffer_size} "
                                f"bytes, the library needs {required_buffer}")
            out.append((self.buffer, self.buffer_size))
        return [r for r in out + self.scalar_ranges() if r[1]]
