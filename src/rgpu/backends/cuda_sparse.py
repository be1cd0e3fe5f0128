"""cuSPARSE's generic API on the GPU through cffi (ABI mode). $RGPU_CUSPARSE names the library; otherwise the
nvidia-cusparse wheel on sys.path (as PyTorch installs it), then the loader's search for libcusparse.so.12.

The request's descriptors become real cuSPARSE descriptors for the one call and are destroyed after it (an
SpMM's preprocessing, kept in the descriptors by cuSPARSE, is therefore not carried over between calls). Every
choice the program made -- operations, compute type, algorithm, scalars, formats, index types, layouts, batches --
reaches cuSPARSE as the program gave it.

An execution's external buffer must hold what cuSPARSE asks for, so the server needs the size for every SPARSE_RUN;
the answer depends on the operation's description only, not on the data, so it is asked for once per description
and handle (`_buffer_sizes`), not on every run."""

from __future__ import annotations

import contextlib

import attrs
import cffi

from rgpu.backends.libcache import PerHandle
from rgpu.backends.nvlibs import LazyLibrary
from rgpu.errors import CudaError, Status
from rgpu.protocol.sparse_wire import FORMAT_COO, FORMAT_CSC, POINTER_MODE_DEVICE, Dense, Function, Phase, Sparse, \
    SparseOp, SpGemm

# Every declaration this module uses (tests/test_sparse.py checks them against cusparse.h).
DECLARATIONS = """
    int cusparseCreate(void **h);
    int cusparseDestroy(void *h);
    int cusparseSetStream(void *h, void *stream);
    int cusparseSetPointerMode(void *h, int mode);
    int cusparseCreateCsr(void **d, int64_t rows, int64_t cols, int64_t nnz, void *offsets, void *indices,
        void *values, int offsets_type, int indices_type, int base, int value_type);
    int cusparseCreateCsc(void **d, int64_t rows, int64_t cols, int64_t nnz, void *offsets, void *indices,
        void *values, int offsets_type, int indices_type, int base, int value_type);
    int cusparseCreateCoo(void **d, int64_t rows, int64_t cols, int64_t nnz, void *row_ind, void *col_ind,
        void *values, int index_type, int base, int value_type);
    int cusparseCsrSetStridedBatch(void *d, int batch, int64_t offsets_stride, int64_t values_stride);
    int cusparseCooSetStridedBatch(void *d, int batch, int64_t stride);
    int cusparseDestroySpMat(void *d);
    int cusparseCreateDnMat(void **d, int64_t rows, int64_t cols, int64_t ld, void *values, int type, int order);
    int cusparseDnMatSetStridedBatch(void *d, int batch, int64_t stride);
    int cusparseDestroyDnMat(void *d);
    int cusparseCreateDnVec(void **d, int64_t size, void *values, int type);
    int cusparseDestroyDnVec(void *d);
    int cusparseSpMV_bufferSize(void *h, int op, const void *alpha, void *a, void *x, const void *beta, void *y,
        int compute, int alg, size_t *size);
    int cusparseSpMV(void *h, int op, const void *alpha, void *a, void *x, const void *beta, void *y, int compute,
        int alg, void *buffer);
    int cusparseSpMM_bufferSize(void *h, int op_a, int op_b, const void *alpha, void *a, void *b, const void *beta,
        void *c, int compute, int alg, size_t *size);
    int cusparseSpMM(void *h, int op_a, int op_b, const void *alpha, void *a, void *b, const void *beta, void *c,
        int compute, int alg, void *buffer);
    int cusparseXcoo2csr(void *h, const int *coo_rows, int nnz, int m, int *csr_offsets, int base);
    int cusparseSpGEMM_createDescr(void **d);
    int cusparseSpGEMM_destroyDescr(void *d);
    int cusparseSpGEMM_workEstimation(void *h, int op_a, int op_b, const void *alpha, void *a, void *b,
        const void *beta, void *c, int compute, int alg, void *d, size_t *size, void *buffer);
    int cusparseSpGEMM_compute(void *h, int op_a, int op_b, const void *alpha, void *a, void *b, const void *beta,
        void *c, int compute, int alg, void *d, size_t *size, void *buffer);
    int cusparseSpGEMM_copy(void *h, int op_a, int op_b, const void *alpha, void *a, void *b, const void *beta,
        void *c, int compute, int alg, void *d);
    int cusparseSpMatGetSize(void *d, int64_t *rows, int64_t *cols, int64_t *nnz);
    int cusparseCsrSetPointers(void *d, void *offsets, void *indices, void *values);
"""
_ffi = cffi.FFI()
_ffi.cdef(DECLARATIONS)

_STATUS = {1: Status.NOT_INITIALIZED, 2: Status.OUT_OF_MEMORY, 3: Status.INVALID_VALUE, 10: Status.NOT_SUPPORTED}


library = LazyLibrary(_ffi, "RGPU_CUSPARSE", ("cu13", "libcusparse.so.12"))


def check(status: int, what: str) -> None:
    if status:
        raise CudaError(_STATUS.get(status, Status.LAUNCH_FAILED), f"{what}: cuSPARSE status {status}")


def _p(value: int):
    return _ffi.cast("void *", value)


def create():
    out = _ffi.new("void **")
    check(library().cusparseCreate(out), "cusparseCreate")
    return out[0]


def destroy(handle) -> None:
    _buffer_sizes.drop(_key(handle))
    check(library().cusparseDestroy(handle), "cusparseDestroy")


def _key(handle) -> int:
    return int(_ffi.cast("uintptr_t", handle))


# Per cuSPARSE handle: (status, bytes) of buffer-size queries by operation description.
_buffer_sizes = PerHandle(lambda answer: None)
_ALIGNMENT = 256  # the part of an address a size could depend on (vectorised kernels): kept in the description


def description(op: SparseOp) -> SparseOp:
    """`op` without its addresses, save their alignment, and (device pointer mode) without its scalars' addresses:
    every other field is part of what a buffer size may depend on."""
    def align(ptr: int) -> int:
        return ptr % _ALIGNMENT

    a = attrs.evolve(op.a, offsets=align(op.a.offsets), indices=align(op.a.indices), values=align(op.a.values))
    scalars = {} if op.pointer_mode != POINTER_MODE_DEVICE else {"alpha": b"", "beta": b""}
    return attrs.evolve(op, a=a, b=attrs.evolve(op.b, values=align(op.b.values)),
                        c=attrs.evolve(op.c, values=align(op.c.values)), buffer=0, **scalars)


class _Descriptors(contextlib.ExitStack):
    """Real descriptors for one request's operands, destroyed on exit."""

    def made(self, create, destroy: str, *args):
        lib, out = library(), _ffi.new("void **")
        check(getattr(lib, create)(out, *args), create)
        self.callback(getattr(lib, destroy), out[0])
        return out[0]

    def sparse(self, a: Sparse):
        lib = library()
        if a.format == FORMAT_COO:
            d = self.made("cusparseCreateCoo", "cusparseDestroySpMat", a.rows, a.cols, a.nnz, _p(a.offsets),
                          _p(a.indices), _p(a.values), a.indices_type, a.base, a.value_type)
            if a.batch > 1:
                check(lib.cusparseCooSetStridedBatch(d, a.batch, a.values_stride), "cusparseCooSetStridedBatch")
            return d
        create = "cusparseCreateCsc" if a.format == FORMAT_CSC else "cusparseCreateCsr"
        d = self.made(create, "cusparseDestroySpMat", a.rows, a.cols, a.nnz, _p(a.offsets), _p(a.indices),
                      _p(a.values), a.offsets_type, a.indices_type, a.base, a.value_type)
        if a.batch > 1:
            check(lib.cusparseCsrSetStridedBatch(d, a.batch, a.offsets_stride, a.values_stride),
                  "cusparseCsrSetStridedBatch")
        return d

    def dense(self, d: Dense, vector: bool):
        if vector:
            return self.made("cusparseCreateDnVec", "cusparseDestroyDnVec", d.rows, _p(d.values), d.type)
        out = self.made("cusparseCreateDnMat", "cusparseDestroyDnMat", d.rows, d.cols, d.ld, _p(d.values), d.type,
                        d.order)
        if d.batch > 1:
            check(library().cusparseDnMatSetStridedBatch(out, d.batch, d.stride), "cusparseDnMatSetStridedBatch")
        return out


def _scalars(op: SparseOp | SpGemm):
    if op.pointer_mode == POINTER_MODE_DEVICE:
        return tuple(_p(p) for p in op.scalars())
    return _ffi.from_buffer(op.alpha), _ffi.from_buffer(op.beta)


def _call(handle, op: SparseOp, name: str, last):
    """cusparseSpMV/SpMM or their _bufferSize, `last` the buffer or the size out-pointer."""
    lib = library()
    check(lib.cusparseSetPointerMode(handle, op.pointer_mode), "cusparseSetPointerMode")
    alpha, beta = _scalars(op)
    vector = op.function == Function.SPMV
    with _Descriptors() as d:
        a, b, c = d.sparse(op.a), d.dense(op.b, vector), d.dense(op.c, vector)
        if vector:
            return getattr(lib, f"cusparseSpMV{name}")(handle, op.op_a, alpha, a, b, beta, c, op.compute_type,
                                                       op.alg, last)
        return getattr(lib, f"cusparseSpMM{name}")(handle, op.op_a, op.op_b, alpha, a, b, beta, c, op.compute_type,
                                                   op.alg, last)


def buffer_size(handle, op: SparseOp) -> tuple[int, int]:
    """(cuSPARSE status, bytes), asked of cuSPARSE once per description (see the module's doc)."""
    def ask() -> tuple[int, int]:
        size = _ffi.new("size_t *")
        status = _call(handle, op, "_bufferSize", size)
        return status, size[0]

    return _buffer_sizes.of(_key(handle)).get(description(op), ask)


def run(handle, stream: int, op: SparseOp) -> None:
    lib = library()
    check(lib.cusparseSetStream(handle, _p(stream)), "cusparseSetStream")
    if op.function == Function.XCOO2CSR:
        check(lib.cusparseXcoo2csr(handle, _ffi.cast("int *", op.a.offsets), op.a.nnz, op.a.rows,
                                   _ffi.cast("int *", op.c.values), op.a.base), "cusparseXcoo2csr")
        return
    check(_call(handle, op, "", _p(op.buffer)), f"cusparse{op.function.name.replace('SP', 'Sp')}")


class _SpGemmState:
    """A real SpGEMM descriptor and the matrix descriptors its phases share (made at its first phase: cuSPARSE
    keeps what it learns about A, B and C in them)."""

    def __init__(self):
        out = _ffi.new("void **")
        check(library().cusparseSpGEMM_createDescr(out), "cusparseSpGEMM_createDescr")
        self.descr, self.matrices = out[0], None
        self._descriptors = _Descriptors()

    def operands(self, g: SpGemm):
        if self.matrices is None:
            self.matrices = tuple(self._descriptors.sparse(m) for m in (g.a, g.b, g.c))
        return self.matrices

    def close(self) -> None:
        self._descriptors.close()
        library().cusparseSpGEMM_destroyDescr(self.descr)


def _spgemm_phase(handle, state: _SpGemmState, g: SpGemm, size, buffer) -> int:
    lib = library()
    check(lib.cusparseSetPointerMode(handle, g.pointer_mode), "cusparseSetPointerMode")
    alpha, beta = _scalars(g)
    a, b, c = state.operands(g)
    args = (handle, g.op_a, g.op_b, alpha, a, b, beta, c, g.compute_type, g.alg, state.descr)
    if g.phase == Phase.COPY:
        check(lib.cusparseCsrSetPointers(c, _p(g.c.offsets), _p(g.c.indices), _p(g.c.values)), "CsrSetPointers")
        return lib.cusparseSpGEMM_copy(*args)
    name = "cusparseSpGEMM_workEstimation" if g.phase == Phase.WORK_ESTIMATION else "cusparseSpGEMM_compute"
    return getattr(lib, name)(*args, size, buffer)


def _c_nnz(state: _SpGemmState) -> int:
    if state.matrices is None:
        return 0
    rows, cols, nnz = (_ffi.new("int64_t *") for _ in range(3))
    check(library().cusparseSpMatGetSize(state.matrices[2], rows, cols, nnz), "cusparseSpMatGetSize")
    return nnz[0]


class CudaSparse:
    """Mixed into CudaBackend (which provides `_use`)."""

    def sparse_create(self, ctx):
        self._use(ctx)
        return create()

    def sparse_destroy(self, ctx, handle) -> None:
        self._use(ctx)
        destroy(handle)

    def sparse_buffer_size(self, ctx, handle, op: SparseOp) -> tuple[int, int]:
        self._use(ctx)
        return buffer_size(handle, op)

    def sparse_run(self, ctx, handle, stream, op: SparseOp) -> None:
        self._use(ctx)
        run(handle, int(stream) if stream is not None else 0, op)

    def spgemm_create(self, ctx):
        self._use(ctx)
        return _SpGemmState()

    def spgemm_destroy(self, ctx, descriptor) -> None:
        self._use(ctx)
        descriptor.close()

    def spgemm_need(self, ctx, handle, descriptor, g: SpGemm) -> tuple[int, int, int]:
        self._use(ctx)
        if g.phase == Phase.COPY:
            return 0, 0, _c_nnz(descriptor)
        size = _ffi.new("size_t *")
        status = _spgemm_phase(handle, descriptor, g, size, _ffi.NULL)
        return status, size[0], _c_nnz(descriptor)

    def spgemm_run(self, ctx, handle, stream, descriptor, g: SpGemm) -> tuple[int, int]:
        self._use(ctx)
        check(library().cusparseSetStream(handle, _p(int(stream) if stream is not None else 0)), "cusparseSetStream")
        size = _ffi.new("size_t *", g.buffer_size)
        status = _spgemm_phase(handle, descriptor, g, size, _p(g.buffer))
        return status, _c_nnz(descriptor)
