/* The generic node API (cuGraphAddNode, cuGraphNodeSetParams, cuGraphExecNodeSetParams), as XLA builds its
 * command buffers: each node type goes to the function of its own kind, so a node made either way is the same
 * node; edges with data (programmatic dependencies, as XLA makes) are added after the node. Node types rgpu
 * does not forward and a child graph moved into its node return NOT_SUPPORTED, logged once each. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph.h"
#include "graph_mirror.h"
#include "rgpu_shim.h"

#define API __attribute__((visibility("default")))

_Static_assert(sizeof(CUDA_KERNEL_NODE_PARAMS_v3) == sizeof(CUDA_KERNEL_NODE_PARAMS),
               "the generic kernel parameters are the _v2 function's");

static CUresult unsupported_type(CUgraphNodeType type)
{
    static int logged[32];
    char what[96];
    snprintf(what, sizeof what, "graph nodes of type %d through the generic node API", (int)type);
    return rgpu_unsupported(&logged[(unsigned)type % 32], what);
}

static CUDA_MEMSET_NODE_PARAMS memset_v1(const CUDA_MEMSET_NODE_PARAMS_v2 *p)
{
    return (CUDA_MEMSET_NODE_PARAMS){.dst = p->dst, .pitch = p->pitch, .value = p->value,
                                     .elementSize = p->elementSize, .width = p->width, .height = p->height};
}

static CUDA_HOST_NODE_PARAMS host_v1(const CUDA_HOST_NODE_PARAMS_v2 *p) /* newer headers may grow _v2 */
{
    return (CUDA_HOST_NODE_PARAMS){.fn = p->fn, .userData = p->userData};
}

static CUresult add_node(CUgraphNode *out, CUgraph g, const CUgraphNode *deps, const CUgraphEdgeData *data,
                         size_t n, CUgraphNodeParams *p) /* p: the allocation's address comes back in it */
{
    if (!p || !out)
        return CUDA_ERROR_INVALID_VALUE;
    if (!rgpu_default_edges(data, n)) { /* the node first, then its edges with their data */
        CUgraphNode node, *to = malloc(n * sizeof *to);
        CUresult r = to ? add_node(&node, g, NULL, NULL, 0, p) : CUDA_ERROR_OUT_OF_MEMORY;
        for (size_t i = 0; r == CUDA_SUCCESS && i < n; i++)
            to[i] = node;
        if (r == CUDA_SUCCESS && (r = rgpu_graph_edges(g, deps, to, data, n, 0)) != CUDA_SUCCESS)
            cuGraphDestroyNode(node);
        free(to);
        if (r == CUDA_SUCCESS)
            *out = node;
        return r;
    }
    switch (p->type) {
    case CU_GRAPH_NODE_TYPE_KERNEL:
        return cuGraphAddKernelNode_v2(out, g, deps, n, (const CUDA_KERNEL_NODE_PARAMS *)&p->kernel);
    case CU_GRAPH_NODE_TYPE_MEMCPY:
        if (p->memcpy.flags || p->memcpy.reserved)
            return CUDA_ERROR_INVALID_VALUE;
        return cuGraphAddMemcpyNode(out, g, deps, n, &p->memcpy.copyParams, p->memcpy.copyCtx);
    case CU_GRAPH_NODE_TYPE_MEMSET: {
        CUDA_MEMSET_NODE_PARAMS m = memset_v1(&p->memset);
        return cuGraphAddMemsetNode(out, g, deps, n, &m, p->memset.ctx);
    }
    case CU_GRAPH_NODE_TYPE_EMPTY:
        return cuGraphAddEmptyNode(out, g, deps, n);
    case CU_GRAPH_NODE_TYPE_HOST: {
        CUDA_HOST_NODE_PARAMS h = host_v1(&p->host);
        return cuGraphAddHostNode(out, g, deps, n, &h);
    }
    case CU_GRAPH_NODE_TYPE_MEM_ALLOC: { /* newer headers may grow the _v2 record: field by field */
        CUDA_MEM_ALLOC_NODE_PARAMS a = {.poolProps = p->alloc.poolProps, .accessDescs = p->alloc.accessDescs,
                                        .accessDescCount = p->alloc.accessDescCount, .bytesize = p->alloc.bytesize};
        CUresult r = cuGraphAddMemAllocNode(out, g, deps, n, &a);
        p->alloc.dptr = a.dptr;
        return r;
    }
    case CU_GRAPH_NODE_TYPE_MEM_FREE:
        return cuGraphAddMemFreeNode(out, g, deps, n, p->free.dptr);
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
        return cuGraphAddEventRecordNode(out, g, deps, n, p->eventRecord.event);
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
        return cuGraphAddEventWaitNode(out, g, deps, n, p->eventWait.event);
    case CU_GRAPH_NODE_TYPE_GRAPH:
        if (p->graph.ownership == CU_GRAPH_CHILD_GRAPH_OWNERSHIP_MOVE)
            return rgpu_graph_move_child(out, g, deps, n, p->graph.graph);
        if (p->graph.ownership != CU_GRAPH_CHILD_GRAPH_OWNERSHIP_CLONE)
            return CUDA_ERROR_INVALID_VALUE;
        return cuGraphAddChildGraphNode(out, g, deps, n, p->graph.graph);
    case CU_GRAPH_NODE_TYPE_CONDITIONAL:
        return rgpu_graph_add_conditional(out, g, deps, n, &p->conditional);
    default:
        return unsupported_type(p->type);
    }
}

API CUresult cuGraphAddNode_v2(CUgraphNode *out, CUgraph g, const CUgraphNode *deps, const CUgraphEdgeData *data,
                               size_t n, CUgraphNodeParams *p)
{
    return add_node(out, g, deps, data, n, p);
}

#undef cuGraphAddNode /* cuda.h names the _v2 function so; the driver also exports CUDA 12.2's, without edge data */
API CUresult cuGraphAddNode(CUgraphNode *out, CUgraph g, const CUgraphNode *deps, size_t n, CUgraphNodeParams *p)
{
    return add_node(out, g, deps, NULL, n, p);
}

/* exec: the executable graph whose copy of the node changes, or NULL for the node in its graph. */
static CUresult set_params(CUgraphExec exec, CUgraphNode h, const CUgraphNodeParams *p)
{
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    switch (p->type) {
    case CU_GRAPH_NODE_TYPE_KERNEL: {
        const CUDA_KERNEL_NODE_PARAMS *k = (const CUDA_KERNEL_NODE_PARAMS *)&p->kernel;
        return exec ? cuGraphExecKernelNodeSetParams_v2(exec, h, k) : cuGraphKernelNodeSetParams_v2(h, k);
    }
    case CU_GRAPH_NODE_TYPE_MEMCPY:
        if (p->memcpy.flags || p->memcpy.reserved)
            return CUDA_ERROR_INVALID_VALUE;
        return exec ? cuGraphExecMemcpyNodeSetParams(exec, h, &p->memcpy.copyParams, p->memcpy.copyCtx)
                    : cuGraphMemcpyNodeSetParams(h, &p->memcpy.copyParams);
    case CU_GRAPH_NODE_TYPE_MEMSET: {
        CUDA_MEMSET_NODE_PARAMS m = memset_v1(&p->memset);
        return exec ? cuGraphExecMemsetNodeSetParams(exec, h, &m, p->memset.ctx) : cuGraphMemsetNodeSetParams(h, &m);
    }
    case CU_GRAPH_NODE_TYPE_HOST: {
        CUDA_HOST_NODE_PARAMS host = host_v1(&p->host);
        return exec ? cuGraphExecHostNodeSetParams(exec, h, &host) : cuGraphHostNodeSetParams(h, &host);
    }
    default:
        return unsupported_type(p->type);
    }
}

API CUresult cuGraphNodeSetParams(CUgraphNode h, CUgraphNodeParams *p) { return set_params(NULL, h, p); }

API CUresult cuGraphExecNodeSetParams(CUgraphExec e, CUgraphNode h, CUgraphNodeParams *p)
{
    return e ? set_params(e, h, p) : CUDA_ERROR_INVALID_VALUE;
}
