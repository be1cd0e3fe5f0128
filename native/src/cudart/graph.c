/* Stream capture and CUDA graphs in the runtime: each call is its driver counterpart in the thread's context
 * (the runtime's and the driver's graph, node, exec and parameter types are the same objects and layouts), so
 * this runs on NVIDIA's driver as well as on rgpu's. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "rt.h"
#include "fork_locks.h"

_Static_assert(sizeof(cudaGraphInstantiateParams) == sizeof(CUDA_GRAPH_INSTANTIATE_PARAMS) &&
                   sizeof(cudaGraphExecUpdateResultInfo) == sizeof(CUgraphExecUpdateResultInfo),
               "runtime and driver graph records differ");
_Static_assert((int)cudaStreamCaptureModeRelaxed == (int)CU_STREAM_CAPTURE_MODE_RELAXED &&
                   (int)cudaStreamCaptureStatusInvalidated == (int)CU_STREAM_CAPTURE_STATUS_INVALIDATED,
               "capture enums differ");

RT_API cudaError_t cudaStreamBeginCapture(cudaStream_t s, enum cudaStreamCaptureMode mode)
{
    WITH_CONTEXT(cuStreamBeginCapture_v2((CUstream)s, (CUstreamCaptureMode)mode));
}

RT_API cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *graph)
{
    WITH_CONTEXT(cuStreamEndCapture((CUstream)s, (CUgraph *)graph));
}

RT_API cudaError_t cudaStreamIsCapturing(cudaStream_t s, enum cudaStreamCaptureStatus *status)
{
    WITH_CONTEXT(cuStreamIsCapturing((CUstream)s, (CUstreamCaptureStatus *)status));
}

static cudaError_t capture_info(cudaStream_t s, enum cudaStreamCaptureStatus *status, unsigned long long *id,
                                cudaGraph_t *graph, const cudaGraphNode_t **deps, const cudaGraphEdgeData **edges,
                                size_t *n)
{
    WITH_CONTEXT(cuStreamGetCaptureInfo_v3((CUstream)s, (CUstreamCaptureStatus *)status, (cuuint64_t *)id,
                                           (CUgraph *)graph, (const CUgraphNode **)deps,
                                           (const CUgraphEdgeData **)edges, n));
}

#if CUDART_VERSION >= 13000
RT_API cudaError_t cudaStreamGetCaptureInfo(cudaStream_t s, enum cudaStreamCaptureStatus *status,
                                            unsigned long long *id, cudaGraph_t *graph,
                                            const cudaGraphNode_t **deps, const cudaGraphEdgeData **edges, size_t *n)
{
    return capture_info(s, status, id, graph, deps, edges, n);
}
#else
RT_API cudaError_t cudaStreamGetCaptureInfo_v2(cudaStream_t s, enum cudaStreamCaptureStatus *status,
                                               unsigned long long *id, cudaGraph_t *graph,
                                               const cudaGraphNode_t **deps, size_t *n)
{
    return capture_info(s, status, id, graph, deps, NULL, n);
}
RT_API cudaError_t cudaStreamGetCaptureInfo_v3(cudaStream_t s, enum cudaStreamCaptureStatus *status,
                                               unsigned long long *id, cudaGraph_t *graph,
                                               const cudaGraphNode_t **deps, const cudaGraphEdgeData **edges,
                                               size_t *n)
{
    return capture_info(s, status, id, graph, deps, edges, n);
}
#endif

static cudaError_t update_capture_dependencies(cudaStream_t s, cudaGraphNode_t *deps, const cudaGraphEdgeData *edges,
                                               size_t n, unsigned int flags)
{
    WITH_CONTEXT(cuStreamUpdateCaptureDependencies_v2((CUstream)s, (CUgraphNode *)deps, (const CUgraphEdgeData *)edges,
                                                      n, flags));
}

#if CUDART_VERSION >= 13000
RT_API cudaError_t cudaStreamUpdateCaptureDependencies(cudaStream_t s, cudaGraphNode_t *deps,
                                                       const cudaGraphEdgeData *edges, size_t n, unsigned int flags)
{
    return update_capture_dependencies(s, deps, edges, n, flags);
}
#else
RT_API cudaError_t cudaStreamUpdateCaptureDependencies(cudaStream_t s, cudaGraphNode_t *deps, size_t n,
                                                       unsigned int flags)
{
    return update_capture_dependencies(s, deps, NULL, n, flags);
}
RT_API cudaError_t cudaStreamUpdateCaptureDependencies_v2(cudaStream_t s, cudaGraphNode_t *deps,
                                                          const cudaGraphEdgeData *edges, size_t n, unsigned int flags)
{
    return update_capture_dependencies(s, deps, edges, n, flags);
}
#endif

RT_API cudaError_t cudaGraphInstantiate(cudaGraphExec_t *exec, cudaGraph_t graph, unsigned long long flags)
{
    WITH_CONTEXT(cuGraphInstantiateWithFlags((CUgraphExec *)exec, (CUgraph)graph, flags));
}

RT_API cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t *exec, cudaGraph_t graph, unsigned long long flags)
{
    return cudaGraphInstantiate(exec, graph, flags);
}

RT_API cudaError_t cudaGraphInstantiateWithParams(cudaGraphExec_t *exec, cudaGraph_t graph,
                                                  cudaGraphInstantiateParams *params)
{
    WITH_CONTEXT(cuGraphInstantiateWithParams((CUgraphExec *)exec, (CUgraph)graph,
                                              (CUDA_GRAPH_INSTANTIATE_PARAMS *)params));
}

RT_API cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t s)
{
    WITH_CONTEXT(cuGraphLaunch((CUgraphExec)exec, (CUstream)s));
}

RT_API cudaError_t cudaGraphUpload(cudaGraphExec_t exec, cudaStream_t s)
{
    WITH_CONTEXT(cuGraphUpload((CUgraphExec)exec, (CUstream)s));
}

RT_API cudaError_t cudaGraphExecUpdate(cudaGraphExec_t exec, cudaGraph_t graph, cudaGraphExecUpdateResultInfo *info)
{
    WITH_CONTEXT(cuGraphExecUpdate_v2((CUgraphExec)exec, (CUgraph)graph, (CUgraphExecUpdateResultInfo *)info));
}

RT_API cudaError_t cudaGraphDestroy(cudaGraph_t graph)
{
    WITH_CONTEXT(cuGraphDestroy((CUgraph)graph));
}

RT_API cudaError_t cudaGraphKernelNodeCopyAttributes(cudaGraphNode_t dst, cudaGraphNode_t src)
{
    WITH_CONTEXT(cuGraphKernelNodeCopyAttributes((CUgraphNode)dst, (CUgraphNode)src));
}

RT_API cudaError_t cudaGraphExecGetFlags(cudaGraphExec_t exec, unsigned long long *flags)
{
    WITH_CONTEXT(cuGraphExecGetFlags((CUgraphExec)exec, (cuuint64_t *)flags));
}

RT_API cudaError_t cudaGraphDebugDotPrint(cudaGraph_t graph, const char *path, unsigned int flags)
{
    WITH_CONTEXT(cuGraphDebugDotPrint((CUgraph)graph, path, flags));
}

RT_API cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec)
{
    WITH_CONTEXT(cuGraphExecDestroy((CUgraphExec)exec));
}

/* -- the explicit graph API ------------------------------------------------------------------------------------ */
RT_API cudaError_t cudaGraphCreate(cudaGraph_t *graph, unsigned int flags)
{
    WITH_CONTEXT(cuGraphCreate((CUgraph *)graph, flags));
}

/* Kernel nodes name host stubs here and CUfunctions in the driver: which stub each node was given, for
 * cudaGraphKernelNodeGetParams. */
#define MAX_KERNEL_NODES 4096
static pthread_mutex_t stubs_lock = PTHREAD_MUTEX_INITIALIZER;
RGPU_FORK_RESET(stubs_lock, &stubs_lock)
static struct {
    cudaGraphNode_t node;
    void *func;
} stubs[MAX_KERNEL_NODES];

static void note_stub(cudaGraphNode_t node, void *func)
{
    pthread_mutex_lock(&stubs_lock);
    int free_slot = -1;
    for (int i = 0; i < MAX_KERNEL_NODES; i++) {
        if (stubs[i].node == node) {
            stubs[i].func = func;
            free_slot = -2;
            break;
        }
        if (!stubs[i].node && free_slot == -1)
            free_slot = i;
    }
    if (free_slot >= 0)
        stubs[free_slot].node = node, stubs[free_slot].func = func;
    pthread_mutex_unlock(&stubs_lock);
}

static cudaError_t driver_kernel_params(const struct cudaKernelNodeParams *p, CUDA_KERNEL_NODE_PARAMS *out)
{
    int dev;
    CUfunction f;
    struct rt_kernel *k = p ? rt_kernel_of(p->func) : NULL;
    if (!k)
        return cudaErrorInvalidDeviceFunction;
    cudaError_t e = rt_context(&dev);
    if (e == cudaSuccess)
        e = rt_kernel_function(k, dev, &f);
    if (e != cudaSuccess)
        return e;
    *out = (CUDA_KERNEL_NODE_PARAMS){.func = f, .gridDimX = p->gridDim.x, .gridDimY = p->gridDim.y,
                                     .gridDimZ = p->gridDim.z, .blockDimX = p->blockDim.x,
                                     .blockDimY = p->blockDim.y, .blockDimZ = p->blockDim.z,
                                     .sharedMemBytes = p->sharedMemBytes, .kernelParams = p->kernelParams,
                                     .extra = p->extra};
    return cudaSuccess;
}

RT_API cudaError_t cudaGraphAddKernelNode(cudaGraphNode_t *node, cudaGraph_t graph, const cudaGraphNode_t *deps,
                                          size_t n, const struct cudaKernelNodeParams *p)
{
    CUDA_KERNEL_NODE_PARAMS d;
    cudaError_t e = driver_kernel_params(p, &d);
    if (e != cudaSuccess)
        return rt_record(e);
    e = rt_fail(cuGraphAddKernelNode_v2((CUgraphNode *)node, (CUgraph)graph, (const CUgraphNode *)deps, n, &d));
    if (e == cudaSuccess)
        note_stub(*node, p->func);
    return e;
}

RT_API cudaError_t cudaGraphKernelNodeSetParams(cudaGraphNode_t node, const struct cudaKernelNodeParams *p)
{
    CUDA_KERNEL_NODE_PARAMS d;
    cudaError_t e = driver_kernel_params(p, &d);
    if (e != cudaSuccess)
        return rt_record(e);
    e = rt_fail(cuGraphKernelNodeSetParams_v2((CUgraphNode)node, &d));
    if (e == cudaSuccess)
        note_stub(node, p->func);
    return e;
}

RT_API cudaError_t cudaGraphExecKernelNodeSetParams(cudaGraphExec_t exec, cudaGraphNode_t node,
                                                    const struct cudaKernelNodeParams *p)
{
    CUDA_KERNEL_NODE_PARAMS d;
    cudaError_t e = driver_kernel_params(p, &d);
    if (e != cudaSuccess)
        return rt_record(e);
    return rt_fail(cuGraphExecKernelNodeSetParams_v2((CUgraphExec)exec, (CUgraphNode)node, &d));
}

RT_API cudaError_t cudaGraphKernelNodeGetParams(cudaGraphNode_t node, struct cudaKernelNodeParams *p)
{
    CUDA_KERNEL_NODE_PARAMS d;
    if (!p)
        return rt_record(cudaErrorInvalidValue);
    cudaError_t e = rt_fail(cuGraphKernelNodeGetParams_v2((CUgraphNode)node, &d));
    if (e != cudaSuccess)
        return e;
    *p = (struct cudaKernelNodeParams){.gridDim = {d.gridDimX, d.gridDimY, d.gridDimZ},
                                       .blockDim = {d.blockDimX, d.blockDimY, d.blockDimZ},
                                       .sharedMemBytes = d.sharedMemBytes, .kernelParams = d.kernelParams};
    pthread_mutex_lock(&stubs_lock);
    for (int i = 0; i < MAX_KERNEL_NODES; i++)
        if (stubs[i].node == node)
            p->func = stubs[i].func;
    pthread_mutex_unlock(&stubs_lock);
    if (!p->func) /* a captured launch: the stub its function came from */
        p->func = (void *)rt_host_of_function(d.func);
    /* A library's kernel (cuBLAS) has no stub in this program: CUDA's runtime says the same. */
    return p->func ? cudaSuccess : rt_record(cudaErrorInvalidDeviceFunction);
}

RT_API cudaError_t cudaGraphKernelNodeGetAttribute(cudaGraphNode_t node, cudaKernelNodeAttrID id,
                                                   cudaKernelNodeAttrValue *v)
{
    WITH_CONTEXT(cuGraphKernelNodeGetAttribute((CUgraphNode)node, (CUkernelNodeAttrID)id, (CUkernelNodeAttrValue *)v));
}

RT_API cudaError_t cudaGraphKernelNodeSetAttribute(cudaGraphNode_t node, cudaKernelNodeAttrID id,
                                                   const cudaKernelNodeAttrValue *v)
{
    WITH_CONTEXT(cuGraphKernelNodeSetAttribute((CUgraphNode)node, (CUkernelNodeAttrID)id,
                                               (const CUkernelNodeAttrValue *)v));
}

RT_API cudaError_t cudaGraphAddMemsetNode(cudaGraphNode_t *node, cudaGraph_t graph, const cudaGraphNode_t *deps,
                                          size_t n, const struct cudaMemsetParams *p)
{
    if (!p)
        return rt_record(cudaErrorInvalidValue);
    CUcontext ctx = NULL;
    CUDA_MEMSET_NODE_PARAMS d = {(CUdeviceptr)(uintptr_t)p->dst, p->pitch, p->value, p->elementSize, p->width,
                                 p->height};
    cudaError_t e = rt_context(NULL);
    if (e == cudaSuccess)
        e = rt_fail(cuCtxGetCurrent(&ctx));
    return e != cudaSuccess ? rt_record(e)
                            : rt_fail(cuGraphAddMemsetNode((CUgraphNode *)node, (CUgraph)graph,
                                                           (const CUgraphNode *)deps, n, &d, ctx));
}

RT_API cudaError_t cudaGraphMemsetNodeGetParams(cudaGraphNode_t node, struct cudaMemsetParams *p)
{
    CUDA_MEMSET_NODE_PARAMS d;
    if (!p)
        return rt_record(cudaErrorInvalidValue);
    cudaError_t e = rt_fail(cuGraphMemsetNodeGetParams((CUgraphNode)node, &d));
    if (e == cudaSuccess)
        *p = (struct cudaMemsetParams){(void *)(uintptr_t)d.dst, d.pitch, d.value, d.elementSize, d.width, d.height};
    return e;
}

static CUDA_MEMSET_NODE_PARAMS driver_memset(const struct cudaMemsetParams *p)
{
    return (CUDA_MEMSET_NODE_PARAMS){(CUdeviceptr)(uintptr_t)p->dst, p->pitch, p->value, p->elementSize, p->width,
                                     p->height};
}

RT_API cudaError_t cudaGraphMemsetNodeSetParams(cudaGraphNode_t node, const struct cudaMemsetParams *p)
{
    if (!p)
        return rt_record(cudaErrorInvalidValue);
    CUDA_MEMSET_NODE_PARAMS d = driver_memset(p);
    WITH_CONTEXT(cuGraphMemsetNodeSetParams((CUgraphNode)node, &d));
}

RT_API cudaError_t cudaGraphExecMemsetNodeSetParams(cudaGraphExec_t exec, cudaGraphNode_t node,
                                                    const struct cudaMemsetParams *p)
{
    if (!p)
        return rt_record(cudaErrorInvalidValue);
    CUDA_MEMSET_NODE_PARAMS d = driver_memset(p);
    WITH_CONTEXT(cuGraphExecMemsetNodeSetParams((CUgraphExec)exec, (CUgraphNode)node, &d, NULL));
}

/* A 1D or 2D copy between pointers, as the driver takes it: unified addressing tells device from host. */
static CUDA_MEMCPY3D driver_copy_2d(const void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                                    size_t height)
{
    CUDA_MEMCPY3D d = {0};
    d.srcMemoryType = d.dstMemoryType = CU_MEMORYTYPE_UNIFIED;
    d.srcDevice = (CUdeviceptr)(uintptr_t)src, d.srcPitch = spitch;
    d.dstDevice = (CUdeviceptr)(uintptr_t)dst, d.dstPitch = dpitch;
    d.WidthInBytes = width, d.Height = height, d.Depth = 1;
    return d;
}

static CUDA_MEMCPY3D driver_copy_1d(const void *dst, const void *src, size_t count)
{
    return driver_copy_2d(dst, count, src, count, count, 1);
}

/* cudaMemcpy3DParms of a memcpy node: pointer ends only, 1D or 2D (0: it is; logged once if not). */
static int driver_copy_params(const struct cudaMemcpy3DParms *p, CUDA_MEMCPY3D *d)
{
    static int logged;
    if (p->srcArray || p->dstArray || p->extent.depth > 1 || p->srcPos.x || p->srcPos.y || p->srcPos.z ||
        p->dstPos.x || p->dstPos.y || p->dstPos.z) {
        rt_unsupported(&logged, "graph memcpy nodes with arrays, 3D extents or positions");
        return -1;
    }
    *d = driver_copy_2d(p->dstPtr.ptr, p->dstPtr.pitch, p->srcPtr.ptr, p->srcPtr.pitch, p->extent.width,
                        p->extent.height);
    return 0;
}

RT_API cudaError_t cudaGraphMemcpyNodeSetParams1D(cudaGraphNode_t node, void *dst, const void *src, size_t count,
                                                  enum cudaMemcpyKind kind)
{
    CUDA_MEMCPY3D d = driver_copy_1d(dst, src, count); /* (unified addressing: the pointers say where they are) */
    cudaError_t e = rt_copy_start(kind);
    return e != cudaSuccess ? e : rt_fail(cuGraphMemcpyNodeSetParams((CUgraphNode)node, &d));
}

RT_API cudaError_t cudaGraphExecMemcpyNodeSetParams1D(cudaGraphExec_t exec, cudaGraphNode_t node, void *dst,
                                                      const void *src, size_t count, enum cudaMemcpyKind kind)
{
    CUDA_MEMCPY3D d = driver_copy_1d(dst, src, count);
    cudaError_t e = rt_copy_start(kind);
    return e != cudaSuccess ? e
                            : rt_fail(cuGraphExecMemcpyNodeSetParams((CUgraphExec)exec, (CUgraphNode)node, &d, NULL));
}

RT_API cudaError_t cudaGraphMemcpyNodeSetParams(cudaGraphNode_t node, const struct cudaMemcpy3DParms *p)
{
    CUDA_MEMCPY3D d;
    if (!p)
        return rt_record(cudaErrorInvalidValue);
    if (driver_copy_params(p, &d))
        return rt_record(cudaErrorNotSupported);
    WITH_CONTEXT(cuGraphMemcpyNodeSetParams((CUgraphNode)node, &d));
}

RT_API cudaError_t cudaGraphExecMemcpyNodeSetParams(cudaGraphExec_t exec, cudaGraphNode_t node,
                                                    const struct cudaMemcpy3DParms *p)
{
    CUDA_MEMCPY3D d;
    if (!p)
        return rt_record(cudaErrorInvalidValue);
    if (driver_copy_params(p, &d))
        return rt_record(cudaErrorNotSupported);
    WITH_CONTEXT(cuGraphExecMemcpyNodeSetParams((CUgraphExec)exec, (CUgraphNode)node, &d, NULL));
}

static void *end_pointer(CUmemorytype type, const void *host, CUdeviceptr dev)
{
    return type == CU_MEMORYTYPE_HOST ? (void *)host : (void *)(uintptr_t)dev;
}

RT_API cudaError_t cudaGraphMemcpyNodeGetParams(cudaGraphNode_t node, struct cudaMemcpy3DParms *p)
{
    CUDA_MEMCPY3D d;
    cudaError_t e = p ? rt_context(NULL) : cudaErrorInvalidValue;
    if (e == cudaSuccess)
        e = rt_fail(cuGraphMemcpyNodeGetParams((CUgraphNode)node, &d));
    if (e != cudaSuccess)
        return rt_record(e);
    *p = (struct cudaMemcpy3DParms){0};
    p->srcArray = d.srcMemoryType == CU_MEMORYTYPE_ARRAY ? (cudaArray_t)d.srcArray : NULL;
    p->dstArray = d.dstMemoryType == CU_MEMORYTYPE_ARRAY ? (cudaArray_t)d.dstArray : NULL;
    p->srcPos = (struct cudaPos){d.srcXInBytes, d.srcY, d.srcZ};
    p->dstPos = (struct cudaPos){d.dstXInBytes, d.dstY, d.dstZ};
    p->srcPtr = (struct cudaPitchedPtr){end_pointer(d.srcMemoryType, d.srcHost, d.srcDevice), d.srcPitch,
                                        d.WidthInBytes, d.Height};
    p->dstPtr = (struct cudaPitchedPtr){end_pointer(d.dstMemoryType, d.dstHost, d.dstDevice), d.dstPitch,
                                        d.WidthInBytes, d.Height};
    p->extent = (struct cudaExtent){d.WidthInBytes, d.Height, d.Depth};
    p->kind = cudaMemcpyDefault;
    return cudaSuccess;
}

/* A __device__ variable's address, offset bytes in, with room for count bytes after it (and a copy direction that
 * is one). */
static cudaError_t symbol_at(const void *symbol, size_t offset, size_t count, enum cudaMemcpyKind kind, void **out)
{
    size_t size = 0;
    cudaError_t e = rt_copy_start(kind);
    if (e == cudaSuccess)
        e = cudaGetSymbolAddress(out, symbol);
    if (e == cudaSuccess)
        e = cudaGetSymbolSize(&size, symbol);
    if (e == cudaSuccess && (offset > size || count > size - offset))
        e = rt_record(cudaErrorInvalidValue);
    if (e == cudaSuccess)
        *out = (char *)*out + offset;
    return e;
}

static cudaError_t add_copy(cudaGraphNode_t *node, cudaGraph_t graph, const cudaGraphNode_t *deps, size_t n,
                            const void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                            size_t height)
{
    CUcontext ctx = NULL;
    CUDA_MEMCPY3D d = driver_copy_2d(dst, dpitch, src, spitch, width, height);
    cudaError_t e = rt_context(NULL);
    if (e == cudaSuccess)
        e = rt_fail(cuCtxGetCurrent(&ctx));
    return e != cudaSuccess ? rt_record(e)
                            : rt_fail(cuGraphAddMemcpyNode((CUgraphNode *)node, (CUgraph)graph,
                                                           (const CUgraphNode *)deps, n, &d, ctx));
}

RT_API cudaError_t cudaGraphAddMemcpyNode1D(cudaGraphNode_t *node, cudaGraph_t graph, const cudaGraphNode_t *deps,
                                            size_t n, void *dst, const void *src, size_t count,
                                            enum cudaMemcpyKind kind)
{
    (void)kind; /* unified addressing: the pointers say where they are */
    return add_copy(node, graph, deps, n, dst, count, src, count, count, 1);
}

RT_API cudaError_t cudaGraphAddMemcpyNode(cudaGraphNode_t *node, cudaGraph_t graph, const cudaGraphNode_t *deps,
                                          size_t n, const struct cudaMemcpy3DParms *p)
{
    CUDA_MEMCPY3D d;
    if (!p)
        return rt_record(cudaErrorInvalidValue);
    if (driver_copy_params(p, &d))
        return rt_record(cudaErrorNotSupported);
    return add_copy(node, graph, deps, n, p->dstPtr.ptr, p->dstPtr.pitch, p->srcPtr.ptr, p->srcPtr.pitch,
                    p->extent.width, p->extent.height);
}

/* -- memcpy nodes to and from __device__ variables ----------------------------------------------------------- */
RT_API cudaError_t cudaGraphAddMemcpyNodeToSymbol(cudaGraphNode_t *node, cudaGraph_t graph,
                                                  const cudaGraphNode_t *deps, size_t n, const void *symbol,
                                                  const void *src, size_t count, size_t offset,
                                                  enum cudaMemcpyKind kind)
{
    void *at;
    cudaError_t e = symbol_at(symbol, offset, count, kind, &at);
    return e != cudaSuccess ? e : add_copy(node, graph, deps, n, at, count, src, count, count, 1);
}

RT_API cudaError_t cudaGraphAddMemcpyNodeFromSymbol(cudaGraphNode_t *node, cudaGraph_t graph,
                                                    const cudaGraphNode_t *deps, size_t n, void *dst,
                                                    const void *symbol, size_t count, size_t offset,
                                                    enum cudaMemcpyKind kind)
{
    void *at;
    cudaError_t e = symbol_at(symbol, offset, count, kind, &at);
    return e != cudaSuccess ? e : add_copy(node, graph, deps, n, dst, count, at, count, count, 1);
}

RT_API cudaError_t cudaGraphMemcpyNodeSetParamsToSymbol(cudaGraphNode_t node, const void *symbol, const void *src,
                                                        size_t count, size_t offset, enum cudaMemcpyKind kind)
{
    void *at;
    cudaError_t e = symbol_at(symbol, offset, count, kind, &at);
    return e != cudaSuccess ? e : cudaGraphMemcpyNodeSetParams1D(node, at, src, count, kind);
}

RT_API cudaError_t cudaGraphMemcpyNodeSetParamsFromSymbol(cudaGraphNode_t node, void *dst, const void *symbol,
                                                          size_t count, size_t offset, enum cudaMemcpyKind kind)
{
    void *at;
    cudaError_t e = symbol_at(symbol, offset, count, kind, &at);
    return e != cudaSuccess ? e : cudaGraphMemcpyNodeSetParams1D(node, dst, at, count, kind);
}

RT_API cudaError_t cudaGraphExecMemcpyNodeSetParamsToSymbol(cudaGraphExec_t exec, cudaGraphNode_t node,
                                                            const void *symbol, const void *src, size_t count,
                                                            size_t offset, enum cudaMemcpyKind kind)
{
    void *at;
    cudaError_t e = symbol_at(symbol, offset, count, kind, &at);
    return e != cudaSuccess ? e : cudaGraphExecMemcpyNodeSetParams1D(exec, node, at, src, count, kind);
}

RT_API cudaError_t cudaGraphExecMemcpyNodeSetParamsFromSymbol(cudaGraphExec_t exec, cudaGraphNode_t node, void *dst,
                                                              const void *symbol, size_t count, size_t offset,
                                                              enum cudaMemcpyKind kind)
{
    void *at;
    cudaError_t e = symbol_at(symbol, offset, count, kind, &at);
    return e != cudaSuccess ? e : cudaGraphExecMemcpyNodeSetParams1D(exec, node, dst, at, count, kind);
}

RT_API cudaError_t cudaGraphAddEmptyNode(cudaGraphNode_t *node, cudaGraph_t graph, const cudaGraphNode_t *deps,
                                         size_t n)
{
    WITH_CONTEXT(cuGraphAddEmptyNode((CUgraphNode *)node, (CUgraph)graph, (const CUgraphNode *)deps, n));
}

RT_API cudaError_t cudaGraphAddEventRecordNode(cudaGraphNode_t *node, cudaGraph_t graph,
                                               const cudaGraphNode_t *deps, size_t n, cudaEvent_t event)
{
    WITH_CONTEXT(cuGraphAddEventRecordNode((CUgraphNode *)node, (CUgraph)graph, (const CUgraphNode *)deps, n,
                                           (CUevent)event));
}

RT_API cudaError_t cudaGraphAddEventWaitNode(cudaGraphNode_t *node, cudaGraph_t graph, const cudaGraphNode_t *deps,
                                             size_t n, cudaEvent_t event)
{
    WITH_CONTEXT(cuGraphAddEventWaitNode((CUgraphNode *)node, (CUgraph)graph, (const CUgraphNode *)deps, n,
                                         (CUevent)event));
}

RT_API cudaError_t cudaGraphAddChildGraphNode(cudaGraphNode_t *node, cudaGraph_t graph,
                                              const cudaGraphNode_t *deps, size_t n, cudaGraph_t child)
{
    WITH_CONTEXT(cuGraphAddChildGraphNode((CUgraphNode *)node, (CUgraph)graph, (const CUgraphNode *)deps, n,
                                          (CUgraph)child));
}

static cudaError_t dependencies(cudaGraph_t g, const cudaGraphNode_t *from, const cudaGraphNode_t *to,
                                const cudaGraphEdgeData *data, size_t n, int remove)
{
    CUresult (*fn)(CUgraph, const CUgraphNode *, const CUgraphNode *, const CUgraphEdgeData *, size_t) =
        remove ? cuGraphRemoveDependencies_v2 : cuGraphAddDependencies_v2;
    WITH_CONTEXT(fn((CUgraph)g, (const CUgraphNode *)from, (const CUgraphNode *)to, (const CUgraphEdgeData *)data,
                    n));
}

static cudaError_t get_edges(cudaGraph_t g, cudaGraphNode_t *from, cudaGraphNode_t *to, cudaGraphEdgeData *data,
                             size_t *n)
{
    WITH_CONTEXT(cuGraphGetEdges_v2((CUgraph)g, (CUgraphNode *)from, (CUgraphNode *)to, (CUgraphEdgeData *)data, n));
}

static cudaError_t node_dependencies(cudaGraphNode_t node, cudaGraphNode_t *deps, cudaGraphEdgeData *data, size_t *n)
{
    WITH_CONTEXT(cuGraphNodeGetDependencies_v2((CUgraphNode)node, (CUgraphNode *)deps, (CUgraphEdgeData *)data, n));
}

static cudaError_t dependent_nodes(cudaGraphNode_t node, cudaGraphNode_t *out, cudaGraphEdgeData *data, size_t *n)
{
    WITH_CONTEXT(cuGraphNodeGetDependentNodes_v2((CUgraphNode)node, (CUgraphNode *)out, (CUgraphEdgeData *)data, n));
}

RT_API cudaError_t cudaGraphEventRecordNodeGetEvent(cudaGraphNode_t node, cudaEvent_t *event)
{
    WITH_CONTEXT(cuGraphEventRecordNodeGetEvent((CUgraphNode)node, (CUevent *)event));
}

RT_API cudaError_t cudaGraphEventWaitNodeGetEvent(cudaGraphNode_t node, cudaEvent_t *event)
{
    WITH_CONTEXT(cuGraphEventWaitNodeGetEvent((CUgraphNode)node, (CUevent *)event));
}

#if CUDART_VERSION >= 13000
RT_API cudaError_t cudaGraphNodeGetDependentNodes(cudaGraphNode_t node, cudaGraphNode_t *out, cudaGraphEdgeData *data,
                                                  size_t *n)
{
    return dependent_nodes(node, out, data, n);
}
#else
RT_API cudaError_t cudaGraphNodeGetDependentNodes(cudaGraphNode_t node, cudaGraphNode_t *out, size_t *n)
{
    return dependent_nodes(node, out, NULL, n);
}
RT_API cudaError_t cudaGraphNodeGetDependentNodes_v2(cudaGraphNode_t node, cudaGraphNode_t *out,
                                                     cudaGraphEdgeData *data, size_t *n)
{
    return dependent_nodes(node, out, data, n);
}
#endif

#if CUDART_VERSION >= 13000
RT_API cudaError_t cudaGraphAddDependencies(cudaGraph_t g, const cudaGraphNode_t *from, const cudaGraphNode_t *to,
                                            const cudaGraphEdgeData *data, size_t n)
{
    return dependencies(g, from, to, data, n, 0);
}
RT_API cudaError_t cudaGraphRemoveDependencies(cudaGraph_t g, const cudaGraphNode_t *from,
                                               const cudaGraphNode_t *to, const cudaGraphEdgeData *data, size_t n)
{
    return dependencies(g, from, to, data, n, 1);
}
RT_API cudaError_t cudaGraphGetEdges(cudaGraph_t g, cudaGraphNode_t *from, cudaGraphNode_t *to,
                                     cudaGraphEdgeData *data, size_t *n)
{
    return get_edges(g, from, to, data, n);
}
RT_API cudaError_t cudaGraphNodeGetDependencies(cudaGraphNode_t node, cudaGraphNode_t *deps, cudaGraphEdgeData *data,
                                                size_t *n)
{
    return node_dependencies(node, deps, data, n);
}
#else
RT_API cudaError_t cudaGraphAddDependencies(cudaGraph_t g, const cudaGraphNode_t *from, const cudaGraphNode_t *to,
                                            size_t n)
{
    return dependencies(g, from, to, NULL, n, 0);
}
RT_API cudaError_t cudaGraphAddDependencies_v2(cudaGraph_t g, const cudaGraphNode_t *from, const cudaGraphNode_t *to,
                                               const cudaGraphEdgeData *data, size_t n)
{
    return dependencies(g, from, to, data, n, 0);
}
RT_API cudaError_t cudaGraphRemoveDependencies(cudaGraph_t g, const cudaGraphNode_t *from,
                                               const cudaGraphNode_t *to, size_t n)
{
    return dependencies(g, from, to, NULL, n, 1);
}
RT_API cudaError_t cudaGraphRemoveDependencies_v2(cudaGraph_t g, const cudaGraphNode_t *from,
                                                  const cudaGraphNode_t *to, const cudaGraphEdgeData *data, size_t n)
{
    return dependencies(g, from, to, data, n, 1);
}
RT_API cudaError_t cudaGraphGetEdges(cudaGraph_t g, cudaGraphNode_t *from, cudaGraphNode_t *to, size_t *n)
{
    return get_edges(g, from, to, NULL, n);
}
RT_API cudaError_t cudaGraphGetEdges_v2(cudaGraph_t g, cudaGraphNode_t *from, cudaGraphNode_t *to,
                                        cudaGraphEdgeData *data, size_t *n)
{
    return get_edges(g, from, to, data, n);
}
RT_API cudaError_t cudaGraphNodeGetDependencies(cudaGraphNode_t node, cudaGraphNode_t *deps, size_t *n)
{
    return node_dependencies(node, deps, NULL, n);
}
RT_API cudaError_t cudaGraphNodeGetDependencies_v2(cudaGraphNode_t node, cudaGraphNode_t *deps,
                                                   cudaGraphEdgeData *data, size_t *n)
{
    return node_dependencies(node, deps, data, n);
}
#endif

RT_API cudaError_t cudaGraphGetNodes(cudaGraph_t g, cudaGraphNode_t *nodes, size_t *n)
{
    WITH_CONTEXT(cuGraphGetNodes((CUgraph)g, (CUgraphNode *)nodes, n));
}

RT_API cudaError_t cudaGraphGetRootNodes(cudaGraph_t g, cudaGraphNode_t *nodes, size_t *n)
{
    WITH_CONTEXT(cuGraphGetRootNodes((CUgraph)g, (CUgraphNode *)nodes, n));
}

RT_API cudaError_t cudaGraphNodeGetType(cudaGraphNode_t node, enum cudaGraphNodeType *type)
{
    WITH_CONTEXT(cuGraphNodeGetType((CUgraphNode)node, (CUgraphNodeType *)type));
}

RT_API cudaError_t cudaGraphClone(cudaGraph_t *clone, cudaGraph_t g)
{
    WITH_CONTEXT(cuGraphClone((CUgraph *)clone, (CUgraph)g));
}

RT_API cudaError_t cudaGraphNodeFindInClone(cudaGraphNode_t *node, cudaGraphNode_t original, cudaGraph_t clone)
{
    WITH_CONTEXT(cuGraphNodeFindInClone((CUgraphNode *)node, (CUgraphNode)original, (CUgraph)clone));
}

RT_API cudaError_t cudaGraphDestroyNode(cudaGraphNode_t node)
{
    WITH_CONTEXT(cuGraphDestroyNode((CUgraphNode)node));
}

/* -- the generic node API: each node type to its own function above, so a node made either way is the same
 * node; edges with data are added after the node. Other node types, and memcpy parameters set in place, are
 * NOT_SUPPORTED (logged once). */
static int plain_edges(const cudaGraphEdgeData *data, size_t n)
{
    static const cudaGraphEdgeData zero;
    for (size_t i = 0; data && i < n; i++)
        if (memcmp(&data[i], &zero, sizeof zero))
            return 0;
    return 1;
}

static struct cudaKernelNodeParams kernel_v1(const struct cudaKernelNodeParamsV2 *k)
{
    return (struct cudaKernelNodeParams){.func = k->func, .gridDim = k->gridDim, .blockDim = k->blockDim,
                                         .sharedMemBytes = k->sharedMemBytes, .kernelParams = k->kernelParams,
                                         .extra = k->extra};
}

/* -- host nodes: the driver shim runs them on this side (native/src/graph_host.c) ------------------------------- */
_Static_assert(sizeof(struct cudaHostNodeParams) == sizeof(CUDA_HOST_NODE_PARAMS),
               "runtime and driver host node parameters differ");

RT_API cudaError_t cudaGraphAddHostNode(cudaGraphNode_t *node, cudaGraph_t graph, const cudaGraphNode_t *deps,
                                        size_t n, const struct cudaHostNodeParams *p)
{
    WITH_CONTEXT(cuGraphAddHostNode((CUgraphNode *)node, (CUgraph)graph, (const CUgraphNode *)deps, n,
                                    (const CUDA_HOST_NODE_PARAMS *)p));
}

RT_API cudaError_t cudaGraphHostNodeGetParams(cudaGraphNode_t node, struct cudaHostNodeParams *p)
{
    WITH_CONTEXT(cuGraphHostNodeGetParams((CUgraphNode)node, (CUDA_HOST_NODE_PARAMS *)p));
}

RT_API cudaError_t cudaGraphHostNodeSetParams(cudaGraphNode_t node, const struct cudaHostNodeParams *p)
{
    WITH_CONTEXT(cuGraphHostNodeSetParams((CUgraphNode)node, (const CUDA_HOST_NODE_PARAMS *)p));
}

RT_API cudaError_t cudaGraphExecHostNodeSetParams(cudaGraphExec_t exec, cudaGraphNode_t node,
                                                  const struct cudaHostNodeParams *p)
{
    WITH_CONTEXT(cuGraphExecHostNodeSetParams((CUgraphExec)exec, (CUgraphNode)node, (const CUDA_HOST_NODE_PARAMS *)p));
}

/* -- memory nodes ------------------------------------------------------------------------------------------------ */
_Static_assert(sizeof(struct cudaMemAllocNodeParams) == sizeof(CUDA_MEM_ALLOC_NODE_PARAMS),
               "runtime and driver memory allocation node parameters differ");

RT_API cudaError_t cudaGraphAddMemAllocNode(cudaGraphNode_t *node, cudaGraph_t graph, const cudaGraphNode_t *deps,
                                            size_t n, struct cudaMemAllocNodeParams *p)
{
    WITH_CONTEXT(cuGraphAddMemAllocNode((CUgraphNode *)node, (CUgraph)graph, (const CUgraphNode *)deps, n,
                                        (CUDA_MEM_ALLOC_NODE_PARAMS *)p));
}

RT_API cudaError_t cudaGraphMemAllocNodeGetParams(cudaGraphNode_t node, struct cudaMemAllocNodeParams *p)
{
    WITH_CONTEXT(cuGraphMemAllocNodeGetParams((CUgraphNode)node, (CUDA_MEM_ALLOC_NODE_PARAMS *)p));
}

RT_API cudaError_t cudaGraphAddMemFreeNode(cudaGraphNode_t *node, cudaGraph_t graph, const cudaGraphNode_t *deps,
                                           size_t n, void *dptr)
{
    WITH_CONTEXT(cuGraphAddMemFreeNode((CUgraphNode *)node, (CUgraph)graph, (const CUgraphNode *)deps, n,
                                       (CUdeviceptr)(uintptr_t)dptr));
}

RT_API cudaError_t cudaGraphMemFreeNodeGetParams(cudaGraphNode_t node, void *dptr_out)
{
    WITH_CONTEXT(cuGraphMemFreeNodeGetParams((CUgraphNode)node, (CUdeviceptr *)dptr_out));
}

static struct cudaMemsetParams memset_v1(const struct cudaMemsetParamsV2 *m)
{
    return (struct cudaMemsetParams){.dst = m->dst, .pitch = m->pitch, .value = m->value,
                                     .elementSize = m->elementSize, .width = m->width, .height = m->height};
}

static cudaError_t add_node(cudaGraphNode_t *node, cudaGraph_t graph, const cudaGraphNode_t *deps,
                            const cudaGraphEdgeData *data, size_t n, struct cudaGraphNodeParams *p)
{
    static int logged;
    if (!p || !node)
        return rt_record(cudaErrorInvalidValue);
    if (!plain_edges(data, n)) { /* the node first, then its edges with their data, in one call */
        cudaGraphNode_t made, *to = malloc(n * sizeof *to);
        cudaError_t e = to ? add_node(&made, graph, NULL, NULL, 0, p) : rt_record(cudaErrorMemoryAllocation);
        for (size_t i = 0; e == cudaSuccess && i < n; i++)
            to[i] = made;
        if (e == cudaSuccess && (e = dependencies(graph, deps, to, data, n, 0)) != cudaSuccess)
            cudaGraphDestroyNode(made);
        free(to);
        if (e == cudaSuccess)
            *node = made;
        return e;
    }
    switch (p->type) {
    case cudaGraphNodeTypeKernel: {
        struct cudaKernelNodeParams k = kernel_v1(&p->kernel);
        return cudaGraphAddKernelNode(node, graph, deps, n, &k);
    }
    case cudaGraphNodeTypeMemcpy:
        return p->memcpy.flags ? rt_record(cudaErrorInvalidValue)
                               : cudaGraphAddMemcpyNode(node, graph, deps, n, &p->memcpy.copyParams);
    case cudaGraphNodeTypeMemset: {
        struct cudaMemsetParams m = memset_v1(&p->memset);
        return cudaGraphAddMemsetNode(node, graph, deps, n, &m);
    }
    case cudaGraphNodeTypeEmpty:
        return cudaGraphAddEmptyNode(node, graph, deps, n);
    case cudaGraphNodeTypeEventRecord:
        return cudaGraphAddEventRecordNode(node, graph, deps, n, p->eventRecord.event);
    case cudaGraphNodeTypeWaitEvent:
        return cudaGraphAddEventWaitNode(node, graph, deps, n, p->eventWait.event);
    case cudaGraphNodeTypeHost: {
        struct cudaHostNodeParams h = {p->host.fn, p->host.userData}; /* newer headers may grow the V2 record */
        return cudaGraphAddHostNode(node, graph, deps, n, &h);
    }
    case cudaGraphNodeTypeMemAlloc: {
        struct cudaMemAllocNodeParams a = {.poolProps = p->alloc.poolProps, .accessDescs = p->alloc.accessDescs,
                                           .accessDescCount = p->alloc.accessDescCount,
                                           .bytesize = p->alloc.bytesize};
        cudaError_t e = cudaGraphAddMemAllocNode(node, graph, deps, n, &a);
        p->alloc.dptr = a.dptr; /* the allocation's address comes back in p */
        return e;
    }
    case cudaGraphNodeTypeMemFree:
        return cudaGraphAddMemFreeNode(node, graph, deps, n, p->free.dptr);
    case cudaGraphNodeTypeGraph: { /* cloned, or moved into the node (XLA's nested command buffers) */
        CUgraphNodeParams child = {.type = CU_GRAPH_NODE_TYPE_GRAPH};
        child.graph.graph = (CUgraph)p->graph.graph;
        child.graph.ownership = (CUgraphChildGraphNodeOwnership)p->graph.ownership;
        WITH_CONTEXT(
            cuGraphAddNode_v2((CUgraphNode *)node, (CUgraph)graph, (const CUgraphNode *)deps, NULL, n, &child));
    }
    case cudaGraphNodeTypeConditional:
        return rt_add_conditional(node, graph, deps, n, &p->conditional);
    default:
        return rt_unsupported(&logged, "cudaGraphAddNode of a node type other than kernel, memcpy, memset, empty, "
                                       "host, memory, event record/wait, child graph and conditional");
    }
}

#if CUDART_VERSION >= 13000
RT_API cudaError_t cudaGraphAddNode(cudaGraphNode_t *node, cudaGraph_t graph, const cudaGraphNode_t *deps,
                                    const cudaGraphEdgeData *data, size_t n, struct cudaGraphNodeParams *p)
{
    return add_node(node, graph, deps, data, n, p);
}
#else
RT_API cudaError_t cudaGraphAddNode(cudaGraphNode_t *node, cudaGraph_t graph, const cudaGraphNode_t *deps, size_t n,
                                    struct cudaGraphNodeParams *p)
{
    return add_node(node, graph, deps, NULL, n, p);
}
RT_API cudaError_t cudaGraphAddNode_v2(cudaGraphNode_t *node, cudaGraph_t graph, const cudaGraphNode_t *deps,
                                       const cudaGraphEdgeData *data, size_t n, struct cudaGraphNodeParams *p)
{
    return add_node(node, graph, deps, data, n, p);
}
#endif

/* exec: the executable graph whose copy of the node changes, or NULL for the node in its graph. */
static cudaError_t set_node(cudaGraphExec_t exec, cudaGraphNode_t node, const struct cudaGraphNodeParams *p)
{
    static int logged;
    if (!p)
        return rt_record(cudaErrorInvalidValue);
    if (p->type == cudaGraphNodeTypeKernel) {
        struct cudaKernelNodeParams k = kernel_v1(&p->kernel);
        return exec ? cudaGraphExecKernelNodeSetParams(exec, node, &k) : cudaGraphKernelNodeSetParams(node, &k);
    }
    if (p->type == cudaGraphNodeTypeMemset) {
        struct cudaMemsetParams m = memset_v1(&p->memset);
        return exec ? cudaGraphExecMemsetNodeSetParams(exec, node, &m) : cudaGraphMemsetNodeSetParams(node, &m);
    }
    if (p->type == cudaGraphNodeTypeHost) {
        struct cudaHostNodeParams h = {p->host.fn, p->host.userData};
        return exec ? cudaGraphExecHostNodeSetParams(exec, node, &h) : cudaGraphHostNodeSetParams(node, &h);
    }
    return rt_unsupported(&logged, "cudaGraph(Exec)NodeSetParams of a node type other than kernel, memset and host");
}

RT_API cudaError_t cudaGraphNodeSetParams(cudaGraphNode_t node, struct cudaGraphNodeParams *p)
{
    return set_node(NULL, node, p);
}

RT_API cudaError_t cudaGraphExecNodeSetParams(cudaGraphExec_t exec, cudaGraphNode_t node, struct cudaGraphNodeParams *p)
{
    return exec ? set_node(exec, node, p) : rt_record(cudaErrorInvalidValue);
}
