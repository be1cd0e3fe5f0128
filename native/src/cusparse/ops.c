/* The operations: SpMV and SpMM with their buffer-size queries, and the index conversion cusparseXcoo2csr.
 * Each is one request built from the handle and the descriptors. */
#include "sparse.h"

/* Query (`size` set) or run one SpMV/SpMM. */
static int operation(struct sparse_handle *h, int function, int op_a, int op_b, const void *alpha,
                     const struct sp_mat *a, const struct dn_mat *b, const void *beta, const struct dn_mat *c,
                     int compute, int alg, void *buffer, size_t *size)
{
    if (!h)
        return CUSPARSE_STATUS_NOT_INITIALIZED;
    if (!a || !b || !c || (function == SPARSE_SPMV) != (b->is_vector && c->is_vector) ||
        (function == SPARSE_SPMM && (b->is_vector || c->is_vector)))
        return CUSPARSE_STATUS_INVALID_VALUE;
    struct rgpu_sparse_run_req r = rgpu_sparse_request(h, function, a, b, c);
    r.op_a = (uint32_t)op_a, r.op_b = (uint32_t)op_b, r.compute_type = (uint32_t)compute, r.alg = (uint32_t)alg,
    r.buffer = (uintptr_t)buffer;
    int s = rgpu_sparse_scalars(h, compute, r.alpha, r.beta, alpha, beta);
    if (s)
        return s;
    /* No buffer size travels: the server checks that the buffer holds what its library needs. */
    return size ? rgpu_sparse_query(&r, size) : rgpu_sparse_submit(&r);
}

SPARSE_API int cusparseSpMV_bufferSize(struct sparse_handle *h, int op, const void *alpha, const struct sp_mat *a,
                                       const struct dn_mat *x, const void *beta, const struct dn_mat *y, int compute,
                                       int alg, size_t *size)
{
    if (!size)
        return CUSPARSE_STATUS_INVALID_VALUE;
    return operation(h, SPARSE_SPMV, op, 0, alpha, a, x, beta, y, compute, alg, NULL, size);
}

SPARSE_API int cusparseSpMV(struct sparse_handle *h, int op, const void *alpha, const struct sp_mat *a,
                            const struct dn_mat *x, const void *beta, struct dn_mat *y, int compute, int alg,
                            void *buffer)
{
    return operation(h, SPARSE_SPMV, op, 0, alpha, a, x, beta, y, compute, alg, buffer, NULL);
}

SPARSE_API int cusparseSpMM_bufferSize(struct sparse_handle *h, int op_a, int op_b, const void *alpha,
                                       const struct sp_mat *a, const struct dn_mat *b, const void *beta,
                                       const struct dn_mat *c, int compute, int alg, size_t *size)
{
    if (!size)
        return CUSPARSE_STATUS_INVALID_VALUE;
    return operation(h, SPARSE_SPMM, op_a, op_b, alpha, a, b, beta, c, compute, alg, NULL, size);
}

SPARSE_API int cusparseSpMM(struct sparse_handle *h, int op_a, int op_b, const void *alpha, const struct sp_mat *a,
                            const struct dn_mat *b, const void *beta, struct dn_mat *c, int compute, int alg,
                            void *buffer)
{
    return operation(h, SPARSE_SPMM, op_a, op_b, alpha, a, b, beta, c, compute, alg, buffer, NULL);
}

/* Preprocessing is an optional speed-up whose analysis cuSPARSE keeps in the descriptors; the server makes its
 * descriptors per call, so there is nothing to keep it in. SpMM gives the same result without it. */
SPARSE_API int cusparseSpMM_preprocess(struct sparse_handle *h, int op_a, int op_b, const void *alpha,
                                       const struct sp_mat *a, const struct dn_mat *b, const void *beta,
                                       struct dn_mat *c, int compute, int alg, void *buffer)
{
    (void)op_a, (void)op_b, (void)compute, (void)alg, (void)buffer;
    if (!h)
        return CUSPARSE_STATUS_NOT_INITIALIZED;
    return !alpha || !a || !b || !beta || !c ? CUSPARSE_STATUS_INVALID_VALUE : CUSPARSE_STATUS_SUCCESS;
}

SPARSE_API int cusparseXcoo2csr(struct sparse_handle *h, const int *coo_rows, int nnz, int m, int *csr_offsets,
                                int base)
{
    if (!h)
        return CUSPARSE_STATUS_NOT_INITIALIZED;
    if (nnz < 0 || m < 0 || (base != CUSPARSE_INDEX_BASE_ZERO && base != CUSPARSE_INDEX_BASE_ONE))
        return CUSPARSE_STATUS_INVALID_VALUE;
    struct sp_mat a = {.format = CUSPARSE_FORMAT_COO, .rows = m, .nnz = nnz, .offsets = (void *)coo_rows,
                       .base = base, .batch = 1};
    struct dn_mat c = {.rows = m + 1, .cols = 1, .ld = m + 1, .values = csr_offsets, .batch = 1};
    struct rgpu_sparse_run_req r = rgpu_sparse_request(h, SPARSE_XCOO2CSR, &a, NULL, &c);
    return rgpu_sparse_submit(&r);
}
