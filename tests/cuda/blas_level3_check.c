/* cuBLAS Level 2/3 beyond S/D GEMM and GEMV -- trsm, trmm, syrk, herk, symm, ger/geru/gerc, trsv, trmv, complex
 * gemm/gemm3m/gemv -- and getrsBatched, through whatever libcublas the loader gives, every result compared with a
 * CPU reference (complex double on the host). Declares the prototypes it needs (pointers as void *), so it builds
 * without cuBLAS headers. Prints one line per check; exits non-zero on any mismatch.
 *
 *   blas_level3_check        the checks above, and the arguments cuBLAS refuses (cuBLAS prints its own line for
 *                            each, " ** On entry to DTRSM  parameter number 9 ...", to stdout)
 *   blas_level3_check bad    operands outside the program's memory (through rgpu only: natively a foreign pointer
 *                            faults the context) */
#include <complex.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib_check.h"

typedef void *handle_t;
typedef double complex zc;
typedef float complex cc;
int cudaMalloc(void **p, size_t n);
int cudaFree(void *p);
int cudaMemcpy(void *dst, const void *src, size_t n, int kind);
int cudaDeviceSynchronize(void);
int cublasCreate_v2(handle_t *h);
int cublasDestroy_v2(handle_t h);
int cublasSetPointerMode_v2(handle_t h, int mode);
int cublasDgetrfBatched(handle_t h, int n, void *a, int lda, int *p, int *info, int batch);
int cublasZgetrfBatched(handle_t h, int n, void *a, int lda, int *p, int *info, int batch);
int cublasDgetrsBatched(handle_t h, int trans, int n, int nrhs, const void *a, int lda, const int *p, void *b, int ldb,
                        int *info, int batch);
int cublasZgetrsBatched(handle_t h, int trans, int n, int nrhs, const void *a, int lda, const int *p, void *b, int ldb,
                        int *info, int batch);
int cublasDtrsm_v2(handle_t h, int side, int uplo, int trans, int diag, int m, int n, const void *alpha,
                   const void *a, int lda, void *b, int ldb);
int cublasZtrsm_v2_64(handle_t h, int side, int uplo, int trans, int diag, int64_t m, int64_t n, const void *alpha,
                      const void *a, int64_t lda, void *b, int64_t ldb);
int cublasDtrmm_v2(handle_t h, int side, int uplo, int trans, int diag, int m, int n, const void *alpha,
                   const void *a, int lda, const void *b, int ldb, void *c, int ldc);
int cublasZtrmm_v2(handle_t h, int side, int uplo, int trans, int diag, int m, int n, const void *alpha,
                   const void *a, int lda, const void *b, int ldb, void *c, int ldc);
int cublasDsyrk_v2(handle_t h, int uplo, int trans, int n, int k, const void *alpha, const void *a, int lda,
                   const void *beta, void *c, int ldc);
int cublasZherk_v2(handle_t h, int uplo, int trans, int n, int k, const void *alpha, const void *a, int lda,
                   const void *beta, void *c, int ldc);
int cublasDsymm_v2(handle_t h, int side, int uplo, int m, int n, const void *alpha, const void *a, int lda,
                   const void *b, int ldb, const void *beta, void *c, int ldc);
int cublasCsymm_v2(handle_t h, int side, int uplo, int m, int n, const void *alpha, const void *a, int lda,
                   const void *b, int ldb, const void *beta, void *c, int ldc);
int cublasDger_v2(handle_t h, int m, int n, const void *alpha, const void *x, int incx, const void *y, int incy,
                  void *a, int lda);
int cublasZgeru_v2(handle_t h, int m, int n, const void *alpha, const void *x, int incx, const void *y, int incy,
                   void *a, int lda);
int cublasZgerc_v2(handle_t h, int m, int n, const void *alpha, const void *x, int incx, const void *y, int incy,
                   void *a, int lda);
int cublasDtrsv_v2(handle_t h, int uplo, int trans, int diag, int n, const void *a, int lda, void *x, int incx);
int cublasZtrmv_v2(handle_t h, int uplo, int trans, int diag, int n, const void *a, int lda, void *x, int incx);
int cublasZgemm_v2(handle_t h, int ta, int tb, int m, int n, int k, const void *alpha, const void *a, int lda,
                   const void *b, int ldb, const void *beta, void *c, int ldc);
int cublasCgemm3m(handle_t h, int ta, int tb, int m, int n, int k, const void *alpha, const void *a, int lda,
                  const void *b, int ldb, const void *beta, void *c, int ldc);
int cublasZgemv_v2(handle_t h, int trans, int m, int n, const void *alpha, const void *a, int lda, const void *x,
                   int incx, const void *beta, void *y, int incy);
int cublasCgemv_v2_64(handle_t h, int trans, int64_t m, int64_t n, const void *alpha, const void *a, int64_t lda,
                      const void *x, int64_t incx, const void *beta, void *y, int64_t incy);

enum { N_, T_, C_ };                 /* cublasOperation_t */
enum { LEFT, RIGHT };                /* cublasSideMode_t */
enum { LOWER, UPPER };               /* cublasFillMode_t */
enum { NON_UNIT, UNIT };             /* cublasDiagType_t */
enum { INVALID_VALUE = 7, M = 7, K = 5, LD = 9 };

static void *device(const void *host, size_t n)
{
    void *d;
    CHECK(cudaMalloc(&d, n));
    CHECK(cudaMemcpy(d, host, n, 1));
    return d;
}

static void fetch(void *host, const void *d, size_t n) { CHECK(cudaMemcpy(host, d, n, 2)); }

/* Deterministic values in [-1, 1] (imaginary parts only when `complex_`), plus `diagonal` on an ld-matrix's
 * diagonal so that triangular solves are well conditioned. */
static void fill(zc *a, int count, int complex_, int seed, int ld, double diagonal)
{
    unsigned s = 2654435761u * (unsigned)seed + 1;
    for (int i = 0; i < count; i++) {
        s = s * 1103515245u + 12345u;
        double re = ((s >> 8) % 2001) / 1000.0 - 1;
        s = s * 1103515245u + 12345u;
        double im = complex_ ? ((s >> 8) % 2001) / 1000.0 - 1 : 0;
        a[i] = re + im * I + (ld && i % (ld + 1) == 0 ? diagonal : 0);
    }
}

static void to_d(double *out, const zc *in, int n) { for (int i = 0; i < n; i++) out[i] = creal(in[i]); }
static void from_d(zc *out, const double *in, int n) { for (int i = 0; i < n; i++) out[i] = in[i]; }
static void to_c(cc *out, const zc *in, int n) { for (int i = 0; i < n; i++) out[i] = (cc)in[i]; }
static void from_c(zc *out, const cc *in, int n) { for (int i = 0; i < n; i++) out[i] = in[i]; }

/* op(A)(i, j) for a column-major A */
static zc opel(int op, const zc *a, int lda, int i, int j)
{
    return op == N_ ? a[i + j * lda] : op == T_ ? a[j + i * lda] : conj(a[j + i * lda]);
}

/* T (order x order, leading dimension LD): the uplo triangle of A, 1 on a unit diagonal, 0 elsewhere. */
static void triangle(int uplo, int diag, const zc *a, int order, zc *t)
{
    for (int c = 0; c < order; c++)
        for (int r = 0; r < LD; r++)
            t[r + c * LD] = r >= order                        ? 0
                            : r == c && diag == UNIT           ? 1
                            : (uplo == LOWER ? r >= c : r <= c) ? a[r + c * LD]
                                                                : 0;
}

/* S (order x order, leading dimension LD): the symmetric matrix A's uplo triangle describes. */
static void symmetric_of(int uplo, const zc *a, int order, zc *s)
{
    for (int c = 0; c < order; c++)
        for (int r = 0; r < order; r++)
            s[r + c * LD] = (uplo == LOWER) == (r >= c) ? a[r + c * LD] : a[c + r * LD];
}

/* Element i of a vector of n elements `inc` apart (backwards for a negative increment, as BLAS walks it). */
static zc *vel(zc *x, int n, int inc, int i) { return x + (inc > 0 ? i * inc : (n - 1 - i) * -inc); }

static double rel(zc got, zc want) { return cabs(got - want) / (1 + cabs(want)); }

/* The larger error, NaN winning (fmax would drop it). */
static double worst(double e, double x) { return isnan(x) || x > e ? x : e; }

/* The error of R = alpha op(A) op(B) + beta C0 (m x n, every operand with leading dimension LD); beta 0: C0 unread. */
static double gemm_error(int ta, int tb, int m, int n, int k, zc alpha, const zc *A, const zc *B, zc beta,
                         const zc *C0, const zc *R)
{
    double e = 0;
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            zc acc = 0;
            for (int l = 0; l < k; l++)
                acc += opel(ta, A, LD, i, l) * opel(tb, B, LD, l, j);
            e = worst(e, rel(R[i + j * LD], alpha * acc + (beta != 0 ? beta * C0[i + j * LD] : 0)));
        }
    return e;
}

static void scaled(zc *out, zc alpha, const zc *x, int n) { for (int i = 0; i < n; i++) out[i] = alpha * x[i]; }

static void triangular(handle_t h)
{
    zc A[LD * M], B[LD * M], X[LD * M], R[LD * M], T[LD * M], AB[LD * M];
    double a[LD * M], b[LD * M], x[LD * M], two = 2;
    fill(A, LD * M, 0, 1, LD, 4);
    fill(B, LD * M, 0, 2, 0, 0);
    to_d(a, A, LD * M), to_d(b, B, LD * M);
    scaled(AB, 2, B, LD * M);
    void *dA = device(a, sizeof a), *dB = device(b, sizeof b);
    /* left, lower, N, non-unit: A X = 2 B (M x K), checked as op(T) X against 2 B */
    CHECK(cublasDtrsm_v2(h, LEFT, LOWER, N_, NON_UNIT, M, K, &two, dA, LD, dB, LD));
    fetch(x, dB, sizeof x), from_d(X, x, LD * M), triangle(LOWER, NON_UNIT, A, M, T);
    report("cublasDtrsm left lower N 7x5 lda 9", gemm_error(N_, N_, M, K, M, 1, T, X, 0, NULL, AB), 1e-12);
    /* right, upper, T, unit: X A^T = 2 B (K x M) */
    CHECK(cudaMemcpy(dB, b, sizeof b, 1));
    CHECK(cublasDtrsm_v2(h, RIGHT, UPPER, T_, UNIT, K, M, &two, dA, LD, dB, LD));
    fetch(x, dB, sizeof x), from_d(X, x, LD * M), triangle(UPPER, UNIT, A, M, T);
    report("cublasDtrsm right upper T unit 5x7", gemm_error(N_, T_, K, M, M, 1, X, T, 0, NULL, AB), 1e-12);

    /* complex, _64, left upper C: A^H X = alpha B */
    zc ZA[LD * M], ZB[LD * M], alpha = 0.5 - 1.5 * I;
    fill(ZA, LD * M, 1, 3, LD, 3);
    fill(ZB, LD * M, 1, 4, 0, 0);
    scaled(AB, alpha, ZB, LD * M);
    void *zA = device(ZA, sizeof ZA), *zB = device(ZB, sizeof ZB);
    CHECK(cublasZtrsm_v2_64(h, LEFT, UPPER, C_, NON_UNIT, M, K, &alpha, zA, LD, zB, LD));
    fetch(X, zB, sizeof X), triangle(UPPER, NON_UNIT, ZA, M, T);
    report("cublasZtrsm_v2_64 left upper C 7x5", gemm_error(C_, N_, M, K, M, 1, T, X, 0, NULL, AB), 1e-12);

    /* trmm: C = 2 A B (left lower N, unit) in double, ldc 7 (read back into ld LD); C = alpha B A^H (right upper) in
     * complex */
    double c[LD * M];
    CHECK(cudaMemcpy(dB, b, sizeof b, 1));
    void *dC = device(c, sizeof c), *zC = device(ZB, sizeof ZB);
    CHECK(cublasDtrmm_v2(h, LEFT, LOWER, N_, UNIT, M, K, &two, dA, LD, dB, LD, dC, M));
    fetch(c, dC, sizeof c);
    for (int j = 0; j < K; j++)
        for (int i = 0; i < M; i++)
            R[i + j * LD] = c[i + j * M];
    triangle(LOWER, UNIT, A, M, T);
    report("cublasDtrmm left lower N unit 7x5 ldc 7", gemm_error(N_, N_, M, K, M, 2, T, B, 0, NULL, R), 1e-13);
    CHECK(cudaMemcpy(zB, ZB, sizeof ZB, 1));
    CHECK(cublasZtrmm_v2(h, RIGHT, UPPER, C_, NON_UNIT, K, M, &alpha, zA, LD, zB, LD, zC, LD));
    fetch(R, zC, sizeof R), triangle(UPPER, NON_UNIT, ZA, M, T);
    report("cublasZtrmm right upper C 5x7", gemm_error(N_, C_, K, M, M, alpha, ZB, T, 0, NULL, R), 1e-13);

    /* trsv lower T (double), trmv upper C with incx 2 (complex): vectors as one-column matrices */
    zc V[LD * M], W[LD * M];
    double v[LD];
    fill(V, LD, 0, 5, 0, 0);
    to_d(v, V, LD);
    void *dv = device(v, sizeof v);
    CHECK(cublasDtrsv_v2(h, LOWER, T_, NON_UNIT, M, dA, LD, dv, 1));
    fetch(v, dv, sizeof v), from_d(W, v, LD), triangle(LOWER, NON_UNIT, A, M, T);
    report("cublasDtrsv lower T 7", gemm_error(T_, N_, M, 1, M, 1, T, W, 0, NULL, V), 1e-12);
    zc Vs[2 * M], Ws[2 * M];
    fill(Vs, 2 * M, 1, 6, 0, 0);
    void *zv = device(Vs, sizeof Vs);
    CHECK(cublasZtrmv_v2(h, UPPER, C_, UNIT, M, zA, LD, zv, 2));
    fetch(Ws, zv, sizeof Ws), triangle(UPPER, UNIT, ZA, M, T);
    double untouched = 0;
    for (int i = 0; i < M; i++)
        V[i] = Vs[2 * i], W[i] = Ws[2 * i], untouched += cabs(Ws[2 * i + 1] - Vs[2 * i + 1]);
    report("cublasZtrmv upper C unit incx 2", gemm_error(C_, N_, M, 1, M, 1, T, V, 0, NULL, W) + untouched, 1e-13);
    expect("cublasDtrsm lda < m", cublasDtrsm_v2(h, LEFT, LOWER, N_, NON_UNIT, M, K, &two, dA, M - 1, dB, LD),
           INVALID_VALUE);
    expect("cublasDtrsm side 2", cublasDtrsm_v2(h, 2, LOWER, N_, NON_UNIT, M, K, &two, dA, LD, dB, LD), INVALID_VALUE);
    expect("cublasZtrmv incx 0", cublasZtrmv_v2(h, UPPER, N_, UNIT, M, zA, LD, zv, 0), INVALID_VALUE);
    for (void **p = (void *[]){dA, dB, dC, zA, zB, zC, dv, zv, NULL}; *p; p++)
        CHECK(cudaFree(*p));
}

/* The error of a rank-k update's uplo triangle of R against alpha P P^T (P^H for herk) + beta C0, P = op(A) n x k,
 * and of its other triangle against C0 (untouched). */
static double rank_k_error(int herk, int uplo, int trans, int n, int k, zc alpha, const zc *A, zc beta,
                           const zc *C0, const zc *R)
{
    double e = 0;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            zc acc = 0;
            for (int l = 0; l < k; l++)
                acc += opel(trans, A, LD, i, l) * (herk ? conj(opel(trans, A, LD, j, l)) : opel(trans, A, LD, j, l));
            zc want = (uplo == LOWER ? i >= j : i <= j) ? alpha * acc + beta * C0[i + j * LD] : C0[i + j * LD];
            e = worst(e, rel(R[i + j * LD], want));
        }
    return e;
}

static void symmetric(handle_t h)
{
    zc A[LD * M], C0[LD * M], R[LD * M], B[LD * M], S[LD * M];
    double a[LD * M], c[LD * M], b[LD * M], alpha = 1.5, beta = -0.5;
    fill(A, LD * M, 0, 7, 0, 0), fill(C0, LD * M, 0, 8, 0, 0), fill(B, LD * M, 0, 9, 0, 0);
    to_d(a, A, LD * M), to_d(c, C0, LD * M), to_d(b, B, LD * M);
    void *dA = device(a, sizeof a), *dC = device(c, sizeof c), *dB = device(b, sizeof b);
    /* syrk lower N: C (7x7) = 1.5 A A^T + -0.5 C, A 7x5; the upper triangle untouched */
    CHECK(cublasDsyrk_v2(h, LOWER, N_, M, K, &alpha, dA, LD, &beta, dC, LD));
    fetch(c, dC, sizeof c), from_d(R, c, LD * M);
    report("cublasDsyrk lower N 7x5 (upper untouched)", rank_k_error(0, LOWER, N_, M, K, alpha, A, beta, C0, R), 1e-13);
    /* herk upper C: C = 1.5 A^H A - 0.5 C with A 5x7, real scalars */
    zc ZA[LD * M], ZC[LD * M];
    fill(ZA, LD * M, 1, 10, 0, 0), fill(ZC, LD * M, 1, 11, 0, 0);
    for (int i = 0; i < M; i++)
        ZC[i + i * LD] = creal(ZC[i + i * LD]); /* a Hermitian C has a real diagonal */
    void *zA = device(ZA, sizeof ZA), *zC = device(ZC, sizeof ZC);
    CHECK(cublasZherk_v2(h, UPPER, C_, M, K, &alpha, zA, LD, &beta, zC, LD));
    fetch(R, zC, sizeof R);
    report("cublasZherk upper C 7x5 (lower untouched)", rank_k_error(1, UPPER, C_, M, K, alpha, ZA, beta, ZC, R),
           1e-13);
    /* symm left lower (double): C = 1.5 S B - 0.5 C, S 7x7 from A's lower triangle, B 7x5 */
    CHECK(cudaMemcpy(dC, c, sizeof c, 1));
    from_d(C0, c, LD * M);
    CHECK(cublasDsymm_v2(h, LEFT, LOWER, M, K, &alpha, dA, LD, dB, LD, &beta, dC, LD));
    fetch(c, dC, sizeof c), from_d(R, c, LD * M), symmetric_of(LOWER, A, M, S);
    report("cublasDsymm left lower 7x5", gemm_error(N_, N_, M, K, M, alpha, S, B, beta, C0, R), 1e-13);
    /* symm right upper (single complex): C = alpha B S + beta C, B 5x7 */
    cc fa[LD * M], fb[LD * M], fc[LD * M], falpha = 1 - 2 * I, fbeta = 0.25f;
    fill(ZA, LD * M, 1, 12, 0, 0), fill(B, LD * M, 1, 13, 0, 0), fill(C0, LD * M, 1, 14, 0, 0);
    to_c(fa, ZA, LD * M), to_c(fb, B, LD * M), to_c(fc, C0, LD * M);
    from_c(ZA, fa, LD * M), from_c(B, fb, LD * M), from_c(C0, fc, LD * M); /* the values as the GPU sees them */
    void *cA = device(fa, sizeof fa), *cB = device(fb, sizeof fb), *cC = device(fc, sizeof fc);
    CHECK(cublasCsymm_v2(h, RIGHT, UPPER, K, M, &falpha, cA, LD, cB, LD, &fbeta, cC, LD));
    fetch(fc, cC, sizeof fc), from_c(R, fc, LD * M), symmetric_of(UPPER, ZA, M, S);
    within("cublasCsymm right upper 5x7", gemm_error(N_, N_, K, M, M, falpha, B, S, fbeta, C0, R), 1e-5);
    /* NVIDIA's cuBLAS accepts herk's T (measured on the H200), as it does a complex gemv's operation 7 below */
    expect("cublasZherk trans T", cublasZherk_v2(h, UPPER, T_, M, K, &alpha, zA, LD, &beta, zC, LD), 0);
    expect("cublasDsyrk ldc < n", cublasDsyrk_v2(h, LOWER, N_, M, K, &alpha, dA, LD, &beta, dC, M - 1), INVALID_VALUE);
    for (void **p = (void *[]){dA, dB, dC, zA, zC, cA, cB, cC, NULL}; *p; p++)
        CHECK(cudaFree(*p));
}

static void rank1_and_complex_products(handle_t h)
{
    zc A[LD * M], X[3 * M], Y[3 * M], R[LD * M];
    double a[LD * M], x[3 * M], y[3 * M], alpha = -0.75;
    fill(A, LD * M, 0, 15, 0, 0), fill(X, 3 * M, 0, 16, 0, 0), fill(Y, 3 * M, 0, 17, 0, 0);
    to_d(a, A, LD * M), to_d(x, X, 3 * M), to_d(y, Y, 3 * M);
    void *dA = device(a, sizeof a), *dx = device(x, sizeof x), *dy = device(y, sizeof y);
    /* ger: A (7x5) += alpha x y^T, x every 2nd, y every 3rd */
    CHECK(cublasDger_v2(h, M, K, &alpha, dx, 2, dy, 3, dA, LD));
    fetch(a, dA, sizeof a), from_d(R, a, LD * M);
    double e = 0;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < K; j++)
            e = worst(e, rel(R[i + j * LD], A[i + j * LD] + alpha * X[2 * i] * Y[3 * j]));
    report("cublasDger 7x5 incx 2 incy 3", e, 1e-14);
    /* geru and gerc (complex), x backwards */
    zc ZA[LD * M], za = 0.5 + 0.25 * I;
    fill(ZA, LD * M, 1, 18, 0, 0), fill(X, 3 * M, 1, 19, 0, 0), fill(Y, 3 * M, 1, 20, 0, 0);
    void *zA = device(ZA, sizeof ZA), *zx = device(X, sizeof X), *zy = device(Y, sizeof Y);
    CHECK(cublasZgeru_v2(h, M, K, &za, zx, -1, zy, 1, zA, LD));
    CHECK(cublasZgerc_v2(h, M, K, &za, zx, 1, zy, 2, zA, LD));
    fetch(R, zA, sizeof R);
    e = 0;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < K; j++)
            e = worst(e, rel(R[i + j * LD],
                             ZA[i + j * LD] + za * *vel(X, M, -1, i) * Y[j] + za * X[i] * conj(Y[2 * j])));
    report("cublasZgeru incx -1, cublasZgerc incy 2", e, 1e-14);

    /* Zgemm: C (7x5) = alpha A B^H + beta C, A 7x3 lda 9, B 5x3 */
    zc ZB[LD * M], ZC[LD * M], zb = -1 + 0.5 * I;
    fill(ZA, LD * M, 1, 21, 0, 0), fill(ZB, LD * M, 1, 22, 0, 0), fill(ZC, LD * M, 1, 23, 0, 0);
    void *gA = device(ZA, sizeof ZA), *gB = device(ZB, sizeof ZB), *gC = device(ZC, sizeof ZC);
    CHECK(cublasZgemm_v2(h, N_, C_, M, K, 3, &za, gA, LD, gB, LD, &zb, gC, LD));
    fetch(R, gC, sizeof R);
    report("cublasZgemm N C 7x5x3", gemm_error(N_, C_, M, K, 3, za, ZA, ZB, zb, ZC, R), 1e-14);
    /* Cgemm3m: C (5x4) = alpha A^T B, A 6x5, beta 0 over a C of NaN */
    cc fa[LD * M], fb[LD * M], fc[LD * M], falpha = 2 + I, fzero = 0;
    fill(ZA, LD * M, 1, 24, 0, 0), fill(ZB, LD * M, 1, 25, 0, 0);
    to_c(fa, ZA, LD * M), to_c(fb, ZB, LD * M), from_c(ZA, fa, LD * M), from_c(ZB, fb, LD * M);
    for (int i = 0; i < LD * M; i++)
        fc[i] = NAN;
    void *cA = device(fa, sizeof fa), *cB = device(fb, sizeof fb), *cC = device(fc, sizeof fc);
    CHECK(cublasCgemm3m(h, T_, N_, 5, 4, 6, &falpha, cA, LD, cB, LD, &fzero, cC, LD));
    fetch(fc, cC, sizeof fc), from_c(R, fc, LD * M);
    within("cublasCgemm3m T N 5x4x6, beta 0 over NaN", gemm_error(T_, N_, 5, 4, 6, falpha, ZA, ZB, 0, NULL, R), 1e-5);

    /* Zgemv C: y (5, backwards) = alpha A^H x + beta y, A 7x5 (gA's), x every 2nd; Cgemv_64 N */
    fill(ZA, LD * M, 1, 21, 0, 0);
    fill(X, 3 * M, 1, 26, 0, 0), fill(Y, 3 * M, 1, 27, 0, 0);
    zc W[3 * M];
    CHECK(cudaMemcpy(zx, X, sizeof X, 1));
    CHECK(cudaMemcpy(zy, Y, sizeof Y, 1));
    CHECK(cublasZgemv_v2(h, C_, M, K, &za, gA, LD, zx, 2, &zb, zy, -1));
    fetch(W, zy, sizeof W);
    e = 0;
    for (int i = 0; i < K; i++) {
        zc acc = 0;
        for (int k = 0; k < M; k++)
            acc += opel(C_, ZA, LD, i, k) * X[2 * k];
        e = worst(e, rel(*vel(W, K, -1, i), za * acc + zb * *vel(Y, K, -1, i)));
    }
    report("cublasZgemv C 7x5 incx 2 incy -1", e, 1e-14);
    cc fx[3 * M], fy[3 * M];
    zc FA[LD * M];
    to_c(fx, X, 3 * M), to_c(fy, Y, 3 * M), from_c(X, fx, 3 * M), from_c(Y, fy, 3 * M);
    to_c(fa, ZA, LD * M), from_c(FA, fa, LD * M);
    CHECK(cudaMemcpy(cA, fa, sizeof fa, 1));
    void *cx = device(fx, sizeof fx), *cy = device(fy, sizeof fy);
    CHECK(cublasCgemv_v2_64(h, N_, M, K, &falpha, cA, LD, cx, 1, &fzero, cy, 3));
    fetch(fy, cy, sizeof fy);
    e = 0;
    for (int i = 0; i < M; i++) {
        zc acc = 0;
        for (int k = 0; k < K; k++)
            acc += FA[i + k * LD] * X[k];
        e = worst(e, rel(fy[3 * i], (zc)falpha * acc));
    }
    within("cublasCgemv_v2_64 N 7x5 incy 3", e, 1e-5);
    expect("cublasZgemm lda < m", cublasZgemm_v2(h, N_, N_, M, K, 3, &za, gA, M - 1, gB, LD, &zb, gC, LD),
           INVALID_VALUE);
    expect("cublasDger incy 0", cublasDger_v2(h, M, K, &alpha, dx, 1, dy, 0, dA, LD), INVALID_VALUE);
    expect("cublasZgemv trans 7", cublasZgemv_v2(h, 7, M, K, &za, gA, LD, zx, 1, &zb, zy, 1), 0);

    /* device pointer mode: Zgemm's alpha and beta read from device memory (gA and gB as above) */
    fill(ZB, LD * M, 1, 22, 0, 0);
    zc scalars[2] = {za, zb};
    void *dscal = device(scalars, sizeof scalars);
    CHECK(cudaMemcpy(gC, ZC, sizeof ZC, 1));
    CHECK(cublasSetPointerMode_v2(h, 1));
    CHECK(cublasZgemm_v2(h, N_, C_, M, K, 3, dscal, gA, LD, gB, LD, (zc *)dscal + 1, gC, LD));
    CHECK(cublasSetPointerMode_v2(h, 0));
    fetch(R, gC, sizeof R);
    report("cublasZgemm, alpha and beta on the device", gemm_error(N_, C_, M, K, 3, za, ZA, ZB, zb, ZC, R), 1e-14);
    for (void **p = (void *[]){dA, dx, dy, zA, zx, zy, gA, gB, gC, cA, cB, cC, cx, cy, dscal, NULL}; *p; p++)
        CHECK(cudaFree(*p));
}

/* getrsBatched after getrfBatched: op(A_i) X_i = B_i, checked against the original A_i. */
static void getrs(handle_t h)
{
    enum { NN = 6, NRHS = 3, BATCH = 2 };
    zc A[BATCH * LD * NN], B[BATCH * LD * NRHS], X[BATCH * LD * NRHS];
    double a[BATCH * LD * NN], b[BATCH * LD * NRHS], x[BATCH * LD * NRHS];
    fill(A, BATCH * LD * NN, 0, 30, 0, 0), fill(B, BATCH * LD * NRHS, 0, 31, 0, 0);
    to_d(a, A, BATCH * LD * NN), to_d(b, B, BATCH * LD * NRHS);
    double *dA = device(a, sizeof a), *dB = device(b, sizeof b);
    uint64_t pa[BATCH], pb[BATCH];
    for (int i = 0; i < BATCH; i++)
        pa[i] = (uint64_t)(uintptr_t)(dA + i * LD * NN), pb[i] = (uint64_t)(uintptr_t)(dB + i * LD * NRHS);
    void *arrA = device(pa, sizeof pa), *arrB = device(pb, sizeof pb);
    int zeros[BATCH * NN] = {0}, hinfo[BATCH], info = 99;
    int *piv = device(zeros, sizeof zeros), *dinfo = device(zeros, sizeof(int) * BATCH);
    CHECK(cublasDgetrfBatched(h, NN, arrA, LD, piv, dinfo, BATCH));
    for (int trans = N_; trans <= T_; trans++) {
        CHECK(cudaMemcpy(dB, b, sizeof b, 1));
        CHECK(cublasDgetrsBatched(h, trans, NN, NRHS, arrA, LD, piv, arrB, LD, &info, BATCH));
        fetch(x, dB, sizeof x), from_d(X, x, BATCH * LD * NRHS);
        double e = 0;
        for (int s = 0; s < BATCH; s++)
            for (int i = 0; i < NN; i++)
                for (int j = 0; j < NRHS; j++) {
                    zc acc = 0;
                    for (int k = 0; k < NN; k++)
                        acc += opel(trans, A + s * LD * NN, LD, i, k) * X[s * LD * NRHS + k + j * LD];
                    e = worst(e, rel(acc, B[s * LD * NRHS + i + j * LD]));
                }
        report(trans == N_ ? "cublasDgetrsBatched N x2 6x6, 3 rhs" : "cublasDgetrsBatched T x2 6x6, 3 rhs", e, 1e-12);
        expect("... host info", info, 0);
    }
    fetch(hinfo, dinfo, sizeof hinfo);
    expect("... getrfBatched info", hinfo[0] | hinfo[1], 0);

    /* complex, conjugate transpose, one matrix */
    zc ZA[LD * NN], ZB[LD * NRHS], ZX[LD * NRHS];
    fill(ZA, LD * NN, 1, 32, 0, 0), fill(ZB, LD * NRHS, 1, 33, 0, 0);
    void *zA = device(ZA, sizeof ZA), *zB = device(ZB, sizeof ZB);
    pa[0] = (uint64_t)(uintptr_t)zA, pb[0] = (uint64_t)(uintptr_t)zB;
    void *arrZA = device(pa, sizeof pa), *arrZB = device(pb, sizeof pb);
    CHECK(cublasZgetrfBatched(h, NN, arrZA, LD, piv, dinfo, 1));
    CHECK(cublasZgetrsBatched(h, C_, NN, NRHS, arrZA, LD, piv, arrZB, LD, &info, 1));
    fetch(ZX, zB, sizeof ZX);
    double e = 0;
    for (int i = 0; i < NN; i++)
        for (int j = 0; j < NRHS; j++) {
            zc acc = 0;
            for (int k = 0; k < NN; k++)
                acc += opel(C_, ZA, LD, i, k) * ZX[k + j * LD];
            e = worst(e, rel(acc, ZB[i + j * LD]));
        }
    report("cublasZgetrsBatched C 6x6, 3 rhs", e, 1e-12);
    info = 0;
    cublasDgetrsBatched(h, N_, NN, NRHS, arrA, NN - 1, piv, arrB, LD, &info, BATCH);
    expect("cublasDgetrsBatched lda < n: host info < 0", info < 0, 1);
    for (void **p = (void *[]){dA, dB, arrA, arrB, piv, dinfo, zA, zB, arrZA, arrZB, NULL}; *p; p++)
        CHECK(cudaFree(*p));
}

static int bad(handle_t h)
{
    /* Operands the program does not own, or past the end of its allocation: accepted (deferred), refused by the
     * server, reported at the next synchronisation; the handle works on. */
    double a[LD * M] = {0}, two = 2;
    for (int i = 0; i < M; i++)
        a[i + i * LD] = 1;
    void *dA = device(a, sizeof a), *dB = device(a, sizeof a), *foreign = (void *)0x10000;
    expect("cublasDtrsm, B foreign (deferred)", cublasDtrsm_v2(h, LEFT, LOWER, N_, NON_UNIT, M, K, &two, dA, LD,
                                                               foreign, LD), 0);
    expect_failed_sync(cudaDeviceSynchronize());
    expect("cublasDtrsm, B past its allocation", cublasDtrsm_v2(h, LEFT, LOWER, N_, NON_UNIT, M, 2 * M, &two, dA, LD,
                                                                 dB, LD), 0);
    expect_failed_sync(cudaDeviceSynchronize());
    expect("cublasDger, y foreign", cublasDger_v2(h, M, K, &two, dA, 1, foreign, 1, dB, LD), 0);
    expect_failed_sync(cudaDeviceSynchronize());
    expect("cublasDsyrk, A too short for trans T", cublasDsyrk_v2(h, LOWER, T_, M, 4 * M, &two, dA, 4 * M, &two, dB,
                                                                           LD), 0);
    expect_failed_sync(cudaDeviceSynchronize());
    CHECK(cublasSetPointerMode_v2(h, 1));
    expect("cublasDtrsm, device alpha foreign", cublasDtrsm_v2(h, LEFT, LOWER, N_, NON_UNIT, M, K, foreign, dA, LD, dB,
                                                               LD), 0);
    expect_failed_sync(cudaDeviceSynchronize());
    CHECK(cublasSetPointerMode_v2(h, 0));
    uint64_t ptrs[2] = {(uint64_t)(uintptr_t)dA, 0x10000};
    uint64_t both_b[2] = {(uint64_t)(uintptr_t)dB, (uint64_t)(uintptr_t)dB};
    void *arr = device(ptrs, sizeof ptrs), *arrB = device(both_b, sizeof both_b);
    int info = 99;
    expect("cublasDgetrsBatched, second A foreign", cublasDgetrsBatched(h, N_, M, 2, arr, LD, NULL, arrB, LD, &info, 2),
           0);
    expect_failed_sync(cudaDeviceSynchronize());
    expect("cublasDtrsm, one good call", cublasDtrsm_v2(h, LEFT, LOWER, N_, NON_UNIT, M, K, &two, dA, LD, dB, LD), 0);
    expect("... synchronises cleanly", cudaDeviceSynchronize(), 0);
    printf(failures ? "blas_level3_check bad FAILED (%d)\n" : "blas_level3_check bad OK\n", failures);
    return failures != 0;
}

int main(int argc, char **argv)
{
    handle_t h;
    CHECK(cublasCreate_v2(&h));
    if (argc > 1 && !strcmp(argv[1], "bad"))
        return bad(h);
    triangular(h);
    symmetric(h);
    rank1_and_complex_products(h);
    getrs(h);
    CHECK(cublasDestroy_v2(h));
    printf(failures ? "blas_level3_check FAILED (%d)\n" : "blas_level3_check OK\n", failures);
    return failures != 0;
}
