/* Stream-ordered memory: pools, cuMemAllocAsync / cuMemAllocFromPoolAsync, cuMemFreeAsync.
 *
 * The server owns pools and checks everything (src/rgpu/dispatch/pools.py). An allocation needs its address
 * back, so it is a round trip; a free is deferred like any stream-ordered call. Allocated ranges are device
 * ranges here from allocation to free, like cuMemAlloc's. */
#include <string.h>

#include "rgpu_shim.h"

#define API __attribute__((visibility("default")))

static CUresult alloc_async(CUdeviceptr *dptr, size_t size, uint64_t pool, CUstream stream)
{
    if (!dptr)
        return CUDA_ERROR_INVALID_VALUE;
    uint8_t a[RGPU_MEM_ALLOC_ASYNC_REQ_SIZE], rep[RGPU_MEM_ALLOC_ASYNC_REP_SIZE];
    rgpu_pack_mem_alloc_async(a, &(struct rgpu_mem_alloc_async_req){size, pool, rgpu_stream_handle(stream)});
    CUresult r = rgpu_call(RGPU_OP_MEM_ALLOC_ASYNC, a, sizeof a, NULL, 0, rep, sizeof rep, NULL);
    struct rgpu_mem_alloc_async_rep out;
    if (r == CUDA_SUCCESS && rgpu_unpack_mem_alloc_async(rep, sizeof rep, &out) == 0) {
        *dptr = (CUdeviceptr)out.dptr;
        rgpu_ranges_note_device(out.dptr, size, rgpu_thread_ctx());
    }
    return r;
}

API CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t size, CUstream s) { return alloc_async(dptr, size, 0, s); }
API CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t size, CUstream s) { return alloc_async(dptr, size, 0, s); }

API CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t size, CUmemoryPool pool, CUstream s)
{
    return pool ? alloc_async(dptr, size, (uint64_t)(uintptr_t)pool, s) : CUDA_ERROR_INVALID_VALUE;
}
API CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t size, CUmemoryPool pool, CUstream s)
{
    return cuMemAllocFromPoolAsync(dptr, size, pool, s);
}

API CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream s)
{
    /* Deferred, so what CUDA refuses at once (a pointer that is not an allocation, a second free) is refused
     * here from the shim's own ranges rather than at the next synchronising call. */
    CUdeviceptr base = 0;
    if (!dptr || cuMemGetAddressRange_v2(&base, NULL, dptr) != CUDA_SUCCESS || base != dptr)
        return CUDA_ERROR_INVALID_VALUE;
    uint8_t a[RGPU_MEM_FREE_ASYNC_REQ_SIZE];
    rgpu_pack_mem_free_async(a, &(struct rgpu_mem_free_async_req){dptr, rgpu_stream_handle(s)});
    CUresult r = rgpu_defer(RGPU_OP_MEM_FREE_ASYNC, a, sizeof a, NULL, 0);
    if (r == CUDA_SUCCESS)
        rgpu_ranges_drop_device_within(dptr, 1);
    return r;
}
API CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream s) { return cuMemFreeAsync(dptr, s); }

/* -- the device's pools ---------------------------------------------------------------------------------- */
static CUresult pool_of_device(uint16_t op, CUmemoryPool *pool, int dev)
{
    if (!pool)
        return CUDA_ERROR_INVALID_VALUE;
    uint8_t a[4], rep[8];
    rgpu_put_u32(a, (uint32_t)dev); /* MEM_POOL_GET_DEFAULT and MEM_POOL_GET_CURRENT: device:i32 -> pool:u64 */
    _Static_assert(RGPU_MEM_POOL_GET_DEFAULT_REQ_SIZE == 4 && RGPU_MEM_POOL_GET_CURRENT_REQ_SIZE == 4 &&
                   RGPU_MEM_POOL_GET_DEFAULT_REP_SIZE == 8 && RGPU_MEM_POOL_GET_CURRENT_REP_SIZE == 8, "layouts");
    CUresult r = rgpu_call(op, a, sizeof a, NULL, 0, rep, sizeof rep, NULL);
    if (r == CUDA_SUCCESS)
        *pool = (CUmemoryPool)(uintptr_t)rgpu_get_u64(rep);
    return r;
}

API CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool, CUdevice dev)
{
    return pool_of_device(RGPU_OP_MEM_POOL_GET_DEFAULT, pool, dev);
}
API CUresult cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice dev) { return pool_of_device(RGPU_OP_MEM_POOL_GET_CURRENT, pool, dev); }

API CUresult cuDeviceSetMemPool(CUdevice dev, CUmemoryPool pool)
{
    uint8_t a[RGPU_MEM_POOL_SET_CURRENT_REQ_SIZE];
    rgpu_pack_mem_pool_set_current(a, &(struct rgpu_mem_pool_set_current_req){dev, (uint64_t)(uintptr_t)pool});
    return rgpu_call(RGPU_OP_MEM_POOL_SET_CURRENT, a, sizeof a, NULL, 0, NULL, 0, NULL);
}

/* CUDA 13's by-location forms: device memory only (a host location would be the server's). */
static int logged_location;

static CUresult device_location(const CUmemLocation *location, CUmemAllocationType type, int *dev)
{
    if (!location || type != CU_MEM_ALLOCATION_TYPE_PINNED)
        return CUDA_ERROR_INVALID_VALUE;
    if (location->type != CU_MEM_LOCATION_TYPE_DEVICE)
        return rgpu_unsupported(&logged_location, "memory pools on a host location (it would be the server's)");
    *dev = location->id;
    return CUDA_SUCCESS;
}

API CUresult cuMemGetDefaultMemPool(CUmemoryPool *pool, CUmemLocation *location, CUmemAllocationType type)
{
    int dev = 0;
    CUresult r = device_location(location, type, &dev);
    return r == CUDA_SUCCESS ? cuDeviceGetDefaultMemPool(pool, dev) : r;
}

API CUresult cuMemGetMemPool(CUmemoryPool *pool, CUmemLocation *location, CUmemAllocationType type)
{
    int dev = 0;
    CUresult r = device_location(location, type, &dev);
    return r == CUDA_SUCCESS ? cuDeviceGetMemPool(pool, dev) : r;
}

API CUresult cuMemSetMemPool(CUmemLocation *location, CUmemAllocationType type, CUmemoryPool pool)
{
    int dev = 0;
    CUresult r = device_location(location, type, &dev);
    return r == CUDA_SUCCESS ? cuDeviceSetMemPool(dev, pool) : r;
}

/* -- explicit pools -------------------------------------------------------------------------------------- */
API CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *props)
{
    if (!pool || !props || props->allocType != CU_MEM_ALLOCATION_TYPE_PINNED)
        return CUDA_ERROR_INVALID_VALUE;
    if (props->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return rgpu_unsupported(&logged_location, "memory pools on a host location (it would be the server's)");
    uint8_t a[RGPU_MEM_POOL_CREATE_REQ_SIZE], rep[RGPU_MEM_POOL_CREATE_REP_SIZE];
    rgpu_pack_mem_pool_create(a, &(struct rgpu_mem_pool_create_req){props->location.id, (uint32_t)props->handleTypes,
                                                                     props->maxSize, props->usage});
    CUresult r = rgpu_call(RGPU_OP_MEM_POOL_CREATE, a, sizeof a, NULL, 0, rep, sizeof rep, NULL);
    struct rgpu_mem_pool_create_rep out;
    if (r == CUDA_SUCCESS && rgpu_unpack_mem_pool_create(rep, sizeof rep, &out) == 0)
        *pool = (CUmemoryPool)(uintptr_t)out.pool;
    return r;
}

API CUresult cuMemPoolDestroy(CUmemoryPool pool)
{
    uint8_t a[RGPU_MEM_POOL_DESTROY_REQ_SIZE];
    rgpu_pack_mem_pool_destroy(a, &(struct rgpu_mem_pool_destroy_req){(uint64_t)(uintptr_t)pool});
    return rgpu_call(RGPU_OP_MEM_POOL_DESTROY, a, sizeof a, NULL, 0, NULL, 0, NULL);
}

API CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t keep)
{
    uint8_t a[RGPU_MEM_POOL_TRIM_REQ_SIZE];
    rgpu_pack_mem_pool_trim(a, &(struct rgpu_mem_pool_trim_req){(uint64_t)(uintptr_t)pool, keep});
    return rgpu_call(RGPU_OP_MEM_POOL_TRIM, a, sizeof a, NULL, 0, NULL, 0, NULL);
}

/* The reuse policies are ints; the rest are cuuint64_t byte counts. */
static int int_attribute(CUmemPool_attribute attr)
{
    return attr == CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES || attr == CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC ||
           attr == CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES;
}

API CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
    if (!value)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t v = int_attribute(attr) ? (uint64_t)(int64_t)*(int *)value : *(cuuint64_t *)value;
    uint8_t a[RGPU_MEM_POOL_SET_ATTRIBUTE_REQ_SIZE];
    rgpu_pack_mem_pool_set_attribute(a, &(struct rgpu_mem_pool_set_attribute_req){(uint64_t)(uintptr_t)pool,
                                                                                   (uint32_t)attr, v});
    return rgpu_call(RGPU_OP_MEM_POOL_SET_ATTRIBUTE, a, sizeof a, NULL, 0, NULL, 0, NULL);
}

API CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
    if (!value)
        return CUDA_ERROR_INVALID_VALUE;
    uint8_t a[RGPU_MEM_POOL_GET_ATTRIBUTE_REQ_SIZE], rep[RGPU_MEM_POOL_GET_ATTRIBUTE_REP_SIZE];
    rgpu_pack_mem_pool_get_attribute(a, &(struct rgpu_mem_pool_get_attribute_req){(uint64_t)(uintptr_t)pool,
                                                                                   (uint32_t)attr});
    CUresult r = rgpu_call(RGPU_OP_MEM_POOL_GET_ATTRIBUTE, a, sizeof a, NULL, 0, rep, sizeof rep, NULL);
    struct rgpu_mem_pool_get_attribute_rep out;
    if (r == CUDA_SUCCESS && rgpu_unpack_mem_pool_get_attribute(rep, sizeof rep, &out) == 0) {
        if (int_attribute(attr))
            *(int *)value = (int)out.value;
        else
            *(cuuint64_t *)value = out.value;
    }
    return r;
}

#define MAX_ACCESS 64

API CUresult cuMemPoolSetAccess(CUmemoryPool pool, const CUmemAccessDesc *map, size_t count)
{
    if (!map || !count || count > MAX_ACCESS)
        return CUDA_ERROR_INVALID_VALUE;
    uint8_t a[RGPU_MEM_POOL_SET_ACCESS_REQ_SIZE], bulk[MAX_ACCESS * 12];
    for (size_t i = 0; i < count; i++) {
        rgpu_put_u32(bulk + 12 * i, (uint32_t)map[i].location.type);
        rgpu_put_u32(bulk + 12 * i + 4, (uint32_t)map[i].location.id);
        rgpu_put_u32(bulk + 12 * i + 8, (uint32_t)map[i].flags);
    }
    rgpu_pack_mem_pool_set_access(a, &(struct rgpu_mem_pool_set_access_req){(uint64_t)(uintptr_t)pool, (uint32_t)count});
    return rgpu_call(RGPU_OP_MEM_POOL_SET_ACCESS, a, sizeof a, bulk, 12 * count, NULL, 0, NULL);
}

API CUresult cuMemPoolGetAccess(CUmemAccess_flags *flags, CUmemoryPool pool, CUmemLocation *location)
{
    if (!flags || !location)
        return CUDA_ERROR_INVALID_VALUE;
    uint8_t a[RGPU_MEM_POOL_GET_ACCESS_REQ_SIZE], rep[RGPU_MEM_POOL_GET_ACCESS_REP_SIZE];
    rgpu_pack_mem_pool_get_access(a, &(struct rgpu_mem_pool_get_access_req){(uint64_t)(uintptr_t)pool,
                                                                             (uint32_t)location->type, location->id});
    CUresult r = rgpu_call(RGPU_OP_MEM_POOL_GET_ACCESS, a, sizeof a, NULL, 0, rep, sizeof rep, NULL);
    struct rgpu_mem_pool_get_access_rep out;
    if (r == CUDA_SUCCESS && rgpu_unpack_mem_pool_get_access(rep, sizeof rep, &out) == 0)
        *flags = (CUmemAccess_flags)out.flags;
    return r;
}
