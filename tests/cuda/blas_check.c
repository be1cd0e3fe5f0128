/* GEMMs through whatever libcublas/libcublasLt the loader gives (NVIDIA's natively, rgpu's stand-ins through
 * rgpu), every result compared with a CPU reference. Declares the few prototypes it needs, so it builds
 * without cuBLAS headers. Prints one line per check; exits non-zero on any mismatch. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib_check.h"

typedef void *handle_t;
int cudaMalloc(void **p, size_t n);
int cudaFree(void *p);
int cudaMemcpy(void *dst, const void *src, size_t n, int kind);
int cudaDeviceSynchronize(void);
int cublasCreate_v2(handle_t *h);
int cublasDestroy_v2(handle_t h);
int cublasSgemm_v2(handle_t, int, int, int, int, int, const float *, const float *, int, const float *, int,
                   const float *, float *, int);
int cublasDgemm_v2(handle_t, int, int, int, int, int, const double *, const double *, int, const double *, int,
                   const double *, double *, int);
int cublasSgemmStridedBatched(handle_t, int, int, int, int, int, const float *, const float *, int, long long,
                              const float *, int, long long, const float *, float *, int, long long, int);
int cublasGemmEx(handle_t, int, int, int, int, int, const void *, const void *, int, int, const void *, int, int,
                 const void *, void *, int, int, int, int);
int cublasLtCreate(handle_t *h);
int cublasLtDestroy(handle_t h);
int cublasLtMatmulDescCreate(handle_t *d, int compute, int scale);
int cublasLtMatmulDescDestroy(handle_t d);
int cublasLtMatmulDescSetAttribute(handle_t d, int attr, const void *buf, size_t n);
int cublasLtMatrixLayoutCreate(handle_t *l, int type, uint64_t rows, uint64_t cols, int64_t ld);
int cublasLtMatrixLayoutDestroy(handle_t l);
int cublasLtMatmulPreferenceCreate(handle_t *p);
int cublasLtMatmulPreferenceDestroy(handle_t p);
int cublasLtMatmulPreferenceSetAttribute(handle_t p, int attr, const void *buf, size_t n);
int cublasLtMatmulAlgoGetHeuristic(handle_t, handle_t, handle_t, handle_t, handle_t, handle_t, handle_t, int, void *,
                                   int *);
int cublasLtMatmul(handle_t, handle_t, const void *, const void *, handle_t, const void *, handle_t, const void *,
                   const void *, handle_t, void *, handle_t, const void *, void *, size_t, void *);

enum { N = 0, T = 1, R_32F = 0, R_64F = 1, COMPUTE_32F = 68, COMPUTE_64F = 70, GEMM_DEFAULT = -1 };
enum { DESC_TRANSA = 3, DESC_EPILOGUE = 7, DESC_BIAS_POINTER = 8, EPILOGUE_RELU_BIAS = 6, PREF_MAX_WORKSPACE = 1 };


/* C = alpha * op(A) * op(B) + beta * C, column-major, in double. */
static void ref_gemm(int ta, int tb, int m, int n, int k, double alpha, const double *A, int lda, const double *B,
                     int ldb, double beta, double *C, int ldc)
{
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            double acc = 0;
            for (int p = 0; p < k; p++)
                acc += (ta ? A[p + i * lda] : A[i + p * lda]) * (tb ? B[j + p * ldb] : B[p + j * ldb]);
            C[i + j * ldc] = alpha * acc + beta * C[i + j * ldc];
        }
}

static void *upload(const void *host, size_t n)
{
    void *d;
    CHECK(cudaMalloc(&d, n));
    CHECK(cudaMemcpy(d, host, n, 1));
    return d;
}

static double max_err_f(const float *got, const double *want, int n)
{
    double e = 0;
    for (int i = 0; i < n; i++)
        e = fmax(e, fabs(got[i] - want[i]) / (1 + fabs(want[i])));
    return e;
}

int main(void)
{
    srand(7);
    const int m = 67, n = 45, k = 129, batch = 3;
    double *A = malloc(sizeof(double) * k * m * batch), *B = malloc(sizeof(double) * k * n * batch),
           *C = malloc(sizeof(double) * m * n * batch), *R = malloc(sizeof(double) * m * n * batch);
    float *Af = malloc(sizeof(float) * k * m * batch), *Bf = malloc(sizeof(float) * k * n * batch),
          *Cf = malloc(sizeof(float) * m * n * batch);
    for (int i = 0; i < k * m * batch; i++)
        A[i] = (rand() % 2001 - 1000) / 1000.0, Af[i] = (float)A[i];
    for (int i = 0; i < k * n * batch; i++)
        B[i] = (rand() % 2001 - 1000) / 1000.0, Bf[i] = (float)B[i];
    for (int i = 0; i < m * n * batch; i++)
        C[i] = (rand() % 2001 - 1000) / 1000.0, Cf[i] = (float)C[i];
    handle_t h;
    CHECK(cublasCreate_v2(&h));

    /* Sgemm, A transposed (stored k x m) */
    float *dA = upload(Af, sizeof(float) * k * m), *dB = upload(Bf, sizeof(float) * k * n),
          *dC = upload(Cf, sizeof(float) * m * n), out[67 * 45 * 3];
    float alpha = 1.5f, beta = -0.5f;
    CHECK(cublasSgemm_v2(h, T, N, m, n, k, &alpha, dA, k, dB, k, &beta, dC, m));
    CHECK(cudaMemcpy(out, dC, sizeof(float) * m * n, 2));
    memcpy(R, C, sizeof(double) * m * n);
    ref_gemm(T, N, m, n, k, 1.5, A, k, B, k, -0.5, R, m);
    report("cublasSgemm T,N 67x45x129", max_err_f(out, R, m * n), 1e-4);

    /* Dgemm */
    double *dAd = upload(A, sizeof(double) * k * m), *dBd = upload(B, sizeof(double) * k * n),
           *dCd = upload(C, sizeof(double) * m * n), outd[67 * 45];
    double da = 0.75, db = 0.25;
    CHECK(cublasDgemm_v2(h, N, T, m, n, k, &da, dAd, m, dBd, n, &db, dCd, m));
    CHECK(cudaMemcpy(outd, dCd, sizeof(double) * m * n, 2));
    memcpy(R, C, sizeof(double) * m * n);
    ref_gemm(N, T, m, n, k, 0.75, A, m, B, n, 0.25, R, m);
    double e = 0;
    for (int i = 0; i < m * n; i++)
        e = fmax(e, fabs(outd[i] - R[i]));
    report("cublasDgemm N,T 67x45x129", e, 1e-10);

    /* GemmEx fp32 and strided batched */
    float zero = 0.0f, one = 1.0f;
    CHECK(cublasGemmEx(h, N, N, m, n, k, &one, dA, R_32F, m, dB, R_32F, k, &zero, dC, R_32F, m, COMPUTE_32F,
                       GEMM_DEFAULT));
    CHECK(cudaMemcpy(out, dC, sizeof(float) * m * n, 2));
    memset(R, 0, sizeof(double) * m * n);
    ref_gemm(N, N, m, n, k, 1, A, m, B, k, 0, R, m);
    report("cublasGemmEx fp32 N,N", max_err_f(out, R, m * n), 1e-4);

    float *bA = upload(Af, sizeof(float) * k * m * batch), *bB = upload(Bf, sizeof(float) * k * n * batch),
          *bC = upload(Cf, sizeof(float) * m * n * batch);
    CHECK(cublasSgemmStridedBatched(h, N, N, m, n, k, &one, bA, m, (long long)m * k, bB, k, (long long)k * n, &one,
                                    bC, m, (long long)m * n, batch));
    CHECK(cudaMemcpy(out, bC, sizeof(float) * m * n * batch, 2));
    memcpy(R, C, sizeof(double) * m * n * batch);
    for (int b = 0; b < batch; b++)
        ref_gemm(N, N, m, n, k, 1, A + b * m * k, m, B + b * k * n, k, 1, R + b * m * n, m);
    report("cublasSgemmStridedBatched x3", max_err_f(out, R, m * n * batch), 1e-4);

    /* cuBLASLt: D = relu(op(A) B + bias), A transposed, with a heuristic-chosen algorithm */
    handle_t lt, op, la, lb, lc, pref;
    CHECK(cublasLtCreate(&lt));
    CHECK(cublasLtMatmulDescCreate(&op, COMPUTE_32F, R_32F));
    int32_t trans = T, epilogue = EPILOGUE_RELU_BIAS;
    float bias[67];
    for (int i = 0; i < m; i++)
        bias[i] = (float)(i % 7) - 3.0f;
    float *dbias = upload(bias, sizeof bias);
    CHECK(cublasLtMatmulDescSetAttribute(op, DESC_TRANSA, &trans, sizeof trans));
    CHECK(cublasLtMatmulDescSetAttribute(op, DESC_EPILOGUE, &epilogue, sizeof epilogue));
    CHECK(cublasLtMatmulDescSetAttribute(op, DESC_BIAS_POINTER, &dbias, sizeof dbias));
    CHECK(cublasLtMatrixLayoutCreate(&la, R_32F, k, m, k));
    CHECK(cublasLtMatrixLayoutCreate(&lb, R_32F, k, n, k));
    CHECK(cublasLtMatrixLayoutCreate(&lc, R_32F, m, n, m));
    CHECK(cublasLtMatmulPreferenceCreate(&pref));
    uint64_t workspace = 1 << 20;
    CHECK(cublasLtMatmulPreferenceSetAttribute(pref, PREF_MAX_WORKSPACE, &workspace, sizeof workspace));
    uint8_t results[4][96];
    int found = 0;
    CHECK(cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, lc, lc, pref, 4, results, &found));
    void *ws;
    CHECK(cudaMalloc(&ws, workspace));
    float *dD;
    CHECK(cudaMalloc((void **)&dD, sizeof(float) * m * n));
    CHECK(cublasLtMatmul(lt, op, &one, dA, la, dB, lb, &zero, dD, lc, dD, lc, results[0], ws,
                         *(uint64_t *)(results[0] + 64), NULL));
    CHECK(cudaMemcpy(out, dD, sizeof(float) * m * n, 2));
    memset(R, 0, sizeof(double) * m * n);
    ref_gemm(T, N, m, n, k, 1, A, k, B, k, 0, R, m);
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++)
            R[i + j * m] = fmax(0.0, R[i + j * m] + bias[i]);
    report("cublasLtMatmul T,N +bias relu", max_err_f(out, R, m * n), 1e-4);
    printf("heuristic results: %d\n", found > 0);
    /* The same question again is answered as before (rgpu answers it from memory: tests/test_blas.py counts the
     * round trips); a different one is asked anew. */
    uint8_t again[4][96];
    int found_again = 0;
    CHECK(cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, lc, lc, pref, 4, again, &found_again));
    if (found_again != found || memcmp(again, results, (size_t)found * 96))
        printf("FAIL heuristic asked twice differs\n"), failures++;
    CHECK(cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, lc, lc, pref, 2, again, &found_again));
    if (found_again < 1 || found_again > 2)
        printf("FAIL heuristic for 2 gave %d\n", found_again), failures++;
    /* More distinct questions than a step of a big model asks (here: 200 workspace limits), each asked twice: rgpu asks the
     * server once per distinct question (tests/test_blas.py counts 2 + 200 round trips). */
    for (int round = 0; round < 2; round++)
        for (int i = 0; i < 200; i++) {
            uint64_t limit = workspace + 256 * (uint64_t)(i + 1);
            CHECK(cublasLtMatmulPreferenceSetAttribute(pref, PREF_MAX_WORKSPACE, &limit, sizeof limit));
            CHECK(cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, lc, lc, pref, 4, again, &found_again));
        }

    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(la), cublasLtMatrixLayoutDestroy(lb), cublasLtMatrixLayoutDestroy(lc);
    cublasLtMatmulDescDestroy(op);
    CHECK(cublasLtDestroy(lt));
    CHECK(cublasDestroy_v2(h));
    CHECK(cudaDeviceSynchronize());
    printf("blas_check %s\n", failures ? "FAILED" : "OK");
    return failures != 0;
}
