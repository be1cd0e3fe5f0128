/* Memory: what the shim knows locally about device and host ranges, and every copy and memset.
 *
 * The shim records the device ranges it was given (allocations and module globals). That answers pointer
 * queries without a round trip, tells device from host pointers for unified copies, and lets a synchronous
 * host->device copy into a known range be deferred: CUDA returns from such a copy once the source is staged,
 * and the shim has staged it once the bytes are queued, so the program cannot tell -- except in speed.
 * "Pinned" host memory is ordinary memory here: there is no DMA engine on this side of the wire. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rgpu_shim.h"

#define API __attribute__((visibility("default")))

/* -- range sets: sorted by start, binary-searched ------------------------------------------------------- */
struct range {
    uint64_t start, size, ctx;
    unsigned flags;
};
struct range_set {
    pthread_mutex_t lock;
    struct range *v;
    size_t n, cap;
};

static struct range_set device_ranges = {PTHREAD_MUTEX_INITIALIZER, NULL, 0, 0};
static struct range_set host_ranges = {PTHREAD_MUTEX_INITIALIZER, NULL, 0, 0};
RGPU_FORK_RESET(device_ranges, &device_ranges.lock)
RGPU_FORK_RESET(host_ranges, &host_ranges.lock)

/* Index of the last range starting at or below ptr, or -1. Caller holds the lock. */
static long below(const struct range_set *set, uint64_t ptr)
{
    long lo = 0, hi = (long)set->n - 1, found = -1;
    while (lo <= hi) {
        long mid = (lo + hi) / 2;
        if (set->v[mid].start <= ptr) {
            found = mid;
            lo = mid + 1;
        } else {
            hi = mid - 1;
        }
    }
    return found;
}

static int set_add(struct range_set *set, uint64_t start, uint64_t size, uint64_t ctx, unsigned flags)
{
    int rc = 0;
    pthread_mutex_lock(&set->lock);
    long i = below(set, start);
    if (i >= 0 && set->v[i].start == start) {
        set->v[i] = (struct range){start, size, ctx, flags}; /* a module global looked up again */
    } else if (set->n == set->cap && !(set->v = realloc(set->v, (set->cap = set->cap ? 2 * set->cap : 64) * sizeof *set->v))) {
        set->n = set->cap = 0;
        rc = -1;
    } else {
        memmove(set->v + i + 2, set->v + i + 1, (set->n - (size_t)(i + 1)) * sizeof *set->v);
        set->v[i + 1] = (struct range){start, size, ctx, flags};
        set->n++;
    }
    pthread_mutex_unlock(&set->lock);
    return rc;
}

static int set_remove(struct range_set *set, uint64_t start, struct range *out)
{
    int rc = -1;
    pthread_mutex_lock(&set->lock);
    long i = below(set, start);
    if (i >= 0 && set->v[i].start == start) {
        if (out)
            *out = set->v[i];
        memmove(set->v + i, set->v + i + 1, (set->n - (size_t)i - 1) * sizeof *set->v);
        set->n--;
        rc = 0;
    }
    pthread_mutex_unlock(&set->lock);
    return rc;
}

/* The range holding [ptr, ptr+n): 0 and *out filled, or -1. */
static int set_find(struct range_set *set, uint64_t ptr, uint64_t n, struct range *out)
{
    int rc = -1;
    pthread_mutex_lock(&set->lock);
    long i = below(set, ptr);
    if (i >= 0 && ptr + n <= set->v[i].start + set->v[i].size && ptr + n >= ptr) {
        if (out)
            *out = set->v[i];
        rc = 0;
    }
    pthread_mutex_unlock(&set->lock);
    return rc;
}

void rgpu_ranges_note_device(uint64_t start, uint64_t size, uint64_t ctx) { set_add(&device_ranges, start, size, ctx, 0); }

void rgpu_ranges_drop_ctx(uint64_t ctx)
{
    rgpu_managed_drop_ctx(ctx);
    pthread_mutex_lock(&device_ranges.lock);
    size_t k = 0;
    for (size_t i = 0; i < device_ranges.n; i++)
        if (device_ranges.v[i].ctx != ctx)
            device_ranges.v[k++] = device_ranges.v[i];
    device_ranges.n = k;
    pthread_mutex_unlock(&device_ranges.lock);
}

void rgpu_ranges_drop_device_within(uint64_t start, uint64_t size)
{
    pthread_mutex_lock(&device_ranges.lock);
    size_t k = 0;
    for (size_t i = 0; i < device_ranges.n; i++)
        if (device_ranges.v[i].start < start || device_ranges.v[i].start - start >= size)
            device_ranges.v[k++] = device_ranges.v[i];
    device_ranges.n = k;
    pthread_mutex_unlock(&device_ranges.lock);
}

int rgpu_is_device_range(uint64_t ptr, uint64_t n) { return set_find(&device_ranges, ptr, n ? n : 1, NULL) == 0; }
/* For the library stand-ins: is ptr in memory the server gave (else it is this process's own). */
__attribute__((visibility("default"))) int rgpu_ext_is_device(uint64_t ptr) { return rgpu_is_device_range(ptr, 1); }

static int overlaps_device_range(uint64_t start, uint64_t size)
{
    pthread_mutex_lock(&device_ranges.lock);
    long i = below(&device_ranges, start + (size ? size - 1 : 0));
    int hit = i >= 0 && device_ranges.v[i].start + device_ranges.v[i].size > start;
    pthread_mutex_unlock(&device_ranges.lock);
    return hit;
}

int rgpu_ranges_ctx(uint64_t ptr, uint64_t *ctx)
{
    struct range rg;
    if (set_find(&device_ranges, ptr, 1, &rg))
        return -1;
    *ctx = rg.ctx;
    return 0;
}

/* -- allocation --------------------------------------------------------------------------------------------- */
/* Device addresses name their server on this side: a block that another server's memory already spans cannot
 * be told apart. Such a block is kept while the server is asked again (so it hands out another address), up to
 * this many times, then given back. */
#define ALLOC_ATTEMPTS 32

static void free_on(int server, uint64_t ptr)
{
    uint8_t a[RGPU_MEM_FREE_REQ_SIZE];
    rgpu_pack_mem_free(a, &(struct rgpu_mem_free_req){.dptr = ptr});
    int prev = rgpu_route_push(server); /* (routing by address would pick the other server) */
    rgpu_call(RGPU_OP_MEM_FREE, a, sizeof a, NULL, 0, NULL, 0, NULL);
    rgpu_route_pop(prev);
}

API CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytes)
{
    uint8_t a[RGPU_MEM_ALLOC_REQ_SIZE], rep[RGPU_MEM_ALLOC_REP_SIZE];
    struct rgpu_mem_alloc_rep got;
    uint64_t held[ALLOC_ATTEMPTS];
    int n_held = 0, server = rgpu_server_of_ctx(rgpu_thread_ctx());
    if (!dptr)
        return CUDA_ERROR_INVALID_VALUE;
    if (rgpu_capture_unsafe_call() != CUDA_SUCCESS)
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    rgpu_pack_mem_alloc(a, &(struct rgpu_mem_alloc_req){.size = bytes});
    CUresult r;
    for (;;) {
        r = rgpu_call(RGPU_OP_MEM_ALLOC, a, sizeof a, NULL, 0, rep, sizeof rep, NULL);
        if (r != CUDA_SUCCESS)
            break;
        if (rgpu_unpack_mem_alloc(rep, sizeof rep, &got)) {
            r = rgpu_bad_reply(RGPU_OP_MEM_ALLOC, "reply size");
            break;
        }
        if (rgpu_server_count() <= 1 || server < 0 || !overlaps_device_range(got.dptr, bytes)) {
            *dptr = (CUdeviceptr)got.dptr;
            rgpu_ranges_note_device(*dptr, bytes, rgpu_thread_ctx());
            break;
        }
        if (n_held == ALLOC_ATTEMPTS) {
            rgpu_log(RGPU_LOG_ERROR, "device memory from rgpu-server %d keeps overlapping memory of another server "
                                     "(0x%llx+%zu); the servers of one program need disjoint device addresses",
                     server, (unsigned long long)got.dptr, bytes);
            free_on(server, got.dptr);
            r = CUDA_ERROR_OUT_OF_MEMORY;
            break;
        }
        held[n_held++] = got.dptr;
    }
    if (n_held)
        rgpu_log(RGPU_LOG_INFO, "%d block(s) from rgpu-server %d overlapped another server's memory; asked again",
                 n_held, server);
    for (int i = 0; i < n_held; i++)
        free_on(server, held[i]);
    return r;
}

API CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height, unsigned int elem)
{
    if (!dptr || !pitch || !width || !height || (elem != 4 && elem != 8 && elem != 16))
        return CUDA_ERROR_INVALID_VALUE;
    size_t p = (width + 511) / 512 * 512; /* the texture pitch alignment of every current GPU */
    CUresult r = cuMemAlloc_v2(dptr, p * height);
    if (r == CUDA_SUCCESS)
        *pitch = p;
    return r;
}

API CUresult cuMemFree_v2(CUdeviceptr dptr)
{
    uint8_t a[RGPU_MEM_FREE_REQ_SIZE];
    CUresult managed;
    if (!dptr)
        return CUDA_SUCCESS;
    if (rgpu_capture_unsafe_call() != CUDA_SUCCESS)
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    if (rgpu_managed_free(dptr, &managed))
        return managed;
    rgpu_pack_mem_free(a, &(struct rgpu_mem_free_req){.dptr = dptr});
    CUresult r = rgpu_call(RGPU_OP_MEM_FREE, a, sizeof a, NULL, 0, NULL, 0, NULL);
    if (r == CUDA_SUCCESS)
        set_remove(&device_ranges, dptr, NULL);
    return r;
}

API CUresult cuMemGetAddressRange_v2(CUdeviceptr *base, size_t *size, CUdeviceptr dptr)
{
    struct range rg;
    CUresult r = rgpu_ready();
    if (r != CUDA_SUCCESS)
        return r;
    if (set_find(&device_ranges, dptr, 1, &rg))
        return CUDA_ERROR_NOT_FOUND;
    if (base)
        *base = (CUdeviceptr)rg.start;
    if (size)
        *size = (size_t)rg.size;
    return CUDA_SUCCESS;
}

/* -- host memory: local; "pinned" only in name ---------------------------------------------------------------- */
static int logged_mapped;

API CUresult cuMemHostAlloc(void **pp, size_t bytes, unsigned int flags)
{
    if (!pp)
        return CUDA_ERROR_INVALID_VALUE;
    if (flags & CU_MEMHOSTALLOC_DEVICEMAP)
        return rgpu_unsupported(&logged_mapped, "mapped (zero-copy) host memory: the GPU is on another machine");
    void *p = NULL;
    if (posix_memalign(&p, 4096, bytes ? bytes : 1))
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (set_add(&host_ranges, (uint64_t)(uintptr_t)p, bytes, 0, flags | 0x80000000u)) {
        free(p);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *pp = p;
    return CUDA_SUCCESS;
}

API CUresult cuMemAllocHost_v2(void **pp, size_t bytes) { return cuMemHostAlloc(pp, bytes, 0); }

API CUresult cuMemFreeHost(void *p)
{
    struct range rg;
    if (set_remove(&host_ranges, (uint64_t)(uintptr_t)p, &rg) || !(rg.flags & 0x80000000u))
        return CUDA_ERROR_INVALID_VALUE;
    rgpu_shadow_forget(rg.start);
    free(p);
    return CUDA_SUCCESS;
}

API CUresult cuMemHostRegister_v2(void *p, size_t bytes, unsigned int flags)
{
    if (!p || !bytes)
        return CUDA_ERROR_INVALID_VALUE;
    if (flags & CU_MEMHOSTREGISTER_DEVICEMAP)
        return rgpu_unsupported(&logged_mapped, "mapped (zero-copy) host memory: the GPU is on another machine");
    if (set_find(&host_ranges, (uint64_t)(uintptr_t)p, 1, NULL) == 0)
        return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
    return set_add(&host_ranges, (uint64_t)(uintptr_t)p, bytes, 0, flags) ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_SUCCESS;
}

API CUresult cuMemHostUnregister(void *p)
{
    struct range rg;
    if (set_find(&host_ranges, (uint64_t)(uintptr_t)p, 1, &rg) || rg.start != (uint64_t)(uintptr_t)p ||
        (rg.flags & 0x80000000u))
        return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
    set_remove(&host_ranges, rg.start, NULL);
    rgpu_shadow_forget(rg.start);
    return CUDA_SUCCESS;
}

API CUresult cuMemHostGetFlags(unsigned int *flags, void *p)
{
    struct range rg;
    if (!flags || set_find(&host_ranges, (uint64_t)(uintptr_t)p, 1, &rg))
        return CUDA_ERROR_INVALID_VALUE;
    *flags = rg.flags & ~0x80000000u;
    return CUDA_SUCCESS;
}

API CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *dptr, void *p, unsigned int flags)
{
    (void)dptr, (void)p, (void)flags;
    return rgpu_unsupported(&logged_mapped, "mapped (zero-copy) host memory: the GPU is on another machine");
}

/* -- pointer attributes, answered from the range sets ---------------------------------------------------------- */
static CUresult pointer_attribute(void *data, CUpointer_attribute attr, CUdeviceptr ptr, int lenient)
{
    struct range rg;
    uint64_t managed_start, managed_size;
    int is_dev = set_find(&device_ranges, ptr, 1, &rg) == 0;
    int is_host = !is_dev && set_find(&host_ranges, ptr, 1, &rg) == 0;
    int managed = is_dev && rgpu_managed_range(ptr, &managed_start, &managed_size) == 0; /* (both sides' address) */
    if (!is_dev && !is_host && !lenient)
        return CUDA_ERROR_INVALID_VALUE;
    switch (attr) {
    case CU_POINTER_ATTRIBUTE_CONTEXT:
        *(CUcontext *)data = is_dev ? (CUcontext)(uintptr_t)rg.ctx : NULL;
        break;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
        *(unsigned *)data = is_dev ? CU_MEMORYTYPE_DEVICE : is_host ? CU_MEMORYTYPE_HOST : 0;
        break;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
        if (!is_dev && !lenient)
            return CUDA_ERROR_INVALID_VALUE;
        *(CUdeviceptr *)data = is_dev ? ptr : 0;
        break;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
        if (!is_host && !managed && !lenient)
            return CUDA_ERROR_INVALID_VALUE;
        *(void **)data = is_host || managed ? (void *)(uintptr_t)ptr : NULL;
        break;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:
        *(int *)data = managed;
        break;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
        *(int *)data = is_dev ? rgpu_ctx_device(rg.ctx) : -2;
        break;
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
    case CU_POINTER_ATTRIBUTE_MAPPED:
        *(int *)data = is_dev;
        break;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
        *(unsigned long long *)data = is_dev ? rg.start : 0;
        break;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
        *(CUdeviceptr *)data = (is_dev || is_host) ? rg.start : 0;
        break;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
        *(size_t *)data = (is_dev || is_host) ? rg.size : 0;
        break;
    default:
        if (!lenient)
            return CUDA_ERROR_NOT_SUPPORTED;
    }
    return CUDA_SUCCESS;
}

API CUresult cuPointerGetAttribute(void *data, CUpointer_attribute attr, CUdeviceptr ptr)
{
    if (!data)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = rgpu_ready();
    return r == CUDA_SUCCESS ? pointer_attribute(data, attr, ptr, 0) : r;
}

API CUresult cuPointerGetAttributes(unsigned int n, CUpointer_attribute *attrs, void **data, CUdeviceptr ptr)
{
    if (!attrs || !data)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = rgpu_ready();
    for (unsigned i = 0; r == CUDA_SUCCESS && i < n; i++)
        if (data[i])
            r = pointer_attribute(data[i], attrs[i], ptr, 1);
    return r;
}

/* A "device" pointer into the program's page-locked host memory (unified addressing: XLA copies out of and
 * memsets its pinned buffers this way). Such memory is the program's own here and the server cannot reach it.
 * Doing the work locally, at once, is exact: nothing on a stream writes host memory later than its call
 * returns (device-to-host copies complete before they return) and host-to-device copies take their bytes
 * when they are called, so no queued work can observe the difference. */
static int program_host(uint64_t ptr, uint64_t n)
{
    return n && set_find(&host_ranges, ptr, n, NULL) == 0 && set_find(&device_ranges, ptr, 1, NULL) != 0;
}

int rgpu_host_range(uint64_t ptr, uint64_t *start, uint64_t *size)
{
    struct range rg; /* program_host's two lookups, the first keeping the range */
    if (set_find(&host_ranges, ptr, 1, &rg) || set_find(&device_ranges, ptr, 1, NULL) == 0)
        return -1;
    *start = rg.start, *size = rg.size;
    return 0;
}

/* Program memory that rgpu reads or writes for the program: first back from a device shadow (shadow.c). */
static int program_host_settled(uint64_t ptr, uint64_t n)
{
    if (!program_host(ptr, n))
        return 0;
    rgpu_shadow_settle(ptr, n);
    return 1;
}

int rgpu_is_program_host(uint64_t ptr)
{
    if (!__atomic_load_n(&host_ranges.n, __ATOMIC_RELAXED)) /* the common case, without the lock */
        return 0;
    return program_host(ptr, 1);
}

/* -- 1D copies: chunked to the server's frame limit; device->host bytes land in the caller's buffer ------------ */
static CUresult htod(uint16_t op, CUdeviceptr dst, const void *src, size_t n, uint64_t stream)
{
    const uint8_t *p = src;
    size_t off = 0;
    if (!src && n)
        return CUDA_ERROR_INVALID_VALUE;
    rgpu_shadow_settle((uint64_t)(uintptr_t)src, n);
    if (program_host_settled(dst, n)) {
        memmove((void *)(uintptr_t)dst, src, n);
        return CUDA_SUCCESS;
    }
    int defer = op == RGPU_OP_MEMCPY_HTOD_ASYNC ||
                (rgpu_server_minor() >= 1 && set_find(&device_ranges, dst, n, NULL) == 0);
    /* (a copy that waits for each chunk's reply goes in big chunks: smaller ones would each cost a round trip) */
    size_t chunk = defer ? rgpu_htod_chunk(n) : rgpu_max_chunk();
    /* An asynchronous copy goes coded piece by piece (copy_coded.c) until a piece does not code; the rest as is. */
    int coding = op == RGPU_OP_MEMCPY_HTOD_ASYNC;
    do {
        if (coding && rgpu_coded_copies(n - off)) { /* (a small last piece goes as it is) */
            size_t k = n - off < RGPU_RUNS_MAX_COPY_BYTES ? n - off : RGPU_RUNS_MAX_COPY_BYTES;
            CUresult r;
            if ((coding = rgpu_htod_coded(dst + off, p + off, k, stream, &r))) {
                if (r != CUDA_SUCCESS)
                    return r;
                off += k;
                continue;
            }
        }
        size_t k = n - off < chunk ? n - off : chunk;
        uint8_t a[RGPU_MEMCPY_HTOD_ASYNC_REQ_SIZE];
        size_t alen;
        /* A deferred synchronous copy in several chunks: all but the last go as asynchronous copies on the NULL
         * stream, so that the server waits for the device once, after the last (it waited after each, ~20 us per
         * sealed 256 KiB chunk); the last, synchronous on the same stream, still waits for them all. */
        uint16_t chunk_op = defer && off + k < n ? RGPU_OP_MEMCPY_HTOD_ASYNC : op;
        if (chunk_op == RGPU_OP_MEMCPY_HTOD_ASYNC) {
            rgpu_pack_memcpy_htod_async(a, &(struct rgpu_memcpy_htod_async_req){.dst = dst + off, .stream = stream});
            alen = RGPU_MEMCPY_HTOD_ASYNC_REQ_SIZE;
        } else {
            rgpu_pack_memcpy_htod(a, &(struct rgpu_memcpy_htod_req){.dst = dst + off});
            alen = RGPU_MEMCPY_HTOD_REQ_SIZE;
        }
        /* Deferred: the bytes are queued or sent before we return, which is all CUDA promises here. */
        CUresult r = defer ? rgpu_defer(chunk_op, a, alen, p + off, k)
                           : rgpu_call(op, a, alen, p + off, k, NULL, 0, NULL);
        if (r != CUDA_SUCCESS)
            return r;
        off += k;
    } while (off < n);
    return CUDA_SUCCESS;
}

/* Chunks in flight at once: the server copies and sends chunk i+1 (and seals it, with a PSK) while this side
 * takes in chunk i. */
#define DTOH_WINDOW 3

static CUresult dtoh(uint16_t op, void *dst, CUdeviceptr src, size_t n, uint64_t stream)
{
    uint8_t *p = dst;
    size_t chunk = rgpu_max_chunk();
    if (!dst && n)
        return CUDA_ERROR_INVALID_VALUE;
    rgpu_shadow_settle((uint64_t)(uintptr_t)dst, n);
    if (program_host_settled(src, n)) {
        memmove(dst, (const void *)(uintptr_t)src, n);
        return CUDA_SUCCESS;
    }
    int async = op == RGPU_OP_MEMCPY_DTOH_ASYNC;
    size_t alen = async ? RGPU_MEMCPY_DTOH_ASYNC_REQ_SIZE : RGPU_MEMCPY_DTOH_REQ_SIZE;
    size_t count = n ? (n + chunk - 1) / chunk : 0;
    while (count) {
        uint8_t args[16 * RGPU_MEMCPY_DTOH_ASYNC_REQ_SIZE];
        struct rgpu_sink sinks[16];
        size_t group = count < 16 ? count : 16, off = 0;
        for (size_t i = 0; i < group; i++) {
            size_t k = n - off < chunk ? n - off : chunk;
            if (async)
                rgpu_pack_memcpy_dtoh_async(args + i * alen, &(struct rgpu_memcpy_dtoh_async_req){
                                                                 .src = src + off, .size = k, .stream = stream});
            else
                rgpu_pack_memcpy_dtoh(args + i * alen, &(struct rgpu_memcpy_dtoh_req){.src = src + off, .size = k});
            sinks[i] = (struct rgpu_sink){p + off, k, 0};
            off += k;
        }
        CUresult r = rgpu_call_pipelined(op, group, args, alen, sinks, DTOH_WINDOW);
        if (r != CUDA_SUCCESS)
            return r;
        for (size_t i = 0; i < group; i++)
            if (sinks[i].len != sinks[i].cap)
                return rgpu_bad_reply(op, "copied bytes");
        p += off;
        src += off;
        n -= off;
        count -= group;
    }
    return CUDA_SUCCESS;
}

/* Managed memory named as the host side is the device allocation it is (managed.c): the copy is the device's. */
static int managed(const void *host, size_t n) { return rgpu_managed_device_side((uint64_t)(uintptr_t)host, n); }

API CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n)
{
    return managed(src, n) ? rgpu_copy_device(dst, (CUdeviceptr)(uintptr_t)src, n, NULL, 0)
                           : htod(RGPU_OP_MEMCPY_HTOD, dst, src, n, 0);
}
API CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr dst, const void *src, size_t n) { return cuMemcpyHtoD_v2(dst, src, n); }
API CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n)
{
    return managed(dst, n) ? rgpu_copy_device((CUdeviceptr)(uintptr_t)dst, src, n, NULL, 0)
                           : dtoh(RGPU_OP_MEMCPY_DTOH, dst, src, n, 0);
}
API CUresult cuMemcpyDtoH_v2_ptds(void *dst, CUdeviceptr src, size_t n) { return cuMemcpyDtoH_v2(dst, src, n); }

API CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, CUstream s)
{
    if (managed(src, n))
        return rgpu_copy_device(dst, (CUdeviceptr)(uintptr_t)src, n, s, 1);
    if (rgpu_capture_host_copy(s) != CUDA_SUCCESS)
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    return htod(RGPU_OP_MEMCPY_HTOD_ASYNC, dst, src, n, rgpu_stream_handle(s));
}
API CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dst, const void *src, size_t n, CUstream s)
{
    return cuMemcpyHtoDAsync_v2(dst, src, n, s);
}
API CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, CUstream s)
{
    /* The bytes must be in host memory when the stream reaches this point; rgpu simply waits for them. */
    if (managed(dst, n))
        return rgpu_copy_device((CUdeviceptr)(uintptr_t)dst, src, n, s, 1);
    if (rgpu_capture_host_copy(s) != CUDA_SUCCESS)
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    return dtoh(RGPU_OP_MEMCPY_DTOH_ASYNC, dst, src, n, rgpu_stream_handle(s));
}
API CUresult cuMemcpyDtoHAsync_v2_ptsz(void *dst, CUdeviceptr src, size_t n, CUstream s)
{
    return cuMemcpyDtoHAsync_v2(dst, src, n, s);
}

/* -- device to device: on the server, or between servers through this host -------------------------------- */
#define ACROSS_CHUNK (16u << 20)

/* The source is read after the work before it on `s` (when s is the source server's) or on the source's NULL
 * stream; the destination is written in order on its server (on `s` when s is the destination server's). A
 * stream of one server cannot order the other's side: programs order it with events (a wait for another
 * server's event is a wait on the host, graph.c), as they do between any two devices. */
static CUresult copy_across(CUdeviceptr dst, int dst_server, CUdeviceptr src, int src_server, size_t n, CUstream s,
                            int async)
{
    uint64_t stream = rgpu_stream_handle(s);
    int on = async && stream ? rgpu_server_of_handle(stream) : -1;
    size_t cap = n < ACROSS_CHUNK ? n : ACROSS_CHUNK;
    uint8_t *buf = malloc(cap ? cap : 1);
    if (!buf)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = CUDA_SUCCESS;
    for (size_t off = 0; off < n && r == CUDA_SUCCESS; off += cap) {
        size_t k = n - off < cap ? n - off : cap;
        r = on == src_server ? dtoh(RGPU_OP_MEMCPY_DTOH_ASYNC, buf, src + off, k, stream)
                             : dtoh(RGPU_OP_MEMCPY_DTOH, buf, src + off, k, 0);
        if (r == CUDA_SUCCESS) /* (queued bytes are copied, larger ones sent, before htod returns) */
            r = on == dst_server ? htod(RGPU_OP_MEMCPY_HTOD_ASYNC, dst + off, buf, k, stream)
                                 : htod(RGPU_OP_MEMCPY_HTOD, dst + off, buf, k, 0);
    }
    free(buf);
    return r;
}

static CUresult unified(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s, int async);

CUresult rgpu_copy_device(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s, int async)
{
    if (program_host_settled(dst, n) | program_host_settled(src, n)) /* both settled, not just the first */
        return unified(dst, src, n, s, async);
    int dst_server = rgpu_server_of_ptr(dst), src_server = rgpu_server_of_ptr(src);
    if (rgpu_server_count() > 1 && dst_server >= 0 && src_server >= 0 && dst_server != src_server)
        return copy_across(dst, dst_server, src, src_server, n, s, async);
    if (async) {
        uint8_t a[RGPU_MEMCPY_DTOD_ASYNC_REQ_SIZE];
        rgpu_pack_memcpy_dtod_async(a, &(struct rgpu_memcpy_dtod_async_req){dst, src, n, rgpu_stream_handle(s)});
        return rgpu_defer(RGPU_OP_MEMCPY_DTOD_ASYNC, a, sizeof a, NULL, 0);
    }
    uint8_t a[RGPU_MEMCPY_DTOD_REQ_SIZE];
    rgpu_pack_memcpy_dtod(a, &(struct rgpu_memcpy_dtod_req){dst, src, n});
    return rgpu_call(RGPU_OP_MEMCPY_DTOD, a, sizeof a, NULL, 0, NULL, 0, NULL);
}

API CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n) { return rgpu_copy_device(dst, src, n, NULL, 0); }
API CUresult cuMemcpyDtoD_v2_ptds(CUdeviceptr dst, CUdeviceptr src, size_t n) { return rgpu_copy_device(dst, src, n, NULL, 0); }
API CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s)
{
    return rgpu_copy_device(dst, src, n, s, 1);
}
API CUresult cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s)
{
    return rgpu_copy_device(dst, src, n, s, 1);
}

/* Unified copies: the range sets say which side each pointer is on. */
static CUresult unified(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s, int async)
{
    int d = rgpu_is_device_range(dst, n), sdev = rgpu_is_device_range(src, n);
    if (d && sdev)
        return async ? cuMemcpyDtoDAsync_v2(dst, src, n, s) : cuMemcpyDtoD_v2(dst, src, n);
    if (d)
        return async ? cuMemcpyHtoDAsync_v2(dst, (const void *)(uintptr_t)src, n, s)
                     : cuMemcpyHtoD_v2(dst, (const void *)(uintptr_t)src, n);
    if (sdev)
        return async ? cuMemcpyDtoHAsync_v2((void *)(uintptr_t)dst, src, n, s)
                     : cuMemcpyDtoH_v2((void *)(uintptr_t)dst, src, n);
    if (async) {
        CUresult r = cuStreamSynchronize(s);
        if (r != CUDA_SUCCESS)
            return r;
    }
    memmove((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, n);
    return CUDA_SUCCESS;
}

API CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n) { return unified(dst, src, n, NULL, 0); }
API CUresult cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t n) { return unified(dst, src, n, NULL, 0); }
API CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) { return unified(dst, src, n, s, 1); }
API CUresult cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) { return unified(dst, src, n, s, 1); }

/* -- 2D copies: host rows travel packed, so the wire carries width x height bytes whatever the host pitch ------- */
enum { KIND_H2D = 1, KIND_D2H = 2, KIND_D2D = 3 };

static int resolve(CUmemorytype type, const void *host, CUdeviceptr dev, size_t x, size_t y, size_t pitch,
                   uint64_t *addr)
{
    if (type == CU_MEMORYTYPE_UNIFIED)
        type = rgpu_is_device_range(dev, 1) ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST;
    uint64_t base = type == CU_MEMORYTYPE_HOST ? (uint64_t)(uintptr_t)(host ? host : (const void *)(uintptr_t)dev) : dev;
    *addr = base + y * pitch + x;
    return type;
}

static CUresult copy_2d(const CUDA_MEMCPY2D *p, CUstream stream, int async)
{
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    if (p->srcMemoryType == CU_MEMORYTYPE_ARRAY || p->dstMemoryType == CU_MEMORYTYPE_ARRAY) {
        CUDA_MEMCPY3D c = {.srcXInBytes = p->srcXInBytes, .srcY = p->srcY, .srcMemoryType = p->srcMemoryType,
                           .srcHost = p->srcHost, .srcDevice = p->srcDevice, .srcArray = p->srcArray,
                           .srcPitch = p->srcPitch, .dstXInBytes = p->dstXInBytes, .dstY = p->dstY,
                           .dstMemoryType = p->dstMemoryType, .dstHost = p->dstHost, .dstDevice = p->dstDevice,
                           .dstArray = p->dstArray, .dstPitch = p->dstPitch, .WidthInBytes = p->WidthInBytes,
                           .Height = p->Height, .Depth = 1};
        return rgpu_array_copy(&c, stream, async);
    }
    uint64_t src, dst;
    int st = resolve(p->srcMemoryType, p->srcHost, p->srcDevice, p->srcXInBytes, p->srcY, p->srcPitch, &src);
    int dt = resolve(p->dstMemoryType, p->dstHost, p->dstDevice, p->dstXInBytes, p->dstY, p->dstPitch, &dst);
    size_t w = p->WidthInBytes, h = p->Height;
    size_t sp = p->srcPitch ? p->srcPitch : w, dp = p->dstPitch ? p->dstPitch : w;
    if (!w || !h)
        return CUDA_SUCCESS;
    if ((h > 1 && (sp < w || dp < w)))
        return CUDA_ERROR_INVALID_VALUE;
    if (async && (st == CU_MEMORYTYPE_HOST || dt == CU_MEMORYTYPE_HOST) && rgpu_capture_host_copy(stream))
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    if (st == CU_MEMORYTYPE_HOST && dt == CU_MEMORYTYPE_HOST) {
        if (async) {
            CUresult r = cuStreamSynchronize(stream);
            if (r != CUDA_SUCCESS)
                return r;
        }
        for (size_t y = 0; y < h; y++)
            memmove((void *)(uintptr_t)(dst + y * dp), (const void *)(uintptr_t)(src + y * sp), w);
        return CUDA_SUCCESS;
    }
    int kind = st == CU_MEMORYTYPE_HOST ? KIND_H2D : dt == CU_MEMORYTYPE_HOST ? KIND_D2H : KIND_D2D;
    /* MEMCPY_2D and MEMCPY_2D_ASYNC take the same request. */
    _Static_assert(RGPU_MEMCPY_2D_REQ_SIZE == RGPU_MEMCPY_2D_ASYNC_REQ_SIZE, "one request for two operations");
    struct rgpu_memcpy_2d_req req = {.kind = (uint32_t)kind, .dst = dst, .dst_pitch = dp, .src = src,
                                     .src_pitch = sp, .width = w, .height = h,
                                     .stream = rgpu_stream_handle(stream)};
    uint8_t a[RGPU_MEMCPY_2D_REQ_SIZE];
    if (kind == KIND_D2D) {
        rgpu_pack_memcpy_2d(a, &req);
        return async ? rgpu_defer(RGPU_OP_MEMCPY_2D_ASYNC, a, sizeof a, NULL, 0)
                     : rgpu_call(RGPU_OP_MEMCPY_2D, a, sizeof a, NULL, 0, NULL, 0, NULL);
    }
    size_t chunk = rgpu_max_chunk();
    if (w > chunk) { /* rows wider than a frame: row by row, each a chunked 1D copy */
        for (size_t y = 0; y < h; y++) {
            CUresult r = kind == KIND_H2D ? cuMemcpyHtoD_v2(dst + y * dp, (const void *)(uintptr_t)(src + y * sp), w)
                                          : cuMemcpyDtoH_v2((void *)(uintptr_t)(dst + y * dp), src + y * sp, w);
            if (r != CUDA_SUCCESS)
                return r;
        }
        return CUDA_SUCCESS;
    }
    size_t rows = chunk / w;
    int packed = kind == KIND_H2D ? sp == w : dp == w;
    uint8_t *buf = packed ? NULL : malloc(rows * w);
    if (!packed && !buf)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = CUDA_SUCCESS;
    for (size_t y = 0; y < h && r == CUDA_SUCCESS; y += rows) {
        size_t k = h - y < rows ? h - y : rows;
        req.dst = kind == KIND_H2D ? dst + y * dp : 0;
        req.src = kind == KIND_D2H ? src + y * sp : 0;
        req.height = k;
        rgpu_pack_memcpy_2d(a, &req);
        if (kind == KIND_H2D) {
            const uint8_t *rows_at = (const uint8_t *)(uintptr_t)(src + y * sp);
            if (!packed)
                for (size_t i = 0; i < k; i++)
                    memcpy(buf + i * w, rows_at + i * sp, w);
            r = async ? rgpu_defer(RGPU_OP_MEMCPY_2D_ASYNC, a, sizeof a, packed ? rows_at : buf, k * w)
                      : rgpu_call(RGPU_OP_MEMCPY_2D, a, sizeof a, packed ? rows_at : buf, k * w, NULL, 0, NULL);
        } else {
            uint8_t *land = packed ? (uint8_t *)(uintptr_t)(dst + y * dp) : buf;
            struct rgpu_sink s = {land, k * w, 0};
            r = rgpu_call(RGPU_OP_MEMCPY_2D, a, sizeof a, NULL, 0, NULL, 0, &s);
            if (r == CUDA_SUCCESS && s.len != k * w)
                r = rgpu_bad_reply(RGPU_OP_MEMCPY_2D, "copied bytes");
            if (r == CUDA_SUCCESS && !packed)
                for (size_t i = 0; i < k; i++)
                    memcpy((uint8_t *)(uintptr_t)(dst + (y + i) * dp), buf + i * w, w);
        }
    }
    free(buf);
    return r;
}

/* -- 3D copies of linear memory: slice by slice as 2D copies, or as one where each side's slices are exactly the
 * copy's height, so that their rows follow each other (with an array at an end: arrays.c). ------------------- */
static int rows_before(size_t z, size_t height, size_t y, size_t *rows)
{
    return __builtin_mul_overflow(z, height, rows) || __builtin_add_overflow(*rows, y, rows);
}

static CUresult copy_3d(const CUDA_MEMCPY3D *p, CUstream stream, int async)
{
    if (!p || p->reserved0 || p->reserved1 || p->srcLOD || p->dstLOD)
        return CUDA_ERROR_INVALID_VALUE;
    if (p->srcMemoryType == CU_MEMORYTYPE_ARRAY || p->dstMemoryType == CU_MEMORYTYPE_ARRAY)
        return rgpu_array_copy(p, stream, async);
    if (!p->WidthInBytes || !p->Height || !p->Depth)
        return CUDA_SUCCESS;
    size_t sh = p->srcHeight, dh = p->dstHeight, depth = p->Depth, height = p->Height, src_end, dst_end;
    /* (each slice's rows must lie within it: a box taller than a slice, or starting too far down, is refused) */
    if (depth > 1 && (__builtin_add_overflow(p->srcY, height, &src_end) || src_end > sh ||
                      __builtin_add_overflow(p->dstY, height, &dst_end) || dst_end > dh))
        return CUDA_ERROR_INVALID_VALUE;
    if (depth > 1 && sh == height && dh == height) { /* one 2D copy of all the slices' rows */
        if (__builtin_mul_overflow(height, depth, &height))
            return CUDA_ERROR_INVALID_VALUE;
        depth = 1;
    }
    CUDA_MEMCPY2D slice = {.srcXInBytes = p->srcXInBytes, .srcMemoryType = p->srcMemoryType, .srcHost = p->srcHost,
                           .srcDevice = p->srcDevice, .srcPitch = p->srcPitch, .dstXInBytes = p->dstXInBytes,
                           .dstMemoryType = p->dstMemoryType, .dstHost = p->dstHost, .dstDevice = p->dstDevice,
                           .dstPitch = p->dstPitch, .WidthInBytes = p->WidthInBytes, .Height = height};
    for (size_t z = 0; z < depth; z++) {
        size_t sz, dz;
        if (__builtin_add_overflow(p->srcZ, z, &sz) || __builtin_add_overflow(p->dstZ, z, &dz) ||
            rows_before(sz, sh, p->srcY, &slice.srcY) || rows_before(dz, dh, p->dstY, &slice.dstY))
            return CUDA_ERROR_INVALID_VALUE;
        CUresult r = copy_2d(&slice, stream, async);
        if (r != CUDA_SUCCESS)
            return r;
    }
    return CUDA_SUCCESS;
}

API CUresult cuMemcpy3D_v2(const CUDA_MEMCPY3D *p) { return copy_3d(p, NULL, 0); }
API CUresult cuMemcpy3D_v2_ptds(const CUDA_MEMCPY3D *p) { return copy_3d(p, NULL, 0); }
API CUresult cuMemcpy3DAsync_v2(const CUDA_MEMCPY3D *p, CUstream s) { return copy_3d(p, s, 1); }
API CUresult cuMemcpy3DAsync_v2_ptsz(const CUDA_MEMCPY3D *p, CUstream s) { return copy_3d(p, s, 1); }

API CUresult cuMemcpy2D_v2(const CUDA_MEMCPY2D *p) { return copy_2d(p, NULL, 0); }
API CUresult cuMemcpy2D_v2_ptds(const CUDA_MEMCPY2D *p) { return copy_2d(p, NULL, 0); }
API CUresult cuMemcpy2DUnaligned_v2(const CUDA_MEMCPY2D *p) { return copy_2d(p, NULL, 0); }
API CUresult cuMemcpy2DUnaligned_v2_ptds(const CUDA_MEMCPY2D *p) { return copy_2d(p, NULL, 0); }
API CUresult cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D *p, CUstream s) { return copy_2d(p, s, 1); }
API CUresult cuMemcpy2DAsync_v2_ptsz(const CUDA_MEMCPY2D *p, CUstream s) { return copy_2d(p, s, 1); }

/* -- memsets of 16-bit elements and 2D memsets ------------------------------------------------------------- */
static void fill_local(CUdeviceptr dst, size_t pitch, unsigned value, unsigned elem, size_t width, size_t height)
{
    for (size_t y = 0; y < height; y++) {
        uint8_t *row = (uint8_t *)(uintptr_t)(dst + y * pitch);
        for (size_t x = 0; x < width; x++)
            memcpy(row + x * elem, &(uint32_t){value}, elem); /* little-endian: the low `elem` bytes */
    }
}

/* The 1-D memsets keep their own operations on the wire (a graph capture records them as such). */
static CUresult memset_1d(CUdeviceptr dst, unsigned value, unsigned elem, size_t count, CUstream s, int async)
{
    if (program_host_settled(dst, count * elem)) {
        fill_local(dst, count * elem, value, elem, count, 1);
        return CUDA_SUCCESS;
    }
    _Static_assert(RGPU_MEMSET_D8_REQ_SIZE == RGPU_MEMSET_D32_REQ_SIZE &&
                   RGPU_MEMSET_D8_ASYNC_REQ_SIZE == RGPU_MEMSET_D32_ASYNC_REQ_SIZE, "one layout for both widths");
    if (!async) {
        uint8_t a[RGPU_MEMSET_D32_REQ_SIZE];
        rgpu_pack_memset_d32(a, &(struct rgpu_memset_d32_req){.dst = dst, .value = value, .count = count});
        return rgpu_call(elem == 1 ? RGPU_OP_MEMSET_D8 : RGPU_OP_MEMSET_D32, a, sizeof a, NULL, 0, NULL, 0, NULL);
    }
    uint8_t a[RGPU_MEMSET_D32_ASYNC_REQ_SIZE];
    rgpu_pack_memset_d32_async(a, &(struct rgpu_memset_d32_async_req){
                                      .dst = dst, .value = value, .count = count, .stream = rgpu_stream_handle(s)});
    return rgpu_defer(elem == 1 ? RGPU_OP_MEMSET_D8_ASYNC : RGPU_OP_MEMSET_D32_ASYNC, a, sizeof a, NULL, 0);
}

API CUresult cuMemsetD8_v2(CUdeviceptr d, unsigned char v, size_t n) { return memset_1d(d, v, 1, n, NULL, 0); }
API CUresult cuMemsetD8_v2_ptds(CUdeviceptr d, unsigned char v, size_t n) { return memset_1d(d, v, 1, n, NULL, 0); }
API CUresult cuMemsetD8Async(CUdeviceptr d, unsigned char v, size_t n, CUstream s) { return memset_1d(d, v, 1, n, s, 1); }
API CUresult cuMemsetD8Async_ptsz(CUdeviceptr d, unsigned char v, size_t n, CUstream s) { return memset_1d(d, v, 1, n, s, 1); }
API CUresult cuMemsetD32_v2(CUdeviceptr d, unsigned int v, size_t n) { return memset_1d(d, v, 4, n, NULL, 0); }
API CUresult cuMemsetD32_v2_ptds(CUdeviceptr d, unsigned int v, size_t n) { return memset_1d(d, v, 4, n, NULL, 0); }
API CUresult cuMemsetD32Async(CUdeviceptr d, unsigned int v, size_t n, CUstream s) { return memset_1d(d, v, 4, n, s, 1); }
API CUresult cuMemsetD32Async_ptsz(CUdeviceptr d, unsigned int v, size_t n, CUstream s) { return memset_1d(d, v, 4, n, s, 1); }

static CUresult memset_2d(CUdeviceptr dst, size_t pitch, unsigned value, unsigned elem, size_t width, size_t height,
                          CUstream s, int async)
{
    _Static_assert(RGPU_MEMSET_2D_REQ_SIZE == RGPU_MEMSET_2D_ASYNC_REQ_SIZE, "one request for two operations");
    uint8_t a[RGPU_MEMSET_2D_REQ_SIZE];
    if (!width || !height)
        return CUDA_SUCCESS;
    if (program_host_settled(dst, pitch * (height - 1) + width * elem)) {
        fill_local(dst, pitch, value, elem, width, height);
        return CUDA_SUCCESS;
    }
    rgpu_pack_memset_2d(a, &(struct rgpu_memset_2d_req){.dst = dst, .pitch = pitch, .value = value,
                                                        .element_size = elem, .width = width, .height = height,
                                                        .stream = rgpu_stream_handle(s)});
    return async ? rgpu_defer(RGPU_OP_MEMSET_2D_ASYNC, a, sizeof a, NULL, 0)
                 : rgpu_call(RGPU_OP_MEMSET_2D, a, sizeof a, NULL, 0, NULL, 0, NULL);
}

API CUresult cuMemsetD16_v2(CUdeviceptr d, unsigned short v, size_t n) { return memset_2d(d, 2 * n, v, 2, n, 1, NULL, 0); }
API CUresult cuMemsetD16_v2_ptds(CUdeviceptr d, unsigned short v, size_t n) { return cuMemsetD16_v2(d, v, n); }
API CUresult cuMemsetD16Async(CUdeviceptr d, unsigned short v, size_t n, CUstream s) { return memset_2d(d, 2 * n, v, 2, n, 1, s, 1); }
API CUresult cuMemsetD16Async_ptsz(CUdeviceptr d, unsigned short v, size_t n, CUstream s) { return cuMemsetD16Async(d, v, n, s); }

#define MEMSET2D(bits, type, elem)                                                                                   \
    API CUresult cuMemsetD2D##bits##_v2(CUdeviceptr d, size_t pitch, type v, size_t w, size_t h)                  \
    {                                                                                                                \
        return memset_2d(d, pitch, v, elem, w, h, NULL, 0);                                                          \
    }                                                                                                                \
    API CUresult cuMemsetD2D##bits##_v2_ptds(CUdeviceptr d, size_t pitch, type v, size_t w, size_t h)             \
    {                                                                                                                \
        return memset_2d(d, pitch, v, elem, w, h, NULL, 0);                                                          \
    }                                                                                                                \
    API CUresult cuMemsetD2D##bits##Async(CUdeviceptr d, size_t pitch, type v, size_t w, size_t h, CUstream s)    \
    {                                                                                                                \
        return memset_2d(d, pitch, v, elem, w, h, s, 1);                                                             \
    }                                                                                                                \
    API CUresult cuMemsetD2D##bits##Async_ptsz(CUdeviceptr d, size_t pitch, type v, size_t w, size_t h, CUstream s) \
    {                                                                                                                \
        return memset_2d(d, pitch, v, elem, w, h, s, 1);                                                             \
    }
MEMSET2D(8, unsigned char, 1)
MEMSET2D(16, unsigned short, 2)
MEMSET2D(32, unsigned int, 4)
