/* Batched LU factorisation, inversion and solves over arrays of device pointers (cublas<t>getrfBatched,
 * getriBatched, matinvBatched, trsmBatched, getrsBatched): each one deferred BLAS_LU_BATCHED, BLAS_TRSM_BATCHED or
 * BLAS_GETRS_BATCHED. As for cublasGemmBatchedEx, the arrays stay in device memory and the server checks every
 * pointer in them (src/rgpu/dispatch/blas_batched.py). */
#include <stdio.h>
#include <string.h>

#include "blas.h"

enum { GETRF, GETRI, MATINV };


static int lu_batched(struct handle *h, int which, int type, long long n, const void *a, long long lda,
                      const int *pivots, const void *c, long long ldc, const int *info, long long batch)
{
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if (n < 0 || batch < 0 || lda < RGPU_BLAS_AT_LEAST_1(n) || (which != GETRF && ldc < RGPU_BLAS_AT_LEAST_1(n)) ||
        (which == MATINV && n > 32))
        return CUBLAS_STATUS_INVALID_VALUE;
    if (!n || !batch)
        return CUBLAS_STATUS_SUCCESS;
    if (!a || !info || (which != GETRF && !c))
        return CUBLAS_STATUS_INVALID_VALUE;
    struct rgpu_blas_lu_batched_req req = {
        .handle = h->server, .stream = rgpu_ext_stream(h->stream), .which = (uint32_t)which, .type = (uint32_t)type,
        .n = n, .a = (uintptr_t)a, .lda = lda, .pivots = (uintptr_t)pivots, .c = (uintptr_t)c,
        .ldc = which == GETRF ? 0 : ldc, .info = (uintptr_t)info, .batch = batch};
    uint8_t args[RGPU_BLAS_LU_BATCHED_REQ_SIZE];
    rgpu_pack_blas_lu_batched(args, &req);
    return rgpu_blas_status(rgpu_ext_defer(RGPU_OP_BLAS_LU_BATCHED, args, sizeof args, NULL, 0));
}

static int trsm_batched(struct handle *h, int side, int uplo, int trans, int diag, long long m, long long n,
                        const void *alpha, size_t scalar, int type, const void *a, long long lda, const void *b,
                        long long ldb, long long batch)
{
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    long long k = side == CUBLAS_SIDE_LEFT ? m : n;
    /* The first refused parameter by its position (the handle 0), which NVIDIA's cuBLAS prints. */
    int refused = side != CUBLAS_SIDE_LEFT && side != CUBLAS_SIDE_RIGHT                   ? 1
                  : uplo != CUBLAS_FILL_MODE_LOWER && uplo != CUBLAS_FILL_MODE_UPPER        ? 2
                  : trans != CUBLAS_OP_N && trans != CUBLAS_OP_T && trans != CUBLAS_OP_C    ? 3
                  : diag != CUBLAS_DIAG_NON_UNIT && diag != CUBLAS_DIAG_UNIT                ? 4
                  : m < 0                                                                   ? 5
                  : n < 0                                                                   ? 6
                  : lda < RGPU_BLAS_AT_LEAST_1(k)                                           ? 9
                  : ldb < RGPU_BLAS_AT_LEAST_1(m)                                           ? 11
                  : batch < 0                                                               ? 12
                                                                                            : 0;
    if (refused) {
        /* NVIDIA's name for it, as printed on the H200: "DBATCHED TRSM", two spaces before "parameter". */
        char name[24];
        snprintf(name, sizeof name, "%cBATCHED TRSM ",
                 type == CUDA_R_32F ? 'S' : type == CUDA_R_64F ? 'D' : type == CUDA_C_32F ? 'C' : 'Z');
        cublasXerbla(name, refused);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    if (!alpha)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (!m || !n || !batch)
        return CUBLAS_STATUS_SUCCESS;
    if (!a || !b)
        return CUBLAS_STATUS_INVALID_VALUE;
    struct rgpu_blas_trsm_batched_req req = {
        .handle = h->server, .stream = rgpu_ext_stream(h->stream), .side = (uint32_t)side, .uplo = (uint32_t)uplo,
        .trans = (uint32_t)trans, .diag = (uint32_t)diag, .type = (uint32_t)type, .m = m, .n = n,
        .pointer_mode = (uint32_t)h->pointer_mode, .a = (uintptr_t)a, .lda = lda, .b = (uintptr_t)b, .ldb = ldb,
        .batch = batch};
    if (h->pointer_mode == CUBLAS_POINTER_MODE_DEVICE)
        rgpu_put_u64(req.alpha, (uintptr_t)alpha);
    else
        memcpy(req.alpha, alpha, scalar);
    uint8_t args[RGPU_BLAS_TRSM_BATCHED_REQ_SIZE];
    rgpu_pack_blas_trsm_batched(args, &req);
    return rgpu_blas_status(rgpu_ext_defer(RGPU_OP_BLAS_TRSM_BATCHED, args, sizeof args, NULL, 0));
}

/* getrsBatched's info is a host int: it reports the parameter checks (0, or -j for the j-th parameter after the
 * handle, LAPACK's numbering), never a result of the solve, so the call defers like the others. */
static int getrs_batched(struct handle *h, int trans, int type, long long n, long long nrhs, const void *a,
                         long long lda, const int *pivots, const void *b, long long ldb, int *info, long long batch)
{
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!info)
        return CUBLAS_STATUS_INVALID_VALUE;
    *info = !RGPU_BLAS_OP_OK(trans) ? -1 : n < 0 ? -2 : nrhs < 0 ? -3 : lda < RGPU_BLAS_AT_LEAST_1(n) ? -5
          : ldb < RGPU_BLAS_AT_LEAST_1(n) ? -8 : batch < 0 ? -10 : 0;
    if (*info)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (!n || !nrhs || !batch)
        return CUBLAS_STATUS_SUCCESS;
    if (!a || !b)
        return CUBLAS_STATUS_INVALID_VALUE;
    struct rgpu_blas_getrs_batched_req req = {
        .handle = h->server, .stream = rgpu_ext_stream(h->stream), .trans = (uint32_t)trans, .type = (uint32_t)type,
        .n = n, .nrhs = nrhs, .a = (uintptr_t)a, .lda = lda, .pivots = (uintptr_t)pivots, .b = (uintptr_t)b,
        .ldb = ldb, .batch = batch};
    uint8_t args[RGPU_BLAS_GETRS_BATCHED_REQ_SIZE];
    rgpu_pack_blas_getrs_batched(args, &req);
    return rgpu_blas_status(rgpu_ext_defer(RGPU_OP_BLAS_GETRS_BATCHED, args, sizeof args, NULL, 0));
}

#define TYPED_LU(t, ctype, dtype)                                                                                   \
    BLAS_API int cublas##t##getrfBatched(struct handle *h, int n, ctype *const a[], int lda, int *p, int *info,      \
                                         int batch)                                                                 \
    {                                                                                                               \
        return lu_batched(h, GETRF, dtype, n, a, lda, p, NULL, 0, info, batch);                                     \
    }                                                                                                               \
    BLAS_API int cublas##t##getriBatched(struct handle *h, int n, const ctype *const a[], int lda, const int *p,     \
                                         ctype *const c[], int ldc, int *info, int batch)                           \
    {                                                                                                               \
        return lu_batched(h, GETRI, dtype, n, a, lda, p, c, ldc, info, batch);                                      \
    }                                                                                                               \
    BLAS_API int cublas##t##matinvBatched(struct handle *h, int n, const ctype *const a[], int lda,                  \
                                          ctype *const c[], int ldc, int *info, int batch)                          \
    {                                                                                                               \
        return lu_batched(h, MATINV, dtype, n, a, lda, NULL, c, ldc, info, batch);                                  \
    }                                                                                                               \
    BLAS_API int cublas##t##trsmBatched(struct handle *h, int side, int uplo, int trans, int diag, int m, int n,     \
                                        const ctype *alpha, const ctype *const a[], int lda, ctype *const b[],      \
                                        int ldb, int batch)                                                         \
    {                                                                                                               \
        return trsm_batched(h, side, uplo, trans, diag, m, n, alpha, sizeof(ctype), dtype, a, lda, b, ldb, batch);  \
    }                                                                                                               \
    BLAS_API int cublas##t##trsmBatched_64(struct handle *h, int side, int uplo, int trans, int diag, int64_t m,     \
                                           int64_t n, const ctype *alpha, const ctype *const a[], int64_t lda,      \
                                           ctype *const b[], int64_t ldb, int64_t batch)                            \
    {                                                                                                               \
        return trsm_batched(h, side, uplo, trans, diag, m, n, alpha, sizeof(ctype), dtype, a, lda, b, ldb, batch);  \
    }                                                                                                               \
    BLAS_API int cublas##t##getrsBatched(struct handle *h, int trans, int n, int nrhs, const ctype *const a[],      \
                                         int lda, const int *pivots, ctype *const b[], int ldb, int *info,          \
                                         int batch)                                                                 \
    {                                                                                                               \
        return getrs_batched(h, trans, dtype, n, nrhs, a, lda, pivots, b, ldb, info, batch);                        \
    }
/* defines: cublasSgetrfBatched cublasSgetriBatched cublasSmatinvBatched cublasStrsmBatched cublasStrsmBatched_64
 * cublasSgetrsBatched cublasDgetrfBatched cublasDgetriBatched cublasDmatinvBatched cublasDtrsmBatched
 * cublasDtrsmBatched_64 cublasDgetrsBatched cublasCgetrfBatched cublasCgetriBatched cublasCmatinvBatched
 * cublasCtrsmBatched cublasCtrsmBatched_64 cublasCgetrsBatched cublasZgetrfBatched cublasZgetriBatched
 * cublasZmatinvBatched cublasZtrsmBatched cublasZtrsmBatched_64 cublasZgetrsBatched */
TYPED_LU(S, float, CUDA_R_32F)
TYPED_LU(D, double, CUDA_R_64F)
TYPED_LU(C, complex_float, CUDA_C_32F)
TYPED_LU(Z, complex_double, CUDA_C_64F)
