/* GEMMs over arrays of device pointers (cublasGemmBatchedEx, cublas{S,D,H}gemmBatched): one deferred
 * BLAS_GEMM_BATCHED. The arrays stay in device memory: the server reads them when the stream gets there and
 * checks every pointer (src/rgpu/dispatch/blas_batched.py). */
#include <string.h>

#include "blas.h"

static int gemm_batched(struct handle *h, int ta, int tb, int m, int n, int k, const void *alpha, const void *a,
                        int at, int lda, const void *b, int bt, int ldb, const void *beta, const void *c, int ct,
                        int ldc, int batch, int compute, int algo)
{
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!rgpu_blas_gemm_args_ok(ta, tb, m, n, k, lda, ldb, ldc, batch, alpha, beta) ||
        (batch && m && n && (!a || !b || !c)))
        return CUBLAS_STATUS_INVALID_VALUE;
    if (!m || !n || !batch)
        return CUBLAS_STATUS_SUCCESS;
    if (h->math_mode & CUBLAS_TF32_TENSOR_OP_MATH && compute == CUBLAS_COMPUTE_32F)
        compute = CUBLAS_COMPUTE_32F_FAST_TF32;
    struct rgpu_blas_gemm_batched_req req = {
        .handle = h->server, .stream = rgpu_ext_stream(h->stream), .transa = (uint32_t)ta, .transb = (uint32_t)tb,
        .m = m, .n = n, .k = k, .a = (uintptr_t)a, .a_type = (uint32_t)at, .lda = lda, .b = (uintptr_t)b,
        .b_type = (uint32_t)bt, .ldb = ldb, .c = (uintptr_t)c, .c_type = (uint32_t)ct, .ldc = ldc, .batch = batch,
        .compute_type = (uint32_t)compute, .algo = algo, .pointer_mode = (uint32_t)h->pointer_mode,
        .math_mode = (uint32_t)h->math_mode, .workspace = (uintptr_t)h->workspace,
        .workspace_size = h->workspace_size};
    if (h->pointer_mode == CUBLAS_POINTER_MODE_DEVICE) {
        rgpu_put_u64(req.alpha, (uintptr_t)alpha), rgpu_put_u64(req.beta, (uintptr_t)beta);
    } else {
        size_t scalar = rgpu_blas_scalar_size(compute);
        memcpy(req.alpha, alpha, scalar), memcpy(req.beta, beta, scalar);
    }
    uint8_t args[RGPU_BLAS_GEMM_BATCHED_REQ_SIZE];
    rgpu_pack_blas_gemm_batched(args, &req);
    return rgpu_blas_status(rgpu_ext_defer(RGPU_OP_BLAS_GEMM_BATCHED, args, sizeof args, NULL, 0));
}

BLAS_API int cublasGemmBatchedEx(struct handle *h, int ta, int tb, int m, int n, int k, const void *alpha,
                                 const void *const a[], int at, int lda, const void *const b[], int bt, int ldb,
                                 const void *beta, void *const c[], int ct, int ldc, int batch, int compute, int algo)
{
    return gemm_batched(h, ta, tb, m, n, k, alpha, a, at, lda, b, bt, ldb, beta, c, ct, ldc, batch, compute, algo);
}

#define TYPED_BATCHED(name, ctype, dtype, compute)                                                                  \
    BLAS_API int name(struct handle *h, int ta, int tb, int m, int n, int k, const ctype *alpha,                    \
                      const ctype *const a[], int lda, const ctype *const b[], int ldb, const ctype *beta,          \
                      ctype *const c[], int ldc, int batch)                                                        \
    {                                                                                                               \
        return gemm_batched(h, ta, tb, m, n, k, alpha, a, dtype, lda, b, dtype, ldb, beta, c, dtype, ldc, batch,   \
                            compute, CUBLAS_GEMM_DEFAULT);                                                          \
    }
/* defines: cublasSgemmBatched cublasDgemmBatched cublasHgemmBatched */
TYPED_BATCHED(cublasSgemmBatched, float, CUDA_R_32F, CUBLAS_COMPUTE_32F)
TYPED_BATCHED(cublasDgemmBatched, double, CUDA_R_64F, CUBLAS_COMPUTE_64F)
TYPED_BATCHED(cublasHgemmBatched, uint16_t, CUDA_R_16F, CUBLAS_COMPUTE_16F)

/* GEMVs over arrays of pointers: the pointer-array GEMM of rgpu_blas_gemv_shape. */
#define TYPED_GEMV_BATCHED(name, ctype, dtype, compute)                                                             \
    BLAS_API int name(struct handle *h, int trans, int m, int n, const ctype *alpha, const ctype *const a[],         \
                      int lda, const ctype *const x[], int incx, const ctype *beta, ctype *const y[], int incy,     \
                      int batch)                                                                                    \
    {                                                                                                               \
        struct gemv_shape g;                                                                                        \
        if (!h)                                                                                                     \
            return CUBLAS_STATUS_NOT_INITIALIZED;                                                                   \
        int s = rgpu_blas_gemv_shape(trans, m, n, lda, incx, incy, &g);                                             \
        if (s)                                                                                                      \
            return s == RGPU_BLAS_NOTHING ? CUBLAS_STATUS_SUCCESS : s;                                              \
        return gemm_batched(h, CUBLAS_OP_N, g.transb, 1, (int)g.n, (int)g.k, alpha, x, dtype, incx, a, dtype, lda,  \
                            beta, y, dtype, incy, batch, compute, CUBLAS_GEMM_DEFAULT);                             \
    }
/* defines: cublasSgemvBatched cublasDgemvBatched */
TYPED_GEMV_BATCHED(cublasSgemvBatched, float, CUDA_R_32F, CUBLAS_COMPUTE_32F_PEDANTIC)
TYPED_GEMV_BATCHED(cublasDgemvBatched, double, CUDA_R_64F, CUBLAS_COMPUTE_64F)
