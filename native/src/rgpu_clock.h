/* The monotonic clock in nanoseconds, for poll deadlines and timings: one definition for the stand-ins, the lane
 * and the AEAD pipe (which is built into both). */
#ifndef RGPU_CLOCK_H
#define RGPU_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline uint64_t rgpu_now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

#endif
