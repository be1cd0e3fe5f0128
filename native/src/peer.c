/* Several devices: peer access and copies between devices. Devices of one server reach each other on that
 * server (cuMemcpyPeer runs there, the bytes never cross the network); devices of different servers are never
 * peers -- a kernel cannot read another machine's memory -- and a copy between them goes through this host. */
#include <stdlib.h>

#include "rgpu_shim.h"

#define API __attribute__((visibility("default")))

API CUresult cuDeviceCanAccessPeer(int *can, CUdevice dev, CUdevice peer)
{
    int count, local_dev, local_peer;
    if (!can)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = cuDeviceGetCount(&count); /* (connects and numbers the devices of every server) */
    if (r != CUDA_SUCCESS)
        return r;
    int server = rgpu_device_server(dev, &local_dev), peer_server = rgpu_device_server(peer, &local_peer);
    if (server < 0 || peer_server < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    if (server != peer_server) {
        *can = 0;
        return CUDA_SUCCESS;
    }
    /* The device field is routed and translated on its way; the peer goes as that server numbers it. */
    uint8_t a[RGPU_DEVICE_CAN_ACCESS_PEER_REQ_SIZE], rep[RGPU_DEVICE_CAN_ACCESS_PEER_REP_SIZE];
    struct rgpu_device_can_access_peer_rep got;
    rgpu_pack_device_can_access_peer(a, &(struct rgpu_device_can_access_peer_req){.device = dev, .peer = local_peer});
    r = rgpu_call(RGPU_OP_DEVICE_CAN_ACCESS_PEER, a, sizeof a, NULL, 0, rep, sizeof rep, NULL);
    if (r == CUDA_SUCCESS && rgpu_unpack_device_can_access_peer(rep, sizeof rep, &got))
        return rgpu_bad_reply(RGPU_OP_DEVICE_CAN_ACCESS_PEER, "reply size");
    if (r == CUDA_SUCCESS)
        *can = got.can != 0;
    return r;
}

/* Peer access from the current context to `peer`: a context of another server is no peer. */
static CUresult peer_access(uint16_t op, CUcontext peer, unsigned flags)
{
    uint64_t h = (uint64_t)(uintptr_t)peer;
    int server = rgpu_server_of_ctx(rgpu_thread_ctx()), peer_server = rgpu_server_of_ctx(h);
    if (rgpu_server_count() > 1 && server >= 0 && peer_server >= 0 && server != peer_server)
        return op == RGPU_OP_CTX_ENABLE_PEER_ACCESS ? CUDA_ERROR_PEER_ACCESS_UNSUPPORTED
                                                    : CUDA_ERROR_PEER_ACCESS_NOT_ENABLED;
    _Static_assert(RGPU_CTX_DISABLE_PEER_ACCESS_REQ_SIZE <= RGPU_CTX_ENABLE_PEER_ACCESS_REQ_SIZE, "one buffer");
    uint8_t a[RGPU_CTX_ENABLE_PEER_ACCESS_REQ_SIZE];
    size_t len = RGPU_CTX_DISABLE_PEER_ACCESS_REQ_SIZE;
    if (op == RGPU_OP_CTX_ENABLE_PEER_ACCESS) {
        rgpu_pack_ctx_enable_peer_access(a, &(struct rgpu_ctx_enable_peer_access_req){.peer_ctx = h, .flags = flags});
        len = RGPU_CTX_ENABLE_PEER_ACCESS_REQ_SIZE;
    } else {
        rgpu_pack_ctx_disable_peer_access(a, &(struct rgpu_ctx_disable_peer_access_req){.peer_ctx = h});
    }
    return rgpu_call(op, a, len, NULL, 0, NULL, 0, NULL);
}

API CUresult cuCtxEnablePeerAccess(CUcontext peer, unsigned int flags)
{
    return peer_access(RGPU_OP_CTX_ENABLE_PEER_ACCESS, peer, flags);
}

API CUresult cuCtxDisablePeerAccess(CUcontext peer) { return peer_access(RGPU_OP_CTX_DISABLE_PEER_ACCESS, peer, 0); }

static CUresult copy_peer(CUdeviceptr dst, CUcontext dst_ctx, CUdeviceptr src, CUcontext src_ctx, size_t n, CUstream s,
                          int async)
{
    uint64_t dc = (uint64_t)(uintptr_t)dst_ctx, sc = (uint64_t)(uintptr_t)src_ctx;
    if (rgpu_server_count() > 1 && rgpu_server_of_ctx(dc) != rgpu_server_of_ctx(sc))
        return rgpu_copy_device(dst, src, n, s, async); /* (checks the ranges are the program's own) */
    if (async) {
        uint8_t a[RGPU_MEMCPY_PEER_ASYNC_REQ_SIZE];
        rgpu_pack_memcpy_peer_async(a, &(struct rgpu_memcpy_peer_async_req){dst, dc, src, sc, n,
                                                                            rgpu_stream_handle(s)});
        return rgpu_defer(RGPU_OP_MEMCPY_PEER_ASYNC, a, sizeof a, NULL, 0);
    }
    uint8_t a[RGPU_MEMCPY_PEER_REQ_SIZE];
    rgpu_pack_memcpy_peer(a, &(struct rgpu_memcpy_peer_req){dst, dc, src, sc, n});
    return rgpu_call(RGPU_OP_MEMCPY_PEER, a, sizeof a, NULL, 0, NULL, 0, NULL);
}

API CUresult cuMemcpyPeer(CUdeviceptr dst, CUcontext dst_ctx, CUdeviceptr src, CUcontext src_ctx, size_t n)
{
    return copy_peer(dst, dst_ctx, src, src_ctx, n, NULL, 0);
}
API CUresult cuMemcpyPeer_ptds(CUdeviceptr dst, CUcontext dst_ctx, CUdeviceptr src, CUcontext src_ctx, size_t n)
{
    return copy_peer(dst, dst_ctx, src, src_ctx, n, NULL, 0);
}
API CUresult cuMemcpyPeerAsync(CUdeviceptr dst, CUcontext dst_ctx, CUdeviceptr src, CUcontext src_ctx, size_t n,
                               CUstream s)
{
    return copy_peer(dst, dst_ctx, src, src_ctx, n, s, 1);
}
API CUresult cuMemcpyPeerAsync_ptsz(CUdeviceptr dst, CUcontext dst_ctx, CUdeviceptr src, CUcontext src_ctx, size_t n,
                                    CUstream s)
{
    return copy_peer(dst, dst_ctx, src, src_ctx, n, s, 1);
}

/* A 3D copy between contexts (cuMemcpy3DPeer): within one context the 3D copy itself; between two, through this
 * host -- the extent packed into a buffer from the source's context, then written in the destination's, after the
 * work the stream already holds (an asynchronous one completes before it returns). */
static CUDA_MEMCPY3D plain_3d(const CUDA_MEMCPY3D_PEER *p)
{
    return (CUDA_MEMCPY3D){.srcXInBytes = p->srcXInBytes, .srcY = p->srcY, .srcZ = p->srcZ, .srcLOD = p->srcLOD,
                           .srcMemoryType = p->srcMemoryType, .srcHost = p->srcHost, .srcDevice = p->srcDevice,
                           .srcArray = p->srcArray, .srcPitch = p->srcPitch, .srcHeight = p->srcHeight,
                           .dstXInBytes = p->dstXInBytes, .dstY = p->dstY, .dstZ = p->dstZ, .dstLOD = p->dstLOD,
                           .dstMemoryType = p->dstMemoryType, .dstHost = p->dstHost, .dstDevice = p->dstDevice,
                           .dstArray = p->dstArray, .dstPitch = p->dstPitch, .dstHeight = p->dstHeight,
                           .WidthInBytes = p->WidthInBytes, .Height = p->Height, .Depth = p->Depth};
}

static CUresult copy_3d_peer(const CUDA_MEMCPY3D_PEER *p, CUstream s, int async)
{
    if (!p || !p->srcContext || !p->dstContext)
        return CUDA_ERROR_INVALID_VALUE;
    CUDA_MEMCPY3D c = plain_3d(p);
    uint64_t prev = rgpu_thread_ctx(), src = (uint64_t)(uintptr_t)p->srcContext, dst = (uint64_t)(uintptr_t)p->dstContext;
    CUresult r;
    if (src == dst) {
        rgpu_set_thread_ctx(src);
        r = async ? cuMemcpy3DAsync_v2(&c, s) : cuMemcpy3D_v2(&c);
        rgpu_set_thread_ctx(prev);
        return r;
    }
    size_t h = c.Height ? c.Height : 1, d = c.Depth ? c.Depth : 1, bytes;
    if (__builtin_mul_overflow(c.WidthInBytes, h, &bytes) || __builtin_mul_overflow(bytes, d, &bytes))
        return CUDA_ERROR_INVALID_VALUE;
    uint8_t *buf = malloc(bytes ? bytes : 1);
    if (!buf)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUDA_MEMCPY3D up = c, down = c;
    up.dstMemoryType = CU_MEMORYTYPE_HOST, up.dstHost = buf, up.dstDevice = 0, up.dstArray = NULL;
    up.dstXInBytes = up.dstY = up.dstZ = up.dstLOD = 0, up.dstPitch = c.WidthInBytes, up.dstHeight = h;
    down.srcMemoryType = CU_MEMORYTYPE_HOST, down.srcHost = buf, down.srcDevice = 0, down.srcArray = NULL;
    down.srcXInBytes = down.srcY = down.srcZ = down.srcLOD = 0, down.srcPitch = c.WidthInBytes, down.srcHeight = h;
    rgpu_set_thread_ctx(dst);
    r = async ? cuStreamSynchronize(s) : CUDA_SUCCESS;
    rgpu_set_thread_ctx(src);
    if (r == CUDA_SUCCESS)
        r = cuMemcpy3D_v2(&up);
    rgpu_set_thread_ctx(dst);
    if (r == CUDA_SUCCESS)
        r = cuMemcpy3D_v2(&down);
    rgpu_set_thread_ctx(prev);
    free(buf);
    return r;
}

API CUresult cuMemcpy3DPeer(const CUDA_MEMCPY3D_PEER *p) { return copy_3d_peer(p, NULL, 0); }
API CUresult cuMemcpy3DPeer_ptds(const CUDA_MEMCPY3D_PEER *p) { return copy_3d_peer(p, NULL, 0); }
API CUresult cuMemcpy3DPeerAsync(const CUDA_MEMCPY3D_PEER *p, CUstream s) { return copy_3d_peer(p, s, 1); }
API CUresult cuMemcpy3DPeerAsync_ptsz(const CUDA_MEMCPY3D_PEER *p, CUstream s) { return copy_3d_peer(p, s, 1); }
