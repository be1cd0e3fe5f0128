/* Managed memory through the runtime: allocation and the hints, on the driver's (managed.c of the driver stand-in
 * says how rgpu keeps the program's and the GPU's bytes the same). */
#include "rt.h"

RT_API cudaError_t cudaMallocManaged(void **p, size_t size, unsigned int flags)
{
    if (!p || (flags != cudaMemAttachGlobal && flags != cudaMemAttachHost))
        return rt_record(cudaErrorInvalidValue);
    if (!size) { /* nothing asked for: success and no memory (the H100's runtime answers so) */
        *p = NULL;
        return cudaSuccess;
    }
    cudaError_t e = rt_context(NULL);
    if (e != cudaSuccess)
        return rt_record(e);
    CUdeviceptr d = 0;
    CUresult r = cuMemAllocManaged(&d, size, flags);
    *p = r == CUDA_SUCCESS ? (void *)(uintptr_t)d : NULL;
    return r == CUDA_ERROR_OUT_OF_MEMORY ? rt_record(cudaErrorMemoryAllocation) : rt_fail(r);
}

static int to_host(struct cudaMemLocation where)
{
    return where.type == cudaMemLocationTypeHost || where.type == cudaMemLocationTypeHostNuma ||
           where.type == cudaMemLocationTypeHostNumaCurrent;
}

static CUmemLocation location(struct cudaMemLocation where)
{
    return (CUmemLocation){to_host(where) ? CU_MEM_LOCATION_TYPE_HOST : CU_MEM_LOCATION_TYPE_DEVICE, where.id};
}

static cudaError_t prefetch(const void *p, size_t n, struct cudaMemLocation where, unsigned flags, cudaStream_t s)
{
    WITH_CONTEXT(cuMemPrefetchAsync_v2((CUdeviceptr)(uintptr_t)p, n, location(where), flags, (CUstream)s));
}

static cudaError_t advise(const void *p, size_t n, enum cudaMemoryAdvise advice, struct cudaMemLocation where)
{
    WITH_CONTEXT(cuMemAdvise_v2((CUdeviceptr)(uintptr_t)p, n, (CUmem_advise)advice, location(where)));
}

#if CUDART_VERSION >= 13000
RT_API cudaError_t cudaMemPrefetchAsync(const void *p, size_t n, struct cudaMemLocation where, unsigned int flags,
                                        cudaStream_t s)
{
    return prefetch(p, n, where, flags, s);
}
RT_API cudaError_t cudaMemPrefetchAsync_ptsz(const void *p, size_t n, struct cudaMemLocation where,
                                             unsigned int flags, cudaStream_t s)
{
    return prefetch(p, n, where, flags, s ? s : cudaStreamPerThread);
}
RT_API cudaError_t cudaMemAdvise(const void *p, size_t n, enum cudaMemoryAdvise advice, struct cudaMemLocation where)
{
    return advise(p, n, advice, where);
}
#else
static struct cudaMemLocation of_device(int device)
{
    struct cudaMemLocation where = {device == cudaCpuDeviceId ? cudaMemLocationTypeHost : cudaMemLocationTypeDevice,
                                    device};
    return where;
}

RT_API cudaError_t cudaMemPrefetchAsync(const void *p, size_t n, int device, cudaStream_t s)
{
    return prefetch(p, n, of_device(device), 0, s);
}
RT_API cudaError_t cudaMemPrefetchAsync_ptsz(const void *p, size_t n, int device, cudaStream_t s)
{
    return prefetch(p, n, of_device(device), 0, s ? s : cudaStreamPerThread);
}
RT_API cudaError_t cudaMemPrefetchAsync_v2(const void *p, size_t n, struct cudaMemLocation where, unsigned int flags,
                                           cudaStream_t s)
{
    return prefetch(p, n, where, flags, s);
}
RT_API cudaError_t cudaMemPrefetchAsync_v2_ptsz(const void *p, size_t n, struct cudaMemLocation where,
                                                unsigned int flags, cudaStream_t s)
{
    return prefetch(p, n, where, flags, s ? s : cudaStreamPerThread);
}
RT_API cudaError_t cudaMemAdvise(const void *p, size_t n, enum cudaMemoryAdvise advice, int device)
{
    return advise(p, n, advice, of_device(device));
}
RT_API cudaError_t cudaMemAdvise_v2(const void *p, size_t n, enum cudaMemoryAdvise advice, struct cudaMemLocation where)
{
    return advise(p, n, advice, where);
}
#endif

RT_API cudaError_t cudaStreamAttachMemAsync(cudaStream_t s, void *p, size_t n, unsigned int flags)
{
    WITH_CONTEXT(cuStreamAttachMemAsync((CUstream)s, (CUdeviceptr)(uintptr_t)p, n, flags));
}
RT_API cudaError_t cudaStreamAttachMemAsync_ptsz(cudaStream_t s, void *p, size_t n, unsigned int flags)
{
    return cudaStreamAttachMemAsync(s ? s : cudaStreamPerThread, p, n, flags);
}

/* What the program advised and prefetched for a range (the driver stand-in keeps it). */
RT_API cudaError_t cudaMemRangeGetAttribute(void *data, size_t size, enum cudaMemRangeAttribute attr, const void *p,
                                            size_t n)
{
    WITH_CONTEXT(cuMemRangeGetAttribute(data, size, (CUmem_range_attribute)attr, (CUdeviceptr)(uintptr_t)p, n));
}
RT_API cudaError_t cudaMemRangeGetAttributes(void **data, size_t *sizes, enum cudaMemRangeAttribute *attrs,
                                             size_t count, const void *p, size_t n)
{
    WITH_CONTEXT(cuMemRangeGetAttributes(data, sizes, (CUmem_range_attribute *)attrs, count,
                                         (CUdeviceptr)(uintptr_t)p, n));
}
