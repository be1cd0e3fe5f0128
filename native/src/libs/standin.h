/* Shared by the stand-ins built beside libcuda: their logging (RGPU_LOG=error|warn|info|debug) and the one-time
 * "not supported" line. */
#ifndef RGPU_STANDIN_H
#define RGPU_STANDIN_H

#include <stdarg.h>


enum { RGPU_STANDIN_WARN = 0, RGPU_STANDIN_INFO = 1, RGPU_STANDIN_DEBUG = 2 };
void rgpu_standin_vlog(const char *lib, int verbosity, const char *fmt, va_list ap);
int rgpu_standin_unsupported(int *logged, const char *lib, const char *name, int status, const char *status_name);

#endif
