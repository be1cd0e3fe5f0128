/* Internal interface of rgpu's cuBLAS and cuBLASLt stand-ins (libcublas.so.13, libcublasLt.so.13).
 *
 * Handles, settings and descriptors live here; only execution (GEMMs, matmuls) and what truly needs the GPU
 * (cuBLASLt heuristics) travel, over the driver shim's connection (its rgpu_ext_* entry points). Executions
 * are deferred like kernel launches: their errors surface at the next synchronising call. These libraries
 * need NVIDIA's headers only to regenerate native/gen (python native/codegen/gen.py). */
#ifndef RGPU_BLAS_H
#define RGPU_BLAS_H

#include <library_types.h>
#include <stddef.h>
#include <stdint.h>

#include "cublas_consts.h"

#define RGPU_CUBLAS_VERSION_ALL \
    (RGPU_CUBLAS_VERSION_MAJOR * 10000 + RGPU_CUBLAS_VERSION_MINOR * 100 + RGPU_CUBLAS_VERSION_PATCH)
#include "rgpu_ops.h"
#include "rgpu_wire.h"
#include "remote.h"
#include "standin.h"

#define BLAS_API __attribute__((visibility("default")))


/* Complex elements as their bytes: the stand-ins never look inside them. */
typedef struct { float re, im; } complex_float;
typedef struct { double re, im; } complex_double;

/* A cublasHandle_t: its settings live here; `server` is the cuBLAS handle on the server. */
struct handle {
    uint64_t server;
    void *stream;
    void *workspace;
    size_t workspace_size;
    int math_mode, pointer_mode, atomics_mode;
};

/* The checks cuBLAS makes on a GEMM's shape, operations, leading dimensions and scalars (blas.c). */
int rgpu_blas_gemm_args_ok(int ta, int tb, long long m, long long n, long long k, long long lda, long long ldb,
                           long long ldc, long long batch, const void *alpha, const void *beta);

/* A GEMV as the GEMM that computes it, y^T = alpha x^T op(A)^T + beta y^T: the vectors are one-row matrices whose
 * leading dimensions are their increments (blas.c). 0 with the GEMM's B operation and n, k set; RGPU_BLAS_NOTHING
 * when BLAS returns at once (m or n 0); otherwise the status to return. */
#define RGPU_BLAS_NOTHING (-1)
struct gemv_shape {
    int transb;
    long long n, k;
};
/* A real gemv whose x has increment 0, which NVIDIA's cuBLAS accepts: cuBLAS itself runs it on the server
 * (BLAS_ROUTINE), as every other real gemv is one GEMM, which cannot express it (blas_level23.c). */
int rgpu_blas_gemv_routine(struct handle *h, int type, int wide, size_t scalar, int trans, long long m, long long n,
                           const void *alpha, const void *A, long long lda, const void *x, const void *beta, void *y,
                           long long incy);
int rgpu_blas_gemv_shape(int trans, long long m, long long n, long long lda, long long incx, long long incy,
                         struct gemv_shape *out);

/* Level 2/3 routines (blas_level23.c) and getrsBatched (batched_lu.c) check their enumerations alike. */
#define RGPU_BLAS_OP_OK(t) ((t) == CUBLAS_OP_N || (t) == CUBLAS_OP_T || (t) == CUBLAS_OP_C)
#define RGPU_BLAS_AT_LEAST_1(v) ((v) > 1 ? (v) : 1)

/* Reports an argument a routine refuses, as cuBLAS does (blas.c). */
void cublasXerbla(const char *name, int info);

int rgpu_blas_unsupported(int *logged, const char *name);
void rgpu_blas_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
int rgpu_blas_status(int cuda_result);           /* CUresult -> cublasStatus_t */
size_t rgpu_blas_type_size(int cuda_data_type);  /* 0 if unknown */
size_t rgpu_blas_scalar_size(int compute_type);  /* bytes of alpha/beta for a cublasComputeType_t */
const char *rgpu_blas_status_name(int status);

/* cuBLASLt heuristic answers by request bytes (lt_cache.c): the count kept (its results copied out), or -1. */
int rgpu_lt_cache_get(const uint8_t *key, size_t len, int requested, void *results, size_t item_size);
void rgpu_lt_cache_put(const uint8_t *key, size_t len, int requested, const void *results, int count,
                       size_t item_size);

#endif
