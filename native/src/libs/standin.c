/* The stand-ins built beside libcuda (libcudart, libcublas, libcublasLt, libcudnn) log through rgpu_log.h, as
 * libcuda does; this adds their one-time "not supported" line. */
#include <stdarg.h>

#include "standin.h"

void rgpu_standin_vlog(const char *lib, int level, const char *fmt, va_list ap)
{
    rgpu_vlog_from(lib, level, fmt, ap);
}

static void standin_log(const char *lib, int level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    rgpu_vlog_from(lib, level, fmt, ap);
    va_end(ap);
}

int rgpu_standin_unsupported(int *logged, const char *lib, const char *name, int status, const char *status_name)
{
    if (!__atomic_exchange_n(logged, 1, __ATOMIC_RELAXED))
        standin_log(lib, RGPU_LOG_WARN, "%s is not supported by rgpu (returns %s)", name, status_name);
    return status;
}
