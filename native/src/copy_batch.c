/* cuMemcpyBatchAsync (CUDA 12.8; _v2 in 13.0, without failIdx): pointer-to-pointer copies on one stream, sent as
 * that many asynchronous copies in stream order. CUDA gives the copies of a batch no order among themselves, so
 * this is one of the orders it allows; a source the attributes say is read during the call only is (host bytes
 * travel when a copy is queued), and the location hints concern managed memory, which rgpu does not offer. A copy
 * refused part of the way leaves the copies before it queued (failIdx names the one refused). */
#include <stdint.h>

#include "rgpu_shim.h"

#define API __attribute__((visibility("default")))

/* The attributes as the documentation has them: attrsIdxs starting at 0, rising, each below count, one per attrs
 * entry, each with a source access order; and no legacy NULL stream (per_thread: NULL is the thread's own). */
static int well_formed(size_t count, const CUmemcpyAttributes *attrs, const size_t *idxs, size_t n, CUstream s,
                       int per_thread)
{
    if (!attrs || !idxs || !n || n > count || idxs[0] != 0 || s == CU_STREAM_LEGACY || (!s && !per_thread))
        return 0;
    for (size_t k = 0; k < n; k++) {
        if ((k && idxs[k] <= idxs[k - 1]) || idxs[k] >= count)
            return 0;
        if (attrs[k].srcAccessOrder < CU_MEMCPY_SRC_ACCESS_ORDER_STREAM ||
            attrs[k].srcAccessOrder > CU_MEMCPY_SRC_ACCESS_ORDER_ANY ||
            attrs[k].flags & ~(unsigned)CU_MEMCPY_FLAG_PREFER_OVERLAP_WITH_COMPUTE)
            return 0;
    }
    return 1;
}

static CUresult batch(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count, CUmemcpyAttributes *attrs,
                      size_t *idxs, size_t n, size_t *failed, CUstream s, int per_thread)
{
    if (failed)
        *failed = SIZE_MAX; /* (no copy in particular: what the driver reports for a batch refused as a whole) */
    if (!count || !dsts || !srcs || !sizes || !well_formed(count, attrs, idxs, n, s, per_thread))
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < count; i++) {
        CUresult r = cuMemcpyAsync(dsts[i], srcs[i], sizes[i], s); /* (the stream's handle says which it is) */
        if (r != CUDA_SUCCESS) {
            if (failed)
                *failed = i;
            return r;
        }
    }
    return CUDA_SUCCESS;
}

API CUresult cuMemcpyBatchAsync_v2(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count,
                                   CUmemcpyAttributes *attrs, size_t *idxs, size_t n, CUstream s)
{
    return batch(dsts, srcs, sizes, count, attrs, idxs, n, NULL, s, 0);
}

API CUresult cuMemcpyBatchAsync_v2_ptsz(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count,
                                        CUmemcpyAttributes *attrs, size_t *idxs, size_t n, CUstream s)
{
    return batch(dsts, srcs, sizes, count, attrs, idxs, n, NULL, s, 1);
}

/* CUDA 12.8's, which names the copy that failed */
#undef cuMemcpyBatchAsync
#undef cuMemcpyBatchAsync_ptsz
API CUresult cuMemcpyBatchAsync(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count,
                                CUmemcpyAttributes *attrs, size_t *idxs, size_t n, size_t *failed, CUstream s)
{
    return batch(dsts, srcs, sizes, count, attrs, idxs, n, failed, s, 0);
}

API CUresult cuMemcpyBatchAsync_ptsz(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count,
                                     CUmemcpyAttributes *attrs, size_t *idxs, size_t n, size_t *failed, CUstream s)
{
    return batch(dsts, srcs, sizes, count, attrs, idxs, n, failed, s, 1);
}
