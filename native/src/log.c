/* RGPU_LOG, read once: one parser and one line format for every stand-in (see rgpu_log.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rgpu_log.h"

static int threshold(void)
{
    static int level = -2; /* -2: not read yet; -1: off */
    int v = __atomic_load_n(&level, __ATOMIC_RELAXED);
    if (v == -2) {
        const char *env = getenv("RGPU_LOG");
        v = RGPU_LOG_WARN;
        if (env && !strcmp(env, "off"))
            v = -1;
        else if (env && !strcmp(env, "error"))
            v = RGPU_LOG_ERROR;
        else if (env && !strcmp(env, "info"))
            v = RGPU_LOG_INFO;
        else if (env && !strcmp(env, "debug"))
            v = RGPU_LOG_DEBUG;
        __atomic_store_n(&level, v, __ATOMIC_RELAXED);
    }
    return v;
}

int rgpu_log_shown(int level) { return level <= threshold(); }

void rgpu_vlog_from(const char *lib, int level, const char *fmt, va_list ap)
{
    static const char *names[] = {"error", "warning", "info", "debug"};
    if (!rgpu_log_shown(level))
        return;
    char line[1024]; /* one write per line, so lines from several threads do not interleave */
    vsnprintf(line, sizeof line, fmt, ap);
    fprintf(stderr, "rgpu %s: %s: %s\n", lib, names[level], line);
}
