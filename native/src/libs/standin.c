/* Logging shared by the library stand-ins (libcublas, libcublasLt, libcudnn), compiled into each. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "standin.h"

void rgpu_standin_vlog(const char *lib, int debug, const char *fmt, va_list ap)
{
    const char *level = getenv("RGPU_LOG");
    if (level && (!strcmp(level, "error") || !strcmp(level, "off")))
        return;
    if (debug && !(level && !strcmp(level, "debug")))
        return;
    fprintf(stderr, "rgpu %s: %s", lib, debug ? "debug: " : "");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
}

int rgpu_standin_unsupported(int *logged, const char *lib, const char *name, int status, const char *status_name)
{
    const char *level = getenv("RGPU_LOG");
    int quiet = level && (!strcmp(level, "error") || !strcmp(level, "off"));
    if (!__atomic_exchange_n(logged, 1, __ATOMIC_RELAXED) && !quiet)
        fprintf(stderr, "rgpu %s: %s is not supported by rgpu (returns %s)\n", lib, name, status_name);
    return status;
}
