/* Handles and their settings (local), statuses and their names, the legacy matrix descriptor, and the two ways
 * an operation reaches the server. */
#include <stdlib.h>
#include <string.h>

#include "sparse.h"

_Static_assert(RGPU_SPARSE_BUFFER_SIZE_REQ_SIZE == RGPU_SPARSE_RUN_REQ_SIZE,
               "a buffer-size query carries the operation's own request");

int rgpu_sparse_unsupported(int *logged, const char *name)
{
    return rgpu_standin_unsupported(logged, "cusparse", name, CUSPARSE_STATUS_NOT_SUPPORTED,
                                    "CUSPARSE_STATUS_NOT_SUPPORTED");
}

int rgpu_sparse_status(int r)
{
    static const struct rgpu_library_statuses codes = {
        CUSPARSE_STATUS_SUCCESS, CUSPARSE_STATUS_INVALID_VALUE, CUSPARSE_STATUS_ALLOC_FAILED,
        CUSPARSE_STATUS_NOT_INITIALIZED, CUSPARSE_STATUS_NOT_SUPPORTED, CUSPARSE_STATUS_EXECUTION_FAILED};
    return rgpu_library_status(r, &codes);
}

/* A dense operand into the b_ or c_ fields. */
#define PUT_DENSE(r, p, d)                                                                                          \
    ((r).p##_rows = (d)->rows, (r).p##_cols = (d)->cols, (r).p##_ld = (d)->ld,                                      \
     (r).p##_values = (uintptr_t)(d)->values, (r).p##_type = (uint32_t)(d)->type,                                   \
     (r).p##_order = (uint32_t)(d)->order, (r).p##_batch = (d)->batch, (r).p##_stride = (d)->stride)

/* Bytes of one scalar of a cudaDataType (alpha and beta are of the compute type); 0 if unknown. */
static size_t scalar_size(int type)
{
    switch (type) {
    case 2:  /* CUDA_R_16F */
    case 14: /* CUDA_R_16BF */
        return 2;
    case 0:  /* CUDA_R_32F */
    case 10: /* CUDA_R_32I */
        return 4;
    case 1: /* CUDA_R_64F */
    case 4: /* CUDA_C_32F */
        return 8;
    case 5: /* CUDA_C_64F */
        return 16;
    default:
        return 0;
    }
}

int rgpu_sparse_scalars(const struct sparse_handle *h, int compute, uint8_t out_alpha[16], uint8_t out_beta[16],
                        const void *alpha, const void *beta)
{
    if (!alpha || !beta)
        return CUSPARSE_STATUS_INVALID_VALUE;
    if (h->pointer_mode == CUSPARSE_POINTER_MODE_DEVICE) { /* the scalars' device addresses, in their slots */
        rgpu_put_u64(out_alpha, (uintptr_t)alpha), rgpu_put_u64(out_beta, (uintptr_t)beta);
        return CUSPARSE_STATUS_SUCCESS;
    }
    size_t n = scalar_size(compute);
    if (!n)
        return CUSPARSE_STATUS_NOT_SUPPORTED;
    memcpy(out_alpha, alpha, n), memcpy(out_beta, beta, n);
    return CUSPARSE_STATUS_SUCCESS;
}

struct rgpu_sparse_run_req rgpu_sparse_request(struct sparse_handle *h, int function, const struct sp_mat *a,
                                               const struct dn_mat *b, const struct dn_mat *c)
{
    struct rgpu_sparse_run_req r = {.handle = h->server, .stream = rgpu_ext_stream(h->stream),
                                    .function = (uint32_t)function, .pointer_mode = (uint32_t)h->pointer_mode};
    if (a)
        PUT_SPARSE(r, a, a);
    if (b)
        PUT_DENSE(r, b, b);
    if (c)
        PUT_DENSE(r, c, c);
    return r;
}

int rgpu_sparse_query(struct rgpu_sparse_run_req *req, size_t *size)
{
    uint8_t args[RGPU_SPARSE_BUFFER_SIZE_REQ_SIZE], rep[RGPU_SPARSE_BUFFER_SIZE_REP_SIZE];
    rgpu_pack_sparse_run(args, req);
    int r = rgpu_ext_call(RGPU_OP_SPARSE_BUFFER_SIZE, args, sizeof args, NULL, 0, rep, sizeof rep, NULL, 0, NULL);
    struct rgpu_sparse_buffer_size_rep got;
    if (!r && rgpu_unpack_sparse_buffer_size(rep, sizeof rep, &got))
        r = rgpu_ext_bad_reply(RGPU_OP_SPARSE_BUFFER_SIZE, "reply size");
    if (r)
        return rgpu_sparse_status(r);
    if (got.status)
        return (int)got.status;
    *size = got.size;
    return CUSPARSE_STATUS_SUCCESS;
}

int rgpu_sparse_submit(struct rgpu_sparse_run_req *req)
{
    uint8_t args[RGPU_SPARSE_RUN_REQ_SIZE];
    rgpu_pack_sparse_run(args, req);
    return rgpu_sparse_status(rgpu_ext_defer(RGPU_OP_SPARSE_RUN, args, sizeof args, NULL, 0));
}

/* -- handles ---------------------------------------------------------------------------------------------- */
SPARSE_API int cusparseCreate(struct sparse_handle **out)
{
    if (!out)
        return CUSPARSE_STATUS_INVALID_VALUE;
    uint64_t server;
    int r = rgpu_standin_open(RGPU_OP_SPARSE_CREATE, &server);
    if (r)
        return r == RGPU_STANDIN_NO_DEVICE ? CUSPARSE_STATUS_NOT_INITIALIZED : rgpu_sparse_status(r);
    struct sparse_handle *h = calloc(1, sizeof *h);
    if (!h) {
        rgpu_standin_close(RGPU_OP_SPARSE_DESTROY, server);
        return CUSPARSE_STATUS_ALLOC_FAILED;
    }
    h->server = server, h->pointer_mode = CUSPARSE_POINTER_MODE_HOST;
    *out = h;
    return CUSPARSE_STATUS_SUCCESS;
}

SPARSE_API int cusparseDestroy(struct sparse_handle *h)
{
    if (!h)
        return CUSPARSE_STATUS_NOT_INITIALIZED;
    int r = rgpu_standin_close(RGPU_OP_SPARSE_DESTROY, h->server);
    free(h);
    return rgpu_sparse_status(r);
}

SPARSE_API int cusparseSetStream(struct sparse_handle *h, void *stream)
{
    if (!h)
        return CUSPARSE_STATUS_NOT_INITIALIZED;
    h->stream = stream;
    return CUSPARSE_STATUS_SUCCESS;
}

SPARSE_API int cusparseGetStream(struct sparse_handle *h, void **stream)
{
    if (!h)
        return CUSPARSE_STATUS_NOT_INITIALIZED;
    if (!stream)
        return CUSPARSE_STATUS_INVALID_VALUE;
    *stream = h->stream;
    return CUSPARSE_STATUS_SUCCESS;
}

SPARSE_API int cusparseSetPointerMode(struct sparse_handle *h, int mode)
{
    if (!h)
        return CUSPARSE_STATUS_NOT_INITIALIZED;
    if (mode != CUSPARSE_POINTER_MODE_HOST && mode != CUSPARSE_POINTER_MODE_DEVICE)
        return CUSPARSE_STATUS_INVALID_VALUE;
    h->pointer_mode = mode;
    return CUSPARSE_STATUS_SUCCESS;
}

SPARSE_API int cusparseGetPointerMode(struct sparse_handle *h, int *mode)
{
    if (!h)
        return CUSPARSE_STATUS_NOT_INITIALIZED;
    if (!mode)
        return CUSPARSE_STATUS_INVALID_VALUE;
    *mode = h->pointer_mode;
    return CUSPARSE_STATUS_SUCCESS;
}

/* -- versions and statuses ---------------------------------------------------------------------------------- */
#define RGPU_CUSPARSE_VERSION_ALL \
    (RGPU_CUSPARSE_VERSION_MAJOR * 1000 + RGPU_CUSPARSE_VERSION_MINOR * 100 + RGPU_CUSPARSE_VERSION_PATCH)

SPARSE_API int cusparseGetVersion(struct sparse_handle *h, int *version)
{
    (void)h;
    if (!version)
        return CUSPARSE_STATUS_INVALID_VALUE;
    *version = RGPU_CUSPARSE_VERSION_ALL;
    return CUSPARSE_STATUS_SUCCESS;
}

SPARSE_API int cusparseGetProperty(int type, int *value)
{
    int parts[] = {RGPU_CUSPARSE_VERSION_MAJOR, RGPU_CUSPARSE_VERSION_MINOR, RGPU_CUSPARSE_VERSION_PATCH};
    if (!value || type < 0 || type > 2)
        return CUSPARSE_STATUS_INVALID_VALUE;
    *value = parts[type];
    return CUSPARSE_STATUS_SUCCESS;
}

static const char *const status_names[] = {
    "CUSPARSE_STATUS_SUCCESS", "CUSPARSE_STATUS_NOT_INITIALIZED", "CUSPARSE_STATUS_ALLOC_FAILED",
    "CUSPARSE_STATUS_INVALID_VALUE", "CUSPARSE_STATUS_ARCH_MISMATCH", "CUSPARSE_STATUS_MAPPING_ERROR",
    "CUSPARSE_STATUS_EXECUTION_FAILED", "CUSPARSE_STATUS_INTERNAL_ERROR",
    "CUSPARSE_STATUS_MATRIX_TYPE_NOT_SUPPORTED", "CUSPARSE_STATUS_ZERO_PIVOT", "CUSPARSE_STATUS_NOT_SUPPORTED",
    "CUSPARSE_STATUS_INSUFFICIENT_RESOURCES"};

SPARSE_API const char *cusparseGetErrorName(int status)
{
    return status >= 0 && status < (int)(sizeof status_names / sizeof *status_names) ? status_names[status]
                                                                                       : "UNKNOWN_ERROR";
}

SPARSE_API const char *cusparseGetErrorString(int status)
{
    return cusparseGetErrorName(status);
}

/* -- the legacy matrix descriptor ---------------------------------------------------------------------------- */
SPARSE_API int cusparseCreateMatDescr(struct mat_descr **out)
{
    if (!out)
        return CUSPARSE_STATUS_INVALID_VALUE;
    if (!(*out = calloc(1, sizeof **out)))
        return CUSPARSE_STATUS_ALLOC_FAILED;
    (*out)->type = CUSPARSE_MATRIX_TYPE_GENERAL, (*out)->fill = CUSPARSE_FILL_MODE_LOWER,
    (*out)->diag = CUSPARSE_DIAG_TYPE_NON_UNIT, (*out)->base = CUSPARSE_INDEX_BASE_ZERO;
    return CUSPARSE_STATUS_SUCCESS;
}

SPARSE_API int cusparseDestroyMatDescr(struct mat_descr *d)
{
    free(d);
    return CUSPARSE_STATUS_SUCCESS;
}

#define MAT_FIELD(name, field)                                                                                      \
    SPARSE_API int cusparseSetMat##name(struct mat_descr *d, int v)                                                \
    {                                                                                                               \
        if (!d)                                                                                                     \
            return CUSPARSE_STATUS_INVALID_VALUE;                                                                   \
        d->field = v;                                                                                               \
        return CUSPARSE_STATUS_SUCCESS;                                                                             \
    }                                                                                                               \
    SPARSE_API int cusparseGetMat##name(const struct mat_descr *d)                                                 \
    {                                                                                                               \
        return d ? d->field : 0;                                                                                    \
    }
/* defines: cusparseSetMatType cusparseGetMatType cusparseSetMatFillMode cusparseGetMatFillMode
 * cusparseSetMatDiagType cusparseGetMatDiagType cusparseSetMatIndexBase cusparseGetMatIndexBase */
MAT_FIELD(Type, type)
MAT_FIELD(FillMode, fill)
MAT_FIELD(DiagType, diag)
MAT_FIELD(IndexBase, base)
