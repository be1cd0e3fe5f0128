/* Graph control flow and node-by-node changes in the runtime: capture into a graph, conditional nodes (IF, WHILE,
 * SWITCH), enabling nodes of executable graphs, event and child-graph node setters, and graph memory figures.
 * Each is its driver counterpart in the thread's context, as in graph.c. */
#include "rt.h"

_Static_assert((int)cudaGraphCondTypeSwitch == (int)CU_GRAPH_COND_TYPE_SWITCH &&
                   (int)cudaGraphNodeTypeConditional == (int)CU_GRAPH_NODE_TYPE_CONDITIONAL &&
                   (int)cudaGraphMemAttrReservedMemHigh == (int)CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH,
               "runtime and driver graph enums differ");

RT_API cudaError_t cudaStreamBeginCaptureToGraph(cudaStream_t s, cudaGraph_t graph, const cudaGraphNode_t *deps,
                                                 const cudaGraphEdgeData *data, size_t n,
                                                 enum cudaStreamCaptureMode mode)
{
    WITH_CONTEXT(cuStreamBeginCaptureToGraph((CUstream)s, (CUgraph)graph, (const CUgraphNode *)deps,
                                             (const CUgraphEdgeData *)data, n, (CUstreamCaptureMode)mode));
}

RT_API cudaError_t cudaStreamBeginCaptureToGraph_ptsz(cudaStream_t s, cudaGraph_t graph, const cudaGraphNode_t *deps,
                                                      const cudaGraphEdgeData *data, size_t n,
                                                      enum cudaStreamCaptureMode mode)
{
    return cudaStreamBeginCaptureToGraph(s, graph, deps, data, n, mode);
}

RT_API cudaError_t cudaGraphConditionalHandleCreate(cudaGraphConditionalHandle *out, cudaGraph_t graph,
                                                    unsigned int value, unsigned int flags)
{
    CUcontext ctx = NULL;
    cudaError_t e = rt_context(NULL);
    if (e != cudaSuccess)
        return rt_record(e);
    cuCtxGetCurrent(&ctx);
    return rt_fail(cuGraphConditionalHandleCreate((CUgraphConditionalHandle *)out, (CUgraph)graph, ctx, value, flags));
}

cudaError_t rt_add_conditional(cudaGraphNode_t *node, cudaGraph_t graph, const cudaGraphNode_t *deps, size_t n,
                               struct cudaConditionalNodeParams *p)
{
    cudaError_t e = rt_context(NULL);
    if (e != cudaSuccess)
        return rt_record(e);
    CUgraphNodeParams params = {.type = CU_GRAPH_NODE_TYPE_CONDITIONAL};
    params.conditional = (CUDA_CONDITIONAL_NODE_PARAMS){
        .handle = p->handle, .type = (CUgraphConditionalNodeType)p->type, .size = p->size};
    cuCtxGetCurrent(&params.conditional.ctx);
    CUresult r = cuGraphAddNode_v2((CUgraphNode *)node, (CUgraph)graph, (const CUgraphNode *)deps, NULL, n, &params);
    if (r == CUDA_SUCCESS)
        p->phGraph_out = (cudaGraph_t *)params.conditional.phGraph_out; /* the node's own array, as CUDA's */
    return rt_fail(r);
}

RT_API cudaError_t cudaGraphNodeSetEnabled(cudaGraphExec_t exec, cudaGraphNode_t node, unsigned int on)
{
    WITH_CONTEXT(cuGraphNodeSetEnabled((CUgraphExec)exec, (CUgraphNode)node, on));
}

RT_API cudaError_t cudaGraphNodeGetEnabled(cudaGraphExec_t exec, cudaGraphNode_t node, unsigned int *on)
{
    WITH_CONTEXT(cuGraphNodeGetEnabled((CUgraphExec)exec, (CUgraphNode)node, on));
}

RT_API cudaError_t cudaGraphEventRecordNodeSetEvent(cudaGraphNode_t node, cudaEvent_t event)
{
    WITH_CONTEXT(cuGraphEventRecordNodeSetEvent((CUgraphNode)node, (CUevent)event));
}

RT_API cudaError_t cudaGraphEventWaitNodeSetEvent(cudaGraphNode_t node, cudaEvent_t event)
{
    WITH_CONTEXT(cuGraphEventWaitNodeSetEvent((CUgraphNode)node, (CUevent)event));
}

RT_API cudaError_t cudaGraphExecEventRecordNodeSetEvent(cudaGraphExec_t exec, cudaGraphNode_t node, cudaEvent_t event)
{
    WITH_CONTEXT(cuGraphExecEventRecordNodeSetEvent((CUgraphExec)exec, (CUgraphNode)node, (CUevent)event));
}

RT_API cudaError_t cudaGraphExecEventWaitNodeSetEvent(cudaGraphExec_t exec, cudaGraphNode_t node, cudaEvent_t event)
{
    WITH_CONTEXT(cuGraphExecEventWaitNodeSetEvent((CUgraphExec)exec, (CUgraphNode)node, (CUevent)event));
}

RT_API cudaError_t cudaGraphExecChildGraphNodeSetParams(cudaGraphExec_t exec, cudaGraphNode_t node, cudaGraph_t child)
{
    WITH_CONTEXT(cuGraphExecChildGraphNodeSetParams((CUgraphExec)exec, (CUgraphNode)node, (CUgraph)child));
}

RT_API cudaError_t cudaDeviceGraphMemTrim(int device)
{
    cudaError_t e = rt_initialised();
    return e != cudaSuccess ? rt_record(e) : rt_fail(cuDeviceGraphMemTrim((CUdevice)device));
}

RT_API cudaError_t cudaDeviceGetGraphMemAttribute(int device, enum cudaGraphMemAttributeType attr, void *value)
{
    cudaError_t e = rt_initialised();
    return e != cudaSuccess ? rt_record(e) : rt_fail(cuDeviceGetGraphMemAttribute(device, (CUgraphMem_attribute)attr,
                                                                                    value));
}

RT_API cudaError_t cudaDeviceSetGraphMemAttribute(int device, enum cudaGraphMemAttributeType attr, void *value)
{
    cudaError_t e = rt_initialised();
    return e != cudaSuccess ? rt_record(e) : rt_fail(cuDeviceSetGraphMemAttribute(device, (CUgraphMem_attribute)attr,
                                                                                    value));
}

/* -- user objects: the program's own, kept by the driver stand-in (graph_user_objects.c) ------------------------- */
RT_API cudaError_t cudaUserObjectCreate(cudaUserObject_t *out, void *ptr, cudaHostFn_t destroy, unsigned int refs,
                                        unsigned int flags)
{
    return rt_fail(cuUserObjectCreate((CUuserObject *)out, ptr, (CUhostFn)destroy, refs, flags));
}

RT_API cudaError_t cudaUserObjectRetain(cudaUserObject_t object, unsigned int count)
{
    return rt_fail(cuUserObjectRetain((CUuserObject)object, count));
}

RT_API cudaError_t cudaUserObjectRelease(cudaUserObject_t object, unsigned int count)
{
    return rt_fail(cuUserObjectRelease((CUuserObject)object, count));
}

RT_API cudaError_t cudaGraphRetainUserObject(cudaGraph_t graph, cudaUserObject_t object, unsigned int count,
                                             unsigned int flags)
{
    return rt_fail(cuGraphRetainUserObject((CUgraph)graph, (CUuserObject)object, count, flags));
}

RT_API cudaError_t cudaGraphReleaseUserObject(cudaGraph_t graph, cudaUserObject_t object, unsigned int count)
{
    return rt_fail(cuGraphReleaseUserObject((CUgraph)graph, (CUuserObject)object, count));
}

RT_API cudaError_t cudaGraphChildGraphNodeGetGraph(cudaGraphNode_t node, cudaGraph_t *graph)
{
    WITH_CONTEXT(cuGraphChildGraphNodeGetGraph((CUgraphNode)node, (CUgraph *)graph));
}
