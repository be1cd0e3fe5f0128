/* The one logger of every rgpu stand-in (libcuda, libcudart, libcublas, libcublasLt, libcudnn): lines to stderr,
 * "rgpu <library>: <level>: <message>", shown per RGPU_LOG = off|error|warn|info|debug (default warn). Compiled
 * into each library (log.c); no CUDA types, so the runtime can carry it onto NVIDIA's driver too. */
#ifndef RGPU_LOG_H
#define RGPU_LOG_H

#include <stdarg.h>

enum { RGPU_LOG_ERROR = 0, RGPU_LOG_WARN = 1, RGPU_LOG_INFO = 2, RGPU_LOG_DEBUG = 3 };

int rgpu_log_shown(int level); /* whether RGPU_LOG asks for lines of this level */
/* A line under the library's own name: each library defines it (libcuda: log_driver.c; the lane: lane/log.c). */
void rgpu_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void rgpu_vlog_from(const char *lib, int level, const char *fmt, va_list ap);

#endif
