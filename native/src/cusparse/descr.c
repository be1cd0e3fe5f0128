/* The generic API's descriptors, all local: sparse matrices (CSR, CSC, COO), dense matrices and vectors. The
 * Const variants take and give the same descriptors (cuSPARSE's const types differ only in C's qualifiers). */
#include <stdlib.h>

#include "sparse.h"

static int index_type_ok(int t)
{
    return t == CUSPARSE_INDEX_16U || t == CUSPARSE_INDEX_32I || t == CUSPARSE_INDEX_64I;
}

static int sp_create(struct sp_mat **out, int format, int64_t rows, int64_t cols, int64_t nnz, const void *offsets,
                     const void *indices, const void *values, int offsets_type, int indices_type, int base, int type)
{
    if (!out || rows < 0 || cols < 0 || nnz < 0 || !index_type_ok(offsets_type) || !index_type_ok(indices_type) ||
        (base != CUSPARSE_INDEX_BASE_ZERO && base != CUSPARSE_INDEX_BASE_ONE))
        return CUSPARSE_STATUS_INVALID_VALUE;
    struct sp_mat *m = calloc(1, sizeof *m);
    if (!m)
        return CUSPARSE_STATUS_ALLOC_FAILED;
    *m = (struct sp_mat){format, rows, cols, nnz, (void *)offsets, (void *)indices, (void *)values, offsets_type,
                         indices_type, base, type, 1, 0, 0, CUSPARSE_FILL_MODE_LOWER, CUSPARSE_DIAG_TYPE_NON_UNIT};
    *out = m;
    return CUSPARSE_STATUS_SUCCESS;
}

#define SP_CREATE(name, format)                                                                                     \
    SPARSE_API int cusparseCreate##name(struct sp_mat **out, int64_t rows, int64_t cols, int64_t nnz, void *offsets,\
                                        void *indices, void *values, int offsets_type, int indices_type, int base, \
                                        int type)                                                                   \
    {                                                                                                               \
        return sp_create(out, format, rows, cols, nnz, offsets, indices, values, offsets_type, indices_type, base, \
                         type);                                                                                     \
    }                                                                                                               \
    SPARSE_API int cusparseCreateConst##name(struct sp_mat **out, int64_t rows, int64_t cols, int64_t nnz,         \
                                             const void *offsets, const void *indices, const void *values,          \
                                             int offsets_type, int indices_type, int base, int type)                \
    {                                                                                                               \
        return sp_create(out, format, rows, cols, nnz, offsets, indices, values, offsets_type, indices_type, base, \
                         type);                                                                                     \
    }
/* defines: cusparseCreateCsr cusparseCreateConstCsr cusparseCreateCsc cusparseCreateConstCsc */
SP_CREATE(Csr, CUSPARSE_FORMAT_CSR)
SP_CREATE(Csc, CUSPARSE_FORMAT_CSC)

/* COO has one index type for both index arrays. */
SPARSE_API int cusparseCreateCoo(struct sp_mat **out, int64_t rows, int64_t cols, int64_t nnz, void *row_ind,
                                 void *col_ind, void *values, int index_type, int base, int type)
{
    return sp_create(out, CUSPARSE_FORMAT_COO, rows, cols, nnz, row_ind, col_ind, values, index_type, index_type, base,
                     type);
}

SPARSE_API int cusparseCreateConstCoo(struct sp_mat **out, int64_t rows, int64_t cols, int64_t nnz,
                                      const void *row_ind, const void *col_ind, const void *values, int index_type,
                                      int base, int type)
{
    return sp_create(out, CUSPARSE_FORMAT_COO, rows, cols, nnz, row_ind, col_ind, values, index_type, index_type, base,
                     type);
}

SPARSE_API int cusparseDestroySpMat(struct sp_mat *m)
{
    free(m);
    return CUSPARSE_STATUS_SUCCESS;
}

SPARSE_API int cusparseSpMatGetSize(const struct sp_mat *m, int64_t *rows, int64_t *cols, int64_t *nnz)
{
    if (!m || !rows || !cols || !nnz)
        return CUSPARSE_STATUS_INVALID_VALUE;
    *rows = m->rows, *cols = m->cols, *nnz = m->nnz;
    return CUSPARSE_STATUS_SUCCESS;
}

SPARSE_API int cusparseSpMatGetFormat(const struct sp_mat *m, int *format)
{
    if (!m || !format)
        return CUSPARSE_STATUS_INVALID_VALUE;
    *format = m->format;
    return CUSPARSE_STATUS_SUCCESS;
}

SPARSE_API int cusparseSpMatGetIndexBase(const struct sp_mat *m, int *base)
{
    if (!m || !base)
        return CUSPARSE_STATUS_INVALID_VALUE;
    *base = m->base;
    return CUSPARSE_STATUS_SUCCESS;
}

SPARSE_API int cusparseSpMatGetValues(struct sp_mat *m, void **values)
{
    if (!m || !values)
        return CUSPARSE_STATUS_INVALID_VALUE;
    *values = m->values;
    return CUSPARSE_STATUS_SUCCESS;
}

SPARSE_API int cusparseConstSpMatGetValues(const struct sp_mat *m, const void **values)
{
    return cusparseSpMatGetValues((struct sp_mat *)m, (void **)values);
}

SPARSE_API int cusparseSpMatSetValues(struct sp_mat *m, void *values)
{
    if (!m)
        return CUSPARSE_STATUS_INVALID_VALUE;
    m->values = values;
    return CUSPARSE_STATUS_SUCCESS;
}

SPARSE_API int cusparseSpMatGetStridedBatch(const struct sp_mat *m, int *batch)
{
    if (!m || !batch)
        return CUSPARSE_STATUS_INVALID_VALUE;
    *batch = m->batch;
    return CUSPARSE_STATUS_SUCCESS;
}

SPARSE_API int cusparseCsrSetStridedBatch(struct sp_mat *m, int batch, int64_t offsets_stride, int64_t values_stride)
{
    if (!m || m->format == CUSPARSE_FORMAT_COO || batch < 1 || offsets_stride < 0 || values_stride < 0)
        return CUSPARSE_STATUS_INVALID_VALUE;
    m->batch = batch, m->offsets_stride = offsets_stride, m->values_stride = values_stride;
    return CUSPARSE_STATUS_SUCCESS;
}

SPARSE_API int cusparseCooSetStridedBatch(struct sp_mat *m, int batch, int64_t stride)
{
    if (!m || m->format != CUSPARSE_FORMAT_COO || batch < 1 || stride < 0)
        return CUSPARSE_STATUS_INVALID_VALUE;
    m->batch = batch, m->offsets_stride = stride, m->values_stride = stride;
    return CUSPARSE_STATUS_SUCCESS;
}

static int sp_get(const struct sp_mat *m, int format, int64_t *rows, int64_t *cols, int64_t *nnz, void **offsets,
                  void **indices, void **values, int *offsets_type, int *indices_type, int *base, int *type)
{
    if (!m || m->format != format || !rows || !cols || !nnz || !offsets || !indices || !values || !indices_type ||
        !base || !type)
        return CUSPARSE_STATUS_INVALID_VALUE;
    *rows = m->rows, *cols = m->cols, *nnz = m->nnz, *offsets = m->offsets, *indices = m->indices,
    *values = m->values, *indices_type = m->indices_type, *base = m->base, *type = m->value_type;
    if (offsets_type)
        *offsets_type = m->offsets_type;
    return CUSPARSE_STATUS_SUCCESS;
}

#define SP_GET(name, format)                                                                                        \
    SPARSE_API int cusparse##name##Get(struct sp_mat *m, int64_t *rows, int64_t *cols, int64_t *nnz, void **offsets,\
                                       void **indices, void **values, int *offsets_type, int *indices_type,        \
                                       int *base, int *type)                                                        \
    {                                                                                                               \
        if (!offsets_type)                                                                                          \
            return CUSPARSE_STATUS_INVALID_VALUE;                                                                   \
        return sp_get(m, format, rows, cols, nnz, offsets, indices, values, offsets_type, indices_type, base, type);\
    }                                                                                                               \
    SPARSE_API int cusparseConst##name##Get(const struct sp_mat *m, int64_t *rows, int64_t *cols, int64_t *nnz,    \
                                            const void **offsets, const void **indices, const void **values,        \
                                            int *offsets_type, int *indices_type, int *base, int *type)             \
    {                                                                                                               \
        if (!offsets_type)                                                                                          \
            return CUSPARSE_STATUS_INVALID_VALUE;                                                                   \
        return sp_get(m, format, rows, cols, nnz, (void **)offsets, (void **)indices, (void **)values,             \
                      offsets_type, indices_type, base, type);                                                      \
    }
/* defines: cusparseCsrGet cusparseConstCsrGet cusparseCscGet cusparseConstCscGet */
SP_GET(Csr, CUSPARSE_FORMAT_CSR)
SP_GET(Csc, CUSPARSE_FORMAT_CSC)

SPARSE_API int cusparseCooGet(struct sp_mat *m, int64_t *rows, int64_t *cols, int64_t *nnz, void **row_ind,
                              void **col_ind, void **values, int *index_type, int *base, int *type)
{
    return sp_get(m, CUSPARSE_FORMAT_COO, rows, cols, nnz, row_ind, col_ind, values, NULL, index_type, base, type);
}

SPARSE_API int cusparseConstCooGet(const struct sp_mat *m, int64_t *rows, int64_t *cols, int64_t *nnz,
                                   const void **row_ind, const void **col_ind, const void **values, int *index_type,
                                   int *base, int *type)
{
    return sp_get(m, CUSPARSE_FORMAT_COO, rows, cols, nnz, (void **)row_ind, (void **)col_ind, (void **)values, NULL,
                  index_type, base, type);
}

static int sp_set_pointers(struct sp_mat *m, int format, void *offsets, void *indices, void *values)
{
    if (!m || m->format != format)
        return CUSPARSE_STATUS_INVALID_VALUE;
    m->offsets = offsets, m->indices = indices, m->values = values;
    return CUSPARSE_STATUS_SUCCESS;
}

SPARSE_API int cusparseCsrSetPointers(struct sp_mat *m, void *offsets, void *indices, void *values)
{
    return sp_set_pointers(m, CUSPARSE_FORMAT_CSR, offsets, indices, values);
}

SPARSE_API int cusparseCscSetPointers(struct sp_mat *m, void *offsets, void *indices, void *values)
{
    return sp_set_pointers(m, CUSPARSE_FORMAT_CSC, offsets, indices, values);
}

SPARSE_API int cusparseCooSetPointers(struct sp_mat *m, void *rows, void *cols, void *values)
{
    return sp_set_pointers(m, CUSPARSE_FORMAT_COO, rows, cols, values);
}

/* Fill mode and diagonal type matter to triangular solves (SpSV, SpSM), which rgpu does not serve; they are
 * kept so a program can read back what it set. */
static int attribute_ok(const struct sp_mat *m, int attribute, const void *data, size_t size)
{
    return m && data && size == sizeof(int) &&
           (attribute == SPARSE_ATTR_FILL_MODE || attribute == SPARSE_ATTR_DIAG_TYPE);
}

SPARSE_API int cusparseSpMatSetAttribute(struct sp_mat *m, int attribute, void *data, size_t size)
{
    if (!attribute_ok(m, attribute, data, size))
        return CUSPARSE_STATUS_INVALID_VALUE;
    *(attribute == SPARSE_ATTR_FILL_MODE ? &m->fill : &m->diag) = *(const int *)data;
    return CUSPARSE_STATUS_SUCCESS;
}

SPARSE_API int cusparseSpMatGetAttribute(const struct sp_mat *m, int attribute, void *data, size_t size)
{
    if (!attribute_ok(m, attribute, data, size))
        return CUSPARSE_STATUS_INVALID_VALUE;
    *(int *)data = attribute == SPARSE_ATTR_FILL_MODE ? m->fill : m->diag;
    return CUSPARSE_STATUS_SUCCESS;
}

/* -- dense matrices and vectors ------------------------------------------------------------------------------ */
static int dn_create(struct dn_mat **out, int64_t rows, int64_t cols, int64_t ld, const void *values, int type,
                     int order, int is_vector)
{
    int64_t inner = order == CUSPARSE_ORDER_COL ? rows : cols;
    if (!out || rows < 0 || cols < 0 || (order != CUSPARSE_ORDER_COL && order != CUSPARSE_ORDER_ROW) ||
        ld < (inner > 1 ? inner : 1))
        return CUSPARSE_STATUS_INVALID_VALUE;
    struct dn_mat *d = calloc(1, sizeof *d);
    if (!d)
        return CUSPARSE_STATUS_ALLOC_FAILED;
    *d = (struct dn_mat){rows, cols, ld, (void *)values, type, order, 1, is_vector, 0};
    *out = d;
    return CUSPARSE_STATUS_SUCCESS;
}

SPARSE_API int cusparseCreateDnMat(struct dn_mat **out, int64_t rows, int64_t cols, int64_t ld, void *values,
                                   int type, int order)
{
    return dn_create(out, rows, cols, ld, values, type, order, 0);
}

SPARSE_API int cusparseCreateConstDnMat(struct dn_mat **out, int64_t rows, int64_t cols, int64_t ld,
                                        const void *values, int type, int order)
{
    return dn_create(out, rows, cols, ld, values, type, order, 0);
}

SPARSE_API int cusparseCreateDnVec(struct dn_mat **out, int64_t size, void *values, int type)
{
    return dn_create(out, size, 1, size > 1 ? size : 1, values, type, CUSPARSE_ORDER_COL, 1);
}

SPARSE_API int cusparseCreateConstDnVec(struct dn_mat **out, int64_t size, const void *values, int type)
{
    return dn_create(out, size, 1, size > 1 ? size : 1, values, type, CUSPARSE_ORDER_COL, 1);
}

static int dn_destroy(struct dn_mat *d, int is_vector)
{
    if (d && d->is_vector != is_vector)
        return CUSPARSE_STATUS_INVALID_VALUE;
    free(d);
    return CUSPARSE_STATUS_SUCCESS;
}

SPARSE_API int cusparseDestroyDnMat(struct dn_mat *d) { return dn_destroy(d, 0); }
SPARSE_API int cusparseDestroyDnVec(struct dn_mat *d) { return dn_destroy(d, 1); }

SPARSE_API int cusparseDnMatGet(struct dn_mat *d, int64_t *rows, int64_t *cols, int64_t *ld, void **values,
                                int *type, int *order)
{
    if (!d || d->is_vector || !rows || !cols || !ld || !values || !type || !order)
        return CUSPARSE_STATUS_INVALID_VALUE;
    *rows = d->rows, *cols = d->cols, *ld = d->ld, *values = d->values, *type = d->type, *order = d->order;
    return CUSPARSE_STATUS_SUCCESS;
}

SPARSE_API int cusparseConstDnMatGet(const struct dn_mat *d, int64_t *rows, int64_t *cols, int64_t *ld,
                                     const void **values, int *type, int *order)
{
    return cusparseDnMatGet((struct dn_mat *)d, rows, cols, ld, (void **)values, type, order);
}

SPARSE_API int cusparseDnVecGet(struct dn_mat *d, int64_t *size, void **values, int *type)
{
    if (!d || !d->is_vector || !size || !values || !type)
        return CUSPARSE_STATUS_INVALID_VALUE;
    *size = d->rows, *values = d->values, *type = d->type;
    return CUSPARSE_STATUS_SUCCESS;
}

SPARSE_API int cusparseConstDnVecGet(const struct dn_mat *d, int64_t *size, const void **values, int *type)
{
    return cusparseDnVecGet((struct dn_mat *)d, size, (void **)values, type);
}

static int dn_values(struct dn_mat *d, int is_vector, void **get, void *set)
{
    if (!d || d->is_vector != is_vector || (get == NULL && set == NULL))
        return CUSPARSE_STATUS_INVALID_VALUE;
    if (get)
        *get = d->values;
    else
        d->values = set;
    return CUSPARSE_STATUS_SUCCESS;
}

SPARSE_API int cusparseDnMatGetValues(struct dn_mat *d, void **v) { return dn_values(d, 0, v, NULL); }
SPARSE_API int cusparseConstDnMatGetValues(const struct dn_mat *d, const void **v)
{
    return dn_values((struct dn_mat *)d, 0, (void **)v, NULL);
}
SPARSE_API int cusparseDnMatSetValues(struct dn_mat *d, void *v) { return dn_values(d, 0, NULL, v); }
SPARSE_API int cusparseDnVecGetValues(struct dn_mat *d, void **v) { return dn_values(d, 1, v, NULL); }
SPARSE_API int cusparseConstDnVecGetValues(const struct dn_mat *d, const void **v)
{
    return dn_values((struct dn_mat *)d, 1, (void **)v, NULL);
}
SPARSE_API int cusparseDnVecSetValues(struct dn_mat *d, void *v) { return dn_values(d, 1, NULL, v); }

SPARSE_API int cusparseDnMatSetStridedBatch(struct dn_mat *d, int batch, int64_t stride)
{
    if (!d || d->is_vector || batch < 1 || stride < 0)
        return CUSPARSE_STATUS_INVALID_VALUE;
    d->batch = batch, d->stride = stride;
    return CUSPARSE_STATUS_SUCCESS;
}

SPARSE_API int cusparseDnMatGetStridedBatch(const struct dn_mat *d, int *batch, int64_t *stride)
{
    if (!d || d->is_vector || !batch || !stride)
        return CUSPARSE_STATUS_INVALID_VALUE;
    *batch = d->batch, *stride = d->stride;
    return CUSPARSE_STATUS_SUCCESS;
}
