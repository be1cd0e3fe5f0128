/* Errors: the thread's last error, names and descriptions, and the driver-to-runtime mapping. */
#include <stdarg.h>

#include "rt.h"
#include "standin.h"

struct rt_error_name {
    int code;
    const char *name;
};
extern const struct rt_error_name rt_error_names[]; /* native/gen/cudart_errors<major>.c, sorted by code */
extern const size_t rt_error_count;

static __thread cudaError_t last_error = cudaSuccess;

static const struct rt_error_name *find(int code)
{
    size_t lo = 0, hi = rt_error_count;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (rt_error_names[mid].code == code)
            return &rt_error_names[mid];
        if (rt_error_names[mid].code < code)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

/* The runtime's error codes took the driver's numbers where both name the same failure, so a known code
 * maps to itself; anything else is cudaErrorUnknown. */
cudaError_t rt_map(CUresult r)
{
    if (r == CUDA_SUCCESS)
        return cudaSuccess;
    return find((int)r) ? (cudaError_t)r : cudaErrorUnknown;
}

cudaError_t rt_record(cudaError_t e)
{
    if (e != cudaSuccess && e != cudaErrorNotReady)
        last_error = e;
    return e;
}

cudaError_t rt_fail(CUresult r) { return rt_record(rt_map(r)); }

void rt_log(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    rgpu_standin_vlog("cudart", RGPU_STANDIN_WARN, fmt, ap);
    va_end(ap);
}

void rt_info(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    rgpu_standin_vlog("cudart", RGPU_STANDIN_INFO, fmt, ap);
    va_end(ap);
}

cudaError_t rt_unsupported(int *logged, const char *name)
{
    rgpu_standin_unsupported(logged, "cudart", name, cudaErrorNotSupported, "cudaErrorNotSupported");
    return rt_record(cudaErrorNotSupported);
}

RT_API cudaError_t cudaGetLastError(void)
{
    cudaError_t e = last_error;
    last_error = cudaSuccess;
    return e;
}

RT_API cudaError_t cudaPeekAtLastError(void) { return last_error; }

RT_API const char *cudaGetErrorName(cudaError_t e)
{
    const struct rt_error_name *n = find((int)e);
    return n ? n->name : "cudaErrorUnknown";
}

/* The descriptions programs print most; the rest fall back to the error's name. */
static const struct rt_error_name descriptions[] = {
    {cudaSuccess, "no error"},
    {cudaErrorInvalidValue, "invalid argument"},
    {cudaErrorMemoryAllocation, "out of memory"},
    {cudaErrorInitializationError, "initialization error"},
    {cudaErrorCudartUnloading, "driver shutting down"},
    {cudaErrorInvalidConfiguration, "invalid configuration argument"},
    {cudaErrorInvalidPitchValue, "invalid pitch argument"},
    {cudaErrorInvalidSymbol, "invalid device symbol"},
    {cudaErrorInvalidMemcpyDirection, "invalid copy direction for memcpy"},
    {cudaErrorInsufficientDriver, "CUDA driver version is insufficient for CUDA runtime version"},
    {cudaErrorNoDevice, "no CUDA-capable device is detected"},
    {cudaErrorInvalidDevice, "invalid device ordinal"},
    {cudaErrorInvalidKernelImage, "device kernel image is invalid"},
    {cudaErrorNoKernelImageForDevice, "no kernel image is available for execution on the device"},
    {cudaErrorUnsupportedPtxVersion, "the provided PTX was compiled with an unsupported toolchain."},
    {cudaErrorInvalidResourceHandle, "invalid resource handle"},
    {cudaErrorSymbolNotFound, "named symbol not found"},
    {cudaErrorNotReady, "device not ready"},
    {cudaErrorIllegalAddress, "an illegal memory access was encountered"},
    {cudaErrorLaunchOutOfResources, "too many resources requested for launch"},
    {cudaErrorLaunchFailure, "unspecified launch failure"},
    {cudaErrorInvalidDeviceFunction, "invalid device function"},
    {cudaErrorNotSupported, "operation not supported"},
    {cudaErrorNotPermitted, "operation not permitted"},
    {cudaErrorUnknown, "unknown error"},
};

RT_API const char *cudaGetErrorString(cudaError_t e)
{
    for (size_t i = 0; i < sizeof descriptions / sizeof *descriptions; i++)
        if (descriptions[i].code == (int)e)
            return descriptions[i].name;
    const struct rt_error_name *n = find((int)e);
    return n ? n->name : "unrecognized error code";
}
