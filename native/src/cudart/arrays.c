/* CUDA arrays, texture and surface objects in the runtime, on the driver's (the driver shim's arrays.c and
 * textures.c): a channel format is an array format and a channel count, a cudaArray_t is the CUarray, the
 * runtime's resource and texture descriptions are the driver's, field by field. */
#include <string.h>

#include "array_rows.h"
#include "rt.h"

static const struct {
    enum cudaChannelFormatKind kind;
    int bits;
    CUarray_format format;
} FORMATS[] = {
    {cudaChannelFormatKindSigned, 8, CU_AD_FORMAT_SIGNED_INT8},
    {cudaChannelFormatKindSigned, 16, CU_AD_FORMAT_SIGNED_INT16},
    {cudaChannelFormatKindSigned, 32, CU_AD_FORMAT_SIGNED_INT32},
    {cudaChannelFormatKindUnsigned, 8, CU_AD_FORMAT_UNSIGNED_INT8},
    {cudaChannelFormatKindUnsigned, 16, CU_AD_FORMAT_UNSIGNED_INT16},
    {cudaChannelFormatKindUnsigned, 32, CU_AD_FORMAT_UNSIGNED_INT32},
    {cudaChannelFormatKindFloat, 16, CU_AD_FORMAT_HALF},
    {cudaChannelFormatKindFloat, 32, CU_AD_FORMAT_FLOAT},
};
#define N_FORMATS (sizeof FORMATS / sizeof FORMATS[0])

/* A channel description as the driver's format and channel count: 1, 2 or 4 channels of one size. */
static cudaError_t format_of(const struct cudaChannelFormatDesc *d, CUarray_format *format, unsigned *channels)
{
    static int logged;
    if (!d)
        return cudaErrorInvalidValue;
    int bits[4] = {d->x, d->y, d->z, d->w};
    unsigned n = 0;
    while (n < 4 && bits[n])
        n++;
    for (unsigned i = 0; i < 4; i++)
        if ((i < n && bits[i] != d->x) || (i >= n && bits[i]))
            return cudaErrorInvalidChannelDescriptor;
    if (n != 1 && n != 2 && n != 4)
        return cudaErrorInvalidChannelDescriptor;
    for (size_t i = 0; i < N_FORMATS; i++)
        if (FORMATS[i].kind == d->f && FORMATS[i].bits == d->x) {
            *format = FORMATS[i].format;
            *channels = n;
            return cudaSuccess;
        }
    if (d->f <= cudaChannelFormatKindFloat)
        return cudaErrorInvalidChannelDescriptor;
    return rt_unsupported(&logged, "channel formats other than 8/16/32-bit integers and half and single floats");
}

static struct cudaChannelFormatDesc desc_of(CUarray_format format, unsigned channels)
{
    struct cudaChannelFormatDesc d = {0, 0, 0, 0, cudaChannelFormatKindNone};
    for (size_t i = 0; i < N_FORMATS; i++)
        if (FORMATS[i].format == format) {
            int *bits[4] = {&d.x, &d.y, &d.z, &d.w};
            for (unsigned c = 0; c < channels && c < 4; c++)
                *bits[c] = FORMATS[i].bits;
            d.f = FORMATS[i].kind;
        }
    return d;
}

static size_t element_bytes(CUarray a)
{
    CUDA_ARRAY3D_DESCRIPTOR d;
    if (cuArray3DGetDescriptor(&d, a) != CUDA_SUCCESS)
        return 0;
    struct cudaChannelFormatDesc c = desc_of(d.Format, d.NumChannels);
    return (size_t)c.x / 8 * d.NumChannels;
}

static cudaError_t malloc_array(cudaArray_t *array, const struct cudaChannelFormatDesc *desc, struct cudaExtent e,
                                unsigned flags)
{
    CUarray_format format;
    unsigned channels;
    if (!array)
        return rt_record(cudaErrorInvalidValue);
    cudaError_t err = rt_context(NULL);
    if (err == cudaSuccess)
        err = format_of(desc, &format, &channels);
    if (err != cudaSuccess)
        return rt_record(err);
    CUDA_ARRAY3D_DESCRIPTOR d = {e.width, e.height, e.depth, format, channels, flags}; /* (the same flag bits) */
    CUarray a;
    CUresult r = cuArray3DCreate(&a, &d);
    if (r == CUDA_SUCCESS)
        *array = (cudaArray_t)a;
    return rt_fail(r);
}

RT_API cudaError_t cudaMallocArray(cudaArray_t *array, const struct cudaChannelFormatDesc *desc, size_t width,
                                   size_t height, unsigned int flags)
{
    return malloc_array(array, desc, (struct cudaExtent){width, height, 0}, flags);
}

RT_API cudaError_t cudaMalloc3DArray(cudaArray_t *array, const struct cudaChannelFormatDesc *desc, struct cudaExtent e,
                                     unsigned int flags)
{
    return malloc_array(array, desc, e, flags);
}

RT_API cudaError_t cudaFreeArray(cudaArray_t array)
{
    if (!array)
        return cudaSuccess;
    WITH_CONTEXT(cuArrayDestroy((CUarray)array));
}

RT_API cudaError_t cudaArrayGetInfo(struct cudaChannelFormatDesc *desc, struct cudaExtent *extent, unsigned int *flags,
                                    cudaArray_t array)
{
    CUDA_ARRAY3D_DESCRIPTOR d;
    CUresult r = cuArray3DGetDescriptor(&d, (CUarray)array);
    if (r != CUDA_SUCCESS)
        return rt_fail(r);
    if (desc)
        *desc = desc_of(d.Format, d.NumChannels);
    if (extent)
        *extent = (struct cudaExtent){d.Width, d.Height, d.Depth};
    if (flags)
        *flags = d.Flags;
    return cudaSuccess;
}

RT_API cudaError_t cudaGetChannelDesc(struct cudaChannelFormatDesc *desc, cudaArray_const_t array)
{
    if (!desc)
        return rt_record(cudaErrorInvalidValue);
    return cudaArrayGetInfo(desc, NULL, NULL, (cudaArray_t)array);
}

/* -- copies: the driver's 3D copy with an array end -------------------------------------------------------- */
static cudaError_t run_copy(CUDA_MEMCPY3D *c, enum cudaMemcpyKind kind, cudaStream_t s, int async)
{
    cudaError_t e = rt_copy_start(kind);
    if (e != cudaSuccess)
        return e;
    CUmemorytype src, dst;
    rt_memory_types(kind, &src, &dst);
    if (c->srcMemoryType != CU_MEMORYTYPE_ARRAY)
        c->srcMemoryType = src;
    if (c->dstMemoryType != CU_MEMORYTYPE_ARRAY)
        c->dstMemoryType = dst;
    return rt_fail(async ? cuMemcpy3DAsync(c, (CUstream)s) : cuMemcpy3D(c));
}

static void array_end(CUDA_MEMCPY3D *c, int src, cudaArray_const_t a, size_t x, size_t y, size_t z)
{
    if (src)
        c->srcMemoryType = CU_MEMORYTYPE_ARRAY, c->srcArray = (CUarray)a, c->srcXInBytes = x, c->srcY = y, c->srcZ = z;
    else
        c->dstMemoryType = CU_MEMORYTYPE_ARRAY, c->dstArray = (CUarray)a, c->dstXInBytes = x, c->dstY = y, c->dstZ = z;
}

static void memory_end(CUDA_MEMCPY3D *c, int src, const void *p, size_t pitch, size_t height)
{
    if (src)
        c->srcHost = p, c->srcDevice = (CUdeviceptr)(uintptr_t)p, c->srcPitch = pitch, c->srcHeight = height;
    else
        c->dstHost = (void *)p, c->dstDevice = (CUdeviceptr)(uintptr_t)p, c->dstPitch = pitch, c->dstHeight = height;
}

static cudaError_t to_array(cudaArray_t dst, size_t x, size_t y, const void *src, size_t pitch, size_t width,
                            size_t height, enum cudaMemcpyKind kind, cudaStream_t s, int async)
{
    if (height > 1 && pitch < width)
        return rt_record(cudaErrorInvalidPitchValue);
    CUDA_MEMCPY3D c = {.WidthInBytes = width, .Height = height, .Depth = 1};
    array_end(&c, 0, dst, x, y, 0);
    memory_end(&c, 1, src, pitch ? pitch : width, height);
    return run_copy(&c, kind, s, async);
}

static cudaError_t from_array(void *dst, size_t pitch, cudaArray_const_t src, size_t x, size_t y, size_t width,
                              size_t height, enum cudaMemcpyKind kind, cudaStream_t s, int async)
{
    if (height > 1 && pitch < width)
        return rt_record(cudaErrorInvalidPitchValue);
    CUDA_MEMCPY3D c = {.WidthInBytes = width, .Height = height, .Depth = 1};
    array_end(&c, 1, src, x, y, 0);
    memory_end(&c, 0, dst, pitch ? pitch : width, height);
    return run_copy(&c, kind, s, async);
}

static cudaError_t array_to_array(cudaArray_t dst, size_t dx, size_t dy, cudaArray_const_t src, size_t sx, size_t sy,
                                  size_t width, size_t height, enum cudaMemcpyKind kind)
{
    CUDA_MEMCPY3D c = {.WidthInBytes = width, .Height = height, .Depth = 1};
    array_end(&c, 1, src, sx, sy, 0);
    array_end(&c, 0, dst, dx, dy, 0);
    return run_copy(&c, kind, NULL, 0);
}

RT_API cudaError_t cudaMemcpy2DToArray(cudaArray_t dst, size_t x, size_t y, const void *src, size_t pitch,
                                       size_t width, size_t height, enum cudaMemcpyKind kind)
{
    return to_array(dst, x, y, src, pitch, width, height, kind, NULL, 0);
}
RT_API cudaError_t cudaMemcpy2DToArray_ptds(cudaArray_t dst, size_t x, size_t y, const void *src, size_t pitch,
                                            size_t width, size_t height, enum cudaMemcpyKind kind)
{
    return to_array(dst, x, y, src, pitch, width, height, kind, NULL, 0);
}
RT_API cudaError_t cudaMemcpy2DToArrayAsync(cudaArray_t dst, size_t x, size_t y, const void *src, size_t pitch,
                                            size_t width, size_t height, enum cudaMemcpyKind kind, cudaStream_t s)
{
    return to_array(dst, x, y, src, pitch, width, height, kind, s, 1);
}
RT_API cudaError_t cudaMemcpy2DToArrayAsync_ptsz(cudaArray_t dst, size_t x, size_t y, const void *src, size_t pitch,
                                                 size_t width, size_t height, enum cudaMemcpyKind kind, cudaStream_t s)
{
    return to_array(dst, x, y, src, pitch, width, height, kind, s, 1);
}
RT_API cudaError_t cudaMemcpy2DFromArray(void *dst, size_t pitch, cudaArray_const_t src, size_t x, size_t y,
                                         size_t width, size_t height, enum cudaMemcpyKind kind)
{
    return from_array(dst, pitch, src, x, y, width, height, kind, NULL, 0);
}
RT_API cudaError_t cudaMemcpy2DFromArray_ptds(void *dst, size_t pitch, cudaArray_const_t src, size_t x, size_t y,
                                              size_t width, size_t height, enum cudaMemcpyKind kind)
{
    return from_array(dst, pitch, src, x, y, width, height, kind, NULL, 0);
}
RT_API cudaError_t cudaMemcpy2DFromArrayAsync(void *dst, size_t pitch, cudaArray_const_t src, size_t x, size_t y,
                                              size_t width, size_t height, enum cudaMemcpyKind kind, cudaStream_t s)
{
    return from_array(dst, pitch, src, x, y, width, height, kind, s, 1);
}
RT_API cudaError_t cudaMemcpy2DFromArrayAsync_ptsz(void *dst, size_t pitch, cudaArray_const_t src, size_t x, size_t y,
                                                   size_t width, size_t height, enum cudaMemcpyKind kind,
                                                   cudaStream_t s)
{
    return from_array(dst, pitch, src, x, y, width, height, kind, s, 1);
}
RT_API cudaError_t cudaMemcpy2DArrayToArray(cudaArray_t dst, size_t dx, size_t dy, cudaArray_const_t src, size_t sx,
                                            size_t sy, size_t width, size_t height, enum cudaMemcpyKind kind)
{
    return array_to_array(dst, dx, dy, src, sx, sy, width, height, kind);
}
RT_API cudaError_t cudaMemcpy2DArrayToArray_ptds(cudaArray_t dst, size_t dx, size_t dy, cudaArray_const_t src,
                                                 size_t sx, size_t sy, size_t width, size_t height,
                                                 enum cudaMemcpyKind kind)
{
    return array_to_array(dst, dx, dy, src, sx, sy, width, height, kind);
}

/* The deprecated 1D forms: `count` bytes from (x, y) on, running on from row to row. */
static cudaError_t linear(cudaArray_const_t a, size_t x, size_t y, void *mem, size_t count, enum cudaMemcpyKind kind,
                          int to, cudaStream_t s, int async)
{
    size_t row = element_bytes((CUarray)a);
    CUDA_ARRAY3D_DESCRIPTOR d;
    if (!row || cuArray3DGetDescriptor(&d, (CUarray)a) != CUDA_SUCCESS)
        return rt_record(cudaErrorInvalidResourceHandle);
    row *= d.Width;
    y += x / row, x %= row;
    for (size_t done = 0; done < count;) {
        struct array_piece p = array_next_piece(row, x, y, count - done);
        uint8_t *at = (uint8_t *)mem + done;
        cudaError_t e = to ? to_array((cudaArray_t)a, p.x, p.y, at, row, p.width, p.rows, kind, s, async)
                           : from_array(at, row, a, p.x, p.y, p.width, p.rows, kind, s, async);
        if (e != cudaSuccess)
            return e;
        done += p.width * p.rows;
        array_after_piece(row, &p, &x, &y);
    }
    return cudaSuccess;
}

RT_API cudaError_t cudaMemcpyToArray(cudaArray_t dst, size_t x, size_t y, const void *src, size_t count,
                                     enum cudaMemcpyKind kind)
{
    return linear(dst, x, y, (void *)src, count, kind, 1, NULL, 0);
}
RT_API cudaError_t cudaMemcpyToArrayAsync(cudaArray_t dst, size_t x, size_t y, const void *src, size_t count,
                                          enum cudaMemcpyKind kind, cudaStream_t s)
{
    return linear(dst, x, y, (void *)src, count, kind, 1, s, 1);
}
RT_API cudaError_t cudaMemcpyFromArray(void *dst, cudaArray_const_t src, size_t x, size_t y, size_t count,
                                       enum cudaMemcpyKind kind)
{
    return linear(src, x, y, dst, count, kind, 0, NULL, 0);
}
RT_API cudaError_t cudaMemcpyFromArrayAsync(void *dst, cudaArray_const_t src, size_t x, size_t y, size_t count,
                                            enum cudaMemcpyKind kind, cudaStream_t s)
{
    return linear(src, x, y, dst, count, kind, 0, s, 1);
}
RT_API cudaError_t cudaMemcpyArrayToArray(cudaArray_t dst, size_t dx, size_t dy, cudaArray_const_t src, size_t sx,
                                          size_t sy, size_t count, enum cudaMemcpyKind kind)
{
    CUDA_ARRAY3D_DESCRIPTOR ds, dd;
    size_t doff, soff;
    cudaError_t e = rt_copy_start(kind);
    if (e != cudaSuccess)
        return e;
    size_t se = element_bytes((CUarray)src), de = element_bytes((CUarray)dst);
    if (!se || !de || cuArray3DGetDescriptor(&ds, (CUarray)src) || cuArray3DGetDescriptor(&dd, (CUarray)dst))
        return rt_record(cudaErrorInvalidResourceHandle);
    if (__builtin_mul_overflow(dy, dd.Width * de, &doff) || __builtin_add_overflow(doff, dx, &doff) ||
        __builtin_mul_overflow(sy, ds.Width * se, &soff) || __builtin_add_overflow(soff, sx, &soff))
        return rt_record(cudaErrorInvalidValue);
    return rt_fail(cuMemcpyAtoA((CUarray)dst, doff, (CUarray)src, soff, count));
}

/* cudaMemcpy3D's parameters as the driver's: positions and extent count the array's elements at an array end,
 * bytes at a memory end; a memory end's type is the kind's. */
static cudaError_t copy_3d_driver(const struct cudaMemcpy3DParms *p, CUDA_MEMCPY3D *c)
{
    size_t src_elem = p->srcArray ? element_bytes((CUarray)p->srcArray) : 1;
    size_t dst_elem = p->dstArray ? element_bytes((CUarray)p->dstArray) : 1;
    if (!src_elem || !dst_elem)
        return cudaErrorInvalidResourceHandle;
    size_t width = p->extent.width * (p->srcArray ? src_elem : p->dstArray ? dst_elem : 1);
    *c = (CUDA_MEMCPY3D){.WidthInBytes = width, .Height = p->extent.height, .Depth = p->extent.depth};
    if (p->srcArray)
        array_end(c, 1, p->srcArray, p->srcPos.x * src_elem, p->srcPos.y, p->srcPos.z);
    else
        memory_end(c, 1, p->srcPtr.ptr, p->srcPtr.pitch, p->srcPtr.ysize);
    if (p->dstArray)
        array_end(c, 0, p->dstArray, p->dstPos.x * dst_elem, p->dstPos.y, p->dstPos.z);
    else
        memory_end(c, 0, p->dstPtr.ptr, p->dstPtr.pitch, p->dstPtr.ysize);
    if (!p->srcArray)
        c->srcXInBytes = p->srcPos.x, c->srcY = p->srcPos.y, c->srcZ = p->srcPos.z;
    if (!p->dstArray)
        c->dstXInBytes = p->dstPos.x, c->dstY = p->dstPos.y, c->dstZ = p->dstPos.z;
    CUmemorytype src, dst;
    rt_memory_types(p->kind, &src, &dst);
    if (!p->srcArray)
        c->srcMemoryType = src;
    if (!p->dstArray)
        c->dstMemoryType = dst;
    return cudaSuccess;
}

cudaError_t rt_copy_3d(const struct cudaMemcpy3DParms *p, cudaStream_t s, int async)
{
    CUDA_MEMCPY3D c;
    cudaError_t e = copy_3d_driver(p, &c);
    return e != cudaSuccess ? rt_record(e) : run_copy(&c, p->kind, s, async);
}

/* A 3D copy between devices: the driver's, between their primary contexts. */
static cudaError_t copy_3d_peer(const struct cudaMemcpy3DPeerParms *p, cudaStream_t s, int async)
{
    if (!p)
        return rt_record(cudaErrorInvalidValue);
    struct cudaMemcpy3DParms same = {.srcArray = p->srcArray, .srcPos = p->srcPos, .srcPtr = p->srcPtr,
                                     .dstArray = p->dstArray, .dstPos = p->dstPos, .dstPtr = p->dstPtr,
                                     .extent = p->extent, .kind = cudaMemcpyDefault};
    CUDA_MEMCPY3D c;
    CUcontext src = NULL, dst = NULL;
    cudaError_t e = copy_3d_driver(&same, &c);
    if (e == cudaSuccess)
        e = rt_primary(p->srcDevice, &src);
    if (e == cudaSuccess)
        e = rt_primary(p->dstDevice, &dst);
    if (e != cudaSuccess)
        return rt_record(e);
    CUDA_MEMCPY3D_PEER q = {
        .srcXInBytes = c.srcXInBytes, .srcY = c.srcY, .srcZ = c.srcZ, .srcMemoryType = c.srcMemoryType,
        .srcHost = c.srcHost, .srcDevice = c.srcDevice, .srcArray = c.srcArray, .srcContext = src,
        .srcPitch = c.srcPitch, .srcHeight = c.srcHeight, .dstXInBytes = c.dstXInBytes, .dstY = c.dstY,
        .dstZ = c.dstZ, .dstMemoryType = c.dstMemoryType, .dstHost = c.dstHost, .dstDevice = c.dstDevice,
        .dstArray = c.dstArray, .dstContext = dst, .dstPitch = c.dstPitch, .dstHeight = c.dstHeight,
        .WidthInBytes = c.WidthInBytes, .Height = c.Height, .Depth = c.Depth};
    return rt_fail(async ? cuMemcpy3DPeerAsync(&q, (CUstream)s) : cuMemcpy3DPeer(&q));
}

RT_API cudaError_t cudaMemcpy3DPeer(const struct cudaMemcpy3DPeerParms *p) { return copy_3d_peer(p, NULL, 0); }
RT_API cudaError_t cudaMemcpy3DPeerAsync(const struct cudaMemcpy3DPeerParms *p, cudaStream_t s)
{
    return copy_3d_peer(p, s, 1);
}

/* -- texture and surface objects ---------------------------------------------------------------------------- */
static cudaError_t resource_of(const struct cudaResourceDesc *r, CUDA_RESOURCE_DESC *out)
{
    static int logged;
    memset(out, 0, sizeof *out);
    if (!r)
        return cudaErrorInvalidValue;
    out->resType = (CUresourcetype)r->resType; /* (the same numbers) */
#if CUDART_VERSION >= 13000
    out->flags = r->flags; /* (CUDA 12's runtime description has none: 0, as the driver requires) */
#endif
    switch (r->resType) {
    case cudaResourceTypeArray:
        out->res.array.hArray = (CUarray)r->res.array.array;
        return cudaSuccess;
    case cudaResourceTypeLinear:
        out->res.linear.devPtr = (CUdeviceptr)(uintptr_t)r->res.linear.devPtr;
        out->res.linear.sizeInBytes = r->res.linear.sizeInBytes;
        return format_of(&r->res.linear.desc, &out->res.linear.format, &out->res.linear.numChannels);
    case cudaResourceTypePitch2D:
        out->res.pitch2D.devPtr = (CUdeviceptr)(uintptr_t)r->res.pitch2D.devPtr;
        out->res.pitch2D.width = r->res.pitch2D.width;
        out->res.pitch2D.height = r->res.pitch2D.height;
        out->res.pitch2D.pitchInBytes = r->res.pitch2D.pitchInBytes;
        return format_of(&r->res.pitch2D.desc, &out->res.pitch2D.format, &out->res.pitch2D.numChannels);
    case cudaResourceTypeMipmappedArray:
        return rt_unsupported(&logged, "mipmapped arrays");
    default:
        return cudaErrorInvalidValue;
    }
}

static void resource_back(const CUDA_RESOURCE_DESC *r, struct cudaResourceDesc *out)
{
    memset(out, 0, sizeof *out);
    out->resType = (enum cudaResourceType)r->resType;
#if CUDART_VERSION >= 13000
    out->flags = r->flags;
#endif
    if (r->resType == CU_RESOURCE_TYPE_ARRAY) {
        out->res.array.array = (cudaArray_t)r->res.array.hArray;
    } else if (r->resType == CU_RESOURCE_TYPE_LINEAR) {
        out->res.linear.devPtr = (void *)(uintptr_t)r->res.linear.devPtr;
        out->res.linear.desc = desc_of(r->res.linear.format, r->res.linear.numChannels);
        out->res.linear.sizeInBytes = r->res.linear.sizeInBytes;
    } else if (r->resType == CU_RESOURCE_TYPE_PITCH2D) {
        out->res.pitch2D.devPtr = (void *)(uintptr_t)r->res.pitch2D.devPtr;
        out->res.pitch2D.desc = desc_of(r->res.pitch2D.format, r->res.pitch2D.numChannels);
        out->res.pitch2D.width = r->res.pitch2D.width;
        out->res.pitch2D.height = r->res.pitch2D.height;
        out->res.pitch2D.pitchInBytes = r->res.pitch2D.pitchInBytes;
    }
}

static void texture_of(const struct cudaTextureDesc *t, CUDA_TEXTURE_DESC *out)
{
    memset(out, 0, sizeof *out);
    for (int i = 0; i < 3; i++)
        out->addressMode[i] = (CUaddress_mode)t->addressMode[i];
    out->filterMode = (CUfilter_mode)t->filterMode;
    /* (elements as they are is the driver's "read as integer"; normalized floats are its default) */
    out->flags = (t->readMode == cudaReadModeElementType ? CU_TRSF_READ_AS_INTEGER : 0) |
                 (t->normalizedCoords ? CU_TRSF_NORMALIZED_COORDINATES : 0) | (t->sRGB ? CU_TRSF_SRGB : 0) |
                 (t->disableTrilinearOptimization ? CU_TRSF_DISABLE_TRILINEAR_OPTIMIZATION : 0) |
                 (t->seamlessCubemap ? CU_TRSF_SEAMLESS_CUBEMAP : 0);
    out->maxAnisotropy = t->maxAnisotropy;
    out->mipmapFilterMode = (CUfilter_mode)t->mipmapFilterMode;
    out->mipmapLevelBias = t->mipmapLevelBias;
    out->minMipmapLevelClamp = t->minMipmapLevelClamp;
    out->maxMipmapLevelClamp = t->maxMipmapLevelClamp;
    memcpy(out->borderColor, t->borderColor, sizeof out->borderColor);
}

static void texture_back(const CUDA_TEXTURE_DESC *t, struct cudaTextureDesc *out)
{
    memset(out, 0, sizeof *out);
    for (int i = 0; i < 3; i++)
        out->addressMode[i] = (enum cudaTextureAddressMode)t->addressMode[i];
    out->filterMode = (enum cudaTextureFilterMode)t->filterMode;
    out->readMode = t->flags & CU_TRSF_READ_AS_INTEGER ? cudaReadModeElementType : cudaReadModeNormalizedFloat;
    out->normalizedCoords = !!(t->flags & CU_TRSF_NORMALIZED_COORDINATES);
    out->sRGB = !!(t->flags & CU_TRSF_SRGB);
    out->disableTrilinearOptimization = !!(t->flags & CU_TRSF_DISABLE_TRILINEAR_OPTIMIZATION);
    out->seamlessCubemap = !!(t->flags & CU_TRSF_SEAMLESS_CUBEMAP);
    out->maxAnisotropy = t->maxAnisotropy;
    out->mipmapFilterMode = (enum cudaTextureFilterMode)t->mipmapFilterMode;
    out->mipmapLevelBias = t->mipmapLevelBias;
    out->minMipmapLevelClamp = t->minMipmapLevelClamp;
    out->maxMipmapLevelClamp = t->maxMipmapLevelClamp;
    memcpy(out->borderColor, t->borderColor, sizeof out->borderColor);
}

/* A view's format numbers are the driver's; CUDA 13's runtime description also has the driver's reserved words. */
_Static_assert((int)cudaResViewFormatFloat4 == (int)CU_RES_VIEW_FORMAT_FLOAT_4X32, "one view format numbering");

static void view_of(const struct cudaResourceViewDesc *v, CUDA_RESOURCE_VIEW_DESC *out)
{
    memset(out, 0, sizeof *out);
    out->format = (CUresourceViewFormat)v->format;
    out->width = v->width, out->height = v->height, out->depth = v->depth;
    out->firstMipmapLevel = v->firstMipmapLevel, out->lastMipmapLevel = v->lastMipmapLevel;
    out->firstLayer = v->firstLayer, out->lastLayer = v->lastLayer;
}

static void view_back(const CUDA_RESOURCE_VIEW_DESC *v, struct cudaResourceViewDesc *out)
{
    memset(out, 0, sizeof *out);
    out->format = (enum cudaResourceViewFormat)v->format;
    out->width = v->width, out->height = v->height, out->depth = v->depth;
    out->firstMipmapLevel = v->firstMipmapLevel, out->lastMipmapLevel = v->lastMipmapLevel;
    out->firstLayer = v->firstLayer, out->lastLayer = v->lastLayer;
}

/* The thread's context made current and the runtime's resource description made the driver's. */
static cudaError_t object_start(const struct cudaResourceDesc *res, CUDA_RESOURCE_DESC *r)
{
    cudaError_t e = rt_context(NULL);
    if (e == cudaSuccess)
        e = resource_of(res, r);
    return e;
}

RT_API cudaError_t cudaCreateTextureObject(cudaTextureObject_t *object, const struct cudaResourceDesc *res,
                                           const struct cudaTextureDesc *tex, const struct cudaResourceViewDesc *view)
{
    CUDA_RESOURCE_DESC r;
    CUDA_TEXTURE_DESC t;
    CUDA_RESOURCE_VIEW_DESC v;
    cudaError_t e = object && tex ? object_start(res, &r) : cudaErrorInvalidValue;
    if (e != cudaSuccess)
        return rt_record(e);
    texture_of(tex, &t);
    if (view)
        view_of(view, &v);
    CUtexObject out;
    CUresult result = cuTexObjectCreate(&out, &r, &t, view ? &v : NULL);
    if (result == CUDA_SUCCESS)
        *object = out;
    return rt_fail(result);
}

RT_API cudaError_t cudaDestroyTextureObject(cudaTextureObject_t object)
{
    if (!object)
        return cudaSuccess;
    WITH_CONTEXT(cuTexObjectDestroy(object));
}

RT_API cudaError_t cudaGetTextureObjectResourceDesc(struct cudaResourceDesc *out, cudaTextureObject_t object)
{
    CUDA_RESOURCE_DESC r;
    if (!out)
        return rt_record(cudaErrorInvalidValue);
    CUresult result = cuTexObjectGetResourceDesc(&r, object);
    if (result == CUDA_SUCCESS)
        resource_back(&r, out);
    return rt_fail(result);
}

RT_API cudaError_t cudaGetTextureObjectTextureDesc(struct cudaTextureDesc *out, cudaTextureObject_t object)
{
    CUDA_TEXTURE_DESC t;
    if (!out)
        return rt_record(cudaErrorInvalidValue);
    CUresult result = cuTexObjectGetTextureDesc(&t, object);
    if (result == CUDA_SUCCESS)
        texture_back(&t, out);
    return rt_fail(result);
}

RT_API cudaError_t cudaGetTextureObjectResourceViewDesc(struct cudaResourceViewDesc *out, cudaTextureObject_t object)
{
    CUDA_RESOURCE_VIEW_DESC v;
    if (!out)
        return rt_record(cudaErrorInvalidValue);
    CUresult result = cuTexObjectGetResourceViewDesc(&v, object);
    if (result == CUDA_SUCCESS)
        view_back(&v, out);
    return rt_fail(result);
}

RT_API cudaError_t cudaCreateSurfaceObject(cudaSurfaceObject_t *object, const struct cudaResourceDesc *res)
{
    CUDA_RESOURCE_DESC r;
    cudaError_t e = object ? object_start(res, &r) : cudaErrorInvalidValue;
    if (e != cudaSuccess)
        return rt_record(e);
    CUsurfObject out;
    CUresult result = cuSurfObjectCreate(&out, &r);
    if (result == CUDA_SUCCESS)
        *object = out;
    return rt_fail(result);
}

RT_API cudaError_t cudaDestroySurfaceObject(cudaSurfaceObject_t object)
{
    if (!object)
        return cudaSuccess;
    WITH_CONTEXT(cuSurfObjectDestroy(object));
}

RT_API cudaError_t cudaGetSurfaceObjectResourceDesc(struct cudaResourceDesc *out, cudaSurfaceObject_t object)
{
    CUDA_RESOURCE_DESC r;
    if (!out)
        return rt_record(cudaErrorInvalidValue);
    CUresult result = cuSurfObjectGetResourceDesc(&r, object);
    if (result == CUDA_SUCCESS)
        resource_back(&r, out);
    return rt_fail(result);
}
