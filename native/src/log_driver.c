/* libcuda's side of the logger (rgpu_log.h): its library name, and the one-time "not supported" lines. */
#include <stdarg.h>

#include "rgpu_shim.h"

void rgpu_log(int level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    rgpu_vlog_from("libcuda", level, fmt, ap);
    va_end(ap);
}

CUresult rgpu_unsupported(int *logged, const char *name)
{
    /* A benign race on *logged can log twice; never more than once per thread. */
    if (!__atomic_exchange_n(logged, 1, __ATOMIC_RELAXED))
        rgpu_log(RGPU_LOG_WARN, "%s is not supported by rgpu (returning CUDA_ERROR_NOT_SUPPORTED)", name);
    return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult rgpu_need_protocol(uint16_t minor, int *logged, const char *what)
{
    if (rgpu_server_minor() >= minor)
        return CUDA_SUCCESS;
    if (!__atomic_exchange_n(logged, 1, __ATOMIC_RELAXED))
        rgpu_log(RGPU_LOG_WARN, "%s needs a server of protocol 1.%u or later; this one speaks 1.%u "
                 "(returning CUDA_ERROR_NOT_SUPPORTED)", what, minor, rgpu_server_minor());
    return CUDA_ERROR_NOT_SUPPORTED;
}
