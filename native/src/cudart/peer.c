/* Several devices: peer access between their primary contexts, and copies between devices, which the
 * server does itself (the bytes never cross the network). */
#include "rt.h"

/* The current device's context and the peer device's primary context. */
static cudaError_t contexts(int peer, int *dev, CUcontext *peer_ctx)
{
    cudaError_t e = rt_context(dev);
    if (e == cudaSuccess)
        e = rt_primary(peer, peer_ctx);
    if (e == cudaSuccess && peer == *dev)
        e = cudaErrorInvalidDevice; /* as CUDA's runtime: a device is not its own peer */
    return e;
}

RT_API cudaError_t cudaDeviceEnablePeerAccess(int peer, unsigned int flags)
{
    int dev;
    CUcontext peer_ctx;
    if (flags)
        return rt_record(cudaErrorInvalidValue);
    cudaError_t e = contexts(peer, &dev, &peer_ctx);
    return e != cudaSuccess ? rt_record(e) : rt_fail(cuCtxEnablePeerAccess(peer_ctx, 0));
}

RT_API cudaError_t cudaDeviceDisablePeerAccess(int peer)
{
    int dev;
    CUcontext peer_ctx;
    cudaError_t e = contexts(peer, &dev, &peer_ctx);
    return e != cudaSuccess ? rt_record(e) : rt_fail(cuCtxDisablePeerAccess(peer_ctx));
}

static cudaError_t copy_peer(void *dst, int dst_dev, const void *src, int src_dev, size_t n, cudaStream_t s,
                             int async)
{
    CUcontext dst_ctx, src_ctx;
    cudaError_t e = rt_context(NULL); /* (the stream, or the NULL stream of the current device, orders it) */
    if (e == cudaSuccess)
        e = rt_primary(dst_dev, &dst_ctx);
    if (e == cudaSuccess)
        e = rt_primary(src_dev, &src_ctx);
    if (e != cudaSuccess)
        return rt_record(e);
    if (n == 0)
        return cudaSuccess;
    CUdeviceptr d = (CUdeviceptr)(uintptr_t)dst, sp = (CUdeviceptr)(uintptr_t)src;
    return rt_fail(async ? cuMemcpyPeerAsync(d, dst_ctx, sp, src_ctx, n, (CUstream)s)
                         : cuMemcpyPeer(d, dst_ctx, sp, src_ctx, n));
}

RT_API cudaError_t cudaMemcpyPeer(void *dst, int dst_dev, const void *src, int src_dev, size_t n)
{
    return copy_peer(dst, dst_dev, src, src_dev, n, NULL, 0);
}

RT_API cudaError_t cudaMemcpyPeerAsync(void *dst, int dst_dev, const void *src, int src_dev, size_t n, cudaStream_t s)
{
    return copy_peer(dst, dst_dev, src, src_dev, n, s, 1);
}
