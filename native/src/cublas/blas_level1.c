/* cuBLAS Level 1 in single and double precision (axpy, scal, copy, swap, dot, nrm2, asum, iamax, iamin, and their
 * _64 forms): one BLAS_LEVEL1 each, deferred -- except a reduction in host pointer mode, whose result the program
 * reads as soon as the call returns: one BLAS_LEVEL1_RESULT round trip. */
#include <string.h>

#include "blas.h"

enum { AXPY, SCAL, COPY, SWAP, DOT, NRM2, ASUM, IAMAX, IAMIN, IAMAX64, IAMIN64 };

struct level1 {
    int func, type;
    size_t scalar;      /* bytes of an element (and of alpha) */
    long long n;
    const void *x, *y;
    long long incx, incy;
    const void *alpha;  /* axpy, scal */
    void *result;       /* the reductions */
    size_t result_size; /* 4 or 8 */
};

static int run(struct handle *h, struct level1 c)
{
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    int reduction = c.func >= DOT, device = h->pointer_mode == CUBLAS_POINTER_MODE_DEVICE;
    if ((c.func == AXPY || c.func == SCAL) && !c.alpha)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (reduction && !c.result) /* NVIDIA's copy of the result to nowhere fails: measured MAPPING_ERROR (H200) */
        return CUBLAS_STATUS_MAPPING_ERROR;
    /* BLAS returns at once: nothing to do, or a reduction of nothing (0; cuBLAS writes it as the answer). */
    int empty = c.n <= 0 || (c.incx <= 0 && (c.func == SCAL || (reduction && c.func != DOT)));
    if (empty && (!reduction || !device)) {
        if (reduction)
            memset(c.result, 0, c.result_size);
        return CUBLAS_STATUS_SUCCESS;
    }
    struct rgpu_blas_level1_req req = {
        .handle = h->server, .stream = rgpu_ext_stream(h->stream), .func = (uint32_t)c.func, .type = (uint32_t)c.type,
        .n = c.n, .x = (uintptr_t)c.x, .incx = c.incx, .y = (uintptr_t)c.y, .incy = c.incy,
        .pointer_mode = (uint32_t)h->pointer_mode, .result = device ? (uintptr_t)c.result : 0};
    if (c.alpha && device)
        rgpu_put_u64(req.alpha, (uintptr_t)c.alpha);
    else if (c.alpha)
        memcpy(req.alpha, c.alpha, c.scalar);
    _Static_assert(RGPU_BLAS_LEVEL1_REQ_SIZE == RGPU_BLAS_LEVEL1_RESULT_REQ_SIZE, "one request for both");
    uint8_t args[RGPU_BLAS_LEVEL1_REQ_SIZE], rep[RGPU_BLAS_LEVEL1_RESULT_REP_SIZE];
    rgpu_pack_blas_level1(args, &req);
    if (!reduction || device)
        return rgpu_blas_status(rgpu_ext_defer(RGPU_OP_BLAS_LEVEL1, args, sizeof args, NULL, 0));
    int r = rgpu_ext_call(RGPU_OP_BLAS_LEVEL1_RESULT, args, sizeof args, NULL, 0, rep, sizeof rep, NULL, 0, NULL);
    struct rgpu_blas_level1_result_rep got;
    if (r || rgpu_unpack_blas_level1_result(rep, sizeof rep, &got)) /* the reply's size is the connection's check */
        return rgpu_blas_status(r);
    memcpy(c.result, got.result, c.result_size);
    return CUBLAS_STATUS_SUCCESS;
}

#define L1(f, x_, incx_, y_, incy_, alpha_, result_, rsize)                                                            \
    run(h, (struct level1){.func = (f), .type = DTYPE, .scalar = sizeof(CTYPE), .n = n, .x = (x_), .incx = (incx_),    \
                           .y = (y_), .incy = (incy_), .alpha = (alpha_), .result = (result_), .result_size = (rsize)})
#define TYPED_LEVEL1(t, it, ctype, suffix, I, iresult, imax, imin)                                                     \
    BLAS_API int cublas##t##axpy_v2##suffix(struct handle *h, I n, const ctype *alpha, const ctype *x, I incx,         \
                                            ctype *y, I incy)                                                          \
    {                                                                                                                  \
        return L1(AXPY, x, incx, y, incy, alpha, NULL, 0);                                                             \
    }                                                                                                                  \
    BLAS_API int cublas##t##scal_v2##suffix(struct handle *h, I n, const ctype *alpha, ctype *x, I incx)               \
    {                                                                                                                  \
        return L1(SCAL, x, incx, NULL, 0, alpha, NULL, 0);                                                             \
    }                                                                                                                  \
    BLAS_API int cublas##t##copy_v2##suffix(struct handle *h, I n, const ctype *x, I incx, ctype *y, I incy)           \
    {                                                                                                                  \
        return L1(COPY, x, incx, y, incy, NULL, NULL, 0);                                                              \
    }                                                                                                                  \
    BLAS_API int cublas##t##swap_v2##suffix(struct handle *h, I n, ctype *x, I incx, ctype *y, I incy)                 \
    {                                                                                                                  \
        return L1(SWAP, x, incx, y, incy, NULL, NULL, 0);                                                              \
    }                                                                                                                  \
    BLAS_API int cublas##t##dot_v2##suffix(struct handle *h, I n, const ctype *x, I incx, const ctype *y, I incy,      \
                                           ctype *result)                                                              \
    {                                                                                                                  \
        return L1(DOT, x, incx, y, incy, NULL, result, sizeof(ctype));                                                 \
    }                                                                                                                  \
    BLAS_API int cublas##t##nrm2_v2##suffix(struct handle *h, I n, const ctype *x, I incx, ctype *result)              \
    {                                                                                                                  \
        return L1(NRM2, x, incx, NULL, 0, NULL, result, sizeof(ctype));                                                \
    }                                                                                                                  \
    BLAS_API int cublas##t##asum_v2##suffix(struct handle *h, I n, const ctype *x, I incx, ctype *result)              \
    {                                                                                                                  \
        return L1(ASUM, x, incx, NULL, 0, NULL, result, sizeof(ctype));                                                \
    }                                                                                                                  \
    BLAS_API int cublasI##it##amax_v2##suffix(struct handle *h, I n, const ctype *x, I incx, iresult *result)          \
    {                                                                                                                  \
        return L1(imax, x, incx, NULL, 0, NULL, result, sizeof(iresult));                                              \
    }                                                                                                                  \
    BLAS_API int cublasI##it##amin_v2##suffix(struct handle *h, I n, const ctype *x, I incx, iresult *result)          \
    {                                                                                                                  \
        return L1(imin, x, incx, NULL, 0, NULL, result, sizeof(iresult));                                              \
    }
/* defines: cublasSaxpy_v2 cublasSscal_v2 cublasScopy_v2 cublasSswap_v2 cublasSdot_v2 cublasSnrm2_v2 cublasSasum_v2
 * cublasIsamax_v2 cublasIsamin_v2 cublasSaxpy_v2_64 cublasSscal_v2_64 cublasScopy_v2_64 cublasSswap_v2_64
 * cublasSdot_v2_64 cublasSnrm2_v2_64 cublasSasum_v2_64 cublasIsamax_v2_64 cublasIsamin_v2_64
 * cublasDaxpy_v2 cublasDscal_v2 cublasDcopy_v2 cublasDswap_v2 cublasDdot_v2 cublasDnrm2_v2 cublasDasum_v2
 * cublasIdamax_v2 cublasIdamin_v2 cublasDaxpy_v2_64 cublasDscal_v2_64 cublasDcopy_v2_64 cublasDswap_v2_64
 * cublasDdot_v2_64 cublasDnrm2_v2_64 cublasDasum_v2_64 cublasIdamax_v2_64 cublasIdamin_v2_64 */
#define CTYPE float
#define DTYPE CUDA_R_32F
TYPED_LEVEL1(S, s, float, , int, int, IAMAX, IAMIN)
TYPED_LEVEL1(S, s, float, _64, int64_t, int64_t, IAMAX64, IAMIN64)
#undef CTYPE
#undef DTYPE
#define CTYPE double
#define DTYPE CUDA_R_64F
TYPED_LEVEL1(D, d, double, , int, int, IAMAX, IAMIN)
TYPED_LEVEL1(D, d, double, _64, int64_t, int64_t, IAMAX64, IAMIN64)
