/* The check a kernel-parameter layout from the server must pass before a launch uses it (no cuda.h, so the
 * reply fuzzer in native/tests can call it too). */
#ifndef RGPU_LAYOUT_H
#define RGPU_LAYOUT_H

#include <stdint.h>

#include "rgpu_consts.h"
#include "rgpu_ops.h"

/* A layout a driver could have reported: parameters in order, not overlapping, ending within the driver's
 * limit. Whatever the server says, a launch then never writes past its parameter buffer, and never reads more
 * than the limit from the caller's arguments. Returns the buffer size, or -1. */
static inline long rgpu_layout_bytes(const struct rgpu_module_get_function_item *items, uint32_t count)
{
    uint64_t end = 0;
    for (uint32_t i = 0; i < count; i++) {
        if (items[i].offset < end)
            return -1;
        end = (uint64_t)items[i].offset + items[i].size;
        if (end > RGPU_MAX_PARAM_BYTES)
            return -1;
    }
    return (long)end;
}

#endif
