/* Shared by the stand-ins built beside libcuda: their logging (rgpu_log.h, the same as libcuda's) and the
 * one-time "not supported" line. */
#ifndef RGPU_STANDIN_H
#define RGPU_STANDIN_H

#include <stdarg.h>

#include "rgpu_log.h"

enum { RGPU_STANDIN_WARN = RGPU_LOG_WARN, RGPU_STANDIN_INFO = RGPU_LOG_INFO, RGPU_STANDIN_DEBUG = RGPU_LOG_DEBUG };
void rgpu_standin_vlog(const char *lib, int level, const char *fmt, va_list ap);
int rgpu_standin_unsupported(int *logged, const char *lib, const char *name, int status, const char *status_name);

#endif
