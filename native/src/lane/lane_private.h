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

/* One call of `opcode` served outside rgpu_lane_run (serve.c's), in the counts rgpu_lane_take_counts gives. */
void lane_count_call(rgpu_lane *lane, unsigned opcode, unsigned long long ns);

/* The most a device-to-host copy the lane serves may read. */
#define LANE_REPLY_BULK (64u << 10)

/* A blocking call serve.c may run (NOP; STREAM_SYNCHRONIZE and MEMCPY_DTOH_ASYNC while no capture may be under
 * way); its reply's bulk lands in lane_reply(lane) after room for a prefix and header, *bulk_len bytes. -1:
 * Python's (nothing was done); else the CUresult (a failure names its call in *what). */
int lane_blocking_call(rgpu_lane *lane, unsigned opcode, const uint8_t *args, size_t args_len, uint64_t current_ctx,
                       int capture_possible, size_t *bulk_len, const char **what);
uint8_t *lane_reply(rgpu_lane *lane); /* RGPU_PREFIX_SIZE + RGPU_HEADER_SIZE + LANE_REPLY_BULK bytes */

#endif
