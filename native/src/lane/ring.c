/* The copy ring's one copy (lane.h): the slot is reused only once the GPU has read it. */
#include <string.h>

#include "lane.h"

int rgpu_lane_ring_copy(const rgpu_lane_driver *d, rgpu_lane_ring *r, unsigned long long dst, const void *src,
                        size_t n, uintptr_t stream, const char **what)
{
    int i = r->next, code;
    if (n > r->slot_bytes || r->slots <= 0 || r->slots > 64) {
        *what = "copy ring (slot size)";
        return 1; /* CUDA_ERROR_INVALID_VALUE: a caller's mistake, never the program's */
    }
    r->next = (i + 1) % r->slots;
    if (r->pending[i]) {
        if ((code = d->event_synchronize(r->events[i]))) {
            *what = "cuEventSynchronize (copy ring)";
            return code;
        }
        r->pending[i] = 0;
    }
    char *slot = r->base + (size_t)i * r->slot_bytes;
    memcpy(slot, src, n);
    if ((code = d->memcpy_htod_async(dst, slot, n, stream))) {
        *what = "cuMemcpyHtoDAsync";
        return code;
    }
    if ((code = d->event_record(r->events[i], stream))) {
        /* Without its event the slot's reuse cannot be timed: wait for the copy here instead. */
        d->stream_synchronize(stream);
        *what = "cuEventRecord (copy ring)";
        return code;
    }
    r->pending[i] = 1;
    return 0;
}
