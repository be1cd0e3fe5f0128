/* libcublas.so.13: handles and their settings are local; every GEMM variant becomes one deferred BLAS_GEMM
 * (cublasGemmStridedBatchedEx on the server), so a training step costs no round trip per GEMM. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "blas.h"

BLAS_API int cublasCreate_v2(struct handle **out)
{
    if (!out)
        return CUBLAS_STATUS_INVALID_VALUE;
    uint64_t server;
    int r = rgpu_standin_open(RGPU_OP_BLAS_CREATE, &server);
    if (r)
        return r == RGPU_STANDIN_NO_DEVICE ? CUBLAS_STATUS_NOT_INITIALIZED : rgpu_blas_status(r);
    struct handle *h = calloc(1, sizeof *h);
    if (!h)
        return CUBLAS_STATUS_ALLOC_FAILED;
    h->server = server;
    *out = h;
    return CUBLAS_STATUS_SUCCESS;
}

BLAS_API int cublasDestroy_v2(struct handle *h)
{
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    int r = rgpu_standin_close(RGPU_OP_BLAS_DESTROY, h->server);
    free(h);
    return rgpu_blas_status(r);
}

#define SETTER(name, field, type)                                                                                   \
    BLAS_API int cublasSet##name(struct handle *h, type v)                                                        \
    {                                                                                                               \
        if (!h)                                                                                                     \
            return CUBLAS_STATUS_NOT_INITIALIZED;                                                                   \
        h->field = v;                                                                                               \
        return CUBLAS_STATUS_SUCCESS;                                                                               \
    }                                                                                                               \
    BLAS_API int cublasGet##name(struct handle *h, type *v)                                                       \
    {                                                                                                               \
        if (!h)                                                                                                     \
            return CUBLAS_STATUS_NOT_INITIALIZED;                                                                   \
        if (!v)                                                                                                     \
            return CUBLAS_STATUS_INVALID_VALUE;                                                                     \
        *v = h->field;                                                                                              \
        return CUBLAS_STATUS_SUCCESS;                                                                               \
    }
/* defines: cublasSetStream_v2 cublasGetStream_v2 cublasSetMathMode cublasGetMathMode cublasSetPointerMode_v2
 * cublasGetPointerMode_v2 cublasSetAtomicsMode cublasGetAtomicsMode */
SETTER(Stream_v2, stream, void *)
SETTER(MathMode, math_mode, int)
SETTER(PointerMode_v2, pointer_mode, int)
SETTER(AtomicsMode, atomics_mode, int)

BLAS_API int cublasSetWorkspace_v2(struct handle *h, void *workspace, size_t size)
{
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    h->workspace = workspace, h->workspace_size = size;
    return CUBLAS_STATUS_SUCCESS;
}

BLAS_API int cublasGetVersion_v2(struct handle *h, int *version)
{
    (void)h;
    if (!version)
        return CUBLAS_STATUS_INVALID_VALUE;
    *version = RGPU_CUBLAS_VERSION_ALL;
    return CUBLAS_STATUS_SUCCESS;
}

BLAS_API int cublasGetProperty(int type, int *value)
{
    if (!value)
        return CUBLAS_STATUS_INVALID_VALUE;
    int parts[] = {RGPU_CUBLAS_VERSION_ALL / 10000, RGPU_CUBLAS_VERSION_ALL / 100 % 100, RGPU_CUBLAS_VERSION_ALL % 100};
    if (type < 0 || type > 2)
        return CUBLAS_STATUS_INVALID_VALUE;
    *value = parts[type];
    return CUBLAS_STATUS_SUCCESS;
}

BLAS_API size_t cublasGetCudartVersion(void) { return 13000; }
BLAS_API const char *cublasGetStatusName(int s) { return rgpu_blas_status_name(s); }
BLAS_API const char *cublasGetStatusString(int s) { return rgpu_blas_status_name(s); }
/* As NVIDIA's: to the program's stdout, where its own refusals of an argument print (a routine's name as DTRSM,
 * `info` the parameter's position, the handle 0). */
BLAS_API void cublasXerbla(const char *name, int info)
{
    printf(" ** On entry to %-6s parameter number %d had an illegal value\n", name, info);
}

/* -- GEMM: every variant is one strided-batched GemmEx --------------------------------------------------------- */
struct operand {
    const void *ptr;
    int type;
    long long ld, stride;
};

static int rows_ok(int trans, long long rows_n, long long rows_t, long long ld)
{
    long long rows = trans == CUBLAS_OP_N ? rows_n : rows_t;
    return ld >= (rows > 1 ? rows : 1);
}

int rgpu_blas_gemm_args_ok(int ta, int tb, long long m, long long n, long long k, long long lda, long long ldb,
                           long long ldc, long long batch, const void *alpha, const void *beta)
{
    return !(m < 0 || n < 0 || k < 0 || batch < 0 || !alpha || !beta || (ta != CUBLAS_OP_N && ta != CUBLAS_OP_T &&
             ta != CUBLAS_OP_C) || (tb != CUBLAS_OP_N && tb != CUBLAS_OP_T && tb != CUBLAS_OP_C) ||
             !rows_ok(ta, m, k, lda) || !rows_ok(tb, k, n, ldb) || ldc < (m > 1 ? m : 1));
}

static int gemm(struct handle *h, int ta, int tb, long long m, long long n, long long k, const void *alpha,
                struct operand a, struct operand b, const void *beta, struct operand c, long long batch,
                int compute, int algo)
{
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!rgpu_blas_gemm_args_ok(ta, tb, m, n, k, a.ld, b.ld, c.ld, batch, alpha, beta))
        return CUBLAS_STATUS_INVALID_VALUE;
    if (!m || !n || !batch)
        return CUBLAS_STATUS_SUCCESS;
    if (h->math_mode & CUBLAS_TF32_TENSOR_OP_MATH && compute == CUBLAS_COMPUTE_32F)
        compute = CUBLAS_COMPUTE_32F_FAST_TF32;
    struct rgpu_blas_gemm_req req = {
        .handle = h->server, .stream = rgpu_ext_stream(h->stream), .transa = (uint32_t)ta, .transb = (uint32_t)tb,
        .m = m, .n = n, .k = k,
        .a = (uintptr_t)a.ptr, .a_type = (uint32_t)a.type, .lda = a.ld, .stride_a = a.stride,
        .b = (uintptr_t)b.ptr, .b_type = (uint32_t)b.type, .ldb = b.ld, .stride_b = b.stride,
        .c = (uintptr_t)c.ptr, .c_type = (uint32_t)c.type, .ldc = c.ld, .stride_c = c.stride,
        .batch = batch, .compute_type = (uint32_t)compute, .algo = algo, .pointer_mode = (uint32_t)h->pointer_mode,
        .math_mode = (uint32_t)h->math_mode, .workspace = (uintptr_t)h->workspace,
        .workspace_size = h->workspace_size};
    if (h->pointer_mode == CUBLAS_POINTER_MODE_DEVICE) { /* the scalars' device addresses, in their slots */
        uint8_t at[8], bt[8];
        rgpu_put_u64(at, (uintptr_t)alpha), rgpu_put_u64(bt, (uintptr_t)beta);
        memcpy(req.alpha, at, sizeof at), memcpy(req.beta, bt, sizeof bt);
    } else {
        size_t scalar = rgpu_blas_scalar_size(compute);
        memcpy(req.alpha, alpha, scalar), memcpy(req.beta, beta, scalar);
    }
    uint8_t args[RGPU_BLAS_GEMM_REQ_SIZE];
    rgpu_pack_blas_gemm(args, &req);
    return rgpu_blas_status(rgpu_ext_defer(RGPU_OP_BLAS_GEMM, args, sizeof args, NULL, 0));
}

#define OPND(p, t, ld, s) ((struct operand){(p), (t), (ld), (s)})

BLAS_API int cublasGemmStridedBatchedEx(struct handle *h, int ta, int tb, int m, int n, int k, const void *alpha,
                                        const void *A, int at, int lda, long long sa, const void *B, int bt, int ldb,
                                        long long sb, const void *beta, void *C, int ct, int ldc, long long sc,
                                        int batch, int compute, int algo)
{
    return gemm(h, ta, tb, m, n, k, alpha, OPND(A, at, lda, sa), OPND(B, bt, ldb, sb), beta, OPND(C, ct, ldc, sc),
                batch, compute, algo);
}

BLAS_API int cublasGemmEx(struct handle *h, int ta, int tb, int m, int n, int k, const void *alpha, const void *A,
                          int at, int lda, const void *B, int bt, int ldb, const void *beta, void *C, int ct, int ldc,
                          int compute, int algo)
{
    return gemm(h, ta, tb, m, n, k, alpha, OPND(A, at, lda, 0), OPND(B, bt, ldb, 0), beta, OPND(C, ct, ldc, 0), 1,
                compute, algo);
}

#define TYPED_GEMM(name, batched, ctype, dtype, compute)                                                            \
    BLAS_API int name(struct handle *h, int ta, int tb, int m, int n, int k, const ctype *alpha, \
                                         const ctype *A, int lda, const ctype *B, int ldb, const ctype *beta,       \
                                         ctype *C, int ldc)                                                         \
    {                                                                                                               \
        return gemm(h, ta, tb, m, n, k, alpha, OPND(A, dtype, lda, 0), OPND(B, dtype, ldb, 0), beta,               \
                    OPND(C, dtype, ldc, 0), 1, compute, CUBLAS_GEMM_DEFAULT);                                       \
    }                                                                                                               \
    BLAS_API int batched(struct handle *h, int ta, int tb, int m, int n, int k,         \
                                                    const ctype *alpha, const ctype *A, int lda, long long sa,     \
                                                    const ctype *B, int ldb, long long sb, const ctype *beta,      \
                                                    ctype *C, int ldc, long long sc, int batch)                    \
    {                                                                                                               \
        return gemm(h, ta, tb, m, n, k, alpha, OPND(A, dtype, lda, sa), OPND(B, dtype, ldb, sb), beta,             \
                    OPND(C, dtype, ldc, sc), batch, compute, CUBLAS_GEMM_DEFAULT);                                  \
    }
/* defines: cublasSgemm_v2 cublasSgemmStridedBatched cublasDgemm_v2 cublasDgemmStridedBatched cublasHgemm
 * cublasHgemmStridedBatched */
TYPED_GEMM(cublasSgemm_v2, cublasSgemmStridedBatched, float, CUDA_R_32F, CUBLAS_COMPUTE_32F)
TYPED_GEMM(cublasDgemm_v2, cublasDgemmStridedBatched, double, CUDA_R_64F, CUBLAS_COMPUTE_64F)
TYPED_GEMM(cublasHgemm, cublasHgemmStridedBatched, uint16_t, CUDA_R_16F, CUBLAS_COMPUTE_16F)

/* -- GEMV: one deferred BLAS_GEMM (see rgpu_blas_gemv_shape); single precision pedantic, as a GEMV never computes in
 * TF32 whatever the handle's math mode -------------------------------------------------------------------------- */
int rgpu_blas_gemv_shape(int trans, long long m, long long n, long long lda, long long incx, long long incy,
                         struct gemv_shape *out)
{
    static int logged;
    if ((trans != CUBLAS_OP_N && trans != CUBLAS_OP_T && trans != CUBLAS_OP_C) || m < 0 || n < 0 ||
        lda < (m > 1 ? m : 1) || !incx || !incy)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (incx < 0 || incy < 0) /* a row of a matrix cannot run backwards */
        return rgpu_blas_unsupported(&logged, "cublas<t>gemv with a negative increment");
    if (!m || !n)
        return RGPU_BLAS_NOTHING;
    /* y = A x (length m) is y^T = x^T A^T; y = A^T x (length n) is y^T = x^T A. Real types: C is T. */
    *out = trans == CUBLAS_OP_N ? (struct gemv_shape){CUBLAS_OP_T, m, n} : (struct gemv_shape){CUBLAS_OP_N, n, m};
    return CUBLAS_STATUS_SUCCESS;
}

static int gemv(struct handle *h, int trans, long long m, long long n, const void *alpha, struct operand a,
                struct operand x, const void *beta, struct operand y, long long batch, int compute)
{
    struct gemv_shape g;
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    int s = rgpu_blas_gemv_shape(trans, m, n, a.ld, x.ld, y.ld, &g);
    if (s)
        return s == RGPU_BLAS_NOTHING ? CUBLAS_STATUS_SUCCESS : s;
    return gemm(h, CUBLAS_OP_N, g.transb, 1, g.n, g.k, alpha, x, a, beta, y, batch, compute, CUBLAS_GEMM_DEFAULT);
}

#define TYPED_GEMV(t, ctype, dtype, compute, suffix, I)                                                             \
    BLAS_API int cublas##t##gemv_v2##suffix(struct handle *h, int trans, I m, I n, const ctype *alpha,             \
                                            const ctype *A, I lda, const ctype *x, I incx, const ctype *beta,     \
                                            ctype *y, I incy)                                                      \
    {                                                                                                               \
        if (!incx)                                                                                                  \
            return rgpu_blas_gemv_routine(h, dtype, sizeof(I) == 8, sizeof(ctype), trans, m, n, alpha, A, lda, x,  \
                                          beta, y, incy);                                                           \
        return gemv(h, trans, m, n, alpha, OPND(A, dtype, lda, 0), OPND(x, dtype, incx, 0), beta,                  \
                    OPND(y, dtype, incy, 0), 1, compute);                                                           \
    }                                                                                                               \
    BLAS_API int cublas##t##gemvStridedBatched##suffix(                                                             \
        struct handle *h, int trans, I m, I n, const ctype *alpha, const ctype *A, I lda, long long sa,            \
        const ctype *x, I incx, long long sx, const ctype *beta, ctype *y, I incy, long long sy, I batch)          \
    {                                                                                                               \
        return gemv(h, trans, m, n, alpha, OPND(A, dtype, lda, sa), OPND(x, dtype, incx, sx), beta,                \
                    OPND(y, dtype, incy, sy), batch, compute);                                                      \
    }
/* defines: cublasSgemv_v2 cublasSgemvStridedBatched cublasSgemv_v2_64 cublasSgemvStridedBatched_64 cublasDgemv_v2
 * cublasDgemvStridedBatched cublasDgemv_v2_64 cublasDgemvStridedBatched_64 */
TYPED_GEMV(S, float, CUDA_R_32F, CUBLAS_COMPUTE_32F_PEDANTIC, , int)
TYPED_GEMV(S, float, CUDA_R_32F, CUBLAS_COMPUTE_32F_PEDANTIC, _64, int64_t)
TYPED_GEMV(D, double, CUDA_R_64F, CUBLAS_COMPUTE_64F, , int)
TYPED_GEMV(D, double, CUDA_R_64F, CUBLAS_COMPUTE_64F, _64, int64_t)
