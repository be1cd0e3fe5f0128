/* Kernels given page-locked host memory (zero-copy). Under unified addressing a kernel may read and write
 * page-locked host memory through its host address: XLA's autotuner counts redzone mismatches into 8 pinned
 * bytes, its timer spins on a pinned semaphore. The GPU cannot reach this machine's memory, so such an
 * allocation gets a shadow in device memory: uploaded (on the launch's stream) before the first launch that
 * names it, the launch's pointer moved into the shadow, and copied back into the program's memory after the
 * next synchronization that waits for the GPU, or before rgpu itself reads or writes that memory.
 *
 * Exact for memory the GPU writes and the host reads after synchronizing, which is how it is used. Not exact:
 * host writes made while the GPU holds the shadow (the GPU does not see them, and they are overwritten when the
 * shadow comes back) -- a kernel spinning on a flag the host sets runs into its own timeout instead -- and
 * pointers inside structures or in graph kernel nodes, which are not looked for. Allocations above
 * SHADOW_MAX_BYTES get no shadow: the launch goes as it is, with a warning (launch.c). */
#include <pthread.h>
#include <string.h>

#include "rgpu_shim.h"

#define SHADOW_SLOTS 64
#define SHADOW_MAX_BYTES (1u << 20)

struct shadow {
    uint64_t host, size; /* the page-locked allocation */
    CUdeviceptr dev;     /* its copy in device memory, 0: slot free */
    int held;            /* the device copy is the current one */
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
RGPU_FORK_RESET(lock, &lock)
static struct shadow shadows[SHADOW_SLOTS];
static int held_count; /* read without the lock as a hint; changed under it */

static struct shadow *find(uint64_t host) /* under lock */
{
    for (int i = 0; i < SHADOW_SLOTS; i++)
        if (shadows[i].dev && shadows[i].host == host)
            return &shadows[i];
    return NULL;
}

/* The slot of `host`'s shadow, made (device memory allocated) if there is none; NULL if none can be. The lock
 * is never held across a call to the server (their copies ask rgpu_shadow_settle, which takes it). */
static struct shadow *shadow_of(uint64_t host, uint64_t size)
{
    pthread_mutex_lock(&lock);
    struct shadow *s = find(host);
    pthread_mutex_unlock(&lock);
    if (s)
        return s;
    CUdeviceptr dev = 0;
    if (cuMemAlloc_v2(&dev, size) != CUDA_SUCCESS)
        return NULL;
    pthread_mutex_lock(&lock);
    if (!(s = find(host)))
        for (int i = 0; i < SHADOW_SLOTS && !s; i++)
            if (!shadows[i].dev) {
                s = &shadows[i];
                *s = (struct shadow){host, size, dev, 0};
                dev = 0;
            }
    pthread_mutex_unlock(&lock);
    if (dev) /* another thread made it first, or no slot is free */
        cuMemFree_v2(dev);
    else
        rgpu_log(RGPU_LOG_INFO, "page-locked memory 0x%llx (%llu bytes) given to a kernel: shadowed in device "
                                "memory", (unsigned long long)host, (unsigned long long)size);
    return s;
}

int rgpu_shadow_param(uint64_t *ptr, CUstream stream)
{
    uint64_t start, size;
    if (rgpu_host_range(*ptr, &start, &size) || size > SHADOW_MAX_BYTES)
        return -1;
    struct shadow *s = shadow_of(start, size);
    if (!s)
        return -1;
    pthread_mutex_lock(&lock);
    int held = s->held;
    CUdeviceptr dev = s->dev;
    pthread_mutex_unlock(&lock);
    if (!held) {
        if (cuMemcpyHtoDAsync_v2(dev, (const void *)(uintptr_t)start, size, stream) != CUDA_SUCCESS)
            return -1;
        pthread_mutex_lock(&lock);
        if (s->dev == dev && !s->held) {
            s->held = 1;
            held_count++;
        }
        pthread_mutex_unlock(&lock);
    }
    *ptr = dev + (*ptr - start);
    return 0;
}

int rgpu_shadows_held(void) { return __atomic_load_n(&held_count, __ATOMIC_RELAXED) != 0; }

void rgpu_shadows_pull(void)
{
    struct shadow back[SHADOW_SLOTS];
    int n = 0;
    if (!rgpu_shadows_held())
        return;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < SHADOW_SLOTS; i++)
        if (shadows[i].dev && shadows[i].held) {
            shadows[i].held = 0;
            back[n++] = shadows[i];
        }
    held_count = 0;
    pthread_mutex_unlock(&lock);
    for (int i = 0; i < n; i++)
        if (cuMemcpyDtoH_v2((void *)(uintptr_t)back[i].host, back[i].dev, back[i].size) != CUDA_SUCCESS)
            rgpu_log(RGPU_LOG_WARN, "page-locked memory 0x%llx: its device shadow could not be copied back",
                     (unsigned long long)back[i].host);
}

void rgpu_shadow_settle(uint64_t ptr, uint64_t n)
{
    if (!rgpu_shadows_held())
        return;
    int overlaps = 0;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < SHADOW_SLOTS && !overlaps; i++)
        overlaps = shadows[i].dev && shadows[i].held && ptr < shadows[i].host + shadows[i].size &&
                   shadows[i].host < ptr + n;
    pthread_mutex_unlock(&lock);
    if (overlaps && cuCtxSynchronize() == CUDA_SUCCESS) /* the GPU may still write it; then it comes back */
        rgpu_shadows_pull();
}

void rgpu_shadow_forget(uint64_t host)
{
    pthread_mutex_lock(&lock);
    struct shadow *s = find(host);
    struct shadow gone = s ? *s : (struct shadow){0};
    if (s) {
        held_count -= s->held;
        *s = (struct shadow){0};
    }
    pthread_mutex_unlock(&lock);
    if (gone.dev)
        cuMemFree_v2(gone.dev);
}
