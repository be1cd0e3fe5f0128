/* Logging shared by the stand-ins built beside libcuda (libcudart, libcublas, libcublasLt, libcudnn), compiled
 * into each. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "standin.h"

/* The most verbose level RGPU_LOG asks for (-1: nothing); warnings by default. */
static int shown(void)
{
    const char *level = getenv("RGPU_LOG");
    if (!level)
        return RGPU_STANDIN_WARN;
    if (!strcmp(level, "error") || !strcmp(level, "off"))
        return -1;
    return !strcmp(level, "debug") ? RGPU_STANDIN_DEBUG : !strcmp(level, "info") ? RGPU_STANDIN_INFO : RGPU_STANDIN_WARN;
}

void rgpu_standin_vlog(const char *lib, int verbosity, const char *fmt, va_list ap)
{
    if (verbosity > shown())
        return;
    fprintf(stderr, "rgpu %s: %s", lib, verbosity == RGPU_STANDIN_DEBUG ? "debug: " : "");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
}

int rgpu_standin_unsupported(int *logged, const char *lib, const char *name, int status, const char *status_name)
{
    if (!__atomic_exchange_n(logged, 1, __ATOMIC_RELAXED) && shown() >= RGPU_STANDIN_WARN)
        fprintf(stderr, "rgpu %s: %s is not supported by rgpu (returns %s)\n", lib, name, status_name);
    return status;
}

