/* Memory: allocation, copies, memsets, host memory and pointer queries, on the driver API. The driver shim
 * knows which ranges are device memory, so cudaMemcpyDefault and pointer attributes cost no round trip. */
#include <string.h>

#include "rt.h"

RT_API cudaError_t cudaMalloc(void **p, size_t size)
{
    if (!p)
        return rt_record(cudaErrorInvalidValue);
    cudaError_t e = rt_context(NULL);
    if (e != cudaSuccess)
        return rt_record(e);
    if (!size) {
        *p = NULL;
        return cudaSuccess;
    }
    CUdeviceptr d = 0;
    CUresult r = cuMemAlloc(&d, size);
    *p = r == CUDA_SUCCESS ? (void *)(uintptr_t)d : NULL;
    return r == CUDA_ERROR_OUT_OF_MEMORY ? rt_record(cudaErrorMemoryAllocation) : rt_fail(r);
}

RT_API cudaError_t cudaFree(void *p)
{
    cudaError_t e = rt_context(NULL);
    if (e != cudaSuccess || !p)
        return rt_record(e);
    CUresult r = cuMemFree((CUdeviceptr)(uintptr_t)p);
    return r == CUDA_ERROR_INVALID_VALUE ? rt_record(cudaErrorInvalidValue) : rt_fail(r);
}

RT_API cudaError_t cudaMallocPitch(void **p, size_t *pitch, size_t width, size_t height)
{
    CUdeviceptr d = 0;
    if (!p || !pitch)
        return rt_record(cudaErrorInvalidValue);
    cudaError_t e = rt_context(NULL);
    if (e != cudaSuccess)
        return rt_record(e);
    CUresult r = cuMemAllocPitch(&d, pitch, width, height, 4);
    *p = (void *)(uintptr_t)d;
    return rt_fail(r);
}

RT_API cudaError_t cudaMallocHost(void **p, size_t size) { WITH_CONTEXT(cuMemAllocHost(p, size)); }
RT_API cudaError_t cudaHostAlloc(void **p, size_t size, unsigned int flags) { WITH_CONTEXT(cuMemHostAlloc(p, size, flags)); }
RT_API cudaError_t cudaFreeHost(void *p) { WITH_CONTEXT(cuMemFreeHost(p)); }
RT_API cudaError_t cudaHostRegister(void *p, size_t size, unsigned int flags) { WITH_CONTEXT(cuMemHostRegister(p, size, flags)); }
RT_API cudaError_t cudaHostUnregister(void *p) { WITH_CONTEXT(cuMemHostUnregister(p)); }
RT_API cudaError_t cudaHostGetFlags(unsigned int *flags, void *p) { WITH_CONTEXT(cuMemHostGetFlags(flags, p)); }

RT_API cudaError_t cudaHostGetDevicePointer(void **dev, void *host, unsigned int flags)
{
    CUdeviceptr d = 0;
    cudaError_t e = rt_context(NULL);
    if (e != cudaSuccess)
        return rt_record(e);
    CUresult r = cuMemHostGetDevicePointer(&d, host, flags);
    if (dev)
        *dev = (void *)(uintptr_t)d;
    return rt_fail(r);
}

RT_API cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *a, const void *ptr)
{
    if (!a)
        return rt_record(cudaErrorInvalidValue);
    cudaError_t e = rt_context(NULL);
    if (e != cudaSuccess)
        return rt_record(e);
    unsigned type = 0;
    int ordinal = -2, managed = 0;
    CUdeviceptr dptr = 0;
    void *hptr = NULL;
    CUpointer_attribute which[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                   CU_POINTER_ATTRIBUTE_DEVICE_POINTER, CU_POINTER_ATTRIBUTE_HOST_POINTER,
                                   CU_POINTER_ATTRIBUTE_IS_MANAGED};
    void *data[] = {&type, &ordinal, &dptr, &hptr, &managed};
    CUresult r = cuPointerGetAttributes(5, which, data, (CUdeviceptr)(uintptr_t)ptr);
    if (r != CUDA_SUCCESS)
        return rt_fail(r);
    memset(a, 0, sizeof *a);
    a->type = managed ? cudaMemoryTypeManaged : type == CU_MEMORYTYPE_DEVICE ? cudaMemoryTypeDevice
                                              : type == CU_MEMORYTYPE_HOST   ? cudaMemoryTypeHost
                                                                             : cudaMemoryTypeUnregistered;
    a->device = type == CU_MEMORYTYPE_DEVICE ? ordinal : type == CU_MEMORYTYPE_HOST ? 0 : -2;
    a->devicePointer = (void *)(uintptr_t)dptr;
    a->hostPointer = type == CU_MEMORYTYPE_DEVICE && !managed ? NULL : (hptr ? hptr : (void *)ptr);
    if (type == 0)
        a->hostPointer = (void *)ptr;
    return cudaSuccess;
}

/* -- copies ------------------------------------------------------------------------------------------------- */
static CUresult copy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind, cudaStream_t s, int async)
{
    CUdeviceptr d = (CUdeviceptr)(uintptr_t)dst, sp = (CUdeviceptr)(uintptr_t)src;
    CUstream cs = (CUstream)s;
    switch (kind) {
    case cudaMemcpyHostToDevice:
        return async ? cuMemcpyHtoDAsync(d, src, n, cs) : cuMemcpyHtoD(d, src, n);
    case cudaMemcpyDeviceToHost:
        return async ? cuMemcpyDtoHAsync(dst, sp, n, cs) : cuMemcpyDtoH(dst, sp, n);
    case cudaMemcpyDeviceToDevice:
        return async ? cuMemcpyDtoDAsync(d, sp, n, cs) : cuMemcpyDtoD(d, sp, n);
    case cudaMemcpyHostToHost:
    case cudaMemcpyDefault:
        return async ? cuMemcpyAsync(d, sp, n, cs) : cuMemcpy(d, sp, n);
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
}

/* A copy's direction checked and the device's context made current; the error recorded, or cudaSuccess. */
cudaError_t rt_copy_start(enum cudaMemcpyKind kind)
{
    if ((unsigned)kind > cudaMemcpyDefault)
        return rt_record(cudaErrorInvalidMemcpyDirection);
    cudaError_t e = rt_context(NULL);
    return e == cudaSuccess ? e : rt_record(e);
}

static cudaError_t memcpy_checked(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind, cudaStream_t s,
                                  int async)
{
    cudaError_t e = rt_copy_start(kind);
    if (e != cudaSuccess)
        return e;
    return n ? rt_fail(copy(dst, src, n, kind, s, async)) : cudaSuccess;
}

RT_API cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind)
{
    return memcpy_checked(dst, src, n, kind, NULL, 0);
}
RT_API cudaError_t cudaMemcpy_ptds(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind)
{
    return memcpy_checked(dst, src, n, kind, NULL, 0);
}
RT_API cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind, cudaStream_t s)
{
    return memcpy_checked(dst, src, n, kind, s, 1);
}
RT_API cudaError_t cudaMemcpyAsync_ptsz(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind, cudaStream_t s)
{
    return memcpy_checked(dst, src, n, kind, s, 1);
}

/* cudaMemcpyBatchAsync: the driver's batch (the attributes are the driver's, field for field). */
#if CUDART_VERSION >= 13000
static cudaError_t copy_batch(void *const *dsts, const void *const *srcs, const size_t *sizes, size_t count,
                              struct cudaMemcpyAttributes *attrs, size_t *idxs, size_t n, size_t *failed,
                              cudaStream_t s)
#else
static cudaError_t copy_batch(void **dsts, void **srcs, size_t *sizes, size_t count, struct cudaMemcpyAttributes *attrs,
                              size_t *idxs, size_t n, size_t *failed, cudaStream_t s)
#endif
{
    _Static_assert(sizeof(struct cudaMemcpyAttributes) == sizeof(CUmemcpyAttributes), "one attribute layout");
    cudaError_t e = rt_context(NULL);
    if (e != cudaSuccess)
        return rt_record(e);
#if CUDART_VERSION >= 13000
    (void)failed;
    return rt_fail(cuMemcpyBatchAsync((CUdeviceptr *)dsts, (CUdeviceptr *)srcs, (size_t *)sizes, count,
                                      (CUmemcpyAttributes *)attrs, idxs, n, (CUstream)s));
#else
    return rt_fail(cuMemcpyBatchAsync((CUdeviceptr *)dsts, (CUdeviceptr *)srcs, sizes, count, (CUmemcpyAttributes *)attrs,
                                      idxs, n, failed, (CUstream)s));
#endif
}

#if CUDART_VERSION >= 13000
RT_API cudaError_t cudaMemcpyBatchAsync(void *const *dsts, const void *const *srcs, const size_t *sizes, size_t count,
                                        struct cudaMemcpyAttributes *attrs, size_t *idxs, size_t n, cudaStream_t s)
{
    return copy_batch(dsts, srcs, sizes, count, attrs, idxs, n, NULL, s);
}
RT_API cudaError_t cudaMemcpyBatchAsync_ptsz(void *const *dsts, const void *const *srcs, const size_t *sizes,
                                             size_t count, struct cudaMemcpyAttributes *attrs, size_t *idxs, size_t n,
                                             cudaStream_t s)
{
    return copy_batch(dsts, srcs, sizes, count, attrs, idxs, n, NULL, s ? s : cudaStreamPerThread);
}
#else
RT_API cudaError_t cudaMemcpyBatchAsync(void **dsts, void **srcs, size_t *sizes, size_t count,
                                        struct cudaMemcpyAttributes *attrs, size_t *idxs, size_t n, size_t *failed,
                                        cudaStream_t s)
{
    return copy_batch(dsts, srcs, sizes, count, attrs, idxs, n, failed, s);
}
RT_API cudaError_t cudaMemcpyBatchAsync_ptsz(void **dsts, void **srcs, size_t *sizes, size_t count,
                                             struct cudaMemcpyAttributes *attrs, size_t *idxs, size_t n,
                                             size_t *failed, cudaStream_t s)
{
    return copy_batch(dsts, srcs, sizes, count, attrs, idxs, n, failed, s ? s : cudaStreamPerThread);
}
#endif

/* Each side's memory type for a copy of `kind` (the driver resolves cudaMemcpyDefault's by address). */
void rt_memory_types(enum cudaMemcpyKind kind, CUmemorytype *src, CUmemorytype *dst)
{
    int src_dev = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
    int dst_dev = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
    *src = kind == cudaMemcpyDefault ? CU_MEMORYTYPE_UNIFIED : src_dev ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST;
    *dst = kind == cudaMemcpyDefault ? CU_MEMORYTYPE_UNIFIED : dst_dev ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST;
}

static cudaError_t copy_2d(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height,
                           enum cudaMemcpyKind kind, cudaStream_t s, int async)
{
    if (height > 1 && (dpitch < width || spitch < width) && (unsigned)kind <= cudaMemcpyDefault)
        return rt_record(cudaErrorInvalidPitchValue);
    cudaError_t e = rt_copy_start(kind);
    if (e != cudaSuccess)
        return e;
    CUDA_MEMCPY2D p;
    memset(&p, 0, sizeof p);
    rt_memory_types(kind, &p.srcMemoryType, &p.dstMemoryType);
    p.srcHost = src, p.srcDevice = (CUdeviceptr)(uintptr_t)src, p.srcPitch = spitch;
    p.dstHost = dst, p.dstDevice = (CUdeviceptr)(uintptr_t)dst, p.dstPitch = dpitch;
    p.WidthInBytes = width, p.Height = height;
    return rt_fail(async ? cuMemcpy2DAsync(&p, (CUstream)s) : cuMemcpy2D(&p));
}

RT_API cudaError_t cudaMemcpy2D(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height,
                                enum cudaMemcpyKind kind)
{
    return copy_2d(dst, dpitch, src, spitch, width, height, kind, NULL, 0);
}
RT_API cudaError_t cudaMemcpy2D_ptds(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                                     size_t height, enum cudaMemcpyKind kind)
{
    return copy_2d(dst, dpitch, src, spitch, width, height, kind, NULL, 0);
}
RT_API cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                                     size_t height, enum cudaMemcpyKind kind, cudaStream_t s)
{
    return copy_2d(dst, dpitch, src, spitch, width, height, kind, s, 1);
}
RT_API cudaError_t cudaMemcpy2DAsync_ptsz(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                                          size_t height, enum cudaMemcpyKind kind, cudaStream_t s)
{
    return copy_2d(dst, dpitch, src, spitch, width, height, kind, s, 1);
}

/* -- 3D: linear memory (pitched pointers) through the driver's 3D copy (with CUDA arrays: arrays.c) ---------- */
static cudaError_t copy_3d(const struct cudaMemcpy3DParms *p, cudaStream_t s, int async)
{
    return p ? rt_copy_3d(p, s, async) : rt_record(cudaErrorInvalidValue);
}

RT_API cudaError_t cudaMemcpy3D(const struct cudaMemcpy3DParms *p) { return copy_3d(p, NULL, 0); }
RT_API cudaError_t cudaMemcpy3D_ptds(const struct cudaMemcpy3DParms *p) { return copy_3d(p, NULL, 0); }
RT_API cudaError_t cudaMemcpy3DAsync(const struct cudaMemcpy3DParms *p, cudaStream_t s) { return copy_3d(p, s, 1); }
RT_API cudaError_t cudaMemcpy3DAsync_ptsz(const struct cudaMemcpy3DParms *p, cudaStream_t s)
{
    return copy_3d(p, s, 1);
}

/* A volume's rows pitched as cudaMallocPitch pitches them, its slices one after another. */
RT_API cudaError_t cudaMalloc3D(struct cudaPitchedPtr *p, struct cudaExtent e)
{
    void *d = NULL;
    size_t pitch = 0, rows;
    if (!p || __builtin_mul_overflow(e.height, e.depth, &rows))
        return rt_record(cudaErrorInvalidValue);
    cudaError_t r = cudaMallocPitch(&d, &pitch, e.width, rows);
    if (r == cudaSuccess)
        *p = (struct cudaPitchedPtr){.ptr = d, .pitch = pitch, .xsize = e.width, .ysize = e.height};
    return r;
}

/* A 3D memset as 2D ones: one where the volume's slices are exactly the extent's height, else one a slice. */
static cudaError_t memset_3d(struct cudaPitchedPtr p, int value, struct cudaExtent e, cudaStream_t s, int async)
{
    cudaError_t err = rt_context(NULL);
    if (err != cudaSuccess)
        return rt_record(err);
    if (!e.width || !e.height || !e.depth)
        return cudaSuccess;
    size_t height = e.height, depth = e.depth, slice;
    if (depth > 1 && p.ysize < height)
        return rt_record(cudaErrorInvalidValue);
    if (depth == 1 || p.ysize == height) {
        if (__builtin_mul_overflow(height, depth, &height))
            return rt_record(cudaErrorInvalidValue);
        depth = 1;
    }
    if (__builtin_mul_overflow(p.pitch, p.ysize, &slice))
        return rt_record(cudaErrorInvalidValue);
    for (size_t z = 0; z < depth; z++) {
        CUdeviceptr at = (CUdeviceptr)(uintptr_t)p.ptr + z * slice; /* (z * slice < depth * slice: allocated) */
        CUresult r = async ? cuMemsetD2D8Async(at, p.pitch, (unsigned char)value, e.width, height, (CUstream)s)
                           : cuMemsetD2D8(at, p.pitch, (unsigned char)value, e.width, height);
        if (r != CUDA_SUCCESS)
            return rt_fail(r);
    }
    return cudaSuccess;
}

RT_API cudaError_t cudaMemset3D(struct cudaPitchedPtr p, int value, struct cudaExtent e)
{
    return memset_3d(p, value, e, NULL, 0);
}
RT_API cudaError_t cudaMemset3D_ptds(struct cudaPitchedPtr p, int value, struct cudaExtent e)
{
    return memset_3d(p, value, e, NULL, 0);
}
RT_API cudaError_t cudaMemset3DAsync(struct cudaPitchedPtr p, int value, struct cudaExtent e, cudaStream_t s)
{
    return memset_3d(p, value, e, s, 1);
}
RT_API cudaError_t cudaMemset3DAsync_ptsz(struct cudaPitchedPtr p, int value, struct cudaExtent e, cudaStream_t s)
{
    return memset_3d(p, value, e, s, 1);
}

/* -- memsets ------------------------------------------------------------------------------------------------ */
RT_API cudaError_t cudaMemset(void *p, int value, size_t n) { WITH_CONTEXT(cuMemsetD8((CUdeviceptr)(uintptr_t)p, (unsigned char)value, n)); }
RT_API cudaError_t cudaMemset_ptds(void *p, int value, size_t n) { return cudaMemset(p, value, n); }

RT_API cudaError_t cudaMemsetAsync(void *p, int value, size_t n, cudaStream_t s)
{
    WITH_CONTEXT(cuMemsetD8Async((CUdeviceptr)(uintptr_t)p, (unsigned char)value, n, (CUstream)s));
}
RT_API cudaError_t cudaMemsetAsync_ptsz(void *p, int value, size_t n, cudaStream_t s) { return cudaMemsetAsync(p, value, n, s); }

RT_API cudaError_t cudaMemset2D(void *p, size_t pitch, int value, size_t width, size_t height)
{
    WITH_CONTEXT(cuMemsetD2D8((CUdeviceptr)(uintptr_t)p, pitch, (unsigned char)value, width, height));
}
RT_API cudaError_t cudaMemset2D_ptds(void *p, size_t pitch, int value, size_t width, size_t height)
{
    return cudaMemset2D(p, pitch, value, width, height);
}
RT_API cudaError_t cudaMemset2DAsync(void *p, size_t pitch, int value, size_t width, size_t height, cudaStream_t s)
{
    WITH_CONTEXT(cuMemsetD2D8Async((CUdeviceptr)(uintptr_t)p, pitch, (unsigned char)value, width, height, (CUstream)s));
}
RT_API cudaError_t cudaMemset2DAsync_ptsz(void *p, size_t pitch, int value, size_t width, size_t height, cudaStream_t s)
{
    return cudaMemset2DAsync(p, pitch, value, width, height, s);
}
