"""cuSOLVER dense on the GPU through cffi (ABI mode). $RGPU_CUSOLVER names the library; otherwise the
nvidia-cusolver wheel on sys.path (as PyTorch installs it), then the loader's search for libcusolver.so.12.

Each request names its routine (rgpu.protocol.solver_wire.Function) and data type; the classic API's routines
are called by their typed names (cusolverDnSgetrf...), the X API's with the data types as arguments. A
request's cusolverDnParams (the GETRF algorithm) and gesvdjInfo (tolerance, sweeps, sorting) are made here for
the call from the fields that carry them."""

from __future__ import annotations

import contextlib
import cffi

from rgpu.backends.nvlibs import LazyLibrary
from rgpu.errors import CudaError, Status
from rgpu.protocol.solver_wire import BATCHED, NO_WORKSPACE, REAL_OF, Function, Solve

_CLASSIC = """
    int cusolverDn{T}getrf_bufferSize(void *h, int m, int n, void *A, int lda, int *lwork);
    int cusolverDn{T}getrf(void *h, int m, int n, void *A, int lda, void *work, void *ipiv, void *info);
    int cusolverDn{T}getrs(void *h, int trans, int n, int nrhs, void *A, int lda, void *ipiv, void *B, int ldb,
        void *info);
    int cusolverDn{T}potrf_bufferSize(void *h, int uplo, int n, void *A, int lda, int *lwork);
    int cusolverDn{T}potrf(void *h, int uplo, int n, void *A, int lda, void *work, int lwork, void *info);
    int cusolverDn{T}potrs(void *h, int uplo, int n, int nrhs, void *A, int lda, void *B, int ldb, void *info);
    int cusolverDn{T}geqrf_bufferSize(void *h, int m, int n, void *A, int lda, int *lwork);
    int cusolverDn{T}geqrf(void *h, int m, int n, void *A, int lda, void *tau, void *work, int lwork, void *info);
    int cusolverDn{T}{ORG}qr_bufferSize(void *h, int m, int n, int k, void *A, int lda, void *tau, int *lwork);
    int cusolverDn{T}{ORG}qr(void *h, int m, int n, int k, void *A, int lda, void *tau, void *work, int lwork,
        void *info);
    int cusolverDn{T}{ORM}qr_bufferSize(void *h, int side, int trans, int m, int n, int k, void *A, int lda,
        void *tau, void *C, int ldc, int *lwork);
    int cusolverDn{T}{ORM}qr(void *h, int side, int trans, int m, int n, int k, void *A, int lda, void *tau,
        void *C, int ldc, void *work, int lwork, void *info);
    int cusolverDn{T}{SYEVD}_bufferSize(void *h, int jobz, int uplo, int n, void *A, int lda, void *W, int *lwork);
    int cusolverDn{T}{SYEVD}(void *h, int jobz, int uplo, int n, void *A, int lda, void *W, void *work, int lwork,
        void *info);
    int cusolverDn{T}{SYEVJ}_bufferSize(void *h, int jobz, int uplo, int n, void *A, int lda, void *W, int *lwork,
        void *params);
    int cusolverDn{T}{SYEVJ}(void *h, int jobz, int uplo, int n, void *A, int lda, void *W, void *work, int lwork,
        void *info, void *params);
    int cusolverDn{T}{SYEVJ}Batched_bufferSize(void *h, int jobz, int uplo, int n, void *A, int lda, void *W,
        int *lwork, void *params, int batch);
    int cusolverDn{T}{SYEVJ}Batched(void *h, int jobz, int uplo, int n, void *A, int lda, void *W, void *work,
        int lwork, void *info, void *params, int batch);
    int cusolverDn{T}potrfBatched(void *h, int uplo, int n, void *Aarray, int lda, void *info, int batch);
    int cusolverDn{T}potrsBatched(void *h, int uplo, int n, int nrhs, void *Aarray, int lda, void *Barray, int ldb,
        void *info, int batch);
    int cusolverDn{T}gesvd_bufferSize(void *h, int m, int n, int *lwork);
    int cusolverDn{T}gesvd(void *h, signed char jobu, signed char jobvt, int m, int n, void *A, int lda, void *S,
        void *U, int ldu, void *VT, int ldvt, void *work, int lwork, void *rwork, void *info);
    int cusolverDn{T}gesvdj_bufferSize(void *h, int jobz, int econ, int m, int n, void *A, int lda, void *S,
        void *U, int ldu, void *V, int ldv, int *lwork, void *params);
    int cusolverDn{T}gesvdj(void *h, int jobz, int econ, int m, int n, void *A, int lda, void *S, void *U, int ldu,
        void *V, int ldv, void *work, int lwork, void *info, void *params);
    int cusolverDn{T}gesvdjBatched_bufferSize(void *h, int jobz, int m, int n, void *A, int lda, void *S, void *U,
        int ldu, void *V, int ldv, int *lwork, void *params, int batch);
    int cusolverDn{T}gesvdjBatched(void *h, int jobz, int m, int n, void *A, int lda, void *S, void *U, int ldu,
        void *V, int ldv, void *work, int lwork, void *info, void *params, int batch);
"""
# Per cudaDataType: the classic API's letter, and the complex types' names for the orthogonal/symmetric routines.
_PREFIX = {0: ("S", "org", "orm", "syevd"), 1: ("D", "org", "orm", "syevd"), 4: ("C", "ung", "unm", "heevd"),
           5: ("Z", "ung", "unm", "heevd")}

# Every declaration this module uses (tests/test_solver.py checks them against cusolverDn.h).
DECLARATIONS = "".join(_CLASSIC.replace("{T}", t).replace("{ORG}", org).replace("{ORM}", orm)
                       .replace("{SYEVD}", ev).replace("{SYEVJ}", ev[:-1] + "j")
                       for t, org, orm, ev in _PREFIX.values()) + """
    int cusolverDnCreate(void **h);
    int cusolverDnDestroy(void *h);
    int cusolverDnSetStream(void *h, void *stream);
    int cusolverDnCreateParams(void **p);
    int cusolverDnDestroyParams(void *p);
    int cusolverDnSetAdvOptions(void *p, int function, int algo);
    int cusolverDnCreateGesvdjInfo(void **info);
    int cusolverDnDestroyGesvdjInfo(void *info);
    int cusolverDnXgesvdjSetTolerance(void *info, double tolerance);
    int cusolverDnXgesvdjSetMaxSweeps(void *info, int sweeps);
    int cusolverDnXgesvdjSetSortEig(void *info, int sort);
    int cusolverDnCreateSyevjInfo(void **info);
    int cusolverDnDestroySyevjInfo(void *info);
    int cusolverDnXsyevjSetTolerance(void *info, double tolerance);
    int cusolverDnXsyevjSetMaxSweeps(void *info, int sweeps);
    int cusolverDnXsyevjSetSortEig(void *info, int sort);
    int cusolverDnXgetrf_bufferSize(void *h, void *p, int64_t m, int64_t n, int ta, void *A, int64_t lda, int ct,
        size_t *dev, size_t *host);
    int cusolverDnXgetrf(void *h, void *p, int64_t m, int64_t n, int ta, void *A, int64_t lda, void *ipiv, int ct,
        void *dbuf, size_t dsize, void *hbuf, size_t hsize, void *info);
    int cusolverDnXgetrs(void *h, void *p, int trans, int64_t n, int64_t nrhs, int ta, void *A, int64_t lda,
        void *ipiv, int tb, void *B, int64_t ldb, void *info);
    int cusolverDnXpotrf_bufferSize(void *h, void *p, int uplo, int64_t n, int ta, void *A, int64_t lda, int ct,
        size_t *dev, size_t *host);
    int cusolverDnXpotrf(void *h, void *p, int uplo, int64_t n, int ta, void *A, int64_t lda, int ct, void *dbuf,
        size_t dsize, void *hbuf, size_t hsize, void *info);
    int cusolverDnXpotrs(void *h, void *p, int uplo, int64_t n, int64_t nrhs, int ta, void *A, int64_t lda, int tb,
        void *B, int64_t ldb, void *info);
    int cusolverDnXgeqrf_bufferSize(void *h, void *p, int64_t m, int64_t n, int ta, void *A, int64_t lda, int tt,
        void *tau, int ct, size_t *dev, size_t *host);
    int cusolverDnXgeqrf(void *h, void *p, int64_t m, int64_t n, int ta, void *A, int64_t lda, int tt, void *tau,
        int ct, void *dbuf, size_t dsize, void *hbuf, size_t hsize, void *info);
    int cusolverDnXsyevd_bufferSize(void *h, void *p, int jobz, int uplo, int64_t n, int ta, void *A, int64_t lda,
        int tw, void *W, int ct, size_t *dev, size_t *host);
    int cusolverDnXsyevd(void *h, void *p, int jobz, int uplo, int64_t n, int ta, void *A, int64_t lda, int tw,
        void *W, int ct, void *dbuf, size_t dsize, void *hbuf, size_t hsize, void *info);
    int cusolverDnXsyevBatched_bufferSize(void *h, void *p, int jobz, int uplo, int64_t n, int ta, void *A,
        int64_t lda, int tw, void *W, int ct, size_t *dev, size_t *host, int64_t batch);
    int cusolverDnXsyevBatched(void *h, void *p, int jobz, int uplo, int64_t n, int ta, void *A, int64_t lda, int tw,
        void *W, int ct, void *dbuf, size_t dsize, void *hbuf, size_t hsize, void *info, int64_t batch);
    int cusolverDnXgesvd_bufferSize(void *h, void *p, signed char jobu, signed char jobvt, int64_t m, int64_t n,
        int ta, void *A, int64_t lda, int ts, void *S, int tu, void *U, int64_t ldu, int tv, void *VT, int64_t ldvt,
        int ct, size_t *dev, size_t *host);
    int cusolverDnXgesvd(void *h, void *p, signed char jobu, signed char jobvt, int64_t m, int64_t n, int ta,
        void *A, int64_t lda, int ts, void *S, int tu, void *U, int64_t ldu, int tv, void *VT, int64_t ldvt, int ct,
        void *dbuf, size_t dsize, void *hbuf, size_t hsize, void *info);
"""
_ffi = cffi.FFI()
_ffi.cdef(DECLARATIONS)

_STATUS = {1: Status.NOT_INITIALIZED, 2: Status.OUT_OF_MEMORY, 3: Status.INVALID_VALUE, 9: Status.NOT_SUPPORTED}
GETRF_FUNCTION = 0  # CUSOLVERDN_GETRF, the one routine whose algorithm cusolverDnSetAdvOptions picks


library = LazyLibrary(_ffi, "RGPU_CUSOLVER", ("cu13", "libcusolver.so.12"))


def check(status: int, what: str) -> None:
    if status:
        raise CudaError(_STATUS.get(status, Status.LAUNCH_FAILED), f"{what}: cuSOLVER status {status}")


def _p(value: int):
    return _ffi.cast("void *", value)


def create():
    out = _ffi.new("void **")
    check(library().cusolverDnCreate(out), "cusolverDnCreate")
    return out[0]


def destroy(handle) -> None:
    check(library().cusolverDnDestroy(handle), "cusolverDnDestroy")


# The Jacobi routines' parameter objects: gesvdjInfo_t, syevjInfo_t (cusolverDnCreateGesvdjInfo...).
_JACOBI = {Function.GESVDJ: "gesvdj", Function.GESVDJ_BATCHED: "gesvdj", Function.SYEVJ: "syevj",
           Function.SYEVJ_BATCHED: "syevj"}


@contextlib.contextmanager
def _options(s: Solve):
    """The cusolverDnParams (X API), gesvdjInfo or syevjInfo (Jacobi methods) the call takes, made for it and
    destroyed after."""
    lib, out = library(), _ffi.new("void **")
    if s.function.x_api:
        check(lib.cusolverDnCreateParams(out), "cusolverDnCreateParams")
        try:
            if s.function.base == Function.GETRF and s.algo:
                check(lib.cusolverDnSetAdvOptions(out[0], GETRF_FUNCTION, s.algo), "cusolverDnSetAdvOptions")
            yield out[0]
        finally:
            lib.cusolverDnDestroyParams(out[0])
    elif s.function.base in _JACOBI:
        kind = _JACOBI[s.function.base]
        check(getattr(lib, f"cusolverDnCreate{kind.capitalize()}Info")(out), f"cusolverDnCreate{kind}Info")
        try:
            if s.tol:
                check(getattr(lib, f"cusolverDnX{kind}SetTolerance")(out[0], s.tol), f"{kind} tolerance")
            if s.max_sweeps:
                check(getattr(lib, f"cusolverDnX{kind}SetMaxSweeps")(out[0], s.max_sweeps), f"{kind} sweeps")
            check(getattr(lib, f"cusolverDnX{kind}SetSortEig")(out[0], s.sort), f"{kind} sorting")
            yield out[0]
        finally:
            getattr(lib, f"cusolverDnDestroy{kind.capitalize()}Info")(out[0])
    else:
        yield _ffi.NULL


def _classic(s: Solve, name: str):
    t, org, orm, ev = _PREFIX[s.data_type]
    name = name.replace("orgqr", org + "qr").replace("ormqr", orm + "qr").replace("syevd", ev) \
        .replace("syevj", ev[:-1] + "j")
    return getattr(library(), f"cusolverDn{t}{name}")


def _classic_query(handle, s: Solve, params) -> tuple[int, int]:
    lwork = _ffi.new("int *")
    f, a = s.function.base, _p(s.a)
    args = {
        Function.GETRF: (s.m, s.n, a, s.lda),
        Function.POTRF: (s.uplo, s.n, a, s.lda),
        Function.GEQRF: (s.m, s.n, a, s.lda),
        Function.ORGQR: (s.m, s.n, s.k, a, s.lda, _p(s.tau)),
        Function.ORMQR: (s.side, s.trans, s.m, s.n, s.k, a, s.lda, _p(s.tau), _p(s.b), s.ldb),
        Function.SYEVD: (s.jobz, s.uplo, s.n, a, s.lda, _p(s.w)),
        Function.GESVD: (s.m, s.n),
        Function.GESVDJ: (s.jobz, s.econ, s.m, s.n, a, s.lda, _p(s.w), _p(s.u), s.ldu, _p(s.v), s.ldv),
        Function.GESVDJ_BATCHED: (s.jobz, s.m, s.n, a, s.lda, _p(s.w), _p(s.u), s.ldu, _p(s.v), s.ldv),
        Function.SYEVJ: (s.jobz, s.uplo, s.n, a, s.lda, _p(s.w)),
        Function.SYEVJ_BATCHED: (s.jobz, s.uplo, s.n, a, s.lda, _p(s.w)),
    }[f]
    tail = (lwork, params, s.batch) if f in BATCHED else (lwork, params) if f in _JACOBI else (lwork,)
    name = f"{f.name.lower().replace('_batched', 'Batched')}_bufferSize"
    return _classic(s, name)(handle, *args, *tail), lwork[0]


def _x_query(handle, s: Solve, params):
    lib, dev, host = library(), _ffi.new("size_t *"), _ffi.new("size_t *")
    f, t, a, ct = s.function.base, s.data_type, _p(s.a), s.compute_type
    real = REAL_OF[t]
    status = {
        Function.GETRF: lambda: lib.cusolverDnXgetrf_bufferSize(handle, params, s.m, s.n, t, a, s.lda, ct, dev,
                                                                host),
        Function.POTRF: lambda: lib.cusolverDnXpotrf_bufferSize(handle, params, s.uplo, s.n, t, a, s.lda, ct,
                                                                dev, host),
        Function.GEQRF: lambda: lib.cusolverDnXgeqrf_bufferSize(handle, params, s.m, s.n, t, a, s.lda, t,
                                                                _p(s.tau), ct, dev, host),
        Function.SYEVD: lambda: lib.cusolverDnXsyevd_bufferSize(handle, params, s.jobz, s.uplo, s.n, t, a,
                                                                s.lda, real, _p(s.w), ct, dev, host),
        Function.SYEV_BATCHED: lambda: lib.cusolverDnXsyevBatched_bufferSize(
            handle, params, s.jobz, s.uplo, s.n, t, a, s.lda, real, _p(s.w), ct, dev, host, s.batch),
        Function.GESVD: lambda: lib.cusolverDnXgesvd_bufferSize(
            handle, params, s.jobu, s.jobvt, s.m, s.n, t, a, s.lda, real, _p(s.w), t, _p(s.u), s.ldu, t,
            _p(s.v), s.ldv, ct, dev, host),
    }[f]()
    return status, dev[0], host[0]


def buffer_size(handle, s: Solve) -> tuple[int, int, int]:
    if s.function in NO_WORKSPACE:
        return 0, 0, 0
    with _options(s) as params:
        if s.function.x_api:
            return _x_query(handle, s, params)
        status, lwork = _classic_query(handle, s, params)
        return status, lwork, 0


def run(handle, stream: int, s: Solve, work_elements: int) -> None:
    """`work_elements`: the classic API's lwork (checked by the dispatcher against the library's own need)."""
    lib = library()
    check(lib.cusolverDnSetStream(handle, _p(stream)), "cusolverDnSetStream")
    with _options(s) as params:
        if s.function.x_api:
            _run_x(lib, handle, s, params)
        else:
            _run_classic(handle, s, params, work_elements)


def _run_classic(handle, s: Solve, params, lwork: int) -> None:
    f, a, info, work = s.function.base, _p(s.a), _p(s.info), _p(s.work)
    args = {
        Function.GETRF: (s.m, s.n, a, s.lda, work, _p(s.ipiv), info),
        Function.GETRS: (s.trans, s.n, s.nrhs, a, s.lda, _p(s.ipiv), _p(s.b), s.ldb, info),
        Function.POTRF: (s.uplo, s.n, a, s.lda, work, lwork, info),
        Function.POTRS: (s.uplo, s.n, s.nrhs, a, s.lda, _p(s.b), s.ldb, info),
        Function.GEQRF: (s.m, s.n, a, s.lda, _p(s.tau), work, lwork, info),
        Function.ORGQR: (s.m, s.n, s.k, a, s.lda, _p(s.tau), work, lwork, info),
        Function.ORMQR: (s.side, s.trans, s.m, s.n, s.k, a, s.lda, _p(s.tau), _p(s.b), s.ldb, work, lwork, info),
        Function.SYEVD: (s.jobz, s.uplo, s.n, a, s.lda, _p(s.w), work, lwork, info),
        Function.GESVD: (s.jobu, s.jobvt, s.m, s.n, a, s.lda, _p(s.w), _p(s.u), s.ldu, _p(s.v), s.ldv, work, lwork,
                         _p(s.rwork), info),
        Function.GESVDJ: (s.jobz, s.econ, s.m, s.n, a, s.lda, _p(s.w), _p(s.u), s.ldu, _p(s.v), s.ldv, work, lwork,
                          info, params),
        Function.GESVDJ_BATCHED: (s.jobz, s.m, s.n, a, s.lda, _p(s.w), _p(s.u), s.ldu, _p(s.v), s.ldv, work, lwork,
                                  info, params, s.batch),
        Function.SYEVJ: (s.jobz, s.uplo, s.n, a, s.lda, _p(s.w), work, lwork, info, params),
        Function.SYEVJ_BATCHED: (s.jobz, s.uplo, s.n, a, s.lda, _p(s.w), work, lwork, info, params, s.batch),
        Function.POTRF_BATCHED: (s.uplo, s.n, a, s.lda, info, s.batch),
        Function.POTRS_BATCHED: (s.uplo, s.n, s.nrhs, a, s.lda, _p(s.b), s.ldb, info, s.batch),
    }[f]
    name = f.name.lower().replace("_batched", "Batched")
    check(_classic(s, name)(handle, *args), f"cusolverDn{name}")


def _run_x(lib, handle, s: Solve, params) -> None:
    status, _, host_size = _x_query(handle, s, params) if s.function not in NO_WORKSPACE else (0, 0, 0)
    check(status, f"{s.function.name} buffer size")
    # The host workspace is the server's own: the client's host buffer never crosses the wire.
    host = _ffi.new("char[]", host_size) if host_size else _ffi.NULL
    f, t, a, ct, info = s.function.base, s.data_type, _p(s.a), s.compute_type, _p(s.info)
    real, work, size = REAL_OF[t], _p(s.work), s.work_size
    call = {
        Function.GETRF: lambda: lib.cusolverDnXgetrf(handle, params, s.m, s.n, t, a, s.lda, _p(s.ipiv), ct, work,
                                                     size, host, host_size, info),
        Function.GETRS: lambda: lib.cusolverDnXgetrs(handle, params, s.trans, s.n, s.nrhs, t, a, s.lda, _p(s.ipiv),
                                                     t, _p(s.b), s.ldb, info),
        Function.POTRF: lambda: lib.cusolverDnXpotrf(handle, params, s.uplo, s.n, t, a, s.lda, ct, work, size, host,
                                                     host_size, info),
        Function.POTRS: lambda: lib.cusolverDnXpotrs(handle, params, s.uplo, s.n, s.nrhs, t, a, s.lda, t, _p(s.b),
                                                     s.ldb, info),
        Function.GEQRF: lambda: lib.cusolverDnXgeqrf(handle, params, s.m, s.n, t, a, s.lda, t, _p(s.tau), ct, work,
                                                     size, host, host_size, info),
        Function.SYEVD: lambda: lib.cusolverDnXsyevd(handle, params, s.jobz, s.uplo, s.n, t, a, s.lda, real, _p(s.w),
                                                     ct, work, size, host, host_size, info),
        Function.SYEV_BATCHED: lambda: lib.cusolverDnXsyevBatched(handle, params, s.jobz, s.uplo, s.n, t, a, s.lda,
                                                                  real, _p(s.w), ct, work, size, host, host_size,
                                                                  info, s.batch),
        Function.GESVD: lambda: lib.cusolverDnXgesvd(handle, params, s.jobu, s.jobvt, s.m, s.n, t, a, s.lda, real,
                                                     _p(s.w), t, _p(s.u), s.ldu, t, _p(s.v), s.ldv, ct, work, size,
                                                     host, host_size, info),
    }[f]
    check(call(), f"cusolverDn{s.function.name.capitalize()}")


class CudaSolver:
    """Mixed into CudaBackend (which provides `_use`)."""

    def solver_create(self, ctx):
        self._use(ctx)
        return create()

    def solver_destroy(self, ctx, handle) -> None:
        self._use(ctx)
        destroy(handle)

    def solver_buffer_size(self, ctx, handle, solve: Solve) -> tuple[int, int, int]:
        self._use(ctx)
        return buffer_size(handle, solve)

    def solver_run(self, ctx, handle, stream, solve: Solve, arrays=None) -> None:
        # cuSOLVER reads pointer arrays itself, from the same device memory the server checked.
        self._use(ctx)
        run(handle, int(stream) if stream is not None else 0, solve, solve.work_size)
