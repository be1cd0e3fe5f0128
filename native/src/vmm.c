/* Virtual memory management: cuMemCreate, cuMemAddressReserve, cuMemMap and friends.
 *
 * The server owns the state and does the checking (src/rgpu/dispatch/vmm.py); this side keeps only what makes
 * mapped memory ordinary device memory for the rest of the shim: the mapped spans of each reservation, adjacent
 * mappings merged, registered as device ranges (pointer queries, unified copies, deferrable copies).
 * Only device memory can be allocated and mapped: host locations and exporting to OS handles would name
 * memory on the server's machine. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "rgpu_shim.h"

#define API __attribute__((visibility("default")))

struct span {
    uint64_t start, size;
};
struct reservation {
    uint64_t start, size, ctx;
    struct span *maps; /* sorted by start */
    size_t n, cap;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
RGPU_FORK_RESET(lock, &lock)
static struct reservation *reservations;
static size_t n_reservations, cap_reservations;

/* Caller holds the lock. */
static struct reservation *reservation_of(uint64_t ptr)
{
    for (size_t i = 0; i < n_reservations; i++)
        if (ptr >= reservations[i].start && ptr - reservations[i].start < reservations[i].size)
            return &reservations[i];
    return NULL;
}

/* The reservation's device ranges: its mappings, adjacent ones merged. Caller holds the lock. */
static void publish(const struct reservation *r)
{
    rgpu_ranges_drop_device_within(r->start, r->size);
    for (size_t i = 0; i < r->n;) {
        uint64_t start = r->maps[i].start, end = start + r->maps[i].size;
        for (i++; i < r->n && r->maps[i].start == end; i++)
            end += r->maps[i].size;
        rgpu_ranges_note_device(start, end - start, r->ctx);
    }
}

static void note_reservation(uint64_t start, uint64_t size, uint64_t ctx)
{
    pthread_mutex_lock(&lock);
    for (size_t i = 0; i < n_reservations;) /* the same addresses, left behind by a destroyed context */
        if (reservations[i].start < start + size && start < reservations[i].start + reservations[i].size) {
            free(reservations[i].maps);
            reservations[i] = reservations[--n_reservations];
        } else {
            i++;
        }
    if (n_reservations == cap_reservations) {
        size_t cap = cap_reservations ? 2 * cap_reservations : 16;
        struct reservation *v = realloc(reservations, cap * sizeof *v);
        if (!v) {
            pthread_mutex_unlock(&lock);
            return; /* only local knowledge is lost: the server still checks every use */
        }
        reservations = v, cap_reservations = cap;
    }
    reservations[n_reservations++] = (struct reservation){start, size, ctx, NULL, 0, 0};
    pthread_mutex_unlock(&lock);
}

static int grow(struct reservation *r)
{
    if (r->n < r->cap)
        return 0;
    size_t cap = r->cap ? 2 * r->cap : 8;
    struct span *v = realloc(r->maps, cap * sizeof *v);
    if (!v)
        return -1;
    r->maps = v, r->cap = cap;
    return 0;
}

static void note_map(uint64_t ptr, uint64_t size)
{
    pthread_mutex_lock(&lock);
    struct reservation *r = reservation_of(ptr);
    if (r && grow(r) == 0) { /* (out of memory: only local knowledge is lost; the server checks every use) */
        size_t i = 0;
        while (i < r->n && r->maps[i].start < ptr)
            i++;
        memmove(r->maps + i + 1, r->maps + i, (r->n - i) * sizeof *r->maps);
        r->maps[i] = (struct span){ptr, size};
        r->n++;
        publish(r);
    }
    pthread_mutex_unlock(&lock);
}

static void note_unmap(uint64_t ptr, uint64_t size)
{
    pthread_mutex_lock(&lock);
    struct reservation *r = reservation_of(ptr);
    if (r) {
        size_t k = 0;
        for (size_t i = 0; i < r->n; i++)
            if (r->maps[i].start < ptr || r->maps[i].start + r->maps[i].size > ptr + size)
                r->maps[k++] = r->maps[i];
        r->n = k;
        publish(r);
    }
    pthread_mutex_unlock(&lock);
}

static void forget_reservation(uint64_t ptr)
{
    pthread_mutex_lock(&lock);
    struct reservation *r = reservation_of(ptr);
    if (r) {
        rgpu_ranges_drop_device_within(r->start, r->size);
        free(r->maps);
        *r = reservations[--n_reservations];
    }
    pthread_mutex_unlock(&lock);
}

/* -- properties ------------------------------------------------------------------------------------------ */
static int logged_location;

static CUresult check_prop(const CUmemAllocationProp *prop)
{
    if (!prop || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED)
        return CUDA_ERROR_INVALID_VALUE;
    if (prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return rgpu_unsupported(&logged_location, "virtual memory on a host location (it would be the server's)");
    return CUDA_SUCCESS;
}

API CUresult cuMemGetAllocationGranularity(size_t *granularity, const CUmemAllocationProp *prop,
                                           CUmemAllocationGranularity_flags option)
{
    if (!granularity)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = check_prop(prop);
    if (r != CUDA_SUCCESS)
        return r;
    uint8_t a[RGPU_MEM_GET_GRANULARITY_REQ_SIZE], rep[RGPU_MEM_GET_GRANULARITY_REP_SIZE];
    struct rgpu_mem_get_granularity_req req = {prop->location.id, (uint32_t)option, (uint32_t)prop->requestedHandleTypes,
                                               prop->allocFlags.compressionType};
    rgpu_pack_mem_get_granularity(a, &req);
    r = rgpu_call(RGPU_OP_MEM_GET_GRANULARITY, a, sizeof a, NULL, 0, rep, sizeof rep, NULL);
    struct rgpu_mem_get_granularity_rep out;
    if (r == CUDA_SUCCESS && rgpu_unpack_mem_get_granularity(rep, sizeof rep, &out) == 0)
        *granularity = (size_t)out.granularity;
    return r;
}

API CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
                         unsigned long long flags)
{
    if (!handle)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = check_prop(prop);
    if (r != CUDA_SUCCESS)
        return r;
    uint8_t a[RGPU_MEM_CREATE_REQ_SIZE], rep[RGPU_MEM_CREATE_REP_SIZE];
    struct rgpu_mem_create_req req = {size, prop->location.id, (uint32_t)prop->requestedHandleTypes,
                                      prop->allocFlags.compressionType, prop->allocFlags.usage, flags};
    rgpu_pack_mem_create(a, &req);
    r = rgpu_call(RGPU_OP_MEM_CREATE, a, sizeof a, NULL, 0, rep, sizeof rep, NULL);
    struct rgpu_mem_create_rep out;
    if (r == CUDA_SUCCESS && rgpu_unpack_mem_create(rep, sizeof rep, &out) == 0)
        *handle = (CUmemGenericAllocationHandle)out.handle;
    return r;
}

API CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
    uint8_t a[RGPU_MEM_RELEASE_REQ_SIZE];
    rgpu_pack_mem_release(a, &(struct rgpu_mem_release_req){handle});
    return rgpu_call(RGPU_OP_MEM_RELEASE, a, sizeof a, NULL, 0, NULL, 0, NULL);
}

API CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop, CUmemGenericAllocationHandle handle)
{
    if (!prop)
        return CUDA_ERROR_INVALID_VALUE;
    uint8_t a[RGPU_MEM_GET_ALLOCATION_PROPERTIES_REQ_SIZE], rep[RGPU_MEM_GET_ALLOCATION_PROPERTIES_REP_SIZE];
    rgpu_pack_mem_get_allocation_properties(a, &(struct rgpu_mem_get_allocation_properties_req){handle});
    CUresult r = rgpu_call(RGPU_OP_MEM_GET_ALLOCATION_PROPERTIES, a, sizeof a, NULL, 0, rep, sizeof rep, NULL);
    struct rgpu_mem_get_allocation_properties_rep out;
    if (r == CUDA_SUCCESS && rgpu_unpack_mem_get_allocation_properties(rep, sizeof rep, &out) == 0) {
        memset(prop, 0, sizeof *prop);
        prop->type = CU_MEM_ALLOCATION_TYPE_PINNED;
        prop->requestedHandleTypes = (CUmemAllocationHandleType)out.handle_types;
        prop->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        prop->location.id = out.device;
        prop->allocFlags.compressionType = (unsigned char)out.compression;
        prop->allocFlags.usage = (unsigned short)out.usage;
    }
    return r;
}

API CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr)
{
    if (!handle)
        return CUDA_ERROR_INVALID_VALUE;
    uint8_t a[RGPU_MEM_RETAIN_ALLOCATION_HANDLE_REQ_SIZE], rep[RGPU_MEM_RETAIN_ALLOCATION_HANDLE_REP_SIZE];
    rgpu_pack_mem_retain_allocation_handle(a, &(struct rgpu_mem_retain_allocation_handle_req){(uint64_t)(uintptr_t)addr});
    CUresult r = rgpu_call(RGPU_OP_MEM_RETAIN_ALLOCATION_HANDLE, a, sizeof a, NULL, 0, rep, sizeof rep, NULL);
    struct rgpu_mem_retain_allocation_handle_rep out;
    if (r == CUDA_SUCCESS && rgpu_unpack_mem_retain_allocation_handle(rep, sizeof rep, &out) == 0)
        *handle = (CUmemGenericAllocationHandle)out.handle;
    return r;
}

/* -- address ranges and mappings ------------------------------------------------------------------------- */
API CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
                                 unsigned long long flags)
{
    if (!ptr)
        return CUDA_ERROR_INVALID_VALUE;
    uint8_t a[RGPU_MEM_ADDRESS_RESERVE_REQ_SIZE], rep[RGPU_MEM_ADDRESS_RESERVE_REP_SIZE];
    rgpu_pack_mem_address_reserve(a, &(struct rgpu_mem_address_reserve_req){size, alignment, addr, flags});
    CUresult r = rgpu_call(RGPU_OP_MEM_ADDRESS_RESERVE, a, sizeof a, NULL, 0, rep, sizeof rep, NULL);
    struct rgpu_mem_address_reserve_rep out;
    if (r == CUDA_SUCCESS && rgpu_unpack_mem_address_reserve(rep, sizeof rep, &out) == 0) {
        *ptr = (CUdeviceptr)out.ptr;
        note_reservation(out.ptr, size, rgpu_thread_ctx());
    }
    return r;
}

API CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
    uint8_t a[RGPU_MEM_ADDRESS_FREE_REQ_SIZE];
    rgpu_pack_mem_address_free(a, &(struct rgpu_mem_address_free_req){ptr, size});
    CUresult r = rgpu_call(RGPU_OP_MEM_ADDRESS_FREE, a, sizeof a, NULL, 0, NULL, 0, NULL);
    if (r == CUDA_SUCCESS)
        forget_reservation(ptr);
    return r;
}

API CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                      unsigned long long flags)
{
    uint8_t a[RGPU_MEM_MAP_REQ_SIZE];
    rgpu_pack_mem_map(a, &(struct rgpu_mem_map_req){ptr, size, offset, handle, flags});
    CUresult r = rgpu_call(RGPU_OP_MEM_MAP, a, sizeof a, NULL, 0, NULL, 0, NULL);
    if (r == CUDA_SUCCESS)
        note_map(ptr, size);
    return r;
}

API CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    uint8_t a[RGPU_MEM_UNMAP_REQ_SIZE];
    rgpu_pack_mem_unmap(a, &(struct rgpu_mem_unmap_req){ptr, size});
    CUresult r = rgpu_call(RGPU_OP_MEM_UNMAP, a, sizeof a, NULL, 0, NULL, 0, NULL);
    if (r == CUDA_SUCCESS)
        note_unmap(ptr, size);
    return r;
}

#define MAX_ACCESS 64 /* the server's limit on descriptors per call */

API CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count)
{
    if (!desc || !count || count > MAX_ACCESS)
        return CUDA_ERROR_INVALID_VALUE;
    uint8_t a[RGPU_MEM_SET_ACCESS_REQ_SIZE], bulk[MAX_ACCESS * 12];
    for (size_t i = 0; i < count; i++) {
        rgpu_put_u32(bulk + 12 * i, (uint32_t)desc[i].location.type);
        rgpu_put_u32(bulk + 12 * i + 4, (uint32_t)desc[i].location.id);
        rgpu_put_u32(bulk + 12 * i + 8, (uint32_t)desc[i].flags);
    }
    rgpu_pack_mem_set_access(a, &(struct rgpu_mem_set_access_req){ptr, size, (uint32_t)count});
    return rgpu_call(RGPU_OP_MEM_SET_ACCESS, a, sizeof a, bulk, 12 * count, NULL, 0, NULL);
}

API CUresult cuMemGetAccess(unsigned long long *flags, const CUmemLocation *location, CUdeviceptr ptr)
{
    if (!flags || !location)
        return CUDA_ERROR_INVALID_VALUE;
    uint8_t a[RGPU_MEM_GET_ACCESS_REQ_SIZE], rep[RGPU_MEM_GET_ACCESS_REP_SIZE];
    rgpu_pack_mem_get_access(a, &(struct rgpu_mem_get_access_req){ptr, (uint32_t)location->type, location->id});
    CUresult r = rgpu_call(RGPU_OP_MEM_GET_ACCESS, a, sizeof a, NULL, 0, rep, sizeof rep, NULL);
    struct rgpu_mem_get_access_rep out;
    if (r == CUDA_SUCCESS && rgpu_unpack_mem_get_access(rep, sizeof rep, &out) == 0)
        *flags = out.flags;
    return r;
}
