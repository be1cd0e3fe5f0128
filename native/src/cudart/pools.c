/* Stream-ordered memory in the runtime: one driver call each (the runtime's pool types and structures are the
 * driver's under other names: cudaMemPool_t is a CUmemoryPool, cudaMemPoolProps a CUmemPoolProps...). */
#include "rt.h"

_Static_assert(sizeof(struct cudaMemPoolProps) == sizeof(CUmemPoolProps), "pool properties differ");
_Static_assert(sizeof(struct cudaMemAccessDesc) == sizeof(CUmemAccessDesc), "access descriptors differ");

RT_API cudaError_t cudaMallocAsync(void **p, size_t size, cudaStream_t s)
{
    if (!p)
        return rt_record(cudaErrorInvalidValue);
    WITH_CONTEXT(cuMemAllocAsync((CUdeviceptr *)p, size, (CUstream)s));
}
RT_API cudaError_t cudaMallocAsync_ptsz(void **p, size_t size, cudaStream_t s) { return cudaMallocAsync(p, size, s); }

RT_API cudaError_t cudaMallocFromPoolAsync(void **p, size_t size, cudaMemPool_t pool, cudaStream_t s)
{
    if (!p)
        return rt_record(cudaErrorInvalidValue);
    WITH_CONTEXT(cuMemAllocFromPoolAsync((CUdeviceptr *)p, size, (CUmemoryPool)pool, (CUstream)s));
}
RT_API cudaError_t cudaMallocFromPoolAsync_ptsz(void **p, size_t size, cudaMemPool_t pool, cudaStream_t s)
{
    return cudaMallocFromPoolAsync(p, size, pool, s);
}

RT_API cudaError_t cudaFreeAsync(void *p, cudaStream_t s) { WITH_CONTEXT(cuMemFreeAsync((CUdeviceptr)p, (CUstream)s)); }
RT_API cudaError_t cudaFreeAsync_ptsz(void *p, cudaStream_t s) { return cudaFreeAsync(p, s); }

RT_API cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t *pool, int dev)
{
    WITH_CONTEXT(cuDeviceGetDefaultMemPool((CUmemoryPool *)pool, dev));
}
RT_API cudaError_t cudaDeviceGetMemPool(cudaMemPool_t *pool, int dev) { WITH_CONTEXT(cuDeviceGetMemPool((CUmemoryPool *)pool, dev)); }
RT_API cudaError_t cudaDeviceSetMemPool(int dev, cudaMemPool_t pool) { WITH_CONTEXT(cuDeviceSetMemPool(dev, (CUmemoryPool)pool)); }

#if CUDART_VERSION >= 13000
/* CUDA 13's pools by location: the driver's (the same location and allocation-type numbers and layouts). */
_Static_assert(sizeof(struct cudaMemLocation) == sizeof(CUmemLocation), "one location layout");
RT_API cudaError_t cudaMemGetDefaultMemPool(cudaMemPool_t *pool, struct cudaMemLocation *location,
                                            enum cudaMemAllocationType type)
{
    WITH_CONTEXT(cuMemGetDefaultMemPool((CUmemoryPool *)pool, (CUmemLocation *)location, (CUmemAllocationType)type));
}
RT_API cudaError_t cudaMemGetMemPool(cudaMemPool_t *pool, struct cudaMemLocation *location,
                                     enum cudaMemAllocationType type)
{
    WITH_CONTEXT(cuMemGetMemPool((CUmemoryPool *)pool, (CUmemLocation *)location, (CUmemAllocationType)type));
}
RT_API cudaError_t cudaMemSetMemPool(struct cudaMemLocation *location, enum cudaMemAllocationType type,
                                     cudaMemPool_t pool)
{
    WITH_CONTEXT(cuMemSetMemPool((CUmemLocation *)location, (CUmemAllocationType)type, (CUmemoryPool)pool));
}
#endif

RT_API cudaError_t cudaMemPoolCreate(cudaMemPool_t *pool, const struct cudaMemPoolProps *props)
{
    WITH_CONTEXT(cuMemPoolCreate((CUmemoryPool *)pool, (const CUmemPoolProps *)props));
}
RT_API cudaError_t cudaMemPoolDestroy(cudaMemPool_t pool) { WITH_CONTEXT(cuMemPoolDestroy((CUmemoryPool)pool)); }
RT_API cudaError_t cudaMemPoolTrimTo(cudaMemPool_t pool, size_t keep) { WITH_CONTEXT(cuMemPoolTrimTo((CUmemoryPool)pool, keep)); }

RT_API cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t pool, enum cudaMemPoolAttr attr, void *value)
{
    WITH_CONTEXT(cuMemPoolSetAttribute((CUmemoryPool)pool, (CUmemPool_attribute)attr, value));
}
RT_API cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t pool, enum cudaMemPoolAttr attr, void *value)
{
    WITH_CONTEXT(cuMemPoolGetAttribute((CUmemoryPool)pool, (CUmemPool_attribute)attr, value));
}

RT_API cudaError_t cudaMemPoolSetAccess(cudaMemPool_t pool, const struct cudaMemAccessDesc *map, size_t count)
{
    WITH_CONTEXT(cuMemPoolSetAccess((CUmemoryPool)pool, (const CUmemAccessDesc *)map, count));
}
RT_API cudaError_t cudaMemPoolGetAccess(enum cudaMemAccessFlags *flags, cudaMemPool_t pool, struct cudaMemLocation *location)
{
    WITH_CONTEXT(cuMemPoolGetAccess((CUmemAccess_flags *)flags, (CUmemoryPool)pool, (CUmemLocation *)location));
}
