/* What the lane's own files share beyond lane.h (not exported: the library's version script exports rgpu_lane_*
 * only, and cffi never sees this header). */
#ifndef RGPU_LANE_PRIVATE_H
#define RGPU_LANE_PRIVATE_H
#include <time.h>

#include "lane.h"

static inline unsigned long long lane_now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (unsigned long long)t.tv_sec * 1000000000ull + (unsigned long long)t.tv_nsec;
}

/* One call of `opcode` served outside rgpu_lane_run (serve.c's NOPs), in the counts rgpu_lane_take_counts gives. */
void lane_count_call(rgpu_lane *lane, unsigned opcode, unsigned long long ns);

#endif
