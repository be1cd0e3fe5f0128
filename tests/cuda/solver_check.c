/* Dense factorizations and solves through whatever libcusolver the loader gives (NVIDIA's natively, rgpu's
 * stand-in through rgpu), every result checked against a CPU reference: LU (classic and 64-bit API), Cholesky,
 * QR with Q formed and applied, symmetric eigenvalues, SVD (gesvd, Jacobi, batched Jacobi), and the info arrays
 * of a singular and an indefinite matrix. Declares the prototypes it needs, so it builds without cuSOLVER
 * headers. One line per check; exits non-zero on any mismatch.
 *
 * `solver_check hostile` instead checks rgpu's refusals of bad input (run through rgpu only: NVIDIA's library
 * reports some of them differently, or not at all): a missing handle, a workspace shorter than the routine
 * needs, a pointer the program never allocated, a missing info array; after each the next call works. */
#include <stdint.h>
#include <string.h>

#include "libcheck.h"

typedef void *handle_t;
int cusolverDnCreate(handle_t *h);
int cusolverDnDestroy(handle_t h);
int cusolverDnCreateParams(handle_t *p);
int cusolverDnDestroyParams(handle_t p);
int cusolverDnSetAdvOptions(handle_t p, int function, int algo);
int cusolverDnCreateGesvdjInfo(handle_t *p);
int cusolverDnDestroyGesvdjInfo(handle_t p);
int cusolverDnXgesvdjSetTolerance(handle_t p, double tol);
int cusolverDnXgesvdjSetMaxSweeps(handle_t p, int sweeps);
int cusolverDnCreateSyevjInfo(handle_t *p);
int cusolverDnDestroySyevjInfo(handle_t p);
int cusolverDnXsyevjSetSortEig(handle_t p, int sort);
int cusolverDnSsyevj_bufferSize(handle_t, int, int, int, const float *, int, const float *, int *, handle_t);
int cusolverDnSsyevj(handle_t, int, int, int, float *, int, float *, float *, int, int *, handle_t);
int cusolverDnDsyevjBatched_bufferSize(handle_t, int, int, int, const double *, int, const double *, int *, handle_t,
                                       int);
int cusolverDnDsyevjBatched(handle_t, int, int, int, double *, int, double *, double *, int, int *, handle_t, int);
int cusolverDnXsyevBatched_bufferSize(handle_t, handle_t, int, int, int64_t, int, const void *, int64_t, int,
                                      const void *, int, size_t *, size_t *, int64_t);
int cusolverDnXsyevBatched(handle_t, handle_t, int, int, int64_t, int, void *, int64_t, int, void *, int, void *,
                           size_t, void *, size_t, int *, int64_t);
int cusolverDnDgetrf_bufferSize(handle_t, int, int, double *, int, int *);
int cusolverDnDgetrf(handle_t, int, int, double *, int, double *, int *, int *);
int cusolverDnDgetrs(handle_t, int, int, int, const double *, int, const int *, double *, int, int *);
int cusolverDnDpotrf_bufferSize(handle_t, int, int, double *, int, int *);
int cusolverDnDpotrf(handle_t, int, int, double *, int, double *, int, int *);
int cusolverDnDpotrs(handle_t, int, int, int, const double *, int, double *, int, int *);
int cusolverDnDpotrfBatched(handle_t, int, int, double **, int, int *, int);
int cusolverDnDpotrsBatched(handle_t, int, int, int, double **, int, double **, int, int *, int);
int cusolverDnDgeqrf_bufferSize(handle_t, int, int, double *, int, int *);
int cusolverDnDgeqrf(handle_t, int, int, double *, int, double *, double *, int, int *);
int cusolverDnDorgqr_bufferSize(handle_t, int, int, int, const double *, int, const double *, int *);
int cusolverDnDorgqr(handle_t, int, int, int, double *, int, const double *, double *, int, int *);
int cusolverDnDormqr_bufferSize(handle_t, int, int, int, int, int, const double *, int, const double *,
                                const double *, int, int *);
int cusolverDnDormqr(handle_t, int, int, int, int, int, const double *, int, const double *, double *, int, double *,
                     int, int *);
int cusolverDnDsyevd_bufferSize(handle_t, int, int, int, const double *, int, const double *, int *);
int cusolverDnDsyevd(handle_t, int, int, int, double *, int, double *, double *, int, int *);
int cusolverDnDgesvd_bufferSize(handle_t, int, int, int *);
int cusolverDnDgesvd(handle_t, signed char, signed char, int, int, double *, int, double *, double *, int, double *,
                     int, double *, int, double *, int *);
int cusolverDnDgesvdj_bufferSize(handle_t, int, int, int, int, const double *, int, const double *, const double *,
                                 int, const double *, int, int *, handle_t);
int cusolverDnDgesvdj(handle_t, int, int, int, int, double *, int, double *, double *, int, double *, int, double *,
                      int, int *, handle_t);
int cusolverDnSgesvdjBatched_bufferSize(handle_t, int, int, int, const float *, int, const float *, const float *,
                                        int, const float *, int, int *, handle_t, int);
int cusolverDnSgesvdjBatched(handle_t, int, int, int, float *, int, float *, float *, int, float *, int, float *, int,
                             int *, handle_t, int);
int cusolverDnXgetrf_bufferSize(handle_t, handle_t, int64_t, int64_t, int, const void *, int64_t, int, size_t *,
                                size_t *);
int cusolverDnXgetrf(handle_t, handle_t, int64_t, int64_t, int, void *, int64_t, int64_t *, int, void *, size_t,
                     void *, size_t, int *);
int cusolverDnXgetrs(handle_t, handle_t, int, int64_t, int64_t, int, const void *, int64_t, const int64_t *, int,
                     void *, int64_t, int *);
int cusolverDnXpotrf_bufferSize(handle_t, handle_t, int, int64_t, int, const void *, int64_t, int, size_t *,
                                size_t *);
int cusolverDnXpotrf(handle_t, handle_t, int, int64_t, int, void *, int64_t, int, void *, size_t, void *, size_t,
                     int *);
int cusolverDnXpotrs(handle_t, handle_t, int, int64_t, int64_t, int, const void *, int64_t, int, void *, int64_t,
                     int *);
int cusolverDnXgeqrf_bufferSize(handle_t, handle_t, int64_t, int64_t, int, const void *, int64_t, int, const void *,
                                int, size_t *, size_t *);
int cusolverDnXgeqrf(handle_t, handle_t, int64_t, int64_t, int, void *, int64_t, int, void *, int, void *, size_t,
                     void *, size_t, int *);
int cusolverDnXsyevd_bufferSize(handle_t, handle_t, int, int, int64_t, int, const void *, int64_t, int, const void *,
                                int, size_t *, size_t *);
int cusolverDnXsyevd(handle_t, handle_t, int, int, int64_t, int, void *, int64_t, int, void *, int, void *, size_t,
                     void *, size_t, int *);
int cusolverDnXgesvd_bufferSize(handle_t, handle_t, signed char, signed char, int64_t, int64_t, int, const void *,
                                int64_t, int, const void *, int, const void *, int64_t, int, const void *, int64_t,
                                int, size_t *, size_t *);
int cusolverDnXgesvd(handle_t, handle_t, signed char, signed char, int64_t, int64_t, int, void *, int64_t, int,
                     void *, int, void *, int64_t, int, void *, int64_t, int, void *, size_t, void *, size_t, int *);

enum { OP_N = 0, OP_T = 1, LOWER = 0, UPPER = 1, LEFT = 0, VECTORS = 1, R_32F = 0, R_64F = 1, GETRF_FN = 0 };

static int info_of(const int *d)
{
    int v;
    get(&v, d, sizeof v);
    return v;
}

static double *random_matrix(int rows, int cols)
{
    double *a = malloc(sizeof(double) * rows * cols);
    for (int i = 0; i < rows * cols; i++)
        a[i] = random_value(2.0);
    return a;
}

/* C (m x n) = op(A) op(B), column-major; ta/tb transpose. */
static void mul(int ta, int tb, int m, int n, int k, const double *a, int lda, const double *b, int ldb, double *c)
{
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            double acc = 0;
            for (int p = 0; p < k; p++)
                acc += (ta ? a[p + i * lda] : a[i + p * lda]) * (tb ? b[j + p * ldb] : b[p + j * ldb]);
            c[i + j * m] = acc;
        }
}

/* A symmetric positive definite n x n matrix: B^T B + n I. */
static double *spd(int n)
{
    double *b = random_matrix(n, n), *a = malloc(sizeof(double) * n * n);
    mul(1, 0, n, n, n, b, n, b, n, a);
    for (int i = 0; i < n; i++)
        a[i + i * n] += n;
    free(b);
    return a;
}

/* The pivots LAPACK's partial pivoting picks (largest magnitude, first on ties), 1-based. */
static void ref_pivots(const double *a0, int n, int *ipiv)
{
    double *a = malloc(sizeof(double) * n * n);
    memcpy(a, a0, sizeof(double) * n * n);
    for (int j = 0; j < n; j++) {
        int p = j;
        for (int i = j + 1; i < n; i++)
            if (fabs(a[i + j * n]) > fabs(a[p + j * n]))
                p = i;
        ipiv[j] = p + 1;
        for (int c = 0; c < n; c++) {
            double t = a[j + c * n];
            a[j + c * n] = a[p + c * n], a[p + c * n] = t;
        }
        for (int i = j + 1; i < n; i++) {
            double l = a[i + j * n] / a[j + j * n];
            for (int c = j; c < n; c++)
                a[i + c * n] -= l * a[j + c * n];
        }
    }
    free(a);
}

static void check_lu(handle_t h)
{
    const int n = 37, nrhs = 3;
    double *a = random_matrix(n, n), *b = random_matrix(n, nrhs), x[37 * 3], ax[37 * 3];
    double *da = dev(a, sizeof(double) * n * n), *db = dev(b, sizeof(double) * n * nrhs);
    int *dipiv = dev(NULL, sizeof(int) * n), *dinfo = dev(NULL, sizeof(int)), lwork, ipiv[37], want[37];
    CHECK(cusolverDnDgetrf_bufferSize(h, n, n, da, n, &lwork));
    double *work = dev(NULL, sizeof(double) * (lwork ? lwork : 1));
    CHECK(cusolverDnDgetrf(h, n, n, da, n, work, dipiv, dinfo));
    CHECK(cusolverDnDgetrs(h, OP_N, n, nrhs, da, n, dipiv, db, n, dinfo));
    get(x, db, sizeof x);
    get(ipiv, dipiv, sizeof ipiv);
    mul(0, 0, n, nrhs, n, a, n, x, n, ax);
    report("Dgetrf+Dgetrs 37x37, 3 rhs", max_diff(ax, b, n * nrhs), 1e-10);
    ref_pivots(a, n, want);
    expect("Dgetrf pivots as LAPACK's", memcmp(ipiv, want, sizeof ipiv) == 0, 1);
    expect("Dgetrs info", info_of(dinfo), 0);

    /* the 64-bit API, float, ALG_1, a transposed solve */
    handle_t params;
    CHECK(cusolverDnCreateParams(&params));
    CHECK(cusolverDnSetAdvOptions(params, GETRF_FN, 1));
    float af[37 * 37], bf[37 * 3], xf[37 * 3];
    for (int i = 0; i < n * n; i++)
        af[i] = (float)a[i];
    for (int i = 0; i < n * nrhs; i++)
        bf[i] = (float)b[i];
    float *daf = dev(af, sizeof af), *dbf = dev(bf, sizeof bf);
    int64_t *dipiv64 = dev(NULL, sizeof(int64_t) * n);
    size_t dsize, hsize;
    CHECK(cusolverDnXgetrf_bufferSize(h, params, n, n, R_32F, daf, n, R_32F, &dsize, &hsize));
    void *dwork = dev(NULL, dsize), *hwork = malloc(hsize ? hsize : 1);
    CHECK(cusolverDnXgetrf(h, params, n, n, R_32F, daf, n, dipiv64, R_32F, dwork, dsize, hwork, hsize, dinfo));
    CHECK(cusolverDnXgetrs(h, params, OP_T, n, nrhs, R_32F, daf, n, dipiv64, R_32F, dbf, n, dinfo));
    get(xf, dbf, sizeof xf);
    for (int i = 0; i < n * nrhs; i++)
        x[i] = xf[i];
    mul(1, 0, n, nrhs, n, a, n, x, n, ax);
    report("Xgetrf+Xgetrs float, A^T x = b", max_diff(ax, b, n * nrhs), 1e-3);
    int64_t ipiv64[37];
    get(ipiv64, dipiv64, sizeof ipiv64);
    int same = 1;
    for (int i = 0; i < n; i++)
        same &= ipiv64[i] == want[i];
    expect("Xgetrf int64 pivots as LAPACK's", same, 1);

    /* a singular matrix: info is the first zero pivot (column 3 is zero) */
    for (int i = 0; i < n; i++)
        a[i + 2 * n] = 0;
    CHECK(cudaMemcpy(da, a, sizeof(double) * n * n, 1));
    CHECK(cusolverDnDgetrf(h, n, n, da, n, work, dipiv, dinfo));
    expect("Dgetrf info of a singular matrix", info_of(dinfo), 3);
    CHECK(cusolverDnDestroyParams(params));
    cudaFree(da), cudaFree(db), cudaFree(dipiv), cudaFree(work), cudaFree(daf), cudaFree(dbf), cudaFree(dipiv64);
    cudaFree(dwork), cudaFree(dinfo);
    free(a), free(b), free(hwork);
}

static void check_cholesky(handle_t h)
{
    const int n = 29, nrhs = 2;
    double *a = spd(n), *b = random_matrix(n, nrhs), x[29 * 2], ax[29 * 2];
    double *da = dev(a, sizeof(double) * n * n), *db = dev(b, sizeof(double) * n * nrhs);
    int *dinfo = dev(NULL, sizeof(int)), lwork;
    CHECK(cusolverDnDpotrf_bufferSize(h, LOWER, n, da, n, &lwork));
    double *work = dev(NULL, sizeof(double) * (lwork ? lwork : 1));
    CHECK(cusolverDnDpotrf(h, LOWER, n, da, n, work, lwork, dinfo));
    CHECK(cusolverDnDpotrs(h, LOWER, n, nrhs, da, n, db, n, dinfo));
    get(x, db, sizeof x);
    mul(0, 0, n, nrhs, n, a, n, x, n, ax);
    report("Dpotrf+Dpotrs lower 29x29", max_diff(ax, b, n * nrhs), 1e-10);

    /* the factor itself: L L^T = A, and the upper triangle left as it was */
    double l[29 * 29], llt[29 * 29], f[29 * 29];
    CHECK(cudaMemcpy(da, a, sizeof(double) * n * n, 1));
    CHECK(cusolverDnDpotrf(h, LOWER, n, da, n, work, lwork, dinfo));
    get(f, da, sizeof f);
    int untouched = 1;
    for (int j = 0; j < n; j++)
        for (int i = 0; i < n; i++) {
            l[i + j * n] = i >= j ? f[i + j * n] : 0;
            untouched &= i >= j || f[i + j * n] == a[i + j * n];
        }
    mul(0, 1, n, n, n, l, n, l, n, llt);
    report("Dpotrf L L^T = A", max_diff(llt, a, n * n), 1e-10);
    expect("Dpotrf leaves the upper triangle", untouched, 1);

    /* 64-bit API, upper */
    size_t dsize, hsize;
    CHECK(cudaMemcpy(da, a, sizeof(double) * n * n, 1));
    CHECK(cudaMemcpy(db, b, sizeof(double) * n * nrhs, 1));
    CHECK(cusolverDnXpotrf_bufferSize(h, NULL, UPPER, n, R_64F, da, n, R_64F, &dsize, &hsize));
    void *dwork = dev(NULL, dsize), *hwork = malloc(hsize ? hsize : 1);
    CHECK(cusolverDnXpotrf(h, NULL, UPPER, n, R_64F, da, n, R_64F, dwork, dsize, hwork, hsize, dinfo));
    CHECK(cusolverDnXpotrs(h, NULL, UPPER, n, nrhs, R_64F, da, n, R_64F, db, n, dinfo));
    get(x, db, sizeof x);
    mul(0, 0, n, nrhs, n, a, n, x, n, ax);
    report("Xpotrf+Xpotrs upper", max_diff(ax, b, n * nrhs), 1e-10);

    /* not positive definite: info is the order of the first failing minor */
    a[4 + 4 * n] = -1e6;
    CHECK(cudaMemcpy(da, a, sizeof(double) * n * n, 1));
    CHECK(cusolverDnDpotrf(h, LOWER, n, da, n, work, lwork, dinfo));
    expect("Dpotrf info of an indefinite matrix", info_of(dinfo), 5);

    /* batches as arrays of device pointers: three SPD matrices (the second one not), one right-hand side each */
    enum { bn = 12, batch = 3 };
    double *mats[batch], *rhs[batch], *dmats[batch], *drhs[batch], xb[bn], axb[bn];
    for (int b = 0; b < batch; b++) {
        mats[b] = spd(bn), rhs[b] = random_matrix(bn, 1);
        if (b == 1)
            mats[b][7 + 7 * bn] = -1e6;
        dmats[b] = dev(mats[b], sizeof(double) * bn * bn), drhs[b] = dev(rhs[b], sizeof(double) * bn);
    }
    double **darr = dev(dmats, sizeof dmats), **dbarr = dev(drhs, sizeof drhs);
    int *dinfos = dev(NULL, sizeof(int) * batch), infos[batch];
    CHECK(cusolverDnDpotrfBatched(h, LOWER, bn, darr, bn, dinfos, batch));
    get(infos, dinfos, sizeof infos);
    expect("DpotrfBatched infos (0, 8, 0)", infos[0] * 100 + infos[1] * 10 + infos[2], 80);
    CHECK(cusolverDnDpotrsBatched(h, LOWER, bn, 1, darr, bn, dbarr, bn, dinfo, batch));
    double eb = 0;
    for (int b = 0; b < batch; b += 2) {
        get(xb, drhs[b], sizeof xb);
        mul(0, 0, bn, 1, bn, mats[b], bn, xb, bn, axb);
        eb = fmax(eb, max_diff(axb, rhs[b], bn));
    }
    report("DpotrfBatched+DpotrsBatched x3", eb, 1e-10);
    for (int b = 0; b < batch; b++)
        cudaFree(dmats[b]), cudaFree(drhs[b]), free(mats[b]), free(rhs[b]);
    cudaFree(darr), cudaFree(dbarr), cudaFree(dinfos);
    cudaFree(da), cudaFree(db), cudaFree(work), cudaFree(dwork), cudaFree(dinfo);
    free(a), free(b), free(hwork);
}

static void check_qr(handle_t h)
{
    const int m = 41, n = 23;
    double *a = random_matrix(m, n), *c = random_matrix(m, 2), f[41 * 23], q[41 * 23], r[23 * 23], qr[41 * 23],
           qtq[23 * 23], eye[23 * 23] = {0}, tau[23], qtc[41 * 2], want[41 * 2];
    double *da = dev(a, sizeof f), *dtau = dev(NULL, sizeof tau), *dc = dev(c, sizeof qtc);
    int *dinfo = dev(NULL, sizeof(int)), lw1, lw2, lw3;
    CHECK(cusolverDnDgeqrf_bufferSize(h, m, n, da, m, &lw1));
    CHECK(cusolverDnDorgqr_bufferSize(h, m, n, n, da, m, dtau, &lw2));
    CHECK(cusolverDnDormqr_bufferSize(h, LEFT, OP_T, m, 2, n, da, m, dtau, dc, m, &lw3));
    int lwork = lw1 > lw2 ? lw1 : lw2;
    lwork = lwork > lw3 ? lwork : lw3;
    double *work = dev(NULL, sizeof(double) * (lwork ? lwork : 1));
    CHECK(cusolverDnDgeqrf(h, m, n, da, m, dtau, work, lwork, dinfo));
    CHECK(cusolverDnDormqr(h, LEFT, OP_T, m, 2, n, da, m, dtau, dc, m, work, lwork, dinfo));
    get(f, da, sizeof f);
    get(qtc, dc, sizeof qtc);
    for (int j = 0; j < n; j++)
        for (int i = 0; i < n; i++)
            r[i + j * n] = i <= j ? f[i + j * m] : 0;
    CHECK(cusolverDnDorgqr(h, m, n, n, da, m, dtau, work, lwork, dinfo));
    get(q, da, sizeof q);
    mul(0, 0, m, n, n, q, m, r, n, qr);
    report("Dgeqrf+Dorgqr Q R = A 41x23", max_diff(qr, a, m * n), 1e-10);
    mul(1, 0, n, n, m, q, m, q, m, qtq);
    for (int i = 0; i < n; i++)
        eye[i + i * n] = 1;
    report("Dorgqr Q^T Q = I", max_diff(qtq, eye, n * n), 1e-10);
    mul(1, 0, n, 2, m, q, m, c, m, want);
    double e = 0;
    for (int j = 0; j < 2; j++)
        for (int i = 0; i < n; i++)
            e = fmax(e, fabs(qtc[i + j * m] - want[i + j * n]));
    report("Dormqr Q^T C (first n rows)", e, 1e-10);

    /* the 64-bit API, float */
    float af[41 * 23], ff[41 * 23];
    for (int i = 0; i < m * n; i++)
        af[i] = (float)a[i];
    float *daf = dev(af, sizeof af), *dtauf = dev(NULL, sizeof(float) * n);
    size_t dsize, hsize;
    CHECK(cusolverDnXgeqrf_bufferSize(h, NULL, m, n, R_32F, daf, m, R_32F, dtauf, R_32F, &dsize, &hsize));
    void *dwork = dev(NULL, dsize), *hwork = malloc(hsize ? hsize : 1);
    CHECK(cusolverDnXgeqrf(h, NULL, m, n, R_32F, daf, m, R_32F, dtauf, R_32F, dwork, dsize, hwork, hsize, dinfo));
    get(ff, daf, sizeof ff);
    e = 0; /* R agrees with the double one (same Householder sign convention) */
    for (int j = 0; j < n; j++)
        for (int i = 0; i <= j; i++)
            e = fmax(e, fabs(ff[i + j * m] - f[i + j * m]) / (1 + fabs(f[i + j * m])));
    report("Xgeqrf float R", e, 1e-4);
    expect("geqrf info", info_of(dinfo), 0);
    cudaFree(da), cudaFree(dtau), cudaFree(dc), cudaFree(work), cudaFree(daf), cudaFree(dtauf), cudaFree(dwork);
    cudaFree(dinfo), free(a), free(c), free(hwork);
}

static void check_eigen(handle_t h)
{
    const int n = 24;
    double *a = spd(n), v[24 * 24], w[24], av[24 * 24], vw[24 * 24];
    for (int i = 0; i < n * n; i++)
        a[i] -= (i % 7) * (i % (n + 1) == 0); /* still symmetric, no longer trivially diagonal-heavy */
    double *da = dev(a, sizeof v), *dw = dev(NULL, sizeof w);
    int *dinfo = dev(NULL, sizeof(int)), lwork;
    CHECK(cusolverDnDsyevd_bufferSize(h, VECTORS, UPPER, n, da, n, dw, &lwork));
    double *work = dev(NULL, sizeof(double) * (lwork ? lwork : 1));
    CHECK(cusolverDnDsyevd(h, VECTORS, UPPER, n, da, n, dw, work, lwork, dinfo));
    get(v, da, sizeof v);
    get(w, dw, sizeof w);
    mul(0, 0, n, n, n, a, n, v, n, av);
    for (int j = 0; j < n; j++)
        for (int i = 0; i < n; i++)
            vw[i + j * n] = v[i + j * n] * w[j];
    report("Dsyevd A V = V diag(w)", max_diff(av, vw, n * n), 1e-9);
    int ascending = 1;
    for (int i = 1; i < n; i++)
        ascending &= w[i] >= w[i - 1];
    expect("Dsyevd eigenvalues ascending", ascending, 1);

    float af[24 * 24], wf[24];
    for (int i = 0; i < n * n; i++)
        af[i] = (float)a[i];
    float *daf = dev(af, sizeof af), *dwf = dev(NULL, sizeof wf);
    size_t dsize, hsize;
    CHECK(cusolverDnXsyevd_bufferSize(h, NULL, 0, LOWER, n, R_32F, daf, n, R_32F, dwf, R_32F, &dsize, &hsize));
    void *dwork = dev(NULL, dsize), *hwork = malloc(hsize ? hsize : 1);
    CHECK(cusolverDnXsyevd(h, NULL, 0, LOWER, n, R_32F, daf, n, R_32F, dwf, R_32F, dwork, dsize, hwork, hsize, dinfo));
    get(wf, dwf, sizeof wf);
    double e = 0;
    for (int i = 0; i < n; i++)
        e = fmax(e, fabs(wf[i] - w[i]) / (1 + fabs(w[i])));
    report("Xsyevd float eigenvalues", e, 1e-4);

    /* Jacobi, float (what torch.linalg.eigh uses for float 32..512): A V = V diag(w) */
    handle_t params;
    float vf[24 * 24];
    CHECK(cusolverDnCreateSyevjInfo(&params));
    CHECK(cudaMemcpy(daf, af, sizeof af, 1));
    CHECK(cusolverDnSsyevj_bufferSize(h, VECTORS, LOWER, n, daf, n, dwf, &lwork, params));
    float *jwork = dev(NULL, sizeof(float) * (lwork ? lwork : 1));
    CHECK(cusolverDnSsyevj(h, VECTORS, LOWER, n, daf, n, dwf, jwork, lwork, dinfo, params));
    get(vf, daf, sizeof vf), get(wf, dwf, sizeof wf);
    for (int i = 0; i < n * n; i++)
        v[i] = vf[i];
    mul(0, 0, n, n, n, a, n, v, n, av);
    for (int j = 0; j < n; j++)
        for (int i = 0; i < n; i++)
            vw[i + j * n] = v[i + j * n] * wf[j];
    report("Ssyevj A V = V diag(w)", max_diff(av, vw, n * n), 1e-3);
    expect("Ssyevj info", info_of(dinfo), 0);

    /* batches of three 8 x 8 matrices: Jacobi (double) and the 64-bit API (float) */
    enum { bn = 8, batch = 3 };
    double ab[bn * bn * batch], wb[bn * batch], vb[bn * bn * batch];
    float abf[bn * bn * batch], wbf[bn * bn * batch];
    for (int b = 0; b < batch; b++)
        for (int j = 0; j < bn; j++)
            for (int i = 0; i <= j; i++)
                ab[b * bn * bn + i + j * bn] = ab[b * bn * bn + j + i * bn] = random_value(2.0);
    for (int i = 0; i < bn * bn * batch; i++)
        abf[i] = (float)ab[i];
    double *dab = dev(ab, sizeof ab), *dwb = dev(NULL, sizeof wb);
    int *dinfos = dev(NULL, sizeof(int) * batch), infos[batch];
    CHECK(cusolverDnXsyevjSetSortEig(params, 1));
    CHECK(cusolverDnDsyevjBatched_bufferSize(h, VECTORS, UPPER, bn, dab, bn, dwb, &lwork, params, batch));
    double *bwork = dev(NULL, sizeof(double) * (lwork ? lwork : 1));
    CHECK(cusolverDnDsyevjBatched(h, VECTORS, UPPER, bn, dab, bn, dwb, bwork, lwork, dinfos, params, batch));
    get(vb, dab, sizeof vb), get(wb, dwb, sizeof wb), get(infos, dinfos, sizeof infos);
    e = 0;
    for (int b = 0; b < batch; b++) {
        double abv[bn * bn];
        mul(0, 0, bn, bn, bn, ab + b * bn * bn, bn, vb + b * bn * bn, bn, abv);
        for (int j = 0; j < bn; j++)
            for (int i = 0; i < bn; i++)
                e = fmax(e, fabs(abv[i + j * bn] - vb[b * bn * bn + i + j * bn] * wb[b * bn + j]));
        failures += infos[b] != 0;
    }
    report("DsyevjBatched x3 A V = V diag(w)", e, 1e-9);
    float *dabf = dev(abf, sizeof abf), *dwbf = dev(NULL, sizeof(float) * bn * batch);
    CHECK(cusolverDnXsyevBatched_bufferSize(h, NULL, 0, LOWER, bn, R_32F, dabf, bn, R_32F, dwbf, R_32F, &dsize,
                                            &hsize, batch));
    void *xwork = dev(NULL, dsize), *xhwork = malloc(hsize ? hsize : 1);
    CHECK(cusolverDnXsyevBatched(h, NULL, 0, LOWER, bn, R_32F, dabf, bn, R_32F, dwbf, R_32F, xwork, dsize, xhwork,
                                 hsize, dinfos, batch));
    get(wbf, dwbf, sizeof(float) * bn * batch);
    e = 0;
    for (int i = 0; i < bn * batch; i++)
        e = fmax(e, fabs(wbf[i] - wb[i]) / (1 + fabs(wb[i])));
    report("XsyevBatched float eigenvalues", e, 1e-4);
    CHECK(cusolverDnDestroySyevjInfo(params));
    cudaFree(da), cudaFree(dw), cudaFree(work), cudaFree(daf), cudaFree(dwf), cudaFree(dwork), cudaFree(dinfo);
    cudaFree(jwork), cudaFree(dab), cudaFree(dwb), cudaFree(dinfos), cudaFree(bwork), cudaFree(dabf), cudaFree(dwbf);
    cudaFree(xwork), free(a), free(hwork), free(xhwork);
}

/* max |U diag(s) V^T - A| for U m x k, V n x k (vt: V^T given, k x n with leading dimension ldvt) */
static double svd_error(const double *a, int m, int n, const double *u, int ldu, const double *s, const double *v,
                        int ldv, int vt, int k)
{
    double e = 0;
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            double acc = 0;
            for (int p = 0; p < k; p++)
                acc += u[i + p * ldu] * s[p] * (vt ? v[p + j * ldv] : v[j + p * ldv]);
            e = fmax(e, fabs(acc - a[i + j * m]));
        }
    return e;
}

static void check_svd(handle_t h)
{
    const int m = 31, n = 19;
    double *a = random_matrix(m, n), s[19], u[31 * 31], vt[19 * 19];
    double *da = dev(a, sizeof(double) * m * n), *ds = dev(NULL, sizeof s), *du = dev(NULL, sizeof u),
           *dvt = dev(NULL, sizeof vt);
    int *dinfo = dev(NULL, sizeof(int)), lwork;
    CHECK(cusolverDnDgesvd_bufferSize(h, m, n, &lwork));
    double *work = dev(NULL, sizeof(double) * lwork), *rwork = dev(NULL, sizeof(double) * n);
    CHECK(cusolverDnDgesvd(h, 'A', 'A', m, n, da, m, ds, du, m, dvt, n, work, lwork, rwork, dinfo));
    get(s, ds, sizeof s), get(u, du, sizeof u), get(vt, dvt, sizeof vt);
    report("Dgesvd U S V^T = A 31x19", svd_error(a, m, n, u, m, s, vt, n, 1, n), 1e-10);
    int sorted = 1;
    for (int i = 1; i < n; i++)
        sorted &= s[i] <= s[i - 1];
    expect("Dgesvd singular values descending", sorted, 1);
    expect("Dgesvd info", info_of(dinfo), 0);

    /* 64-bit API, economy ('S') */
    size_t dsize, hsize;
    double s2[19], u2[31 * 19];
    CHECK(cudaMemcpy(da, a, sizeof(double) * m * n, 1));
    CHECK(cusolverDnXgesvd_bufferSize(h, NULL, 'S', 'S', m, n, R_64F, da, m, R_64F, ds, R_64F, du, m, R_64F, dvt, n,
                                      R_64F, &dsize, &hsize));
    void *dwork = dev(NULL, dsize), *hwork = malloc(hsize ? hsize : 1);
    CHECK(cusolverDnXgesvd(h, NULL, 'S', 'S', m, n, R_64F, da, m, R_64F, ds, R_64F, du, m, R_64F, dvt, n, R_64F,
                           dwork, dsize, hwork, hsize, dinfo));
    get(s2, ds, sizeof s2), get(u2, du, sizeof u2), get(vt, dvt, sizeof vt);
    report("Xgesvd economy", svd_error(a, m, n, u2, m, s2, vt, n, 1, n), 1e-10);
    report("Xgesvd singular values = Dgesvd's", max_diff(s2, s, n), 1e-12);

    /* Jacobi, economy: V (not V^T) */
    handle_t params;
    double v[19 * 19];
    CHECK(cusolverDnCreateGesvdjInfo(&params));
    CHECK(cusolverDnXgesvdjSetTolerance(params, 1e-12));
    CHECK(cusolverDnXgesvdjSetMaxSweeps(params, 50));
    CHECK(cudaMemcpy(da, a, sizeof(double) * m * n, 1));
    CHECK(cusolverDnDgesvdj_bufferSize(h, VECTORS, 1, m, n, da, m, ds, du, m, dvt, n, &lwork, params));
    double *jwork = dev(NULL, sizeof(double) * lwork);
    CHECK(cusolverDnDgesvdj(h, VECTORS, 1, m, n, da, m, ds, du, m, dvt, n, jwork, lwork, dinfo, params));
    get(s2, ds, sizeof s2), get(u2, du, sizeof u2), get(v, dvt, sizeof v);
    report("Dgesvdj economy U S V^T = A", svd_error(a, m, n, u2, m, s2, v, n, 0, n), 1e-9);
    report("Dgesvdj singular values", max_diff(s2, s, n), 1e-9);

    /* batched Jacobi, float, 3 matrices of 8 x 6 */
    enum { bm = 8, bn = 6, batch = 3 };
    float ab[bm * bn * batch], sb[bn * batch], ub[bm * bm * batch], vb[bn * bn * batch];
    for (int i = 0; i < bm * bn * batch; i++)
        ab[i] = (float)(random_value(2.0));
    float *dab = dev(ab, sizeof ab), *dsb = dev(NULL, sizeof sb), *dub = dev(NULL, sizeof ub),
          *dvb = dev(NULL, sizeof vb);
    int *dinfos = dev(NULL, sizeof(int) * batch), infos[batch];
    CHECK(cusolverDnSgesvdjBatched_bufferSize(h, VECTORS, bm, bn, dab, bm, dsb, dub, bm, dvb, bn, &lwork, params,
                                              batch));
    float *bwork = dev(NULL, sizeof(float) * lwork);
    CHECK(cusolverDnSgesvdjBatched(h, VECTORS, bm, bn, dab, bm, dsb, dub, bm, dvb, bn, bwork, lwork, dinfos, params,
                                   batch));
    get(sb, dsb, sizeof sb), get(ub, dub, sizeof ub), get(vb, dvb, sizeof vb), get(infos, dinfos, sizeof infos);
    double e = 0;
    for (int b = 0; b < batch; b++) {
        double ad[bm * bn], ud[bm * bm], sd[bn], vd[bn * bn];
        for (int i = 0; i < bm * bn; i++)
            ad[i] = ab[b * bm * bn + i];
        for (int i = 0; i < bm * bm; i++)
            ud[i] = ub[b * bm * bm + i];
        for (int i = 0; i < bn * bn; i++)
            vd[i] = vb[b * bn * bn + i];
        for (int i = 0; i < bn; i++)
            sd[i] = sb[b * bn + i];
        e = fmax(e, svd_error(ad, bm, bn, ud, bm, sd, vd, bn, 0, bn));
        failures += infos[b] != 0;
    }
    report("SgesvdjBatched x3 U S V^T = A", e, 1e-4);
    CHECK(cusolverDnDestroyGesvdjInfo(params));
    cudaFree(da), cudaFree(ds), cudaFree(du), cudaFree(dvt), cudaFree(work), cudaFree(rwork), cudaFree(dwork);
    cudaFree(jwork), cudaFree(dab), cudaFree(dsb), cudaFree(dub), cudaFree(dvb), cudaFree(dinfos), cudaFree(bwork);
    cudaFree(dinfo), free(a), free(hwork);
}

static int hostile(handle_t h)
{
    const int n = 16;
    double *a = spd(n), after[16 * 16];
    double *da = dev(a, sizeof(double) * n * n);
    int *dinfo = dev(NULL, sizeof(int)), lwork;
    expect("no handle: NOT_INITIALIZED", cusolverDnDpotrf_bufferSize(NULL, LOWER, n, da, n, &lwork), 1);
    expect("lda < n: INVALID_VALUE", cusolverDnDpotrf_bufferSize(h, LOWER, n, da, n - 1, &lwork), 3);
    CHECK(cusolverDnDpotrf_bufferSize(h, LOWER, n, da, n, &lwork));
    double *work = dev(NULL, sizeof(double) * lwork);
    CHECK(cusolverDnDpotrf(h, LOWER, n, da, n, work, lwork - 1, dinfo));
    expect_refused("workspace one element short");
    get(after, da, sizeof after);
    expect("  ... and A left untouched", memcmp(after, a, sizeof after) == 0, 1);
    /* a workspace claimed bigger than its allocation */
    size_t dsize, hsize;
    CHECK(cusolverDnXpotrf_bufferSize(h, NULL, LOWER, n, R_64F, da, n, R_64F, &dsize, &hsize));
    void *small;
    CHECK(cudaMalloc(&small, 64));
    CHECK(cusolverDnXpotrf(h, NULL, LOWER, n, R_64F, da, n, R_64F, small, dsize + 4096, NULL, 0, dinfo));
    expect_refused("workspace larger than its allocation");
    /* pointers the program never allocated */
    CHECK(cusolverDnDpotrf(h, LOWER, n, (double *)0x7f00dead0000, n, work, lwork, dinfo));
    expect_refused("foreign matrix pointer");
    int *dipiv = dev(NULL, sizeof(int) * n);
    CHECK(cusolverDnDgetrf(h, n, n, da, n, work, dipiv, (int *)0x7f00dead0000));
    expect_refused("foreign info pointer");
    CHECK(cusolverDnDgetrf(h, n, n, da, n, work, dipiv, NULL));
    expect_refused("no info array");
    /* a pointer array naming memory the program never allocated */
    double *arr[2] = {da, (double *)0x7f00dead0000}, **darr = dev(arr, sizeof arr);
    int *dinfos = dev(NULL, 2 * sizeof(int));
    CHECK(cusolverDnDpotrfBatched(h, LOWER, n, darr, n, dinfos, 2));
    expect_refused("foreign pointer in a pointer array");
    cudaFree(darr), cudaFree(dinfos);
    /* still usable: a clean factorization afterwards */
    CHECK(cusolverDnDpotrf(h, LOWER, n, da, n, work, lwork, dinfo));
    CHECK(cudaDeviceSynchronize());
    expect("a clean call afterwards", info_of(dinfo), 0);
    cudaFree(da), cudaFree(dinfo), cudaFree(work), cudaFree(small), cudaFree(dipiv), free(a);
    return 0;
}

int main(int argc, char **argv)
{
    srand(11);
    handle_t h;
    CHECK(cusolverDnCreate(&h));
    if (argc > 1 && !strcmp(argv[1], "hostile")) {
        hostile(h);
    } else {
        check_lu(h);
        check_cholesky(h);
        check_qr(h);
        check_eigen(h);
        check_svd(h);
    }
    CHECK(cusolverDnDestroy(h));
    CHECK(cudaDeviceSynchronize());
    printf("solver_check %s\n", failures ? "FAILED" : "OK");
    return failures != 0;
}
