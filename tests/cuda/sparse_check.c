/* cuSPARSE's generic API through whatever libcusparse the loader gives (NVIDIA's natively, rgpu's stand-in
 * through rgpu), every result checked against a dense CPU reference: SpMM with CSR (float and double, A
 * transposed, row-major operands, a strided batch), COO and CSC, SpMV with CSR (also with device-side scalars),
 * and cusparseXcoo2csr. Declares the prototypes it needs, so it builds without cuSPARSE headers. One line per
 * check; exits non-zero on any mismatch.
 *
 * `sparse_check hostile` instead checks rgpu's refusals of bad input (through rgpu only): a missing handle, an
 * external buffer smaller than the library needs, a pointer the program never allocated, operands whose shapes
 * do not match; after each the next call works. */
#include <stdint.h>
#include <string.h>

#include "libcheck.h"

typedef void *handle_t;
int cusparseCreate(handle_t *h);
int cusparseDestroy(handle_t h);
int cusparseSetPointerMode(handle_t h, int mode);
int cusparseCreateCsr(handle_t *d, int64_t rows, int64_t cols, int64_t nnz, void *offsets, void *indices,
                      void *values, int offsets_type, int indices_type, int base, int type);
int cusparseCreateCsc(handle_t *d, int64_t rows, int64_t cols, int64_t nnz, void *offsets, void *indices,
                      void *values, int offsets_type, int indices_type, int base, int type);
int cusparseCreateCoo(handle_t *d, int64_t rows, int64_t cols, int64_t nnz, void *rows_ind, void *cols_ind,
                      void *values, int index_type, int base, int type);
int cusparseCsrSetStridedBatch(handle_t d, int batch, int64_t offsets_stride, int64_t values_stride);
int cusparseDestroySpMat(handle_t d);
int cusparseCreateDnMat(handle_t *d, int64_t rows, int64_t cols, int64_t ld, void *values, int type, int order);
int cusparseDnMatSetStridedBatch(handle_t d, int batch, int64_t stride);
int cusparseDestroyDnMat(handle_t d);
int cusparseCreateDnVec(handle_t *d, int64_t size, void *values, int type);
int cusparseDestroyDnVec(handle_t d);
int cusparseSpMM_bufferSize(handle_t, int, int, const void *, handle_t, handle_t, const void *, handle_t, int, int,
                            size_t *);
int cusparseSpMM(handle_t, int, int, const void *, handle_t, handle_t, const void *, handle_t, int, int, void *);
int cusparseSpMV_bufferSize(handle_t, int, const void *, handle_t, handle_t, const void *, handle_t, int, int,
                            size_t *);
int cusparseSpMV(handle_t, int, const void *, handle_t, handle_t, const void *, handle_t, int, int, void *);
int cusparseXcoo2csr(handle_t, const int *, int, int, int *, int);
int cusparseSpMatGetSize(handle_t, int64_t *, int64_t *, int64_t *);
int cusparseCsrSetPointers(handle_t, void *, void *, void *);
int cusparseSpGEMM_createDescr(handle_t *);
int cusparseSpGEMM_destroyDescr(handle_t);
int cusparseSpGEMM_workEstimation(handle_t, int, int, const void *, handle_t, handle_t, const void *, handle_t, int, int,
                                  handle_t, size_t *, void *);
int cusparseSpGEMM_compute(handle_t, int, int, const void *, handle_t, handle_t, const void *, handle_t, int, int,
                           handle_t, size_t *, void *);
int cusparseSpGEMM_copy(handle_t, int, int, const void *, handle_t, handle_t, const void *, handle_t, int, int,
                        handle_t);

enum { OP_N = 0, OP_T = 1, R_32F = 0, R_64F = 1, I32 = 2, I64 = 3, BASE0 = 0, BASE1 = 1, COL = 1, ROW = 2 };
enum { SPMM_DEFAULT = 0, SPMM_CSR_ALG1 = 4, SPMV_DEFAULT = 0, DEVICE_POINTERS = 1 };

/* A random m x k matrix with about one entry in four stored, as CSR (0-based, int32) plus its dense copy. */
struct csr {
    int m, k, nnz;
    int *offsets, *cols;
    double *values, *dense; /* dense: row-major m x k */
};

static struct csr random_csr(int m, int k)
{
    struct csr a = {m, k, 0, calloc(m + 1, sizeof(int)), malloc(sizeof(int) * m * k),
                    malloc(sizeof(double) * m * k), calloc(m * k, sizeof(double))};
    for (int i = 0; i < m; i++) {
        for (int j = 0; j < k; j++)
            if (rand() % 4 == 0) {
                a.cols[a.nnz] = j, a.values[a.nnz] = random_value(4.0);
                a.dense[i * k + j] = a.values[a.nnz++];
            }
        a.offsets[i + 1] = a.nnz;
    }
    return a;
}

static double *random_values(int n)
{
    double *x = malloc(sizeof(double) * n);
    for (int i = 0; i < n; i++)
        x[i] = random_value(2.0);
    return x;
}

/* want (m x n, column-major) = alpha op(A) B + beta C, with B k x n column-major (op(A): m x k). */
static void ref_spmm(const struct csr *a, int trans, int m, int n, int k, double alpha, const double *b,
                     double beta, const double *c, double *want)
{
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            double acc = 0;
            for (int p = 0; p < k; p++)
                acc += (trans ? a->dense[p * a->k + i] : a->dense[i * a->k + p]) * b[p + j * k];
            want[i + j * m] = alpha * acc + beta * c[i + j * m];
        }
}

static void *floats(const double *x, int n)
{
    float *f = malloc(sizeof(float) * n);
    for (int i = 0; i < n; i++)
        f[i] = (float)x[i];
    return f;
}

static void spmm(handle_t h, handle_t a, handle_t b, handle_t c, int op_a, const void *alpha, const void *beta,
                 int type, int alg)
{
    size_t size;
    CHECK(cusparseSpMM_bufferSize(h, op_a, OP_N, alpha, a, b, beta, c, type, alg, &size));
    void *buffer = dev(NULL, size);
    CHECK(cusparseSpMM(h, op_a, OP_N, alpha, a, b, beta, c, type, alg, buffer));
    CHECK(cudaFree(buffer));
}

static void check_spmm(handle_t h)
{
    const int m = 37, k = 29, n = 6;
    struct csr a = random_csr(m, k);
    double *b = random_values(k * n), *bt = random_values(m * n), *c = random_values(m * n), *ct = random_values(k * n),
           want[37 * 6], got[37 * 6];
    void *doff = dev(a.offsets, sizeof(int) * (m + 1)), *dcol = dev(a.cols, sizeof(int) * a.nnz),
         *dval = dev(a.values, sizeof(double) * a.nnz);
    handle_t sa, sb, sc;
    double alpha = 1.5, beta = -0.5;

    /* double, column-major, C = alpha A B + beta C */
    void *db = dev(b, sizeof(double) * k * n), *dc = dev(c, sizeof(double) * m * n);
    CHECK(cusparseCreateCsr(&sa, m, k, a.nnz, doff, dcol, dval, I32, I32, BASE0, R_64F));
    CHECK(cusparseCreateDnMat(&sb, k, n, k, db, R_64F, COL));
    CHECK(cusparseCreateDnMat(&sc, m, n, m, dc, R_64F, COL));
    spmm(h, sa, sb, sc, OP_N, &alpha, &beta, R_64F, SPMM_CSR_ALG1);
    get(got, dc, sizeof got);
    ref_spmm(&a, 0, m, n, k, alpha, b, beta, c, want);
    report("SpMM CSR double 37x29 * 29x6", max_diff(got, want, m * n), 1e-12);
    cusparseDestroyDnMat(sb), cusparseDestroyDnMat(sc);

    /* A transposed: C (k x n) = A^T B' (B' m x n) */
    double wantt[29 * 6], gott[29 * 6];
    void *dbt = dev(bt, sizeof(double) * m * n), *dct = dev(ct, sizeof(double) * k * n);
    CHECK(cusparseCreateDnMat(&sb, m, n, m, dbt, R_64F, COL));
    CHECK(cusparseCreateDnMat(&sc, k, n, k, dct, R_64F, COL));
    spmm(h, sa, sb, sc, OP_T, &alpha, &beta, R_64F, SPMM_DEFAULT);
    get(gott, dct, sizeof gott);
    ref_spmm(&a, 1, k, n, m, alpha, bt, beta, ct, wantt);
    /* cuSPARSE: "when using the (conjugate) transpose of the sparse matrix A, this routine may produce slightly
     * different results during different runs with the same input parameters" -- also CSC (A^T as CSR) and COO
     * (whose algorithms are documented alike) below: checked within a bound, the error not printed. */
    within("SpMM CSR A^T B", max_diff(gott, wantt, k * n), 1e-12);
    cusparseDestroyDnMat(sb), cusparseDestroyDnMat(sc), cusparseDestroySpMat(sa);

    /* float values, row-major B and C */
    float *fval = floats(a.values, a.nnz), brow[29 * 6], crow[37 * 6], falpha = 2.0f, fbeta = 0.0f;
    for (int i = 0; i < k; i++)
        for (int j = 0; j < n; j++)
            brow[i * n + j] = (float)b[i + j * k];
    void *dfval = dev(fval, sizeof(float) * a.nnz), *dbr = dev(brow, sizeof brow), *dcr = dev(NULL, sizeof crow);
    CHECK(cusparseCreateCsr(&sa, m, k, a.nnz, doff, dcol, dfval, I32, I32, BASE0, R_32F));
    CHECK(cusparseCreateDnMat(&sb, k, n, n, dbr, R_32F, ROW));
    CHECK(cusparseCreateDnMat(&sc, m, n, n, dcr, R_32F, ROW));
    spmm(h, sa, sb, sc, OP_N, &falpha, &fbeta, R_32F, SPMM_DEFAULT);
    get(crow, dcr, sizeof crow);
    ref_spmm(&a, 0, m, n, k, 2.0, b, 0.0, c, want);
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++)
            got[i + j * m] = crow[i * n + j];
    report("SpMM CSR float, row-major B and C", max_diff(got, want, m * n), 1e-5);
    cusparseDestroyDnMat(sb), cusparseDestroyDnMat(sc), cusparseDestroySpMat(sa);

    /* a strided batch of two: the same structure, the second matrix's values negated, B and C per batch */
    double *val2 = malloc(sizeof(double) * 2 * a.nnz), *b2 = malloc(sizeof(double) * 2 * k * n), got2[2 * 37 * 6];
    int *off2 = malloc(sizeof(int) * 2 * (m + 1)), *col2 = malloc(sizeof(int) * 2 * a.nnz);
    for (int i = 0; i < a.nnz; i++)
        val2[i] = a.values[i], val2[a.nnz + i] = -a.values[i], col2[i] = col2[a.nnz + i] = a.cols[i];
    for (int i = 0; i <= m; i++)
        off2[i] = off2[m + 1 + i] = a.offsets[i];
    memcpy(b2, b, sizeof(double) * k * n), memcpy(b2 + k * n, b, sizeof(double) * k * n);
    void *dval2 = dev(val2, sizeof(double) * 2 * a.nnz), *db2 = dev(b2, sizeof(double) * 2 * k * n),
         *dc2 = dev(NULL, sizeof got2), *doff2 = dev(off2, sizeof(int) * 2 * (m + 1)),
         *dcol2 = dev(col2, sizeof(int) * 2 * a.nnz);
    double zero = 0, one = 1;
    CHECK(cusparseCreateCsr(&sa, m, k, a.nnz, doff2, dcol2, dval2, I32, I32, BASE0, R_64F));
    CHECK(cusparseCsrSetStridedBatch(sa, 2, m + 1, a.nnz));
    CHECK(cusparseCreateDnMat(&sb, k, n, k, db2, R_64F, COL));
    CHECK(cusparseDnMatSetStridedBatch(sb, 2, (int64_t)k * n));
    CHECK(cusparseCreateDnMat(&sc, m, n, m, dc2, R_64F, COL));
    CHECK(cusparseDnMatSetStridedBatch(sc, 2, (int64_t)m * n));
    spmm(h, sa, sb, sc, OP_N, &one, &zero, R_64F, SPMM_CSR_ALG1);
    get(got2, dc2, sizeof got2);
    ref_spmm(&a, 0, m, n, k, 1, b, 0, c, want);
    double e = max_diff(got2, want, m * n);
    for (int i = 0; i < m * n; i++)
        e = fmax(e, fabs(got2[m * n + i] + want[i]));
    report("SpMM CSR strided batch of 2", e, 1e-12);
    cusparseDestroyDnMat(sb), cusparseDestroyDnMat(sc), cusparseDestroySpMat(sa);

    /* COO (1-based, int64 indices) and CSC (the CSR arrays of A read as CSC are A^T) */
    int64_t *rows64 = malloc(sizeof(int64_t) * a.nnz), *cols64 = malloc(sizeof(int64_t) * a.nnz);
    for (int i = 0; i < m; i++)
        for (int p = a.offsets[i]; p < a.offsets[i + 1]; p++)
            rows64[p] = i + 1, cols64[p] = a.cols[p] + 1;
    void *drows = dev(rows64, sizeof(int64_t) * a.nnz), *dcols = dev(cols64, sizeof(int64_t) * a.nnz);
    CHECK(cudaMemcpy(dc, c, sizeof(double) * m * n, 1));
    CHECK(cusparseCreateCoo(&sa, m, k, a.nnz, drows, dcols, dval, I64, BASE1, R_64F));
    CHECK(cusparseCreateDnMat(&sb, k, n, k, db, R_64F, COL));
    CHECK(cusparseCreateDnMat(&sc, m, n, m, dc, R_64F, COL));
    spmm(h, sa, sb, sc, OP_N, &alpha, &beta, R_64F, SPMM_DEFAULT);
    get(got, dc, sizeof got);
    ref_spmm(&a, 0, m, n, k, alpha, b, beta, c, want);
    within("SpMM COO 1-based int64 indices", max_diff(got, want, m * n), 1e-12);
    cusparseDestroyDnMat(sb), cusparseDestroyDnMat(sc), cusparseDestroySpMat(sa);

    CHECK(cudaMemcpy(dct, ct, sizeof(double) * k * n, 1));
    CHECK(cusparseCreateCsc(&sa, k, m, a.nnz, doff, dcol, dval, I32, I32, BASE0, R_64F));
    CHECK(cusparseCreateDnMat(&sb, m, n, m, dbt, R_64F, COL));
    CHECK(cusparseCreateDnMat(&sc, k, n, k, dct, R_64F, COL));
    spmm(h, sa, sb, sc, OP_N, &alpha, &beta, R_64F, SPMM_DEFAULT);
    get(gott, dct, sizeof gott);
    within("SpMM CSC (A^T stored as CSC)", max_diff(gott, wantt, k * n), 1e-12);
    cusparseDestroyDnMat(sb), cusparseDestroyDnMat(sc), cusparseDestroySpMat(sa);

    cudaFree(doff), cudaFree(dcol), cudaFree(dval), cudaFree(db), cudaFree(dc), cudaFree(dbt), cudaFree(dct);
    cudaFree(dfval), cudaFree(dbr), cudaFree(dcr), cudaFree(dval2), cudaFree(db2), cudaFree(dc2), cudaFree(drows);
    cudaFree(dcols), cudaFree(doff2), cudaFree(dcol2);
    free(b), free(bt), free(c), free(ct), free(fval), free(val2), free(b2), free(rows64), free(cols64), free(off2);
    free(col2);
}

static void check_spmv_and_coo2csr(handle_t h)
{
    const int m = 53, k = 41;
    struct csr a = random_csr(m, k);
    double *x = random_values(k), *y = random_values(m), want[53], got[53];
    void *doff = dev(a.offsets, sizeof(int) * (m + 1)), *dcol = dev(a.cols, sizeof(int) * a.nnz),
         *dval = dev(a.values, sizeof(double) * a.nnz), *dx = dev(x, sizeof(double) * k),
         *dy = dev(y, sizeof(double) * m);
    handle_t sa, vx, vy;
    double alpha = -1.25, beta = 2.0;
    CHECK(cusparseCreateCsr(&sa, m, k, a.nnz, doff, dcol, dval, I32, I32, BASE0, R_64F));
    CHECK(cusparseCreateDnVec(&vx, k, dx, R_64F));
    CHECK(cusparseCreateDnVec(&vy, m, dy, R_64F));
    size_t size;
    CHECK(cusparseSpMV_bufferSize(h, OP_N, &alpha, sa, vx, &beta, vy, R_64F, SPMV_DEFAULT, &size));
    void *buffer = dev(NULL, size);
    CHECK(cusparseSpMV(h, OP_N, &alpha, sa, vx, &beta, vy, R_64F, SPMV_DEFAULT, buffer));
    get(got, dy, sizeof got);
    ref_spmm(&a, 0, m, 1, k, alpha, x, beta, y, want);
    report("SpMV CSR double 53x41", max_diff(got, want, m), 1e-12);

    /* the scalars in device memory */
    double scalars[2] = {0.5, 0.0};
    void *dscalars = dev(scalars, sizeof scalars);
    CHECK(cusparseSetPointerMode(h, DEVICE_POINTERS));
    CHECK(cusparseSpMV(h, OP_N, dscalars, sa, vx, (double *)dscalars + 1, vy, R_64F, SPMV_DEFAULT, buffer));
    CHECK(cusparseSetPointerMode(h, 0));
    get(got, dy, sizeof got);
    ref_spmm(&a, 0, m, 1, k, 0.5, x, 0.0, y, want);
    report("SpMV device-side alpha and beta", max_diff(got, want, m), 1e-12);
    cusparseDestroyDnVec(vx), cusparseDestroyDnVec(vy), cusparseDestroySpMat(sa);

    /* COO row indices -> CSR offsets */
    int *rows = malloc(sizeof(int) * a.nnz), offsets[54];
    for (int i = 0; i < m; i++)
        for (int p = a.offsets[i]; p < a.offsets[i + 1]; p++)
            rows[p] = i;
    void *drows = dev(rows, sizeof(int) * a.nnz), *doffsets = dev(NULL, sizeof offsets);
    CHECK(cusparseXcoo2csr(h, drows, a.nnz, m, doffsets, BASE0));
    get(offsets, doffsets, sizeof offsets);
    failures += memcmp(offsets, a.offsets, sizeof offsets) != 0;
    printf("%-40s %s\n", "Xcoo2csr", memcmp(offsets, a.offsets, sizeof offsets) ? "MISMATCH" : "OK");
    cudaFree(doff), cudaFree(dcol), cudaFree(dval), cudaFree(dx), cudaFree(dy), cudaFree(buffer);
    cudaFree(dscalars), cudaFree(drows), cudaFree(doffsets), free(x), free(y), free(rows);
}

static void check_spgemm(handle_t h)
{
    const int m = 31, k = 27, n = 23;
    struct csr a = random_csr(m, k), b = random_csr(k, n);
    void *da[3] = {dev(a.offsets, sizeof(int) * (m + 1)), dev(a.cols, sizeof(int) * a.nnz),
                   dev(a.values, sizeof(double) * a.nnz)},
         *db[3] = {dev(b.offsets, sizeof(int) * (k + 1)), dev(b.cols, sizeof(int) * b.nnz),
                   dev(b.values, sizeof(double) * b.nnz)},
         *dcoff = dev(NULL, sizeof(int) * (m + 1));
    handle_t sa, sb, sc, d;
    double alpha = 1.5, beta = 0;
    CHECK(cusparseCreateCsr(&sa, m, k, a.nnz, da[0], da[1], da[2], I32, I32, BASE0, R_64F));
    CHECK(cusparseCreateCsr(&sb, k, n, b.nnz, db[0], db[1], db[2], I32, I32, BASE0, R_64F));
    CHECK(cusparseCreateCsr(&sc, m, n, 0, dcoff, NULL, NULL, I32, I32, BASE0, R_64F));
    CHECK(cusparseSpGEMM_createDescr(&d));
    size_t size1 = 0, size2 = 0;
    CHECK(cusparseSpGEMM_workEstimation(h, OP_N, OP_N, &alpha, sa, sb, &beta, sc, R_64F, 0, d, &size1, NULL));
    void *buffer1 = dev(NULL, size1);
    CHECK(cusparseSpGEMM_workEstimation(h, OP_N, OP_N, &alpha, sa, sb, &beta, sc, R_64F, 0, d, &size1, buffer1));
    CHECK(cusparseSpGEMM_compute(h, OP_N, OP_N, &alpha, sa, sb, &beta, sc, R_64F, 0, d, &size2, NULL));
    void *buffer2 = dev(NULL, size2);
    CHECK(cusparseSpGEMM_compute(h, OP_N, OP_N, &alpha, sa, sb, &beta, sc, R_64F, 0, d, &size2, buffer2));
    int64_t rows, cols, nnz;
    CHECK(cusparseSpMatGetSize(sc, &rows, &cols, &nnz));
    void *dccol = dev(NULL, sizeof(int) * nnz), *dcval = dev(NULL, sizeof(double) * nnz);
    CHECK(cusparseCsrSetPointers(sc, dcoff, dccol, dcval));
    CHECK(cusparseSpGEMM_copy(h, OP_N, OP_N, &alpha, sa, sb, &beta, sc, R_64F, 0, d));
    int *coff = malloc(sizeof(int) * (m + 1)), *ccol = malloc(sizeof(int) * nnz);
    double *cval = malloc(sizeof(double) * nnz), *got = calloc(m * n, sizeof(double)), want[31 * 23];
    get(coff, dcoff, sizeof(int) * (m + 1)), get(ccol, dccol, sizeof(int) * nnz);
    get(cval, dcval, sizeof(double) * nnz);
    int structural = 0; /* the product's structure: (i, j) with some p where A(i, p) and B(p, j) are stored */
    for (int i = 0; i < m; i++) {
        for (int j = 0; j < n; j++) {
            double acc = 0;
            int stored = 0;
            for (int p = 0; p < k; p++) {
                acc += a.dense[i * k + p] * b.dense[p * n + j];
                stored |= a.dense[i * k + p] != 0 && b.dense[p * n + j] != 0;
            }
            want[i + j * m] = alpha * acc;
            structural += stored;
        }
        for (int q = coff[i]; q < coff[i + 1]; q++)
            got[i + ccol[q] * m] += cval[q];
    }
    report("SpGEMM CSR 31x27 * 27x23", max_diff(got, want, m * n), 1e-12);
    expect("SpGEMM non-zeros of C", (long)nnz, structural);
    cusparseSpGEMM_destroyDescr(d), cusparseDestroySpMat(sa), cusparseDestroySpMat(sb), cusparseDestroySpMat(sc);
    for (int i = 0; i < 3; i++)
        cudaFree(da[i]), cudaFree(db[i]);
    cudaFree(dcoff), cudaFree(dccol), cudaFree(dcval), cudaFree(buffer1), cudaFree(buffer2);
    free(coff), free(ccol), free(cval), free(got);
}

static void hostile(handle_t h)
{
    const int m = 16, k = 12, n = 3;
    struct csr a = random_csr(m, k);
    double *b = random_values(k * n), one = 1, zero = 0, before[16 * 3], after[16 * 3];
    void *doff = dev(a.offsets, sizeof(int) * (m + 1)), *dcol = dev(a.cols, sizeof(int) * a.nnz),
         *dval = dev(a.values, sizeof(double) * a.nnz), *db = dev(b, sizeof(double) * k * n),
         *dc = dev(NULL, sizeof before);
    handle_t sa, sb, sc, bad;
    CHECK(cusparseCreateCsr(&sa, m, k, a.nnz, doff, dcol, dval, I32, I32, BASE0, R_64F));
    CHECK(cusparseCreateDnMat(&sb, k, n, k, db, R_64F, COL));
    CHECK(cusparseCreateDnMat(&sc, m, n, m, dc, R_64F, COL));
    size_t size;
    expect("no handle: NOT_INITIALIZED",
           cusparseSpMM_bufferSize(NULL, OP_N, OP_N, &one, sa, sb, &zero, sc, R_64F, SPMM_DEFAULT, &size), 1);
    expect("ld < rows: INVALID_VALUE", cusparseCreateDnMat(&bad, k, n, k - 1, db, R_64F, COL), 3);
    CHECK(cusparseSpMM_bufferSize(h, OP_N, OP_N, &one, sa, sb, &zero, sc, R_64F, SPMM_DEFAULT, &size));
    get(before, dc, sizeof before);
    if (size > 1) { /* a buffer one byte short (cuSPARSE may need none at all for this product) */
        void *small = dev(NULL, size - 1);
        CHECK(cusparseSpMM(h, OP_N, OP_N, &one, sa, sb, &zero, sc, R_64F, SPMM_DEFAULT, small));
        expect_refused("buffer one byte short");
        get(after, dc, sizeof after);
        expect("  ... and C left untouched", memcmp(before, after, sizeof after) == 0, 1);
        cudaFree(small);
    }
    void *buffer = dev(NULL, size);
    /* a values pointer the program never allocated */
    CHECK(cusparseCreateCsr(&bad, m, k, a.nnz, doff, dcol, (void *)0x7f00dead0000, I32, I32, BASE0, R_64F));
    CHECK(cusparseSpMM(h, OP_N, OP_N, &one, bad, sb, &zero, sc, R_64F, SPMM_DEFAULT, buffer));
    expect_refused("foreign values pointer");
    cusparseDestroySpMat(bad);
    /* A claims more non-zeros than its arrays hold */
    CHECK(cusparseCreateCsr(&bad, m, k, a.nnz + 64, doff, dcol, dval, I32, I32, BASE0, R_64F));
    CHECK(cusparseSpMM(h, OP_N, OP_N, &one, bad, sb, &zero, sc, R_64F, SPMM_DEFAULT, buffer));
    expect_refused("nnz beyond the arrays");
    cusparseDestroySpMat(bad);
    /* B with the wrong number of rows for A */
    CHECK(cusparseCreateDnMat(&bad, k - 1, n, k, db, R_64F, COL));
    CHECK(cusparseSpMM(h, OP_N, OP_N, &one, sa, bad, &zero, sc, R_64F, SPMM_DEFAULT, buffer));
    expect_refused("mismatched shapes");
    cusparseDestroyDnMat(bad);
    /* an SpGEMM compute buffer smaller than the library needs */
    handle_t d, sc2;
    void *dcoff = dev(NULL, sizeof(int) * (m + 1));
    CHECK(cusparseCreateCsr(&sc2, m, k, 0, dcoff, NULL, NULL, I32, I32, BASE0, R_64F));
    struct csr b2 = random_csr(k, k);
    void *db2[3] = {dev(b2.offsets, sizeof(int) * (k + 1)), dev(b2.cols, sizeof(int) * b2.nnz),
                    dev(b2.values, sizeof(double) * b2.nnz)};
    handle_t sb2;
    CHECK(cusparseCreateCsr(&sb2, k, k, b2.nnz, db2[0], db2[1], db2[2], I32, I32, BASE0, R_64F));
    CHECK(cusparseSpGEMM_createDescr(&d));
    size_t size1, size2;
    CHECK(cusparseSpGEMM_workEstimation(h, OP_N, OP_N, &one, sa, sb2, &zero, sc2, R_64F, 0, d, &size1, NULL));
    void *buffer1 = dev(NULL, size1);
    CHECK(cusparseSpGEMM_workEstimation(h, OP_N, OP_N, &one, sa, sb2, &zero, sc2, R_64F, 0, d, &size1, buffer1));
    CHECK(cusparseSpGEMM_compute(h, OP_N, OP_N, &one, sa, sb2, &zero, sc2, R_64F, 0, d, &size2, NULL));
    size_t short_size = size2 - 1;
    void *buffer2 = dev(NULL, short_size);
    expect("SpGEMM buffer too small: INVALID_VALUE",
           cusparseSpGEMM_compute(h, OP_N, OP_N, &one, sa, sb2, &zero, sc2, R_64F, 0, d, &short_size, buffer2), 3);
    cusparseSpGEMM_destroyDescr(d), cusparseDestroySpMat(sb2), cusparseDestroySpMat(sc2);
    cudaFree(dcoff), cudaFree(buffer1), cudaFree(buffer2);
    for (int i = 0; i < 3; i++)
        cudaFree(db2[i]);
    /* still usable */
    CHECK(cusparseSpMM(h, OP_N, OP_N, &one, sa, sb, &zero, sc, R_64F, SPMM_DEFAULT, buffer));
    expect("a clean call afterwards", cudaDeviceSynchronize(), 0);
    cusparseDestroyDnMat(sb), cusparseDestroyDnMat(sc), cusparseDestroySpMat(sa);
    cudaFree(doff), cudaFree(dcol), cudaFree(dval), cudaFree(db), cudaFree(dc), cudaFree(buffer), free(b);
}

int main(int argc, char **argv)
{
    srand(5);
    handle_t h;
    CHECK(cusparseCreate(&h));
    if (argc > 1 && !strcmp(argv[1], "hostile")) {
        hostile(h);
    } else {
        check_spmm(h);
        check_spmv_and_coo2csr(h);
        check_spgemm(h);
    }
    CHECK(cusparseDestroy(h));
    CHECK(cudaDeviceSynchronize());
    printf("sparse_check %s\n", failures ? "FAILED" : "OK");
    return failures != 0;
}
