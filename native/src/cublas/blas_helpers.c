/* cublasSetVector/GetVector/SetMatrix/GetMatrix (+Async, +_64): host <-> device copies of strided vectors and
 * column-major matrices. They are 2D copies (an element or a column per row) through rgpu's own libcudart, so
 * the server checks them as it checks any copy and no operation of their own is needed. */
#include <stdint.h>

#include "blas.h"

/* rgpu's libcudart (linked), without its header. */
int cudaMemcpy2D(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height, int kind);
int cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height,
                      int kind, void *stream);
enum { TO_DEVICE = 1, TO_HOST = 2 };

struct copy {
    int kind;
    int async;
    void *stream;
};

static int copy_2d(struct copy how, void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                   size_t height)
{
    if (!width || !height)
        return CUBLAS_STATUS_SUCCESS;
    if (!dst || !src)
        return CUBLAS_STATUS_INVALID_VALUE;
    int r = how.async ? cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, height, how.kind, how.stream)
                      : cudaMemcpy2D(dst, dpitch, src, spitch, width, height, how.kind);
    return r ? CUBLAS_STATUS_MAPPING_ERROR : CUBLAS_STATUS_SUCCESS;
}

/* n elements of elem bytes, `inc` elements apart on either side. */
static int vector(struct copy how, int64_t n, int64_t elem, const void *x, int64_t incx, void *y, int64_t incy)
{
    if (n < 0 || elem <= 0 || incx <= 0 || incy <= 0)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (incx == 1 && incy == 1) /* one row */
        return copy_2d(how, y, (size_t)(n * elem), x, (size_t)(n * elem), (size_t)(n * elem), n ? 1 : 0);
    return copy_2d(how, y, (size_t)(incy * elem), x, (size_t)(incx * elem), (size_t)elem, (size_t)n);
}

/* rows x cols column-major, leading dimensions lda (source) and ldb (destination). */
static int matrix(struct copy how, int64_t rows, int64_t cols, int64_t elem, const void *a, int64_t lda, void *b,
                  int64_t ldb)
{
    /* A leading dimension below `rows` is left to the 2D copy, whose invalid pitch NVIDIA's cuBLAS reports as
     * MAPPING_ERROR -- and the runtime's last error stays set, as there (measured on the H200). */
    if (rows < 0 || cols < 0 || elem <= 0 || lda <= 0 || ldb <= 0)
        return CUBLAS_STATUS_INVALID_VALUE;
    return copy_2d(how, b, (size_t)(ldb * elem), a, (size_t)(lda * elem), (size_t)(rows * elem), (size_t)cols);
}

#define SYNC(kind) ((struct copy){(kind), 0, NULL})
#define ASYNC(kind, s) ((struct copy){(kind), 1, (s)})
#define HELPERS(suffix, I)                                                                                          \
    BLAS_API int cublasSetVector##suffix(I n, I elem, const void *x, I incx, void *y, I incy)                       \
    {                                                                                                               \
        return vector(SYNC(TO_DEVICE), n, elem, x, incx, y, incy);                                                  \
    }                                                                                                               \
    BLAS_API int cublasGetVector##suffix(I n, I elem, const void *x, I incx, void *y, I incy)                       \
    {                                                                                                               \
        return vector(SYNC(TO_HOST), n, elem, x, incx, y, incy);                                                    \
    }                                                                                                               \
    BLAS_API int cublasSetVectorAsync##suffix(I n, I elem, const void *x, I incx, void *y, I incy, void *s)         \
    {                                                                                                               \
        return vector(ASYNC(TO_DEVICE, s), n, elem, x, incx, y, incy);                                              \
    }                                                                                                               \
    BLAS_API int cublasGetVectorAsync##suffix(I n, I elem, const void *x, I incx, void *y, I incy, void *s)         \
    {                                                                                                               \
        return vector(ASYNC(TO_HOST, s), n, elem, x, incx, y, incy);                                                \
    }                                                                                                               \
    BLAS_API int cublasSetMatrix##suffix(I rows, I cols, I elem, const void *a, I lda, void *b, I ldb)              \
    {                                                                                                               \
        return matrix(SYNC(TO_DEVICE), rows, cols, elem, a, lda, b, ldb);                                           \
    }                                                                                                               \
    BLAS_API int cublasGetMatrix##suffix(I rows, I cols, I elem, const void *a, I lda, void *b, I ldb)              \
    {                                                                                                               \
        return matrix(SYNC(TO_HOST), rows, cols, elem, a, lda, b, ldb);                                             \
    }                                                                                                               \
    BLAS_API int cublasSetMatrixAsync##suffix(I rows, I cols, I elem, const void *a, I lda, void *b, I ldb,         \
                                              void *s)                                                              \
    {                                                                                                               \
        return matrix(ASYNC(TO_DEVICE, s), rows, cols, elem, a, lda, b, ldb);                                       \
    }                                                                                                               \
    BLAS_API int cublasGetMatrixAsync##suffix(I rows, I cols, I elem, const void *a, I lda, void *b, I ldb,         \
                                              void *s)                                                              \
    {                                                                                                               \
        return matrix(ASYNC(TO_HOST, s), rows, cols, elem, a, lda, b, ldb);                                         \
    }
/* defines: cublasSetVector cublasGetVector cublasSetVectorAsync cublasGetVectorAsync cublasSetMatrix
 * cublasGetMatrix cublasSetMatrixAsync cublasGetMatrixAsync cublasSetVector_64 cublasGetVector_64
 * cublasSetVectorAsync_64 cublasGetVectorAsync_64 cublasSetMatrix_64 cublasGetMatrix_64 cublasSetMatrixAsync_64
 * cublasGetMatrixAsync_64 */
HELPERS(, int)
HELPERS(_64, int64_t)
