/* The classic dense routines (cusolverDn{S,D,C,Z}...): 32-bit sizes, int pivots, workspaces in elements. Each
 * typed entry point fills the request and goes through one of the shared bodies below. */
#include "solver.h"

static int square(int64_t n, int64_t lda)
{
    return rgpu_solver_shape(n, n, lda);
}

/* -- LU --------------------------------------------------------------------------------------------------- */
static int getrf(void *h, int type, int query, int m, int n, void *a, int lda, void *work, int *ipiv, int *info,
                 int *lwork)
{
    int s = rgpu_solver_shape(m, n, lda);
    if (s)
        return s;
    struct rgpu_solver_run_req r = rgpu_solver_request(SOLVER_GETRF, type);
    r.m = m, r.n = n, r.a = (uintptr_t)a, r.lda = lda, r.work = (uintptr_t)work, r.ipiv = (uintptr_t)ipiv,
    r.info = (uintptr_t)info;
    return query ? rgpu_solver_lwork(h, &r, lwork) : rgpu_solver_submit(h, &r);
}

static int getrs(void *h, int type, int trans, int n, int nrhs, const void *a, int lda, const int *ipiv, void *b,
                 int ldb, int *info)
{
    int s = square(n, lda) ? CUSOLVER_STATUS_INVALID_VALUE : rgpu_solver_shape(n, nrhs, ldb);
    if (s)
        return s;
    struct rgpu_solver_run_req r = rgpu_solver_request(SOLVER_GETRS, type);
    r.n = n, r.nrhs = nrhs, r.trans = (uint32_t)trans, r.a = (uintptr_t)a, r.lda = lda, r.ipiv = (uintptr_t)ipiv,
    r.b = (uintptr_t)b, r.ldb = ldb, r.info = (uintptr_t)info;
    return rgpu_solver_submit(h, &r);
}

/* -- Cholesky --------------------------------------------------------------------------------------------- */
static int potrf(void *h, int type, int query, int uplo, int n, void *a, int lda, void *work, int lwork, int *info,
                 int *lwork_out)
{
    int s = square(n, lda);
    if (s)
        return s;
    struct rgpu_solver_run_req r = rgpu_solver_request(SOLVER_POTRF, type);
    r.uplo = (uint32_t)uplo, r.n = n, r.a = (uintptr_t)a, r.lda = lda, r.work = (uintptr_t)work,
    r.work_size = (uint64_t)(int64_t)lwork, r.info = (uintptr_t)info;
    return query ? rgpu_solver_lwork(h, &r, lwork_out) : rgpu_solver_submit(h, &r);
}

static int potrs(void *h, int type, int uplo, int n, int nrhs, const void *a, int lda, void *b, int ldb, int *info)
{
    int s = square(n, lda) ? CUSOLVER_STATUS_INVALID_VALUE : rgpu_solver_shape(n, nrhs, ldb);
    if (s)
        return s;
    struct rgpu_solver_run_req r = rgpu_solver_request(SOLVER_POTRS, type);
    r.uplo = (uint32_t)uplo, r.n = n, r.nrhs = nrhs, r.a = (uintptr_t)a, r.lda = lda, r.b = (uintptr_t)b,
    r.ldb = ldb, r.info = (uintptr_t)info;
    return rgpu_solver_submit(h, &r);
}

/* potrfBatched (b NULL) and potrsBatched: a and b are device arrays of `batch` matrix pointers. */
static int potr_batched(void *h, int type, int uplo, int n, int nrhs, void *a, int lda, void *b, int ldb, int *info,
                        int batch)
{
    if (n < 0 || lda < (n > 1 ? n : 1) || batch < 1 || (b && (nrhs < 0 || ldb < (n > 1 ? n : 1))))
        return CUSOLVER_STATUS_INVALID_VALUE;
    struct rgpu_solver_run_req r = rgpu_solver_request(b ? SOLVER_POTRS_BATCHED : SOLVER_POTRF_BATCHED, type);
    r.uplo = (uint32_t)uplo, r.n = n, r.nrhs = b ? nrhs : 0, r.a = (uintptr_t)a, r.lda = lda, r.b = (uintptr_t)b,
    r.ldb = ldb, r.info = (uintptr_t)info, r.batch = batch;
    return rgpu_solver_submit(h, &r);
}

/* -- QR ----------------------------------------------------------------------------------------------------- */
static int qr(void *h, int type, int function, int query, int side, int trans, int m, int n, int k, const void *a,
              int lda, const void *tau, void *c, int ldc, void *work, int lwork, int *info, int *lwork_out)
{
    int rows = function == SOLVER_ORMQR ? (side == 0 ? m : n) : m, cols = function == SOLVER_ORMQR ? k : n;
    int s = rgpu_solver_shape(rows, cols, lda);
    if (!s && function == SOLVER_ORMQR)
        s = rgpu_solver_shape(m, n, ldc);
    if (!s && k < 0)
        s = CUSOLVER_STATUS_INVALID_VALUE;
    if (s)
        return s;
    struct rgpu_solver_run_req r = rgpu_solver_request(function, type);
    r.side = (uint32_t)side, r.trans = (uint32_t)trans, r.m = m, r.n = n, r.k = k, r.a = (uintptr_t)a, r.lda = lda,
    r.tau = (uintptr_t)tau, r.b = (uintptr_t)c, r.ldb = ldc, r.work = (uintptr_t)work,
    r.work_size = (uint64_t)(int64_t)lwork, r.info = (uintptr_t)info;
    return query ? rgpu_solver_lwork(h, &r, lwork_out) : rgpu_solver_submit(h, &r);
}

/* -- eigenvalues and singular values ------------------------------------------------------------------------ */
/* syevd (params NULL), syevj and syevjBatched */
static int eigen(void *h, int type, int function, int query, int jobz, int uplo, int n, const void *a, int lda,
                 const void *w, void *work, int lwork, int *info, int *lwork_out, const struct jacobi_info *params,
                 int batch)
{
    int s = square(n, lda);
    if (!s && function != SOLVER_SYEVD && (!params || batch < 1))
        s = CUSOLVER_STATUS_INVALID_VALUE;
    if (s)
        return s;
    struct rgpu_solver_run_req r = rgpu_solver_request(function, type);
    r.jobz = (uint32_t)jobz, r.uplo = (uint32_t)uplo, r.n = n, r.a = (uintptr_t)a, r.lda = lda, r.w = (uintptr_t)w,
    r.work = (uintptr_t)work, r.work_size = (uint64_t)(int64_t)lwork, r.info = (uintptr_t)info, r.batch = batch;
    if (params)
        r.tol = params->tolerance, r.max_sweeps = (uint32_t)params->max_sweeps, r.sort = (uint32_t)params->sort;
    return query ? rgpu_solver_lwork(h, &r, lwork_out) : rgpu_solver_submit(h, &r);
}

struct svd {
    int function, jobu, jobvt, jobz, econ, m, n, lda, ldu, ldv, lwork, batch;
    const void *a, *s, *u, *v, *rwork;
    void *work;
    int *info;
    const struct jacobi_info *params;
};

static int svd(void *h, int type, int query, struct svd q, int *lwork_out)
{
    int s = q.function == SOLVER_GESVD && query ? (q.m < 0 || q.n < 0 ? CUSOLVER_STATUS_INVALID_VALUE : 0)
                                                : rgpu_solver_shape(q.m, q.n, q.lda);
    if (!s && q.function != SOLVER_GESVD && !q.params)
        s = CUSOLVER_STATUS_INVALID_VALUE;
    if (s)
        return s;
    struct rgpu_solver_run_req r = rgpu_solver_request(q.function, type);
    r.jobu = (uint32_t)(unsigned char)q.jobu, r.jobvt = (uint32_t)(unsigned char)q.jobvt, r.jobz = (uint32_t)q.jobz,
    r.econ = (uint32_t)q.econ, r.m = q.m, r.n = q.n, r.a = (uintptr_t)q.a, r.lda = q.lda, r.w = (uintptr_t)q.s,
    r.u = (uintptr_t)q.u, r.ldu = q.ldu, r.v = (uintptr_t)q.v, r.ldv = q.ldv, r.rwork = (uintptr_t)q.rwork,
    r.work = (uintptr_t)q.work, r.work_size = (uint64_t)(int64_t)q.lwork, r.info = (uintptr_t)q.info,
    r.batch = q.batch;
    if (q.params) {
        r.tol = q.params->tolerance, r.max_sweeps = (uint32_t)q.params->max_sweeps, r.sort = (uint32_t)q.params->sort;
    }
    return query ? rgpu_solver_lwork(h, &r, lwork_out) : rgpu_solver_submit(h, &r);
}

#define SVD(...) ((struct svd){__VA_ARGS__})

/* One set of classic entry points per type: T the letter, D the cudaDataType, ORG/ORM/EV/EVJ the names the
 * complex types give the orthogonal and symmetric routines (ungqr, unmqr, heevd, heevj). */
#define CLASSIC(T, D, ORG, ORM, EV, EVJ)                                                                            \
    SOLVER_API int cusolverDn##T##getrf_bufferSize(void *h, int m, int n, void *a, int lda, int *lwork)            \
    {                                                                                                               \
        return getrf(h, D, 1, m, n, a, lda, NULL, NULL, NULL, lwork);                                               \
    }                                                                                                               \
    SOLVER_API int cusolverDn##T##getrf(void *h, int m, int n, void *a, int lda, void *work, int *ipiv, int *info) \
    {                                                                                                               \
        return getrf(h, D, 0, m, n, a, lda, work, ipiv, info, NULL);                                                \
    }                                                                                                               \
    SOLVER_API int cusolverDn##T##getrs(void *h, int trans, int n, int nrhs, const void *a, int lda,               \
                                        const int *ipiv, void *b, int ldb, int *info)                               \
    {                                                                                                               \
        return getrs(h, D, trans, n, nrhs, a, lda, ipiv, b, ldb, info);                                             \
    }                                                                                                               \
    SOLVER_API int cusolverDn##T##potrf_bufferSize(void *h, int uplo, int n, void *a, int lda, int *lwork)         \
    {                                                                                                               \
        return potrf(h, D, 1, uplo, n, a, lda, NULL, 0, NULL, lwork);                                               \
    }                                                                                                               \
    SOLVER_API int cusolverDn##T##potrf(void *h, int uplo, int n, void *a, int lda, void *work, int lwork,         \
                                        int *info)                                                                  \
    {                                                                                                               \
        return potrf(h, D, 0, uplo, n, a, lda, work, lwork, info, NULL);                                            \
    }                                                                                                               \
    SOLVER_API int cusolverDn##T##potrs(void *h, int uplo, int n, int nrhs, const void *a, int lda, void *b,       \
                                        int ldb, int *info)                                                         \
    {                                                                                                               \
        return potrs(h, D, uplo, n, nrhs, a, lda, b, ldb, info);                                                    \
    }                                                                                                               \
    SOLVER_API int cusolverDn##T##potrfBatched(void *h, int uplo, int n, void *a[], int lda, int *info, int batch)  \
    {                                                                                                               \
        return potr_batched(h, D, uplo, n, 0, a, lda, NULL, 0, info, batch);                                        \
    }                                                                                                               \
    SOLVER_API int cusolverDn##T##potrsBatched(void *h, int uplo, int n, int nrhs, void *a[], int lda, void *b[],  \
                                               int ldb, int *info, int batch)                                       \
    {                                                                                                               \
        return b ? potr_batched(h, D, uplo, n, nrhs, a, lda, b, ldb, info, batch) : CUSOLVER_STATUS_INVALID_VALUE;  \
    }                                                                                                               \
    SOLVER_API int cusolverDn##T##geqrf_bufferSize(void *h, int m, int n, void *a, int lda, int *lwork)            \
    {                                                                                                               \
        return qr(h, D, SOLVER_GEQRF, 1, 0, 0, m, n, 0, a, lda, NULL, NULL, 1, NULL, 0, NULL, lwork);               \
    }                                                                                                               \
    SOLVER_API int cusolverDn##T##geqrf(void *h, int m, int n, void *a, int lda, void *tau, void *work, int lwork, \
                                        int *info)                                                                  \
    {                                                                                                               \
        return qr(h, D, SOLVER_GEQRF, 0, 0, 0, m, n, 0, a, lda, tau, NULL, 1, work, lwork, info, NULL);             \
    }                                                                                                               \
    SOLVER_API int cusolverDn##T##ORG##_bufferSize(void *h, int m, int n, int k, const void *a, int lda,           \
                                                   const void *tau, int *lwork)                                     \
    {                                                                                                               \
        return qr(h, D, SOLVER_ORGQR, 1, 0, 0, m, n, k, a, lda, tau, NULL, 1, NULL, 0, NULL, lwork);                \
    }                                                                                                               \
    SOLVER_API int cusolverDn##T##ORG(void *h, int m, int n, int k, void *a, int lda, const void *tau, void *work, \
                                      int lwork, int *info)                                                         \
    {                                                                                                               \
        return qr(h, D, SOLVER_ORGQR, 0, 0, 0, m, n, k, a, lda, tau, NULL, 1, work, lwork, info, NULL);             \
    }                                                                                                               \
    SOLVER_API int cusolverDn##T##ORM##_bufferSize(void *h, int side, int trans, int m, int n, int k,              \
                                                   const void *a, int lda, const void *tau, const void *c, int ldc, \
                                                   int *lwork)                                                      \
    {                                                                                                               \
        return qr(h, D, SOLVER_ORMQR, 1, side, trans, m, n, k, a, lda, tau, (void *)c, ldc, NULL, 0, NULL, lwork);  \
    }                                                                                                               \
    SOLVER_API int cusolverDn##T##ORM(void *h, int side, int trans, int m, int n, int k, const void *a, int lda,   \
                                      const void *tau, void *c, int ldc, void *work, int lwork, int *info)         \
    {                                                                                                               \
        return qr(h, D, SOLVER_ORMQR, 0, side, trans, m, n, k, a, lda, tau, c, ldc, work, lwork, info, NULL);       \
    }                                                                                                               \
    SOLVER_API int cusolverDn##T##EV##_bufferSize(void *h, int jobz, int uplo, int n, const void *a, int lda,      \
                                                  const void *w, int *lwork)                                        \
    {                                                                                                               \
        return eigen(h, D, SOLVER_SYEVD, 1, jobz, uplo, n, a, lda, w, NULL, 0, NULL, lwork, NULL, 1);               \
    }                                                                                                               \
    SOLVER_API int cusolverDn##T##EV(void *h, int jobz, int uplo, int n, void *a, int lda, void *w, void *work,    \
                                     int lwork, int *info)                                                          \
    {                                                                                                               \
        return eigen(h, D, SOLVER_SYEVD, 0, jobz, uplo, n, a, lda, w, work, lwork, info, NULL, NULL, 1);            \
    }                                                                                                               \
    SOLVER_API int cusolverDn##T##EVJ##_bufferSize(void *h, int jobz, int uplo, int n, const void *a, int lda,     \
                                                   const void *w, int *lwork, struct jacobi_info *p)                \
    {                                                                                                               \
        return eigen(h, D, SOLVER_SYEVJ, 1, jobz, uplo, n, a, lda, w, NULL, 0, NULL, lwork, p, 1);                  \
    }                                                                                                               \
    SOLVER_API int cusolverDn##T##EVJ(void *h, int jobz, int uplo, int n, void *a, int lda, void *w, void *work,   \
                                      int lwork, int *info, struct jacobi_info *p)                                  \
    {                                                                                                               \
        return eigen(h, D, SOLVER_SYEVJ, 0, jobz, uplo, n, a, lda, w, work, lwork, info, NULL, p, 1);               \
    }                                                                                                               \
    SOLVER_API int cusolverDn##T##EVJ##Batched_bufferSize(void *h, int jobz, int uplo, int n, const void *a,       \
                                                          int lda, const void *w, int *lwork,                       \
                                                          struct jacobi_info *p, int batch)                         \
    {                                                                                                               \
        return eigen(h, D, SOLVER_SYEVJ_BATCHED, 1, jobz, uplo, n, a, lda, w, NULL, 0, NULL, lwork, p, batch);      \
    }                                                                                                               \
    SOLVER_API int cusolverDn##T##EVJ##Batched(void *h, int jobz, int uplo, int n, void *a, int lda, void *w,      \
                                               void *work, int lwork, int *info, struct jacobi_info *p, int batch) \
    {                                                                                                               \
        return eigen(h, D, SOLVER_SYEVJ_BATCHED, 0, jobz, uplo, n, a, lda, w, work, lwork, info, NULL, p, batch);   \
    }                                                                                                               \
    SOLVER_API int cusolverDn##T##gesvd_bufferSize(void *h, int m, int n, int *lwork)                              \
    {                                                                                                               \
        return svd(h, D, 1, SVD(.function = SOLVER_GESVD, .jobu = 'N', .jobvt = 'N', .m = m, .n = n, .lda = m),    \
                   lwork);                                                                                          \
    }                                                                                                               \
    SOLVER_API int cusolverDn##T##gesvd(void *h, signed char jobu, signed char jobvt, int m, int n, void *a,       \
                                        int lda, void *s, void *u, int ldu, void *vt, int ldvt, void *work,         \
                                        int lwork, void *rwork, int *info)                                          \
    {                                                                                                               \
        return svd(h, D, 0, SVD(.function = SOLVER_GESVD, .jobu = jobu, .jobvt = jobvt, .m = m, .n = n,            \
                                .lda = lda, .ldu = ldu, .ldv = ldvt, .lwork = lwork, .batch = 1, .a = a, .s = s,    \
                                .u = u, .v = vt, .rwork = rwork, .work = work, .info = info),                       \
                   NULL);                                                                                           \
    }                                                                                                               \
    SOLVER_API int cusolverDn##T##gesvdj_bufferSize(void *h, int jobz, int econ, int m, int n, const void *a,      \
                                                    int lda, const void *s, const void *u, int ldu, const void *v, \
                                                    int ldv, int *lwork, struct jacobi_info *p)                     \
    {                                                                                                               \
        return svd(h, D, 1, SVD(.function = SOLVER_GESVDJ, .jobz = jobz, .econ = econ, .m = m, .n = n, .lda = lda, \
                                .ldu = ldu, .ldv = ldv, .batch = 1, .a = a, .s = s, .u = u, .v = v, .params = p),   \
                   lwork);                                                                                          \
    }                                                                                                               \
    SOLVER_API int cusolverDn##T##gesvdj(void *h, int jobz, int econ, int m, int n, void *a, int lda, void *s,     \
                                         void *u, int ldu, void *v, int ldv, void *work, int lwork, int *info,      \
                                         struct jacobi_info *p)                                                     \
    {                                                                                                               \
        return svd(h, D, 0, SVD(.function = SOLVER_GESVDJ, .jobz = jobz, .econ = econ, .m = m, .n = n, .lda = lda, \
                                .ldu = ldu, .ldv = ldv, .lwork = lwork, .batch = 1, .a = a, .s = s, .u = u, .v = v, \
                                .work = work, .info = info, .params = p),                                           \
                   NULL);                                                                                           \
    }                                                                                                               \
    SOLVER_API int cusolverDn##T##gesvdjBatched_bufferSize(void *h, int jobz, int m, int n, const void *a,         \
                                                           int lda, const void *s, const void *u, int ldu,          \
                                                           const void *v, int ldv, int *lwork,                      \
                                                           struct jacobi_info *p, int batch)                        \
    {                                                                                                               \
        return svd(h, D, 1, SVD(.function = SOLVER_GESVDJ_BATCHED, .jobz = jobz, .m = m, .n = n, .lda = lda,       \
                                .ldu = ldu, .ldv = ldv, .batch = batch, .a = a, .s = s, .u = u, .v = v, .params = p),\
                   lwork);                                                                                          \
    }                                                                                                               \
    SOLVER_API int cusolverDn##T##gesvdjBatched(void *h, int jobz, int m, int n, void *a, int lda, void *s,        \
                                                void *u, int ldu, void *v, int ldv, void *work, int lwork,          \
                                                int *info, struct jacobi_info *p, int batch)                        \
    {                                                                                                               \
        return svd(h, D, 0, SVD(.function = SOLVER_GESVDJ_BATCHED, .jobz = jobz, .m = m, .n = n, .lda = lda,       \
                                .ldu = ldu, .ldv = ldv, .lwork = lwork, .batch = batch, .a = a, .s = s, .u = u,     \
                                .v = v, .work = work, .info = info, .params = p),                                   \
                   NULL);                                                                                           \
    }

/* defines: cusolverDnSgetrf_bufferSize cusolverDnSgetrf cusolverDnSgetrs cusolverDnSpotrf_bufferSize
 * cusolverDnSpotrf cusolverDnSpotrs cusolverDnSgeqrf_bufferSize cusolverDnSgeqrf cusolverDnSorgqr_bufferSize
 * cusolverDnSorgqr cusolverDnSormqr_bufferSize cusolverDnSormqr cusolverDnSsyevd_bufferSize cusolverDnSsyevd
 * cusolverDnSgesvd_bufferSize cusolverDnSgesvd cusolverDnSgesvdj_bufferSize cusolverDnSgesvdj
 * cusolverDnSgesvdjBatched_bufferSize cusolverDnSgesvdjBatched
 * cusolverDnDgetrf_bufferSize cusolverDnDgetrf cusolverDnDgetrs cusolverDnDpotrf_bufferSize
 * cusolverDnDpotrf cusolverDnDpotrs cusolverDnDgeqrf_bufferSize cusolverDnDgeqrf cusolverDnDorgqr_bufferSize
 * cusolverDnDorgqr cusolverDnDormqr_bufferSize cusolverDnDormqr cusolverDnDsyevd_bufferSize cusolverDnDsyevd
 * cusolverDnDgesvd_bufferSize cusolverDnDgesvd cusolverDnDgesvdj_bufferSize cusolverDnDgesvdj
 * cusolverDnDgesvdjBatched_bufferSize cusolverDnDgesvdjBatched
 * cusolverDnCgetrf_bufferSize cusolverDnCgetrf cusolverDnCgetrs cusolverDnCpotrf_bufferSize
 * cusolverDnCpotrf cusolverDnCpotrs cusolverDnCgeqrf_bufferSize cusolverDnCgeqrf cusolverDnCungqr_bufferSize
 * cusolverDnCungqr cusolverDnCunmqr_bufferSize cusolverDnCunmqr cusolverDnCheevd_bufferSize cusolverDnCheevd
 * cusolverDnCgesvd_bufferSize cusolverDnCgesvd cusolverDnCgesvdj_bufferSize cusolverDnCgesvdj
 * cusolverDnCgesvdjBatched_bufferSize cusolverDnCgesvdjBatched
 * cusolverDnZgetrf_bufferSize cusolverDnZgetrf cusolverDnZgetrs cusolverDnZpotrf_bufferSize
 * cusolverDnZpotrf cusolverDnZpotrs cusolverDnZgeqrf_bufferSize cusolverDnZgeqrf cusolverDnZungqr_bufferSize
 * cusolverDnZungqr cusolverDnZunmqr_bufferSize cusolverDnZunmqr cusolverDnZheevd_bufferSize cusolverDnZheevd
 * cusolverDnZgesvd_bufferSize cusolverDnZgesvd cusolverDnZgesvdj_bufferSize cusolverDnZgesvdj
 * cusolverDnZgesvdjBatched_bufferSize cusolverDnZgesvdjBatched
 * cusolverDnSsyevj_bufferSize cusolverDnSsyevj cusolverDnSsyevjBatched_bufferSize cusolverDnSsyevjBatched
 * cusolverDnDsyevj_bufferSize cusolverDnDsyevj cusolverDnDsyevjBatched_bufferSize cusolverDnDsyevjBatched
 * cusolverDnCheevj_bufferSize cusolverDnCheevj cusolverDnCheevjBatched_bufferSize cusolverDnCheevjBatched
 * cusolverDnZheevj_bufferSize cusolverDnZheevj cusolverDnZheevjBatched_bufferSize cusolverDnZheevjBatched
 * cusolverDnSpotrfBatched cusolverDnSpotrsBatched cusolverDnDpotrfBatched cusolverDnDpotrsBatched
 * cusolverDnCpotrfBatched cusolverDnCpotrsBatched cusolverDnZpotrfBatched cusolverDnZpotrsBatched */
CLASSIC(S, SOLVER_R_32F, orgqr, ormqr, syevd, syevj)
CLASSIC(D, SOLVER_R_64F, orgqr, ormqr, syevd, syevj)
CLASSIC(C, SOLVER_C_32F, ungqr, unmqr, heevd, heevj)
CLASSIC(Z, SOLVER_C_64F, ungqr, unmqr, heevd, heevj)
