/* Shared by both stand-ins (compiled into each): statuses, type sizes, logging. */
#include <stdarg.h>

#include "blas.h"

void rgpu_blas_log(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    rgpu_standin_vlog("cublas", RGPU_STANDIN_WARN, fmt, ap);
    va_end(ap);
}

int rgpu_blas_unsupported(int *logged, const char *name)
{
    return rgpu_standin_unsupported(logged, "cublas", name, CUBLAS_STATUS_NOT_SUPPORTED, "CUBLAS_STATUS_NOT_SUPPORTED");
}

int rgpu_blas_status(int r)
{
    switch (r) {
    case 0:
        return CUBLAS_STATUS_SUCCESS;
    case 1: /* CUDA_ERROR_INVALID_VALUE */
        return CUBLAS_STATUS_INVALID_VALUE;
    case 2: /* CUDA_ERROR_OUT_OF_MEMORY */
        return CUBLAS_STATUS_ALLOC_FAILED;
    case 3: /* CUDA_ERROR_NOT_INITIALIZED */
    case 100:
        return CUBLAS_STATUS_NOT_INITIALIZED;
    case 801: /* CUDA_ERROR_NOT_SUPPORTED */
        return CUBLAS_STATUS_NOT_SUPPORTED;
    default:
        return CUBLAS_STATUS_EXECUTION_FAILED;
    }
}

size_t rgpu_blas_type_size(int t)
{
    switch (t) {
    case CUDA_R_8I: case CUDA_R_8U: case CUDA_R_8F_E4M3: case CUDA_R_8F_E5M2:
        return 1;
    case CUDA_R_16F: case CUDA_R_16BF: case CUDA_C_8I:
        return 2;
    case CUDA_R_32F: case CUDA_R_32I: case CUDA_C_16F:
        return 4;
    case CUDA_R_64F: case CUDA_C_32F:
        return 8;
    case CUDA_C_64F:
        return 16;
    default:
        return 0;
    }
}

size_t rgpu_blas_scalar_size(int c)
{
    switch (c) {
    case CUBLAS_COMPUTE_16F: case CUBLAS_COMPUTE_16F_PEDANTIC:
        return 2;
    case CUBLAS_COMPUTE_64F: case CUBLAS_COMPUTE_64F_PEDANTIC:
        return 8;
    default: /* 32F and its fast variants, 32I */
        return 4;
    }
}

const char *rgpu_blas_status_name(int s)
{
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
    default: return "CUBLAS_STATUS_UNKNOWN";
    }
}
