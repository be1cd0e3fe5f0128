/* Stream capture and CUDA graphs in the runtime: each call is its driver counterpart in the thread's context
 * (the runtime's and the driver's graph, node, exec and parameter types are the same objects and layouts), so
 * this runs on NVIDIA's driver as well as on rgpu's. */
#include "rt.h"

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

RT_API cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec)
{
    WITH_CONTEXT(cuGraphExecDestroy((CUgraphExec)exec));
}
