/* The lane's side of the logger (rgpu_log.h): its lines go to the worker's stderr under the name "lane". */
#include <stdarg.h>

#include "rgpu_log.h"

void rgpu_log(int level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    rgpu_vlog_from("lane", level, fmt, ap);
    va_end(ap);
}
