/* The 64-bit dense API (cusolverDnX...): int64 sizes and pivots, workspaces in bytes, a data type per array.
 * rgpu takes the arrays' types to be A's (real for eigenvalues and singular values), as every caller it serves
 * passes them; other combinations are CUSOLVER_STATUS_NOT_SUPPORTED. The host workspace never travels: the
 * server gives its library a host buffer of its own. */
#include "solver.h"

static int real_of(int type)
{
    return type == SOLVER_C_32F ? SOLVER_R_32F : type == SOLVER_C_64F ? SOLVER_R_64F : type;
}

static int known(int type)
{
    return type == SOLVER_R_32F || type == SOLVER_R_64F || type == SOLVER_C_32F || type == SOLVER_C_64F;
}

static struct rgpu_solver_run_req request(int function, const struct solver_params *p, int type_a, int compute)
{
    struct rgpu_solver_run_req r = rgpu_solver_request(SOLVER_X_API | function, type_a);
    r.compute_type = (uint32_t)compute, r.algo = p ? (uint32_t)p->getrf_algo : 0;
    return r;
}

/* Query (`query` set: sizes into *device and *host) or run. */
static int finish(void *h, struct rgpu_solver_run_req *r, int query, size_t *device, size_t *host)
{
    if (!query)
        return rgpu_solver_submit(h, r);
    if (!device || !host)
        return CUSOLVER_STATUS_INVALID_VALUE;
    return rgpu_solver_query(h, r, device, host);
}

static int types_ok(int type_a, int other, int real_other)
{
    if (!known(type_a))
        return CUSOLVER_STATUS_NOT_SUPPORTED;
    return (other < 0 || other == type_a) && (real_other < 0 || real_other == real_of(type_a))
               ? 0 : CUSOLVER_STATUS_NOT_SUPPORTED;
}

static int getrf(void *h, struct solver_params *p, int query, int64_t m, int64_t n, int ta, void *a, int64_t lda,
                 int64_t *ipiv, int ct, void *work, size_t work_bytes, int *info, size_t *dev, size_t *host)
{
    int s = rgpu_solver_shape(m, n, lda) ? CUSOLVER_STATUS_INVALID_VALUE : types_ok(ta, -1, -1);
    if (s)
        return s;
    struct rgpu_solver_run_req r = request(SOLVER_GETRF, p, ta, ct);
    r.m = m, r.n = n, r.a = (uintptr_t)a, r.lda = lda, r.ipiv = (uintptr_t)ipiv, r.work = (uintptr_t)work,
    r.work_size = work_bytes, r.info = (uintptr_t)info;
    return finish(h, &r, query, dev, host);
}

SOLVER_API int cusolverDnXgetrf_bufferSize(void *h, struct solver_params *p, int64_t m, int64_t n, int ta,
                                           const void *a, int64_t lda, int ct, size_t *dev, size_t *host)
{
    return getrf(h, p, 1, m, n, ta, (void *)a, lda, NULL, ct, NULL, 0, NULL, dev, host);
}

SOLVER_API int cusolverDnXgetrf(void *h, struct solver_params *p, int64_t m, int64_t n, int ta, void *a, int64_t lda,
                                int64_t *ipiv, int ct, void *work, size_t work_bytes, void *host_work,
                                size_t host_bytes, int *info)
{
    (void)host_work, (void)host_bytes;
    return getrf(h, p, 0, m, n, ta, a, lda, ipiv, ct, work, work_bytes, info, NULL, NULL);
}

SOLVER_API int cusolverDnXgetrs(void *h, struct solver_params *p, int trans, int64_t n, int64_t nrhs, int ta,
                                const void *a, int64_t lda, const int64_t *ipiv, int tb, void *b, int64_t ldb,
                                int *info)
{
    int s = rgpu_solver_shape(n, n, lda) || rgpu_solver_shape(n, nrhs, ldb) ? CUSOLVER_STATUS_INVALID_VALUE
                                                                            : types_ok(ta, tb, -1);
    if (s)
        return s;
    struct rgpu_solver_run_req r = request(SOLVER_GETRS, p, ta, ta);
    r.trans = (uint32_t)trans, r.n = n, r.nrhs = nrhs, r.a = (uintptr_t)a, r.lda = lda, r.ipiv = (uintptr_t)ipiv,
    r.b = (uintptr_t)b, r.ldb = ldb, r.info = (uintptr_t)info;
    return rgpu_solver_submit(h, &r);
}

static int potrf(void *h, struct solver_params *p, int query, int uplo, int64_t n, int ta, void *a, int64_t lda,
                 int ct, void *work, size_t work_bytes, int *info, size_t *dev, size_t *host)
{
    int s = rgpu_solver_shape(n, n, lda) ? CUSOLVER_STATUS_INVALID_VALUE : types_ok(ta, -1, -1);
    if (s)
        return s;
    struct rgpu_solver_run_req r = request(SOLVER_POTRF, p, ta, ct);
    r.uplo = (uint32_t)uplo, r.n = n, r.a = (uintptr_t)a, r.lda = lda, r.work = (uintptr_t)work,
    r.work_size = work_bytes, r.info = (uintptr_t)info;
    return finish(h, &r, query, dev, host);
}

SOLVER_API int cusolverDnXpotrf_bufferSize(void *h, struct solver_params *p, int uplo, int64_t n, int ta,
                                           const void *a, int64_t lda, int ct, size_t *dev, size_t *host)
{
    return potrf(h, p, 1, uplo, n, ta, (void *)a, lda, ct, NULL, 0, NULL, dev, host);
}

SOLVER_API int cusolverDnXpotrf(void *h, struct solver_params *p, int uplo, int64_t n, int ta, void *a, int64_t lda,
                                int ct, void *work, size_t work_bytes, void *host_work, size_t host_bytes, int *info)
{
    (void)host_work, (void)host_bytes;
    return potrf(h, p, 0, uplo, n, ta, a, lda, ct, work, work_bytes, info, NULL, NULL);
}

SOLVER_API int cusolverDnXpotrs(void *h, struct solver_params *p, int uplo, int64_t n, int64_t nrhs, int ta,
                                const void *a, int64_t lda, int tb, void *b, int64_t ldb, int *info)
{
    int s = rgpu_solver_shape(n, n, lda) || rgpu_solver_shape(n, nrhs, ldb) ? CUSOLVER_STATUS_INVALID_VALUE
                                                                            : types_ok(ta, tb, -1);
    if (s)
        return s;
    struct rgpu_solver_run_req r = request(SOLVER_POTRS, p, ta, ta);
    r.uplo = (uint32_t)uplo, r.n = n, r.nrhs = nrhs, r.a = (uintptr_t)a, r.lda = lda, r.b = (uintptr_t)b,
    r.ldb = ldb, r.info = (uintptr_t)info;
    return rgpu_solver_submit(h, &r);
}

static int geqrf(void *h, struct solver_params *p, int query, int64_t m, int64_t n, int ta, void *a, int64_t lda,
                 int tt, void *tau, int ct, void *work, size_t work_bytes, int *info, size_t *dev, size_t *host)
{
    int s = rgpu_solver_shape(m, n, lda) ? CUSOLVER_STATUS_INVALID_VALUE : types_ok(ta, tt, -1);
    if (s)
        return s;
    struct rgpu_solver_run_req r = request(SOLVER_GEQRF, p, ta, ct);
    r.m = m, r.n = n, r.a = (uintptr_t)a, r.lda = lda, r.tau = (uintptr_t)tau, r.work = (uintptr_t)work,
    r.work_size = work_bytes, r.info = (uintptr_t)info;
    return finish(h, &r, query, dev, host);
}

SOLVER_API int cusolverDnXgeqrf_bufferSize(void *h, struct solver_params *p, int64_t m, int64_t n, int ta,
                                           const void *a, int64_t lda, int tt, const void *tau, int ct, size_t *dev,
                                           size_t *host)
{
    return geqrf(h, p, 1, m, n, ta, (void *)a, lda, tt, (void *)tau, ct, NULL, 0, NULL, dev, host);
}

SOLVER_API int cusolverDnXgeqrf(void *h, struct solver_params *p, int64_t m, int64_t n, int ta, void *a, int64_t lda,
                                int tt, void *tau, int ct, void *work, size_t work_bytes, void *host_work,
                                size_t host_bytes, int *info)
{
    (void)host_work, (void)host_bytes;
    return geqrf(h, p, 0, m, n, ta, a, lda, tt, tau, ct, work, work_bytes, info, NULL, NULL);
}

/* Xsyevd (batch 0: not batched) and XsyevBatched */
static int syev(void *h, struct solver_params *p, int query, int jobz, int uplo, int64_t n, int ta, void *a,
                int64_t lda, int tw, void *w, int ct, void *work, size_t work_bytes, int *info, size_t *dev,
                size_t *host, int64_t batch)
{
    int s = rgpu_solver_shape(n, n, lda) || batch < 0 ? CUSOLVER_STATUS_INVALID_VALUE : types_ok(ta, -1, tw);
    if (s)
        return s;
    struct rgpu_solver_run_req r = request(batch ? SOLVER_SYEV_BATCHED : SOLVER_SYEVD, p, ta, ct);
    r.jobz = (uint32_t)jobz, r.uplo = (uint32_t)uplo, r.n = n, r.a = (uintptr_t)a, r.lda = lda, r.w = (uintptr_t)w,
    r.work = (uintptr_t)work, r.work_size = work_bytes, r.info = (uintptr_t)info, r.batch = batch ? batch : 1;
    return finish(h, &r, query, dev, host);
}

SOLVER_API int cusolverDnXsyevd_bufferSize(void *h, struct solver_params *p, int jobz, int uplo, int64_t n, int ta,
                                           const void *a, int64_t lda, int tw, const void *w, int ct, size_t *dev,
                                           size_t *host)
{
    return syev(h, p, 1, jobz, uplo, n, ta, (void *)a, lda, tw, (void *)w, ct, NULL, 0, NULL, dev, host, 0);
}

SOLVER_API int cusolverDnXsyevd(void *h, struct solver_params *p, int jobz, int uplo, int64_t n, int ta, void *a,
                                int64_t lda, int tw, void *w, int ct, void *work, size_t work_bytes, void *host_work,
                                size_t host_bytes, int *info)
{
    (void)host_work, (void)host_bytes;
    return syev(h, p, 0, jobz, uplo, n, ta, a, lda, tw, w, ct, work, work_bytes, info, NULL, NULL, 0);
}

SOLVER_API int cusolverDnXsyevBatched_bufferSize(void *h, struct solver_params *p, int jobz, int uplo, int64_t n,
                                                 int ta, const void *a, int64_t lda, int tw, const void *w, int ct,
                                                 size_t *dev, size_t *host, int64_t batch)
{
    if (batch < 1)
        return CUSOLVER_STATUS_INVALID_VALUE;
    return syev(h, p, 1, jobz, uplo, n, ta, (void *)a, lda, tw, (void *)w, ct, NULL, 0, NULL, dev, host, batch);
}

SOLVER_API int cusolverDnXsyevBatched(void *h, struct solver_params *p, int jobz, int uplo, int64_t n, int ta,
                                      void *a, int64_t lda, int tw, void *w, int ct, void *work, size_t work_bytes,
                                      void *host_work, size_t host_bytes, int *info, int64_t batch)
{
    (void)host_work, (void)host_bytes;
    if (batch < 1)
        return CUSOLVER_STATUS_INVALID_VALUE;
    return syev(h, p, 0, jobz, uplo, n, ta, a, lda, tw, w, ct, work, work_bytes, info, NULL, NULL, batch);
}

struct xsvd {
    signed char jobu, jobvt;
    int64_t m, n, lda, ldu, ldvt;
    int ta, ts, tu, tvt, ct;
    const void *a, *s, *u, *vt;
    void *work;
    size_t work_bytes;
    int *info;
};

static int gesvd(void *h, struct solver_params *p, int query, struct xsvd q, size_t *dev, size_t *host)
{
    int s = rgpu_solver_shape(q.m, q.n, q.lda) ? CUSOLVER_STATUS_INVALID_VALUE : types_ok(q.ta, -1, q.ts);
    if (!s && ((q.jobu == 'A' || q.jobu == 'S') && q.tu != q.ta))
        s = CUSOLVER_STATUS_NOT_SUPPORTED;
    if (!s && ((q.jobvt == 'A' || q.jobvt == 'S') && q.tvt != q.ta))
        s = CUSOLVER_STATUS_NOT_SUPPORTED;
    if (s)
        return s;
    struct rgpu_solver_run_req r = request(SOLVER_GESVD, p, q.ta, q.ct);
    r.jobu = (uint32_t)(unsigned char)q.jobu, r.jobvt = (uint32_t)(unsigned char)q.jobvt, r.m = q.m, r.n = q.n,
    r.a = (uintptr_t)q.a, r.lda = q.lda, r.w = (uintptr_t)q.s, r.u = (uintptr_t)q.u, r.ldu = q.ldu,
    r.v = (uintptr_t)q.vt, r.ldv = q.ldvt, r.work = (uintptr_t)q.work, r.work_size = q.work_bytes,
    r.info = (uintptr_t)q.info;
    return finish(h, &r, query, dev, host);
}

SOLVER_API int cusolverDnXgesvd_bufferSize(void *h, struct solver_params *p, signed char jobu, signed char jobvt,
                                           int64_t m, int64_t n, int ta, const void *a, int64_t lda, int ts,
                                           const void *s, int tu, const void *u, int64_t ldu, int tvt, const void *vt,
                                           int64_t ldvt, int ct, size_t *dev, size_t *host)
{
    return gesvd(h, p, 1, (struct xsvd){jobu, jobvt, m, n, lda, ldu, ldvt, ta, ts, tu, tvt, ct, a, s, u, vt, NULL, 0,
                                        NULL}, dev, host);
}

SOLVER_API int cusolverDnXgesvd(void *h, struct solver_params *p, signed char jobu, signed char jobvt, int64_t m,
                                int64_t n, int ta, void *a, int64_t lda, int ts, void *s, int tu, void *u,
                                int64_t ldu, int tvt, void *vt, int64_t ldvt, int ct, void *work, size_t work_bytes,
                                void *host_work, size_t host_bytes, int *info)
{
    (void)host_work, (void)host_bytes;
    return gesvd(h, p, 0, (struct xsvd){jobu, jobvt, m, n, lda, ldu, ldvt, ta, ts, tu, tvt, ct, a, s, u, vt, work,
                                        work_bytes, info}, NULL, NULL);
}
