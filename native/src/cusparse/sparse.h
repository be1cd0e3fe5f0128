/* Internal interface of rgpu's cuSPARSE stand-in (libcusparse.so.12, the soname of CUDA 12 and 13): the generic
 * API.
 *
 * Handles and descriptors (sparse matrices in CSR, CSC and COO, dense matrices and vectors, the legacy
 * cusparseMatDescr) live here; an operation carries its descriptors as the fixed fields of one request: a
 * buffer-size query is one round trip answered by the server's library, an SpMV/SpMM one deferred SPARSE_RUN
 * (whose external buffer the server checks against the size its library needs). */
#ifndef RGPU_SPARSE_H
#define RGPU_SPARSE_H

#include <stddef.h>
#include <stdint.h>

#include "cusparse_consts.h"
#include "rgpu_ops.h"
#include "rgpu_wire.h"
#include "remote.h"
#include "standin.h"

#define SPARSE_API __attribute__((visibility("default")))

/* rgpu.protocol.sparse_wire.Function */
enum { SPARSE_SPMV = 1, SPARSE_SPMM = 2, SPARSE_XCOO2CSR = 3 };
/* cusparseSpMatAttribute_t (no values in the header's enum to generate from) */
enum { SPARSE_ATTR_FILL_MODE = 0, SPARSE_ATTR_DIAG_TYPE = 1 };

struct sparse_handle {
    uint64_t server;
    void *stream;
    int pointer_mode;
};

/* cusparseSpMatDescr_t: `offsets` are CSR row offsets, CSC column offsets or COO row indices; `indices` CSR
 * column indices, CSC row indices or COO column indices (sparse_wire.Sparse). */
struct sp_mat {
    int format;
    int64_t rows, cols, nnz;
    void *offsets, *indices, *values;
    int offsets_type, indices_type, base, value_type;
    int batch;
    int64_t offsets_stride, values_stride;
    int fill, diag;
};

/* cusparseDnMatDescr_t, and cusparseDnVecDescr_t as a one-column matrix (is_vector set). */
struct dn_mat {
    int64_t rows, cols, ld;
    void *values;
    int type, order, batch, is_vector;
    int64_t stride;
};

/* The legacy cusparseMatDescr_t. */
struct mat_descr {
    int type, fill, diag, base;
};

/* A sparse matrix into the fields of prefix p (a_, b_, c_) of a request. */
#define PUT_SPARSE(r, p, m)                                                                                         \
    ((r).p##_format = (uint32_t)(m)->format, (r).p##_rows = (m)->rows, (r).p##_cols = (m)->cols,                    \
     (r).p##_nnz = (m)->nnz, (r).p##_offsets = (uintptr_t)(m)->offsets, (r).p##_indices = (uintptr_t)(m)->indices, \
     (r).p##_values = (uintptr_t)(m)->values, (r).p##_offsets_type = (uint32_t)(m)->offsets_type,                   \
     (r).p##_indices_type = (uint32_t)(m)->indices_type, (r).p##_base = (uint32_t)(m)->base,                        \
     (r).p##_value_type = (uint32_t)(m)->value_type, (r).p##_batch = (m)->batch,                                    \
     (r).p##_offsets_stride = (m)->offsets_stride, (r).p##_values_stride = (m)->values_stride)

/* alpha and beta into a request's 16-byte slots: values of the compute type, or device addresses. */
int rgpu_sparse_scalars(const struct sparse_handle *h, int compute, uint8_t out_alpha[16], uint8_t out_beta[16],
                        const void *alpha, const void *beta);

/* One request for `function` on the handle's stream, A, B and C in their fields. */
struct rgpu_sparse_run_req rgpu_sparse_request(struct sparse_handle *h, int function, const struct sp_mat *a,
                                               const struct dn_mat *b, const struct dn_mat *c);
int rgpu_sparse_query(struct rgpu_sparse_run_req *req, size_t *size);
int rgpu_sparse_submit(struct rgpu_sparse_run_req *req);

int rgpu_sparse_unsupported(int *logged, const char *name);
int rgpu_sparse_status(int cuda_result); /* CUresult -> cusparseStatus_t */

#endif
