/* Statuses, versions and logging of the cuFFT stand-in. */
#include <stdarg.h>

#include "fft.h"

void rgpu_fft_log(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    rgpu_standin_vlog("cufft", RGPU_STANDIN_WARN, fmt, ap);
    va_end(ap);
}

int rgpu_fft_unsupported(int *logged, const char *name)
{
    return rgpu_standin_unsupported(logged, "cufft", name, CUFFT_NOT_SUPPORTED, "CUFFT_NOT_SUPPORTED");
}

int rgpu_fft_status(int r)
{
    switch (r) {
    case 0:
        return CUFFT_SUCCESS;
    case 1: /* CUDA_ERROR_INVALID_VALUE */
        return CUFFT_INVALID_VALUE;
    case 2: /* CUDA_ERROR_OUT_OF_MEMORY */
        return CUFFT_ALLOC_FAILED;
    case 3: /* CUDA_ERROR_NOT_INITIALIZED */
    case 100: /* CUDA_ERROR_NO_DEVICE */
        return CUFFT_SETUP_FAILED;
    case 400: /* CUDA_ERROR_INVALID_HANDLE: not a plan of this session */
        return CUFFT_INVALID_PLAN;
    case 801: /* CUDA_ERROR_NOT_SUPPORTED */
        return CUFFT_NOT_SUPPORTED;
    default:
        return CUFFT_INTERNAL_ERROR;
    }
}

FFT_API int cufftGetVersion(int *version)
{
    if (!version)
        return CUFFT_INVALID_VALUE;
    *version = RGPU_FFT_MAJOR * 1000 + RGPU_FFT_MINOR * 100 + RGPU_FFT_PATCH;
    return CUFFT_SUCCESS;
}

FFT_API int cufftGetProperty(int type, int *value)
{
    int parts[] = {RGPU_FFT_MAJOR, RGPU_FFT_MINOR, RGPU_FFT_PATCH}; /* libraryPropertyType */
    if (!value)
        return CUFFT_INVALID_VALUE;
    if (type < 0 || type > 2)
        return CUFFT_INVALID_TYPE;
    *value = parts[type];
    return CUFFT_SUCCESS;
}

/* Exported by NVIDIA's libcufft but declared in no header: stubs, so that a binary bound to them still loads. */
FFT_API int cufftDebug()
{
    static int logged;
    return rgpu_fft_unsupported(&logged, "cufftDebug");
}

FFT_API int cufftXtMakePlanGuru64()
{
    static int logged;
    return rgpu_fft_unsupported(&logged, "cufftXtMakePlanGuru64");
}
