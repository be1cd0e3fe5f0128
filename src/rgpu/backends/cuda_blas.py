"""cuBLAS and cuBLASLt on the GPU, called through cffi (ABI mode: no headers needed on the server).

Libraries: $RGPU_CUBLAS / $RGPU_CUBLASLT name them; otherwise the nvidia-cublas wheel on sys.path (as PyTorch
installs it), then the loader's own search for the sonames.
"""

from __future__ import annotations


import cffi

from rgpu.backends.libcache import PerHandle
from rgpu.backends.nvlibs import LazyLibrary
from rgpu.errors import CudaError, Status
from rgpu.protocol import blas_routines

_ffi = cffi.FFI()
_ffi.cdef("""
    int cublasCreate_v2(void **handle);
    int cublasDestroy_v2(void *handle);
    int cublasSetStream_v2(void *handle, void *stream);
    int cublasSetWorkspace_v2(void *handle, void *workspace, size_t size);
    int cublasSetMathMode(void *handle, int mode);
    int cublasSetPointerMode_v2(void *handle, int mode);
    int cublasGemmStridedBatchedEx(void *handle, int ta, int tb, int m, int n, int k, const void *alpha,
        const void *A, int at, int lda, long long sa, const void *B, int bt, int ldb, long long sb,
        const void *beta, void *C, int ct, int ldc, long long sc, int batch, int compute, int algo);
    int cublasGemmBatchedEx(void *handle, int ta, int tb, int m, int n, int k, const void *alpha,
        const void *A, int at, int lda, const void *B, int bt, int ldb, const void *beta, void *C, int ct, int ldc,
        int batch, int compute, int algo);
    int cublasSgetrfBatched(void *h, int n, void *A, int lda, void *P, void *info, int batch);
    int cublasDgetrfBatched(void *h, int n, void *A, int lda, void *P, void *info, int batch);
    int cublasCgetrfBatched(void *h, int n, void *A, int lda, void *P, void *info, int batch);
    int cublasZgetrfBatched(void *h, int n, void *A, int lda, void *P, void *info, int batch);
    int cublasSgetriBatched(void *h, int n, void *A, int lda, void *P, void *C, int ldc, void *info, int batch);
    int cublasDgetriBatched(void *h, int n, void *A, int lda, void *P, void *C, int ldc, void *info, int batch);
    int cublasCgetriBatched(void *h, int n, void *A, int lda, void *P, void *C, int ldc, void *info, int batch);
    int cublasZgetriBatched(void *h, int n, void *A, int lda, void *P, void *C, int ldc, void *info, int batch);
    int cublasSmatinvBatched(void *h, int n, void *A, int lda, void *C, int ldc, void *info, int batch);
    int cublasDmatinvBatched(void *h, int n, void *A, int lda, void *C, int ldc, void *info, int batch);
    int cublasCmatinvBatched(void *h, int n, void *A, int lda, void *C, int ldc, void *info, int batch);
    int cublasZmatinvBatched(void *h, int n, void *A, int lda, void *C, int ldc, void *info, int batch);
    int cublasStrsmBatched_64(void *h, int side, int uplo, int trans, int diag, int64_t m, int64_t n,
        const void *alpha, void *A, int64_t lda, void *B, int64_t ldb, int64_t batch);
    int cublasDtrsmBatched_64(void *h, int side, int uplo, int trans, int diag, int64_t m, int64_t n,
        const void *alpha, void *A, int64_t lda, void *B, int64_t ldb, int64_t batch);
    int cublasCtrsmBatched_64(void *h, int side, int uplo, int trans, int diag, int64_t m, int64_t n,
        const void *alpha, void *A, int64_t lda, void *B, int64_t ldb, int64_t batch);
    int cublasZtrsmBatched_64(void *h, int side, int uplo, int trans, int diag, int64_t m, int64_t n,
        const void *alpha, void *A, int64_t lda, void *B, int64_t ldb, int64_t batch);
    int cublasSaxpy_v2_64(void *h, int64_t n, const void *alpha, void *x, int64_t incx, void *y, int64_t incy);
    int cublasSscal_v2_64(void *h, int64_t n, const void *alpha, void *x, int64_t incx);
    int cublasScopy_v2_64(void *h, int64_t n, void *x, int64_t incx, void *y, int64_t incy);
    int cublasSswap_v2_64(void *h, int64_t n, void *x, int64_t incx, void *y, int64_t incy);
    int cublasSdot_v2_64(void *h, int64_t n, void *x, int64_t incx, void *y, int64_t incy, void *result);
    int cublasSnrm2_v2_64(void *h, int64_t n, void *x, int64_t incx, void *result);
    int cublasSasum_v2_64(void *h, int64_t n, void *x, int64_t incx, void *result);
    int cublasIsamax_v2(void *h, int n, void *x, int incx, void *result);
    int cublasIsamax_v2_64(void *h, int64_t n, void *x, int64_t incx, void *result);
    int cublasIsamin_v2(void *h, int n, void *x, int incx, void *result);
    int cublasIsamin_v2_64(void *h, int64_t n, void *x, int64_t incx, void *result);
    int cublasDaxpy_v2_64(void *h, int64_t n, const void *alpha, void *x, int64_t incx, void *y, int64_t incy);
    int cublasDscal_v2_64(void *h, int64_t n, const void *alpha, void *x, int64_t incx);
    int cublasDcopy_v2_64(void *h, int64_t n, void *x, int64_t incx, void *y, int64_t incy);
    int cublasDswap_v2_64(void *h, int64_t n, void *x, int64_t incx, void *y, int64_t incy);
    int cublasDdot_v2_64(void *h, int64_t n, void *x, int64_t incx, void *y, int64_t incy, void *result);
    int cublasDnrm2_v2_64(void *h, int64_t n, void *x, int64_t incx, void *result);
    int cublasDasum_v2_64(void *h, int64_t n, void *x, int64_t incx, void *result);
    int cublasIdamax_v2(void *h, int n, void *x, int incx, void *result);
    int cublasIdamax_v2_64(void *h, int64_t n, void *x, int64_t incx, void *result);
    int cublasIdamin_v2(void *h, int n, void *x, int incx, void *result);
    int cublasIdamin_v2_64(void *h, int64_t n, void *x, int64_t incx, void *result);
    int cublasLtCreate(void **handle);
    int cublasLtDestroy(void *handle);
    int cublasLtMatmulDescCreate(void **desc, int compute, int scale);
    int cublasLtMatmulDescDestroy(void *desc);
    int cublasLtMatmulDescSetAttribute(void *desc, int attr, const void *buf, size_t size);
    int cublasLtMatrixLayoutCreate(void **layout, int type, uint64_t rows, uint64_t cols, int64_t ld);
    int cublasLtMatrixLayoutDestroy(void *layout);
    int cublasLtMatrixLayoutSetAttribute(void *layout, int attr, const void *buf, size_t size);
    int cublasLtMatmulPreferenceCreate(void **pref);
    int cublasLtMatmulPreferenceDestroy(void *pref);
    int cublasLtMatmulPreferenceSetAttribute(void *pref, int attr, const void *buf, size_t size);
    int cublasLtMatmulAlgoGetHeuristic(void *handle, void *op, void *a, void *b, void *c, void *d, void *pref,
        int requested, void *results, int *returned);
    int cublasLtMatmul(void *handle, void *op, const void *alpha, const void *A, void *Adesc, const void *B,
        void *Bdesc, const void *beta, const void *C, void *Cdesc, void *D, void *Ddesc, const void *algo,
        void *workspace, size_t workspace_size, void *stream);
""")

# Level 2/3 routines (rgpu.protocol.blas_routines), the 32-bit and _64 forms: every pointer a void *.
_ROUTINE_ARGS = {
    "gemm_v2": "int ta, int tb, int64_t m, int64_t n, int64_t k, const void *alpha, const void *A, int64_t lda, "
               "const void *B, int64_t ldb, const void *beta, void *C, int64_t ldc",
    "gemv_v2": "int trans, int64_t m, int64_t n, const void *alpha, const void *A, int64_t lda, const void *x, "
               "int64_t incx, const void *beta, void *y, int64_t incy",
    "ger_v2": "int64_t m, int64_t n, const void *alpha, const void *x, int64_t incx, const void *y, int64_t incy, "
              "void *A, int64_t lda",
    "trsv_v2": "int uplo, int trans, int diag, int64_t n, const void *A, int64_t lda, void *x, int64_t incx",
    "trsm_v2": "int side, int uplo, int trans, int diag, int64_t m, int64_t n, const void *alpha, const void *A, "
               "int64_t lda, void *B, int64_t ldb",
    "trmm_v2": "int side, int uplo, int trans, int diag, int64_t m, int64_t n, const void *alpha, const void *A, "
               "int64_t lda, const void *B, int64_t ldb, void *C, int64_t ldc",
    "syrk_v2": "int uplo, int trans, int64_t n, int64_t k, const void *alpha, const void *A, int64_t lda, "
               "const void *beta, void *C, int64_t ldc",
    "symm_v2": "int side, int uplo, int64_t m, int64_t n, const void *alpha, const void *A, int64_t lda, "
               "const void *B, int64_t ldb, const void *beta, void *C, int64_t ldc",
}
_ROUTINE_ARGS |= {"gemm3m": _ROUTINE_ARGS["gemm_v2"], "geru_v2": _ROUTINE_ARGS["ger_v2"],
                  "gerc_v2": _ROUTINE_ARGS["ger_v2"], "trmv_v2": _ROUTINE_ARGS["trsv_v2"],
                  "herk_v2": _ROUTINE_ARGS["syrk_v2"]}
_REAL_ONLY, _COMPLEX_ONLY = {"ger_v2"}, {"gemm3m", "geru_v2", "gerc_v2", "herk_v2"}
_ffi.cdef("".join(
    f"int cublas{letter}{name}(void *handle, {args.replace('int64_t', 'int')});\n"
    f"int cublas{letter}{name}_64(void *handle, {args});\n"
    for name, args in _ROUTINE_ARGS.items() for letter in "SDCZ"
    if not (letter in "SD" and name in _COMPLEX_ONLY) and not (letter in "CZ" and name in _REAL_ONLY)))
_ffi.cdef("".join(f"int cublas{letter}getrsBatched(void *h, int trans, int n, int nrhs, void *A, int lda, void *P, "
                  f"void *B, int ldb, int *info, int batch);\n" for letter in "SDCZ"))

_STATUS = {1: Status.NOT_INITIALIZED, 3: Status.OUT_OF_MEMORY, 7: Status.INVALID_VALUE, 15: Status.NOT_SUPPORTED}
_LIBRARIES = {"cublas": LazyLibrary(_ffi, "RGPU_CUBLAS", ("cu13", "libcublas.so.13")),
              "cublasLt": LazyLibrary(_ffi, "RGPU_CUBLASLT", ("cu13", "libcublasLt.so.13"))}


def library(name: str):
    return _LIBRARIES[name]()


def check(status: int, what: str) -> None:
    if status:
        raise CudaError(_STATUS.get(status, Status.LAUNCH_FAILED), f"{what}: cuBLAS status {status}")


def _ptr(value: int):
    return _ffi.cast("void *", value)


class Descriptors:
    """Real cuBLASLt descriptors for one decoded operation; kept in `_descriptors` until evicted."""

    def __init__(self, op, lt):
        self.lt, self.made = lt, []
        try:
            self.op = self._make("cublasLtMatmulDescCreate", "cublasLtMatmulDescDestroy",
                                 "cublasLtMatmulDescSetAttribute", op.attrs, op.compute, op.scale)
            self.layouts = [self._make("cublasLtMatrixLayoutCreate", "cublasLtMatrixLayoutDestroy",
                                       "cublasLtMatrixLayoutSetAttribute", lay.attrs, lay.type, lay.rows, lay.cols,
                                       lay.ld)
                            for lay in (op.a, op.b, op.c, op.d)]
            self.pref = None
            if op.preference is not None:
                self.pref = self._make("cublasLtMatmulPreferenceCreate", "cublasLtMatmulPreferenceDestroy",
                                       "cublasLtMatmulPreferenceSetAttribute", op.preference)
        except CudaError:
            self.destroy()
            raise

    def _make(self, create, destroy, set_attr, attrs, *args):
        out = _ffi.new("void **")
        check(getattr(self.lt, create)(out, *args), create)
        self.made.append((destroy, out[0]))
        for attr, raw in attrs.items():
            check(getattr(self.lt, set_attr)(out[0], attr, raw, len(raw)), f"{set_attr}({attr})")
        return out[0]

    def destroy(self) -> None:
        for destroy, obj in reversed(self.made):
            getattr(self.lt, destroy)(obj)
        self.made = []


# Per cuBLASLt handle: descriptors by operation content. Per cuBLAS handle: the settings last given to it.
_descriptors = PerHandle(Descriptors.destroy)
_settings: dict[int, tuple] = {}


def _key(handle) -> int:
    return int(_ffi.cast("uintptr_t", handle))


def _described(lt_handle, op, lt) -> Descriptors:
    return _descriptors.of(_key(lt_handle)).get(op.key(), lambda: Descriptors(op, lt))


def _configure(lib, handle, stream: int, pointer_mode: int, math_mode: int | None = None, workspace: int = 0,
               workspace_size: int = 0) -> None:
    """The handle's settings for one call, set only when they differ from what the last call set. math_mode None:
    the call does not depend on it (left as it is, and so unknown to the next call that does)."""
    key, settings = _key(handle), (stream, math_mode, pointer_mode, workspace, workspace_size)
    if _settings.get(key) == settings:
        return
    _settings.pop(key, None)  # a failed setter leaves the handle's state unknown: set all next time
    # cublasSetStream also puts the handle back on cuBLAS's own workspace: the program's is set after it.
    check(lib.cublasSetStream_v2(handle, _ptr(stream)), "cublasSetStream")
    if math_mode is not None:
        check(lib.cublasSetMathMode(handle, math_mode), "cublasSetMathMode")
    check(lib.cublasSetPointerMode_v2(handle, pointer_mode), "cublasSetPointerMode")
    if workspace_size:
        check(lib.cublasSetWorkspace_v2(handle, _ptr(workspace), workspace_size), "cublasSetWorkspace")
    _settings[key] = settings


def _prepare(lib, handle, stream: int, g):
    """The handle's settings for one GEMM or Level 2/3 routine; its alpha and beta as cuBLAS takes them."""
    _configure(lib, handle, stream, g.pointer_mode, g.math_mode, g.workspace, g.workspace_size)
    if g.pointer_mode:
        return _ptr(int.from_bytes(g.alpha[:8], "little")), _ptr(int.from_bytes(g.beta[:8], "little"))
    return _ffi.from_buffer(g.alpha), _ffi.from_buffer(g.beta)


def gemm(handle, stream: int, g) -> None:
    lib = library("cublas")
    alpha, beta = _prepare(lib, handle, stream, g)
    check(lib.cublasGemmStridedBatchedEx(
        handle, g.transa, g.transb, g.m, g.n, g.k, alpha, _ptr(g.a.ptr), g.a.type, g.a.ld, g.a.stride,
        _ptr(g.b.ptr), g.b.type, g.b.ld, g.b.stride, beta, _ptr(g.c.ptr), g.c.type, g.c.ld, g.c.stride, g.batch,
        g.compute, g.algo), "cublasGemmStridedBatchedEx")


def gemm_batched(handle, stream: int, g) -> None:
    """g.a, g.b, g.c name device arrays of matrix pointers (checked by rgpu.dispatch.blas_batched)."""
    lib = library("cublas")
    alpha, beta = _prepare(lib, handle, stream, g)
    check(lib.cublasGemmBatchedEx(
        handle, g.transa, g.transb, g.m, g.n, g.k, alpha, _ptr(g.a.ptr), g.a.type, g.a.ld, _ptr(g.b.ptr), g.b.type,
        g.b.ld, beta, _ptr(g.c.ptr), g.c.type, g.c.ld, g.batch, g.compute, g.algo), "cublasGemmBatchedEx")


_LU_LETTER = {0: "S", 1: "D", 4: "C", 5: "Z"}


class CudaBlasBatched:
    """Mixed into CudaBackend (which provides `_use`). cuBLAS reads the pointer arrays itself: `arrays` (what the
    server read to check them) is not needed here."""

    def blas_gemm_batched(self, ctx, handle, stream, gemm, arrays) -> None:
        self._use(ctx)
        gemm_batched(handle, int(stream) if stream is not None else 0, gemm)

    def blas_level1(self, ctx, handle, stream, c) -> bytes | None:
        """The _64 entry points (64-bit counts), except iamax/iamin with an int result, which only the 32-bit ones
        write."""
        lib = library("cublas")
        self._use(ctx)
        _configure(lib, handle, _stream_int(stream), c.pointer_mode)
        device = c.pointer_mode == 1
        name = c.name + ("_v2" if c.result_size == 4 and c.func >= 7 else "_v2_64")
        x, y = _ptr(c.x), _ptr(c.y)
        host_result = _ffi.new("char[16]")
        result = _ptr(c.result) if device else host_result
        alpha = _ptr(int.from_bytes(c.alpha[:8], "little")) if device else _ffi.from_buffer(c.alpha)
        fn = getattr(lib, name)
        if c.func == 0:  # axpy
            status = fn(handle, c.n, alpha, x, c.incx, y, c.incy)
        elif c.func == 1:  # scal
            status = fn(handle, c.n, alpha, x, c.incx)
        elif c.func in (2, 3):  # copy, swap
            status = fn(handle, c.n, x, c.incx, y, c.incy)
        elif c.func == 4:  # dot
            status = fn(handle, c.n, x, c.incx, y, c.incy, result)
        else:
            status = fn(handle, c.n, x, c.incx, result)
        check(status, name)
        return None if device or not c.reduction else _ffi.buffer(host_result, c.result_size)[:]

    def blas_lu_batched(self, ctx, handle, stream, lu, arrays) -> None:
        lib = library("cublas")
        self._use(ctx)
        _configure(lib, handle, _stream_int(stream), 0)
        name = f"cublas{_LU_LETTER[lu.type]}{('getrf', 'getri', 'matinv')[lu.which]}Batched"
        fn = getattr(lib, name)
        if lu.which == 0:
            status = fn(handle, lu.n, _ptr(lu.a), lu.lda, _ptr(lu.pivots), _ptr(lu.info), lu.batch)
        elif lu.which == 1:
            status = fn(handle, lu.n, _ptr(lu.a), lu.lda, _ptr(lu.pivots), _ptr(lu.c), lu.ldc, _ptr(lu.info), lu.batch)
        else:
            status = fn(handle, lu.n, _ptr(lu.a), lu.lda, _ptr(lu.c), lu.ldc, _ptr(lu.info), lu.batch)
        check(status, name)

    def blas_trsm_batched(self, ctx, handle, stream, t, arrays) -> None:
        lib = library("cublas")
        self._use(ctx)
        _configure(lib, handle, _stream_int(stream), t.pointer_mode)
        alpha = _ptr(int.from_bytes(t.alpha[:8], "little")) if t.pointer_mode else _ffi.from_buffer(t.alpha)
        name = f"cublas{_LU_LETTER[t.type]}trsmBatched_64"
        check(getattr(lib, name)(handle, t.side, t.uplo, t.trans, t.diag, t.m, t.n, alpha, _ptr(t.a), t.lda,
                                 _ptr(t.b), t.ldb, t.batch), name)


    def blas_routine(self, ctx, handle, stream, r) -> None:
        """A Level 2/3 routine (rgpu.protocol.blas_routines.Routine, its ranges checked): the cuBLAS routine the
        program called, in the form it called (32-bit or _64)."""
        lib = library("cublas")
        self._use(ctx)
        alpha, beta = _prepare(lib, handle, _stream_int(stream), r)
        F = blas_routines.Function
        a, b, c, f = _ptr(r.a), _ptr(r.b), _ptr(r.c), r.function
        if f in (F.GEMM, F.GEMM3M):
            args = (r.transa, r.transb, r.m, r.n, r.k, alpha, a, r.lda, b, r.ldb, beta, c, r.ldc)
        elif f == F.GEMV:
            args = (r.transa, r.m, r.n, alpha, a, r.lda, b, r.ldb, beta, c, r.ldc)
        elif f in (F.GER, F.GERU, F.GERC):
            args = (r.m, r.n, alpha, b, r.ldb, c, r.ldc, a, r.lda)
        elif f in (F.TRSV, F.TRMV):
            args = (r.uplo, r.transa, r.diag, r.n, a, r.lda, b, r.ldb)
        elif f == F.TRSM:
            args = (r.side, r.uplo, r.transa, r.diag, r.m, r.n, alpha, a, r.lda, b, r.ldb)
        elif f == F.TRMM:
            args = (r.side, r.uplo, r.transa, r.diag, r.m, r.n, alpha, a, r.lda, b, r.ldb, c, r.ldc)
        elif f in (F.SYRK, F.HERK):
            args = (r.uplo, r.transa, r.n, r.k, alpha, a, r.lda, beta, c, r.ldc)
        else:  # SYMM
            args = (r.side, r.uplo, r.m, r.n, alpha, a, r.lda, b, r.ldb, beta, c, r.ldc)
        check(getattr(lib, r.name)(handle, *args), r.name)

    def blas_getrs_batched(self, ctx, handle, stream, g, arrays) -> None:
        lib = library("cublas")
        self._use(ctx)
        _configure(lib, handle, _stream_int(stream), 0)
        info = _ffi.new("int *")
        check(getattr(lib, g.name)(handle, g.trans, g.n, g.nrhs, _ptr(g.a), g.lda, _ptr(g.pivots), _ptr(g.b), g.ldb,
                                   info, g.batch), g.name)
        if info[0]:
            raise CudaError(Status.INVALID_VALUE, f"{g.name}: parameter {-info[0]} is invalid")


def _stream_int(stream) -> int:
    return int(stream) if stream is not None else 0


def heuristic(lt_handle, op, requested: int) -> list[bytes]:
    lt = library("cublasLt")
    results = _ffi.new("char[]", 96 * requested)
    returned = _ffi.new("int *")
    d = _described(lt_handle, op, lt)
    check(lt.cublasLtMatmulAlgoGetHeuristic(lt_handle, d.op, *d.layouts, d.pref, requested, results, returned),
          "cublasLtMatmulAlgoGetHeuristic")
    raw = _ffi.buffer(results)[:]
    return [raw[i * 96 : (i + 1) * 96] for i in range(returned[0])]


def matmul(lt_handle, op, pointers, alpha: bytes, beta: bytes, workspace: int, workspace_size: int,
           stream: int) -> None:
    lt = library("cublasLt")
    a, b, c, d = (_ptr(p) for p in pointers)
    algo = _ffi.from_buffer(op.algo) if op.algo is not None else _ffi.NULL
    desc = _described(lt_handle, op, lt)
    check(lt.cublasLtMatmul(lt_handle, desc.op, _ffi.from_buffer(alpha), a, desc.layouts[0], b, desc.layouts[1],
                            _ffi.from_buffer(beta), c, desc.layouts[2], d, desc.layouts[3], algo, _ptr(workspace),
                            workspace_size, _ptr(stream)), "cublasLtMatmul")


def create(kind: str):
    lib = library(kind)
    out = _ffi.new("void **")
    check(lib.cublasCreate_v2(out) if kind == "cublas" else lib.cublasLtCreate(out), f"{kind} create")
    return out[0]


def destroy(kind: str, handle) -> None:
    lib = library(kind)
    _descriptors.drop(_key(handle))
    _settings.pop(_key(handle), None)
    check(lib.cublasDestroy_v2(handle) if kind == "cublas" else lib.cublasLtDestroy(handle), f"{kind} destroy")
