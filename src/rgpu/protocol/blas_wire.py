"""The server's view of cuBLAS/cuBLASLt requests: decoded, validated, and with the device ranges each one
touches, so a session's GEMM can only read and write its own memory (docs/protocol.md, "Libraries")."""

from __future__ import annotations

import struct

import attrs

from rgpu.errors import CudaError, Status

# cudaDataType -> element size; the types the fake backend can also compute with are in FAKE_DTYPES.
TYPE_SIZES = {0: 4, 1: 8, 2: 2, 3: 1, 4: 8, 5: 16, 6: 4, 8: 1, 10: 4, 14: 2, 28: 1, 29: 1}
OP_N, OP_T, OP_C = 0, 1, 2
POINTER_MODE_DEVICE = 1
COMPUTE_16F, COMPUTE_64F = (64, 65), (70, 71)

# cuBLASLt matmul-description attributes a client may set; pointer-valued ones are range-checked below.
MATMUL_ATTRS = {0: "COMPUTE_TYPE", 1: "SCALE_TYPE", 2: "POINTER_MODE", 3: "TRANSA", 4: "TRANSB", 5: "TRANSC",
                6: "FILL_MODE", 7: "EPILOGUE", 8: "BIAS_POINTER", 10: "BIAS_BATCH_STRIDE", 15: "SM_COUNT_TARGET",
                17: "A_SCALE_POINTER", 18: "B_SCALE_POINTER", 19: "C_SCALE_POINTER", 20: "D_SCALE_POINTER",
                21: "AMAX_D_POINTER", 25: "FAST_ACCUM", 26: "BIAS_DATA_TYPE", 31: "A_SCALE_MODE",
                32: "B_SCALE_MODE", 33: "C_SCALE_MODE", 34: "D_SCALE_MODE"}
# Scale and amax pointers name one fp32 scalar each while every scale mode is the default (scalar fp32); the
# block-scaling modes name tensors whose size depends on the mode, which rgpu does not compute yet.
SCALAR_POINTERS = (17, 18, 19, 20, 21)
SCALE_MODES = (31, 32, 33, 34)
ORDER_ROW = 1  # CUBLASLT_ORDER_ROW (XLA's layouts); the tiled orders (COL32, ...) are not supported
LAYOUT_ATTRS = {0: "TYPE", 1: "ORDER", 2: "ROWS", 3: "COLS", 4: "LD", 5: "BATCH_COUNT", 6: "STRIDED_BATCH_OFFSET"}
EPILOGUES = {1: "DEFAULT", 2: "RELU", 4: "BIAS", 6: "RELU_BIAS", 32: "GELU", 36: "GELU_BIAS"}


def type_size(t: int) -> int:
    size = TYPE_SIZES.get(t)
    if size is None:
        raise CudaError(Status.NOT_SUPPORTED, f"data type {t}")
    return size


def scalar_size(compute: int) -> int:
    return 2 if compute in COMPUTE_16F else 8 if compute in COMPUTE_64F else 4


def extent(rows: int, cols: int, ld: int, esize: int, batch: int = 1, stride: int = 0) -> int:
    """Bytes from a column-major matrix's first element to one past its last, over the whole batch."""
    if rows <= 0 or cols <= 0 or batch <= 0:
        return 0
    if ld < rows or stride < 0:
        raise CudaError(Status.INVALID_VALUE, f"leading dimension {ld} < {rows} rows, or a negative stride")
    return ((cols - 1) * ld + rows + stride * (batch - 1)) * esize


@attrs.frozen(slots=True)
class Operand:
    ptr: int
    type: int
    ld: int
    stride: int


@attrs.frozen(slots=True)
class Gemm:
    transa: int
    transb: int
    m: int
    n: int
    k: int
    a: Operand
    b: Operand
    c: Operand
    batch: int
    compute: int
    algo: int
    pointer_mode: int
    math_mode: int
    alpha: bytes
    beta: bytes
    workspace: int
    workspace_size: int

    @classmethod
    def from_request(cls, r) -> Gemm:
        """From a decoded BLAS_GEMM request (ops.BLAS_GEMM.decode)."""
        if r.transa not in (OP_N, OP_T, OP_C) or r.transb not in (OP_N, OP_T, OP_C) or min(r.m, r.n, r.k, r.batch) < 0:
            raise CudaError(Status.INVALID_VALUE,
                            f"gemm shape or operation ({r.transa}, {r.transb}, {r.m}, {r.n}, {r.k}, {r.batch})")
        return cls(r.transa, r.transb, r.m, r.n, r.k, Operand(r.a, r.a_type, r.lda, r.stride_a),
                   Operand(r.b, r.b_type, r.ldb, r.stride_b), Operand(r.c, r.c_type, r.ldc, r.stride_c), r.batch,
                   r.compute_type, r.algo, r.pointer_mode, r.math_mode, r.alpha, r.beta, r.workspace, r.workspace_size)

    def ranges(self) -> list[tuple[int, int]]:
        """(pointer, bytes) of everything the GEMM reads or writes."""
        ar, ac = (self.m, self.k) if self.transa == OP_N else (self.k, self.m)
        br, bc = (self.k, self.n) if self.transb == OP_N else (self.n, self.k)
        out = [(self.c.ptr, extent(self.m, self.n, self.c.ld, type_size(self.c.type), self.batch, self.c.stride))]
        if self.k:
            out.append((self.a.ptr, extent(ar, ac, self.a.ld, type_size(self.a.type), self.batch, self.a.stride)))
            out.append((self.b.ptr, extent(br, bc, self.b.ld, type_size(self.b.type), self.batch, self.b.stride)))
        if self.pointer_mode == POINTER_MODE_DEVICE:
            size = scalar_size(self.compute)
            out += [(struct.unpack_from("<Q", self.alpha)[0], size), (struct.unpack_from("<Q", self.beta)[0], size)]
        if self.workspace_size:
            out.append((self.workspace, self.workspace_size))
        return [r for r in out if r[1]]


# -- cuBLASLt descriptors ------------------------------------------------------------------------------------------
@attrs.frozen(slots=True)
class Layout:
    type: int
    rows: int
    cols: int
    ld: int
    attrs: dict

    @property
    def batch(self) -> int:
        return struct.unpack("<i", self.attrs[5][:4])[0] if 5 in self.attrs else 1

    @property
    def stride(self) -> int:
        return struct.unpack("<q", self.attrs[6][:8])[0] if 6 in self.attrs else 0

    @property
    def row_major(self) -> bool:
        return 1 in self.attrs and int.from_bytes(self.attrs[1][:4], "little") == ORDER_ROW

    def nbytes(self) -> int:
        # A row-major rows x cols matrix lies in memory as a column-major cols x rows one.
        rows, cols = (self.cols, self.rows) if self.row_major else (self.rows, self.cols)
        return extent(rows, cols, self.ld, type_size(self.type), self.batch, self.stride)


@attrs.frozen(slots=True)
class LtOperation:
    compute: int
    scale: int
    attrs: dict  # matmul description attributes: id -> raw bytes
    a: Layout
    b: Layout
    c: Layout
    d: Layout
    preference: dict | None = None
    algo: bytes | None = None

    def key(self) -> tuple:
        """Everything the server's descriptors are made of (not the algorithm, which travels with a matmul)."""
        def layout(lay: Layout) -> tuple:
            return lay.type, lay.rows, lay.cols, lay.ld, tuple(sorted(lay.attrs.items()))

        return (self.compute, self.scale, tuple(sorted(self.attrs.items())), layout(self.a), layout(self.b),
                layout(self.c), layout(self.d),
                None if self.preference is None else tuple(sorted(self.preference.items())))

    def int_attr(self, attr: int, default: int = 0) -> int:
        raw = self.attrs.get(attr)
        return int.from_bytes(raw[:4], "little", signed=True) if raw else default

    @property
    def epilogue(self) -> int:
        return self.int_attr(7, 1)

    @property
    def bias(self) -> int:
        raw = self.attrs.get(8)
        return struct.unpack("<Q", raw[:8])[0] if raw else 0

    def ranges(self, a: int, b: int, c: int, d: int) -> list[tuple[int, int]]:
        out = [(a, self.a.nbytes()), (b, self.b.nbytes()), (c, self.c.nbytes()), (d, self.d.nbytes())]
        if self.bias:
            out.append((self.bias, self.d.rows * type_size(self.int_attr(26, self.d.type))))
        out.extend((pointer, 4) for pointer in self.scalar_pointers())
        return [r for r in out if r[1]]

    def scalar_pointers(self) -> list[int]:
        return [p for p in (struct.unpack("<Q", self.attrs[a][:8].ljust(8, b"\0"))[0]
                            for a in SCALAR_POINTERS if a in self.attrs) if p]


def _records(bulk: bytes):
    view, pos = memoryview(bulk), 0

    def take(fmt: str):
        nonlocal pos
        size = struct.calcsize("<" + fmt)
        if pos + size > len(view):
            raise CudaError(Status.INVALID_VALUE, "truncated cuBLASLt descriptor")
        values = struct.unpack_from("<" + fmt, view, pos)
        pos += size
        return values

    while pos < len(view):
        (tag,) = take("B")
        if tag == 7:
            (algo,) = take("64s")
            yield tag, (), {}, algo
            continue
        fixed = take("II") if tag == 1 else take("IQQq") if 2 <= tag <= 5 else () if tag == 6 else None
        if fixed is None:
            raise CudaError(Status.INVALID_VALUE, f"unknown cuBLASLt descriptor tag {tag}")
        (count,) = take("H")
        attributes = {}
        for _ in range(count):
            attr, size = take("II")
            if size > 64:
                raise CudaError(Status.INVALID_VALUE, f"attribute {attr} of {size} bytes")
            (attributes[attr],) = take(f"{size}s")
        yield tag, fixed, attributes, None


def parse_operation(bulk: bytes) -> LtOperation:
    found: dict[int, tuple] = {}
    for tag, fixed, attributes, algo in _records(bytes(bulk)):
        found[tag] = (fixed, attributes, algo)
    if not all(t in found for t in (1, 2, 3, 4, 5)):
        raise CudaError(Status.INVALID_VALUE, "a matmul needs its description and four layouts")
    (compute, scale), op_attrs, _ = found[1]
    for attr in op_attrs:
        if attr not in MATMUL_ATTRS:
            raise CudaError(Status.NOT_SUPPORTED, f"cuBLASLt matmul attribute {attr} is not supported by rgpu")
    if int.from_bytes(op_attrs.get(2, b"\0")[:4], "little"):
        raise CudaError(Status.NOT_SUPPORTED, "cuBLASLt device pointer mode")
    for attr in SCALE_MODES:
        if int.from_bytes(op_attrs.get(attr, b"\0")[:4], "little"):
            raise CudaError(Status.NOT_SUPPORTED, f"cuBLASLt {MATMUL_ATTRS[attr]} other than scalar fp32")
    layouts = []
    for tag in (2, 3, 4, 5):
        (dtype, rows, cols, ld), la, _ = found[tag]
        for attr, raw in la.items():
            if attr not in LAYOUT_ATTRS or (attr == 1 and int.from_bytes(raw[:4], "little") not in (0, ORDER_ROW)):
                raise CudaError(Status.NOT_SUPPORTED,
                                f"cuBLASLt layout attribute {attr} (only column- and row-major layouts)")
        layouts.append(Layout(dtype, rows, cols, ld, la))
    op = LtOperation(compute, scale, op_attrs, *layouts, preference=found.get(6, (None, None, None))[1],
                     algo=found.get(7, (None, None, None))[2])
    if op.epilogue not in EPILOGUES:
        raise CudaError(Status.NOT_SUPPORTED, f"cuBLASLt epilogue {op.epilogue} is not supported by rgpu")
    return op


# -- batched LU, inversion and triangular solves (BLAS_LU_BATCHED, BLAS_TRSM_BATCHED) -------------------------------
LU_TYPES = (0, 1, 4, 5)  # CUDA_R_32F, CUDA_R_64F, CUDA_C_32F, CUDA_C_64F: cuBLAS's S, D, C, Z
GETRF, GETRI, MATINV = 0, 1, 2
SIDE_LEFT, FILL_LOWER, DIAG_UNIT = 0, 0, 1


def _lu_type(t: int) -> int:
    if t not in LU_TYPES:
        raise CudaError(Status.NOT_SUPPORTED, f"batched LU/TRSM on data type {t}")
    return t


@attrs.frozen(slots=True)
class LuBatched:
    """getrfBatched (factor A in place, pivots and info out), getriBatched (C = inverse from A's factors) or
    matinvBatched (C = inverse of A); a and c are device arrays of `batch` matrix pointers."""

    which: int
    type: int
    n: int
    a: int
    lda: int
    pivots: int
    c: int
    ldc: int
    info: int
    batch: int

    @classmethod
    def from_request(cls, r) -> LuBatched:
        if r.which not in (GETRF, GETRI, MATINV) or r.n < 0 or r.batch < 0 or (r.which == MATINV and r.n > 32):
            raise CudaError(Status.INVALID_VALUE, f"batched LU operation {r.which}, n {r.n}, batch {r.batch}")
        if r.n and r.batch and (not r.info or (r.which != GETRF and not r.c)):
            raise CudaError(Status.INVALID_VALUE, "batched LU without an info array or an output array")
        return cls(r.which, _lu_type(r.type), r.n, r.a, r.lda, r.pivots, r.c if r.which != GETRF else 0,
                   r.ldc, r.info, r.batch)

    @property
    def arrays(self) -> tuple[int, ...]:
        """The device arrays of matrix pointers."""
        return (self.a,) if self.which == GETRF else (self.a, self.c)

    def ranges(self) -> list[tuple[int, int]]:
        """(pointer, bytes) of what is not behind the pointer arrays: the pivots and the info array."""
        out = [(self.info, 4 * self.batch)]
        if self.pivots and self.which != MATINV:
            out.append((self.pivots, 4 * self.n * self.batch))
        return out

    def matrix_ranges(self, pointers: tuple[int, ...]) -> list[tuple[int, int]]:
        """The matrices of one batch entry, given its pointers (one per array)."""
        size = type_size(self.type)
        lds = (self.lda,) if self.which == GETRF else (self.lda, self.ldc)
        return [(p, extent(self.n, self.n, ld, size)) for p, ld in zip(pointers, lds)]


@attrs.frozen(slots=True)
class TrsmBatched:
    """trsmBatched: op(A) X = alpha B (left) or X op(A) = alpha B (right), X over B; A triangular."""

    side: int
    uplo: int
    trans: int
    diag: int
    type: int
    m: int
    n: int
    pointer_mode: int
    alpha: bytes
    a: int
    lda: int
    b: int
    ldb: int
    batch: int

    @classmethod
    def from_request(cls, r) -> TrsmBatched:
        if (r.side > 1 or r.uplo > 1 or r.trans not in (OP_N, OP_T, OP_C) or r.diag > 1 or min(r.m, r.n, r.batch) < 0
                or r.pointer_mode > 1):
            raise CudaError(Status.INVALID_VALUE, f"batched TRSM ({r.side}, {r.uplo}, {r.trans}, {r.diag}, {r.m}, "
                                                  f"{r.n}, {r.batch})")
        return cls(r.side, r.uplo, r.trans, r.diag, _lu_type(r.type), r.m, r.n, r.pointer_mode, r.alpha, r.a, r.lda,
                   r.b, r.ldb, r.batch)

    @property
    def k(self) -> int:
        return self.m if self.side == SIDE_LEFT else self.n

    @property
    def arrays(self) -> tuple[int, ...]:
        return (self.a, self.b)

    def ranges(self) -> list[tuple[int, int]]:
        if self.pointer_mode == POINTER_MODE_DEVICE:
            return [(struct.unpack_from("<Q", self.alpha)[0], type_size(self.type))]
        return []

    def matrix_ranges(self, pointers: tuple[int, ...]) -> list[tuple[int, int]]:
        size = type_size(self.type)
        pa, pb = pointers
        return [(pa, extent(self.k, self.k, self.lda, size)), (pb, extent(self.m, self.n, self.ldb, size))]


# -- Level 1 (BLAS_LEVEL1, BLAS_LEVEL1_RESULT) ---------------------------------------------------------------------
AXPY, SCAL, COPY, SWAP, DOT, NRM2, ASUM, IAMAX, IAMIN, IAMAX64, IAMIN64 = range(11)
LEVEL1_NAMES = ("axpy", "scal", "copy", "swap", "dot", "nrm2", "asum", "amax", "amin", "amax", "amin")


def vector_extent(n: int, inc: int, esize: int) -> int:
    """Bytes a BLAS vector of n elements `inc` apart spans (a negative increment walks the same span backwards)."""
    return (1 + (n - 1) * abs(inc)) * esize if n > 0 else 0


@attrs.frozen(slots=True)
class Level1:
    func: int
    type: int
    n: int
    x: int
    incx: int
    y: int
    incy: int
    pointer_mode: int
    alpha: bytes
    result: int

    @classmethod
    def from_request(cls, r) -> Level1:
        if r.func > IAMIN64 or r.type not in (0, 1) or r.pointer_mode > 1:
            raise CudaError(Status.INVALID_VALUE, f"Level-1 function {r.func} on type {r.type}")
        return cls(r.func, r.type, r.n, r.x, r.incx, r.y, r.incy, r.pointer_mode, r.alpha, r.result)

    @property
    def name(self) -> str:
        """cuBLAS's name for the call, without its _v2/_64 suffix (cublasSaxpy, cublasIdamax)."""
        letter = "SD"[self.type]
        return f"cublasI{letter.lower()}" + LEVEL1_NAMES[self.func] if self.func >= IAMAX else \
            f"cublas{letter}{LEVEL1_NAMES[self.func]}"

    @property
    def reduction(self) -> bool:
        return self.func >= DOT

    @property
    def result_size(self) -> int:
        return 4 if self.func in (IAMAX, IAMIN) else 8 if self.func >= IAMAX else type_size(self.type)

    @property
    def touches_x(self) -> bool:
        """BLAS returns at once for these with a non-positive increment."""
        return self.n > 0 and (self.incx > 0 or self.func in (AXPY, COPY, SWAP, DOT))

    def ranges(self) -> list[tuple[int, int]]:
        size = type_size(self.type)
        out = []
        if self.touches_x:
            out.append((self.x, vector_extent(self.n, self.incx, size)))
            if self.func in (AXPY, COPY, SWAP, DOT):
                out.append((self.y, vector_extent(self.n, self.incy, size)))
        if self.pointer_mode == POINTER_MODE_DEVICE:
            if self.func in (AXPY, SCAL):
                out.append((struct.unpack_from("<Q", self.alpha)[0], size))
            if self.reduction:
                out.append((self.result, self.result_size))
        return out
