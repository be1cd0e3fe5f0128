/* cuBLAS Level 2 and 3 beyond GEMM/GEMV in S/D (blas.c): triangular solves and products (trsv, trmv, trsm, trmm),
 * symmetric and Hermitian rank-k updates and products (syrk, herk, symm), rank-1 updates (ger, geru, gerc), and the
 * complex GEMM/GEMV (gemm, gemm3m, gemv), each with its _64 form. Each call is checked here as cuBLAS checks it and
 * becomes one deferred BLAS_ROUTINE, which the server runs with the same cuBLAS routine after checking every
 * operand range against the session's memory. */
#include <stdio.h>
#include <string.h>

#include "blas.h"

/* rgpu.protocol.blas_routines.Function */
enum { GEMM, GEMM3M, GEMV, GER, GERU, GERC, TRSV, TRMV, TRSM, TRMM, SYRK, HERK, SYMM };

struct routine {
    int function, type, wide; /* wide: the _64 form */
    int side, uplo, transa, transb, diag;
    long long m, n, k;
    const void *alpha, *beta; /* beta NULL for the routines without one */
    size_t scalar;            /* bytes of alpha and beta */
    const void *a, *b, *c;    /* a routine's vectors x and y are b and c */
    long long lda, ldb, ldc;  /* ... and their increments ldb and ldc */
};

static int side_ok(int s) { return s == CUBLAS_SIDE_LEFT || s == CUBLAS_SIDE_RIGHT; }
static int uplo_ok(int u) { return u == CUBLAS_FILL_MODE_LOWER || u == CUBLAS_FILL_MODE_UPPER; }
static int diag_ok(int d) { return d == CUBLAS_DIAG_NON_UNIT || d == CUBLAS_DIAG_UNIT; }
static int complex_type(int t) { return t == CUDA_C_32F || t == CUDA_C_64F; }

/* The fewest rows an operand's leading dimension admits: `rows_n` for CUBLAS_OP_N, else `rows_t`. */
static long long least(int trans, long long rows_n, long long rows_t)
{
    return RGPU_BLAS_AT_LEAST_1(trans == CUBLAS_OP_N ? rows_n : rows_t);
}

/* The first of `count` (refused, parameter number) pairs that is refused: its parameter number, or 0. */
static int first(const int (*checks)[2], int count)
{
    for (int i = 0; i < count; i++)
        if (checks[i][0])
            return checks[i][1];
    return 0;
}
#define FIRST(...) first((const int[][2]){__VA_ARGS__}, sizeof((const int[][2]){__VA_ARGS__}) / sizeof(int[2]))

/* The argument cuBLAS refuses with INVALID_VALUE, as its parameter number in the C signature (the handle is 0):
 * the first by position, as NVIDIA's cuBLAS names it (measured on the H200); 0 if all are fine. `*empty` set when
 * BLAS returns at once. What NVIDIA accepts is accepted: any operation for the complex gemv and herk's
 * CUBLAS_OP_T (the server checks operand extents for every reading of such values). */
static int invalid(const struct routine *r, int *empty)
{
    long long m = r->m, n = r->n, k = r->k;
    long long order = r->side == CUBLAS_SIDE_LEFT ? m : n;
    switch (r->function) {
    case GEMM: /* (ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc) */
    case GEMM3M:
        *empty = !m || !n;
        return FIRST({!RGPU_BLAS_OP_OK(r->transa), 1}, {!RGPU_BLAS_OP_OK(r->transb), 2}, {m < 0, 3}, {n < 0, 4},
                     {k < 0, 5}, {r->lda < least(r->transa, m, k), 8}, {r->ldb < least(r->transb, k, n), 10},
                     {r->ldc < RGPU_BLAS_AT_LEAST_1(m), 13});
    case GEMV: /* (trans, m, n, alpha, A, lda, x, incx, beta, y, incy) */
        *empty = !m || !n;
        /* a zero incx is refused for the complex types only (NVIDIA's Dgemv takes it: rgpu_blas_gemv_routine) */
        return FIRST({m < 0, 2}, {n < 0, 3}, {r->lda < RGPU_BLAS_AT_LEAST_1(m), 6},
                     {!r->ldb && complex_type(r->type), 8}, {!r->ldc, 11});
    case GER: /* (m, n, alpha, x, incx, y, incy, A, lda) */
    case GERU:
    case GERC:
        *empty = !m || !n;
        return FIRST({m < 0, 1}, {n < 0, 2}, {!r->ldb, 5}, {!r->ldc, 7}, {r->lda < RGPU_BLAS_AT_LEAST_1(m), 9});
    case TRSV: /* (uplo, trans, diag, n, A, lda, x, incx) */
    case TRMV:
        *empty = !n;
        return FIRST({!uplo_ok(r->uplo), 1}, {!RGPU_BLAS_OP_OK(r->transa), 2}, {!diag_ok(r->diag), 3}, {n < 0, 4},
                     {r->lda < RGPU_BLAS_AT_LEAST_1(n), 6}, {!r->ldb, 8});
    case TRSM: /* (side, uplo, trans, diag, m, n, alpha, A, lda, B, ldb[, C, ldc]) */
    case TRMM:
        *empty = !m || !n;
        return FIRST({!side_ok(r->side), 1}, {!uplo_ok(r->uplo), 2}, {!RGPU_BLAS_OP_OK(r->transa), 3},
                     {!diag_ok(r->diag), 4}, {m < 0, 5}, {n < 0, 6}, {r->lda < RGPU_BLAS_AT_LEAST_1(order), 9},
                     {r->ldb < RGPU_BLAS_AT_LEAST_1(m), 11},
                     {r->function == TRMM && r->ldc < RGPU_BLAS_AT_LEAST_1(m), 13});
    case SYRK: /* (uplo, trans, n, k, alpha, A, lda, beta, C, ldc) */
    case HERK: {
        /* complex syrk: N or T; herk: N, T or C; real syrk: any (C is T) */
        int trans_ok = r->function == HERK ? RGPU_BLAS_OP_OK(r->transa)
                       : r->transa == CUBLAS_OP_N || r->transa == CUBLAS_OP_T ||
                             (r->transa == CUBLAS_OP_C && !complex_type(r->type));
        *empty = !n;
        return FIRST({!uplo_ok(r->uplo), 1}, {!trans_ok, 2}, {n < 0, 3}, {k < 0, 4},
                     {r->lda < least(r->transa, n, k), 7}, {r->ldc < RGPU_BLAS_AT_LEAST_1(n), 10});
    }
    default: /* SYMM (side, uplo, m, n, alpha, A, lda, B, ldb, beta, C, ldc) */
        *empty = !m || !n;
        return FIRST({!side_ok(r->side), 1}, {!uplo_ok(r->uplo), 2}, {m < 0, 3}, {n < 0, 4},
                     {r->lda < RGPU_BLAS_AT_LEAST_1(order), 7}, {r->ldb < RGPU_BLAS_AT_LEAST_1(m), 9},
                     {r->ldc < RGPU_BLAS_AT_LEAST_1(m), 12});
    }
}

/* The routine's name as cuBLAS's argument errors give it: DTRSM, ZGEMM3M. */
static void routine_name(const struct routine *r, char out[16])
{
    static const char *const names[] = {"GEMM", "GEMM3M", "GEMV", "GER",  "GERU", "GERC", "TRSV",
                                        "TRMV", "TRSM",   "TRMM", "SYRK", "HERK", "SYMM"};
    char letter = r->type == CUDA_R_32F ? 'S' : r->type == CUDA_R_64F ? 'D' : r->type == CUDA_C_32F ? 'C' : 'Z';
    snprintf(out, 16, "%c%s", letter, names[r->function]);
}

static void put_scalar(uint8_t slot[16], int device, const void *value, size_t size)
{
    if (device) /* its device address, in its slot */
        rgpu_put_u64(slot, (uintptr_t)value);
    else
        memcpy(slot, value, size);
}

static int run(struct handle *h, struct routine r)
{
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    int empty = 0, with_alpha = r.function != TRSV && r.function != TRMV,
        with_beta = r.function == GEMM || r.function == GEMM3M || r.function == GEMV || r.function == SYRK ||
                    r.function == HERK || r.function == SYMM;
    int parameter = invalid(&r, &empty);
    if (parameter) {
        char name[16];
        routine_name(&r, name);
        cublasXerbla(name, parameter);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    if ((with_alpha && !r.alpha) || (with_beta && !r.beta)) /* NVIDIA's message for these unmeasured: none */
        return CUBLAS_STATUS_INVALID_VALUE;
    if (empty)
        return CUBLAS_STATUS_SUCCESS;
    int device = h->pointer_mode == CUBLAS_POINTER_MODE_DEVICE;
    struct rgpu_blas_routine_req req = {
        .handle = h->server, .stream = rgpu_ext_stream(h->stream), .function = (uint32_t)r.function,
        .type = (uint32_t)r.type, .wide = (uint32_t)r.wide, .side = (uint32_t)r.side, .uplo = (uint32_t)r.uplo,
        .transa = (uint32_t)r.transa, .transb = (uint32_t)r.transb, .diag = (uint32_t)r.diag, .m = r.m, .n = r.n,
        .k = r.k,
        .pointer_mode = (uint32_t)h->pointer_mode, .math_mode = (uint32_t)h->math_mode, .a = (uintptr_t)r.a,
        .lda = r.lda, .b = (uintptr_t)r.b, .ldb = r.ldb, .c = (uintptr_t)r.c, .ldc = r.ldc,
        .workspace = (uintptr_t)h->workspace, .workspace_size = h->workspace_size};
    if (with_alpha)
        put_scalar(req.alpha, device, r.alpha, r.scalar);
    if (with_beta)
        put_scalar(req.beta, device, r.beta, r.scalar);
    uint8_t args[RGPU_BLAS_ROUTINE_REQ_SIZE];
    rgpu_pack_blas_routine(args, &req);
    return rgpu_blas_status(rgpu_ext_defer(RGPU_OP_BLAS_ROUTINE, args, sizeof args, NULL, 0));
}

int rgpu_blas_gemv_routine(struct handle *h, int type, int wide, size_t scalar, int trans, long long m, long long n,
                           const void *alpha, const void *A, long long lda, const void *x, const void *beta, void *y,
                           long long incy)
{
    return run(h, (struct routine){.function = GEMV, .type = type, .wide = wide, .scalar = scalar, .transa = trans,
                                   .m = m, .n = n, .alpha = alpha, .beta = beta, .a = A, .lda = lda, .b = x, .ldb = 0,
                                   .c = y, .ldc = incy});
}

/* One routine's call: the fields not named are 0. The element type is the including block's (CTYPE, DTYPE); every
 * routine has an `n` of the form's integer type, 64-bit in the _64 form. */
#define WIDE (sizeof(n) == 8)
#define ROUTINE(...) run(h, (struct routine){.type = DTYPE, .wide = WIDE, .scalar = sizeof(CTYPE), __VA_ARGS__})

/* Every type: trsv, trmv, trsm, trmm, syrk, symm. */
#define TYPED_ALL(t, ctype, suffix, I)                                                                              \
    BLAS_API int cublas##t##trsv_v2##suffix(struct handle *h, int uplo, int trans, int diag, I n, const ctype *A,   \
                                            I lda, ctype *x, I incx)                                                \
    {                                                                                                               \
        return ROUTINE(.function = TRSV, .uplo = uplo, .transa = trans, .diag = diag, .n = n, .a = A,               \
                       .lda = lda, .b = x, .ldb = incx);                                                            \
    }                                                                                                               \
    BLAS_API int cublas##t##trmv_v2##suffix(struct handle *h, int uplo, int trans, int diag, I n, const ctype *A,   \
                                            I lda, ctype *x, I incx)                                                \
    {                                                                                                               \
        return ROUTINE(.function = TRMV, .uplo = uplo, .transa = trans, .diag = diag, .n = n, .a = A,               \
                       .lda = lda, .b = x, .ldb = incx);                                                            \
    }                                                                                                               \
    BLAS_API int cublas##t##trsm_v2##suffix(struct handle *h, int side, int uplo, int trans, int diag, I m, I n,    \
                                            const ctype *alpha, const ctype *A, I lda, ctype *B, I ldb)             \
    {                                                                                                               \
        return ROUTINE(.function = TRSM, .side = side, .uplo = uplo, .transa = trans, .diag = diag, .m = m,        \
                       .n = n, .alpha = alpha, .a = A, .lda = lda, .b = B, .ldb = ldb);                             \
    }                                                                                                               \
    BLAS_API int cublas##t##trmm_v2##suffix(struct handle *h, int side, int uplo, int trans, int diag, I m, I n,    \
                                            const ctype *alpha, const ctype *A, I lda, const ctype *B, I ldb,       \
                                            ctype *C, I ldc)                                                        \
    {                                                                                                               \
        return ROUTINE(.function = TRMM, .side = side, .uplo = uplo, .transa = trans, .diag = diag, .m = m,        \
                       .n = n, .alpha = alpha, .a = A, .lda = lda, .b = B, .ldb = ldb, .c = C, .ldc = ldc);         \
    }                                                                                                               \
    BLAS_API int cublas##t##syrk_v2##suffix(struct handle *h, int uplo, int trans, I n, I k, const ctype *alpha,    \
                                            const ctype *A, I lda, const ctype *beta, ctype *C, I ldc)              \
    {                                                                                                               \
        return ROUTINE(.function = SYRK, .uplo = uplo, .transa = trans, .n = n, .k = k, .alpha = alpha,            \
                       .beta = beta, .a = A, .lda = lda, .c = C, .ldc = ldc);                                       \
    }                                                                                                               \
    BLAS_API int cublas##t##symm_v2##suffix(struct handle *h, int side, int uplo, I m, I n, const ctype *alpha,     \
                                            const ctype *A, I lda, const ctype *B, I ldb, const ctype *beta,        \
                                            ctype *C, I ldc)                                                        \
    {                                                                                                               \
        return ROUTINE(.function = SYMM, .side = side, .uplo = uplo, .m = m, .n = n, .alpha = alpha, .beta = beta, \
                       .a = A, .lda = lda, .b = B, .ldb = ldb, .c = C, .ldc = ldc);                                 \
    }

/* A rank-1 update A += alpha x y^T (ger, geru) or alpha x y^H (gerc). */
#define TYPED_GER(name, function_, ctype, I)                                                                        \
    BLAS_API int name(struct handle *h, I m, I n, const ctype *alpha, const ctype *x, I incx, const ctype *y,       \
                      I incy, ctype *A, I lda)                                                                      \
    {                                                                                                               \
        return ROUTINE(.function = function_, .m = m, .n = n, .alpha = alpha, .a = A, .lda = lda, .b = x,          \
                       .ldb = incx, .c = y, .ldc = incy);                                                           \
    }

/* The complex types only: gemm, gemm3m, gemv, geru, gerc, herk (whose alpha and beta are real: rtype). */
#define TYPED_COMPLEX(t, ctype, rtype, suffix, I)                                                                   \
    BLAS_API int cublas##t##gemm_v2##suffix(struct handle *h, int ta, int tb, I m, I n, I k, const ctype *alpha,   \
                                            const ctype *A, I lda, const ctype *B, I ldb, const ctype *beta,        \
                                            ctype *C, I ldc)                                                        \
    {                                                                                                               \
        return ROUTINE(.function = GEMM, .transa = ta, .transb = tb, .m = m, .n = n, .k = k, .alpha = alpha,       \
                       .beta = beta, .a = A, .lda = lda, .b = B, .ldb = ldb, .c = C, .ldc = ldc);                   \
    }                                                                                                               \
    BLAS_API int cublas##t##gemm3m##suffix(struct handle *h, int ta, int tb, I m, I n, I k, const ctype *alpha,    \
                                           const ctype *A, I lda, const ctype *B, I ldb, const ctype *beta,         \
                                           ctype *C, I ldc)                                                         \
    {                                                                                                               \
        return ROUTINE(.function = GEMM3M, .transa = ta, .transb = tb, .m = m, .n = n, .k = k, .alpha = alpha,     \
                       .beta = beta, .a = A, .lda = lda, .b = B, .ldb = ldb, .c = C, .ldc = ldc);                   \
    }                                                                                                               \
    BLAS_API int cublas##t##gemv_v2##suffix(struct handle *h, int trans, I m, I n, const ctype *alpha,             \
                                            const ctype *A, I lda, const ctype *x, I incx, const ctype *beta,      \
                                            ctype *y, I incy)                                                      \
    {                                                                                                               \
        return ROUTINE(.function = GEMV, .transa = trans, .m = m, .n = n, .alpha = alpha, .beta = beta, .a = A,    \
                       .lda = lda, .b = x, .ldb = incx, .c = y, .ldc = incy);                                       \
    }                                                                                                               \
    TYPED_GER(cublas##t##geru_v2##suffix, GERU, ctype, I)                                                           \
    TYPED_GER(cublas##t##gerc_v2##suffix, GERC, ctype, I)                                                           \
    BLAS_API int cublas##t##herk_v2##suffix(struct handle *h, int uplo, int trans, I n, I k, const rtype *alpha,    \
                                            const ctype *A, I lda, const rtype *beta, ctype *C, I ldc)              \
    {                                                                                                               \
        return run(h, (struct routine){.type = DTYPE, .wide = WIDE, .scalar = sizeof(rtype), .function = HERK,     \
                                       .uplo = uplo, .transa = trans, .n = n, .k = k, .alpha = alpha, .beta = beta, \
                                       .a = A, .lda = lda, .c = C, .ldc = ldc});                                    \
    }

#define TYPED_REAL(t, ctype, suffix, I)                                                                             \
    TYPED_ALL(t, ctype, suffix, I)                                                                                  \
    TYPED_GER(cublas##t##ger_v2##suffix, GER, ctype, I)
#define TYPED_CPLX(t, ctype, rtype, suffix, I)                                                                      \
    TYPED_ALL(t, ctype, suffix, I)                                                                                  \
    TYPED_COMPLEX(t, ctype, rtype, suffix, I)

/* defines: cublasStrsv_v2 cublasStrmv_v2 cublasStrsm_v2 cublasStrmm_v2 cublasSsyrk_v2 cublasSsymm_v2 cublasSger_v2
 * cublasStrsv_v2_64 cublasStrmv_v2_64 cublasStrsm_v2_64 cublasStrmm_v2_64 cublasSsyrk_v2_64 cublasSsymm_v2_64
 * cublasSger_v2_64 */
#define CTYPE float
#define DTYPE CUDA_R_32F
TYPED_REAL(S, float, , int)
TYPED_REAL(S, float, _64, int64_t)
#undef CTYPE
#undef DTYPE
/* defines: cublasDtrsv_v2 cublasDtrmv_v2 cublasDtrsm_v2 cublasDtrmm_v2 cublasDsyrk_v2 cublasDsymm_v2 cublasDger_v2
 * cublasDtrsv_v2_64 cublasDtrmv_v2_64 cublasDtrsm_v2_64 cublasDtrmm_v2_64 cublasDsyrk_v2_64 cublasDsymm_v2_64
 * cublasDger_v2_64 */
#define CTYPE double
#define DTYPE CUDA_R_64F
TYPED_REAL(D, double, , int)
TYPED_REAL(D, double, _64, int64_t)
#undef CTYPE
#undef DTYPE
/* defines: cublasCtrsv_v2 cublasCtrmv_v2 cublasCtrsm_v2 cublasCtrmm_v2 cublasCsyrk_v2 cublasCsymm_v2 cublasCgemm_v2
 * cublasCgemm3m cublasCgemv_v2 cublasCgeru_v2 cublasCgerc_v2 cublasCherk_v2 cublasCtrsv_v2_64 cublasCtrmv_v2_64
 * cublasCtrsm_v2_64 cublasCtrmm_v2_64 cublasCsyrk_v2_64 cublasCsymm_v2_64 cublasCgemm_v2_64 cublasCgemm3m_64
 * cublasCgemv_v2_64 cublasCgeru_v2_64 cublasCgerc_v2_64 cublasCherk_v2_64 */
#define CTYPE complex_float
#define DTYPE CUDA_C_32F
TYPED_CPLX(C, complex_float, float, , int)
TYPED_CPLX(C, complex_float, float, _64, int64_t)
#undef CTYPE
#undef DTYPE
/* defines: cublasZtrsv_v2 cublasZtrmv_v2 cublasZtrsm_v2 cublasZtrmm_v2 cublasZsyrk_v2 cublasZsymm_v2 cublasZgemm_v2
 * cublasZgemm3m cublasZgemv_v2 cublasZgeru_v2 cublasZgerc_v2 cublasZherk_v2 cublasZtrsv_v2_64 cublasZtrmv_v2_64
 * cublasZtrsm_v2_64 cublasZtrmm_v2_64 cublasZsyrk_v2_64 cublasZsymm_v2_64 cublasZgemm_v2_64 cublasZgemm3m_64
 * cublasZgemv_v2_64 cublasZgeru_v2_64 cublasZgerc_v2_64 cublasZherk_v2_64 */
#define CTYPE complex_double
#define DTYPE CUDA_C_64F
TYPED_CPLX(Z, complex_double, double, , int)
TYPED_CPLX(Z, complex_double, double, _64, int64_t)
