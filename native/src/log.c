/* Logging to stderr, level from RGPU_LOG (error, warn, info, debug; default warn). */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rgpu_shim.h"

static int log_level(void)
{
    static int level = -1;
    if (level < 0) {
        const char *env = getenv("RGPU_LOG");
        level = RGPU_LOG_WARN;
        if (env) {
            if (!strcmp(env, "error")) level = RGPU_LOG_ERROR;
            else if (!strcmp(env, "info")) level = RGPU_LOG_INFO;
            else if (!strcmp(env, "debug")) level = RGPU_LOG_DEBUG;
        }
    }
    return level;
}

void rgpu_log(int level, const char *fmt, ...)
{
    static const char *names[] = {"error", "warning", "info", "debug"};
    if (level > log_level())
        return;
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "rgpu libcuda: %s: %s\n", names[level], line);
}

CUresult rgpu_unsupported(int *logged, const char *name)
{
    /* A benign race on *logged can log twice; never more than once per thread. */
    if (!__atomic_exchange_n(logged, 1, __ATOMIC_RELAXED))
        rgpu_log(RGPU_LOG_WARN, "%s is not supported by rgpu (returning CUDA_ERROR_NOT_SUPPORTED)", name);
    return CUDA_ERROR_NOT_SUPPORTED;
}
