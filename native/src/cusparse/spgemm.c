/* SpGEMM, C = alpha A B with A, B and C in CSR: its descriptor lives on the server, which keeps what the phases
 * share there (cuSPARSE's own descriptor, and the matrix descriptors it learns the product's structure in). Every
 * phase is a round trip: the sizes and, after the compute phase, C's non-zero count come back, so the program's
 * cusparseSpMatGetSize on C is answered here. */
#include <stdlib.h>

#include "sparse.h"

enum { WORK_ESTIMATION = 1, COMPUTE = 2, COPY = 3 };

struct spgemm {
    uint64_t server;
};

SPARSE_API int cusparseSpGEMM_createDescr(struct spgemm **out)
{
    if (!out)
        return CUSPARSE_STATUS_INVALID_VALUE;
    uint64_t server;
    int r = rgpu_standin_open(RGPU_OP_SPARSE_SPGEMM_CREATE, &server);
    if (r)
        return r == RGPU_STANDIN_NO_DEVICE ? CUSPARSE_STATUS_NOT_INITIALIZED : rgpu_sparse_status(r);
    if (!(*out = calloc(1, sizeof **out))) {
        rgpu_standin_close(RGPU_OP_SPARSE_SPGEMM_DESTROY, server);
        return CUSPARSE_STATUS_ALLOC_FAILED;
    }
    (*out)->server = server;
    return CUSPARSE_STATUS_SUCCESS;
}

SPARSE_API int cusparseSpGEMM_destroyDescr(struct spgemm *d)
{
    if (!d)
        return CUSPARSE_STATUS_INVALID_VALUE;
    int r = rgpu_standin_close(RGPU_OP_SPARSE_SPGEMM_DESTROY, d->server);
    free(d);
    return rgpu_sparse_status(r);
}

static int phase(struct sparse_handle *h, int which, int op_a, int op_b, const void *alpha, const struct sp_mat *a,
                 const struct sp_mat *b, const void *beta, struct sp_mat *c, int compute, int alg, struct spgemm *d,
                 size_t *size, void *buffer)
{
    if (!h)
        return CUSPARSE_STATUS_NOT_INITIALIZED;
    if (!a || !b || !c || !d || (which != COPY && !size))
        return CUSPARSE_STATUS_INVALID_VALUE;
    struct rgpu_sparse_spgemm_req r = {
        .handle = h->server, .stream = rgpu_ext_stream(h->stream), .descriptor = d->server, .phase = (uint32_t)which,
        .op_a = (uint32_t)op_a, .op_b = (uint32_t)op_b, .compute_type = (uint32_t)compute, .alg = (uint32_t)alg,
        .pointer_mode = (uint32_t)h->pointer_mode, .buffer = (uintptr_t)buffer,
        .buffer_size = buffer && size ? *size : 0};
    int s = rgpu_sparse_scalars(h, compute, r.alpha, r.beta, alpha, beta);
    if (s)
        return s;
    PUT_SPARSE(r, a, a), PUT_SPARSE(r, b, b), PUT_SPARSE(r, c, c);
    uint8_t args[RGPU_SPARSE_SPGEMM_REQ_SIZE], rep[RGPU_SPARSE_SPGEMM_REP_SIZE];
    rgpu_pack_sparse_spgemm(args, &r);
    int res = rgpu_ext_call(RGPU_OP_SPARSE_SPGEMM, args, sizeof args, NULL, 0, rep, sizeof rep, NULL, 0, NULL);
    struct rgpu_sparse_spgemm_rep got;
    if (!res && rgpu_unpack_sparse_spgemm(rep, sizeof rep, &got))
        res = rgpu_ext_bad_reply(RGPU_OP_SPARSE_SPGEMM, "reply size");
    if (res)
        return rgpu_sparse_status(res);
    if (got.status)
        return (int)got.status;
    if (size && !buffer)
        *size = got.size;
    if (which == COMPUTE && buffer)
        c->nnz = got.c_nnz;
    return CUSPARSE_STATUS_SUCCESS;
}

SPARSE_API int cusparseSpGEMM_workEstimation(struct sparse_handle *h, int op_a, int op_b, const void *alpha,
                                             const struct sp_mat *a, const struct sp_mat *b, const void *beta,
                                             struct sp_mat *c, int compute, int alg, struct spgemm *d, size_t *size,
                                             void *buffer)
{
    return phase(h, WORK_ESTIMATION, op_a, op_b, alpha, a, b, beta, c, compute, alg, d, size, buffer);
}

SPARSE_API int cusparseSpGEMM_compute(struct sparse_handle *h, int op_a, int op_b, const void *alpha,
                                      const struct sp_mat *a, const struct sp_mat *b, const void *beta,
                                      struct sp_mat *c, int compute, int alg, struct spgemm *d, size_t *size,
                                      void *buffer)
{
    return phase(h, COMPUTE, op_a, op_b, alpha, a, b, beta, c, compute, alg, d, size, buffer);
}

SPARSE_API int cusparseSpGEMM_copy(struct sparse_handle *h, int op_a, int op_b, const void *alpha,
                                   const struct sp_mat *a, const struct sp_mat *b, const void *beta, struct sp_mat *c,
                                   int compute, int alg, struct spgemm *d)
{
    return phase(h, COPY, op_a, op_b, alpha, a, b, beta, c, compute, alg, d, NULL, NULL);
}
