/* The copy ring (lane.h): a slot is reused only once the GPU has read it. pending[i] is 0 while slot i is free,
 * else 1 + the slot whose event says when the GPU is done with it: one copy over several slots records one
 * event, its last slot's (lane_ring_mark_range). */
#include <string.h>

#include "lane.h"
#include "lane_private.h"

int lane_ring_wait(const rgpu_lane_driver *d, rgpu_lane_ring *r, int i, const char **what)
{
    int code, by = r->pending[i];
    if (!by)
        return 0;
    if ((code = d->event_synchronize(r->events[by - 1]))) {
        *what = "cuEventSynchronize (copy ring)";
        return code;
    }
    /* Every slot of that copy is free; none may keep pointing at the event, which the next use of its own slot
     * records again, maybe on another stream. */
    for (int k = 0; k < r->slots && k < 64; k++)
        if (r->pending[k] == by)
            r->pending[k] = 0;
    return 0;
}

int lane_ring_mark_range(const rgpu_lane_driver *d, rgpu_lane_ring *r, int first, int count, uintptr_t stream,
                         const char **what)
{
    int code, last = first + count - 1;
    if ((code = d->event_record(r->events[last], stream))) {
        /* Without its event the slots' reuse cannot be timed: wait for the copy here instead. */
        d->stream_synchronize(stream);
        *what = "cuEventRecord (copy ring)";
        return code;
    }
    for (int k = first; k <= last; k++)
        r->pending[k] = (unsigned char)(last + 1);
    return 0;
}

int lane_ring_mark(const rgpu_lane_driver *d, rgpu_lane_ring *r, int i, uintptr_t stream, const char **what)
{
    return lane_ring_mark_range(d, r, i, 1, stream, what);
}

char *lane_ring_slot(const rgpu_lane_driver *d, rgpu_lane_ring *r, const char **what, int *code)
{
    int first; /* (one slot never wraps: it is the ring's next) */
    return lane_ring_slots(d, r, 1, &first, what, code);
}

char *lane_ring_slots(const rgpu_lane_driver *d, rgpu_lane_ring *r, size_t n, int *first, const char **what,
                      int *code)
{
    if (r->slots <= 0 || r->slots > 64 || !r->slot_bytes) {
        *what = "copy ring (slot count)";
        *code = 1; /* CUDA_ERROR_INVALID_VALUE: a caller's mistake, never the program's */
        return NULL;
    }
    size_t count = n > r->slot_bytes ? (n + r->slot_bytes - 1) / r->slot_bytes : 1;
    if (count > 1 && count > (size_t)r->slots / 2) {
        *what = "copy ring (slots for one copy)";
        *code = 1;
        return NULL;
    }
    if ((size_t)r->next + count > (size_t)r->slots)
        r->next = 0;
    for (size_t i = 0; i < count; i++)
        if ((*code = lane_ring_wait(d, r, r->next + (int)i, what)))
            return NULL;
    *first = r->next;
    return r->base + (size_t)r->next * r->slot_bytes;
}

/* The slots from `first` that n bytes take, if lane_ring_slots could have given them; the ring moves on past them. */
static int claim(rgpu_lane_ring *r, int first, size_t n, const char **what)
{
    int count = n > r->slot_bytes ? (int)((n + r->slot_bytes - 1) / r->slot_bytes) : 1;
    if (first < 0 || r->slots <= 0 || r->slots > 64 || count > r->slots - first) {
        *what = "copy ring (slots past its end)"; /* (a caller's mistake: lane_ring_slots gives what fits) */
        return -1;
    }
    r->next = (first + count) % r->slots;
    return count;
}

int lane_ring_send_slots(const rgpu_lane_driver *d, rgpu_lane_ring *r, int first, unsigned long long dst, size_t n,
                         uintptr_t stream, const char **what)
{
    int code, count = claim(r, first, n, what);
    if (count < 0)
        return 1; /* CUDA_ERROR_INVALID_VALUE */
    if ((code = d->memcpy_htod_async(dst, r->base + (size_t)first * r->slot_bytes, n, stream))) {
        *what = "cuMemcpyHtoDAsync";
        return code;
    }
    return lane_ring_mark_range(d, r, first, count, stream, what);
}

int lane_ring_fill_slots(const rgpu_lane_driver *d, rgpu_lane_ring *r, int first, size_t n, size_t entries,
                         unsigned long long dst, uintptr_t stream, const char **what)
{
    if (!r->runs_fill || !entries || entries > 0x7fffffffu) {
        *what = "copy ring (no fill kernel, or a plan of no entries)"; /* (a caller's mistake) */
        return 1;
    }
    int code, count = claim(r, first, n, what);
    if (count < 0)
        return 1;
    unsigned long long plan = (unsigned long long)(uintptr_t)(r->base + (size_t)first * r->slot_bytes), to = dst;
    void *params[2] = {&plan, &to};
    if ((code = d->launch_kernel(r->runs_fill, (unsigned)entries, 1, 1, RGPU_LANE_FILL_THREADS, 1, 1, 0, stream,
                                 params, NULL))) {
        *what = "cuLaunchKernel (rgpu_runs_fill)";
        return code;
    }
    return lane_ring_mark_range(d, r, first, count, stream, what);
}

int lane_ring_send(const rgpu_lane_driver *d, rgpu_lane_ring *r, unsigned long long dst, size_t n,
                   uintptr_t stream, const char **what)
{
    return lane_ring_send_slots(d, r, r->next, dst, n, stream, what);
}

int rgpu_lane_ring_copy(const rgpu_lane_driver *d, rgpu_lane_ring *r, unsigned long long dst, const void *src,
                        size_t n, uintptr_t stream, const char **what)
{
    int code;
    if (n > r->slot_bytes) {
        *what = "copy ring (slot size)";
        return 1;
    }
    char *slot = lane_ring_slot(d, r, what, &code);
    if (!slot)
        return code;
    memcpy(slot, src, n);
    return lane_ring_send(d, r, dst, n, stream, what);
}
