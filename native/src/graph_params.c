/* Kernel, memset and memcpy nodes of the explicit graph API (the mirror is graph_nodes.c's): each is built in
 * the mirror first, then sent as one deferred node operation -- to add it, or to set its parameters in its graph
 * or in an executable graph. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "graph.h"
#include "graph_mirror.h"
#include "rgpu_consts.h"
#include "rgpu_shim.h"

#define API __attribute__((visibility("default")))

/* -- kernel nodes -------------------------------------------------------------------------------------------- */
static CUresult kernel_params_in(struct gnode *node, const CUDA_KERNEL_NODE_PARAMS *p)
{
    static int logged;
    if (!p || !p->func)
        return p && p->kern ? rgpu_unsupported(&logged, "kernel nodes of a CUkernel (context-independent loading)")
                            : CUDA_ERROR_INVALID_VALUE;
    node->func = p->func;
    unsigned dims[7] = {p->gridDimX, p->gridDimY, p->gridDimZ, p->blockDimX, p->blockDimY, p->blockDimZ,
                        p->sharedMemBytes};
    memcpy(node->dims, dims, sizeof dims);
    size_t size = 0;
    if (p->extra) {
        const void *buf = NULL;
        for (int i = 0; p->extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
            if (p->extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER)
                buf = p->extra[i + 1];
            else if (p->extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE)
                size = *(size_t *)p->extra[i + 1];
            else
                return CUDA_ERROR_INVALID_VALUE;
        }
        if (!buf || size > MAX_PARAMS)
            return CUDA_ERROR_INVALID_VALUE;
        memcpy(node->params, buf, size);
    } else {
        size_t off, sz;
        CUresult r;
        for (unsigned i = 0; (r = cuFuncGetParamInfo(p->func, i, &off, &sz)) != CUDA_ERROR_INVALID_VALUE; i++) {
            if (r != CUDA_SUCCESS) /* no layout from the server: only a packed buffer (extra) can say it */
                return r;
            if (i >= 64 || !p->kernelParams || !p->kernelParams[i] || off + sz > MAX_PARAMS)
                return CUDA_ERROR_INVALID_VALUE;
            memcpy(node->params + off, p->kernelParams[i], sz);
            node->param_ptrs[i] = node->params + off;
            if (off + sz > size)
                size = off + sz;
        }
    }
    node->n_params = size;
    return CUDA_SUCCESS;
}

static CUresult send_kernel(const struct gnode *node, uint64_t graph, uint64_t exec)
{
    uint8_t a[RGPU_GRAPH_KERNEL_NODE_REQ_SIZE];
    size_t cap = 8 * node->n_deps + sizeof node->attrs + node->n_params;
    uint8_t *bulk = malloc(cap);
    if (!bulk)
        return CUDA_ERROR_OUT_OF_MEMORY;
    size_t len = graph ? rgpu_node_deps_bulk(bulk, node) : 0;
    memcpy(bulk + len, node->attrs, node->n_attrs * sizeof *node->attrs);
    len += node->n_attrs * sizeof *node->attrs;
    memcpy(bulk + len, node->params, node->n_params);
    len += node->n_params;
    const unsigned *d = node->dims;
    rgpu_pack_graph_kernel_node(a, &(struct rgpu_graph_kernel_node_req){
                                       graph, node->handle, exec, graph ? (uint32_t)node->n_deps : 0,
                                       rgpu_function_handle(node->func), d[0], d[1], d[2], d[3], d[4], d[5], d[6],
                                       node->n_attrs});
    CUresult r = rgpu_defer(RGPU_OP_GRAPH_KERNEL_NODE, a, sizeof a, bulk, len);
    free(bulk);
    return r;
}

API CUresult cuGraphAddKernelNode_v2(CUgraphNode *out, CUgraph g, const CUgraphNode *deps, size_t n,
                                     const CUDA_KERNEL_NODE_PARAMS *p)
{
    CUresult r;
    if (!out)
        return CUDA_ERROR_INVALID_VALUE;
    struct gnode *node = rgpu_node_new(g, deps, n, CU_GRAPH_NODE_TYPE_KERNEL, &r);
    if (!node)
        return r;
    if ((r = kernel_params_in(node, p)) == CUDA_SUCCESS)
        r = send_kernel(node, H(g), 0);
    return rgpu_node_added(node, r, out);
}

API CUresult cuGraphKernelNodeGetParams_v2(CUgraphNode h, CUDA_KERNEL_NODE_PARAMS *p)
{
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&rgpu_graph_nodes_lock);
    struct gnode *n = rgpu_node_typed(h, CU_GRAPH_NODE_TYPE_KERNEL);
    if (n) {
        memset(p, 0, sizeof *p);
        p->func = n->func;
        p->gridDimX = n->dims[0], p->gridDimY = n->dims[1], p->gridDimZ = n->dims[2];
        p->blockDimX = n->dims[3], p->blockDimY = n->dims[4], p->blockDimZ = n->dims[5];
        p->sharedMemBytes = n->dims[6];
        p->kernelParams = n->param_ptrs[0] ? n->param_ptrs : NULL;
    }
    pthread_mutex_unlock(&rgpu_graph_nodes_lock);
    return n ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

static CUresult kernel_set(CUgraphNode h, const CUDA_KERNEL_NODE_PARAMS *p, uint64_t exec)
{
    struct gnode tmp;
    pthread_mutex_lock(&rgpu_graph_nodes_lock);
    struct gnode *n = rgpu_node_typed(h, CU_GRAPH_NODE_TYPE_KERNEL);
    if (n)
        tmp = *n;
    pthread_mutex_unlock(&rgpu_graph_nodes_lock);
    if (!n)
        return CUDA_ERROR_INVALID_VALUE;
    memset(tmp.param_ptrs, 0, sizeof tmp.param_ptrs);
    CUresult r = kernel_params_in(&tmp, p);
    if (r == CUDA_SUCCESS)
        r = send_kernel(&tmp, 0, exec);
    if (r == CUDA_SUCCESS && !exec) { /* the graph's node changes; an exec's copy is the server's alone */
        pthread_mutex_lock(&rgpu_graph_nodes_lock);
        if ((n = rgpu_node_typed(h, CU_GRAPH_NODE_TYPE_KERNEL))) {
            n->func = tmp.func;
            memcpy(n->dims, tmp.dims, sizeof tmp.dims);
            memcpy(n->params, tmp.params, tmp.n_params);
            n->n_params = tmp.n_params;
            for (int i = 0; i < 64; i++)
                n->param_ptrs[i] = tmp.param_ptrs[i] ? n->params + ((uint8_t *)tmp.param_ptrs[i] - tmp.params) : NULL;
        }
        pthread_mutex_unlock(&rgpu_graph_nodes_lock);
    }
    return r;
}

API CUresult cuGraphKernelNodeSetParams_v2(CUgraphNode h, const CUDA_KERNEL_NODE_PARAMS *p)
{
    return kernel_set(h, p, 0);
}

API CUresult cuGraphExecKernelNodeSetParams_v2(CUgraphExec e, CUgraphNode h, const CUDA_KERNEL_NODE_PARAMS *p)
{
    uint64_t stage = rgpu_graph_is_live(H(e), KIND_GRAPH_EXEC) ? rgpu_exec_target(H(e), H(h)) : 0;
    return stage ? kernel_set(h, p, stage) : CUDA_ERROR_INVALID_VALUE;
}

/* Node h sent again with tmp's attributes (every one it has: the server sets them all), then its mirror too. */
static CUresult send_attributes(CUgraphNode h, const struct gnode *tmp)
{
    CUresult r = send_kernel(tmp, 0, 0);
    if (r == CUDA_SUCCESS) {
        pthread_mutex_lock(&rgpu_graph_nodes_lock);
        struct gnode *n = rgpu_node_typed(h, CU_GRAPH_NODE_TYPE_KERNEL);
        if (n) {
            memcpy(n->attrs, tmp->attrs, sizeof tmp->attrs);
            n->n_attrs = tmp->n_attrs;
        }
        pthread_mutex_unlock(&rgpu_graph_nodes_lock);
    }
    return r;
}

API CUresult cuGraphKernelNodeGetAttribute(CUgraphNode h, CUkernelNodeAttrID id, CUkernelNodeAttrValue *v)
{
    if (!v)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&rgpu_graph_nodes_lock);
    struct gnode *n = rgpu_node_typed(h, CU_GRAPH_NODE_TYPE_KERNEL);
    int found = 0;
    if (n) {
        memset(v, 0, sizeof *v); /* never set: the default, zero */
        for (unsigned i = 0; i < n->n_attrs; i++)
            if (n->attrs[i].id == id)
                *v = n->attrs[i].value, found = 1;
    }
    pthread_mutex_unlock(&rgpu_graph_nodes_lock);
    (void)found;
    return n ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

API CUresult cuGraphKernelNodeSetAttribute(CUgraphNode h, CUkernelNodeAttrID id, const CUkernelNodeAttrValue *v)
{
    if (!v)
        return CUDA_ERROR_INVALID_VALUE;
    struct gnode tmp;
    pthread_mutex_lock(&rgpu_graph_nodes_lock);
    struct gnode *n = rgpu_node_typed(h, CU_GRAPH_NODE_TYPE_KERNEL);
    if (n)
        tmp = *n;
    pthread_mutex_unlock(&rgpu_graph_nodes_lock);
    if (!n)
        return CUDA_ERROR_INVALID_VALUE;
    unsigned i = 0;
    while (i < tmp.n_attrs && tmp.attrs[i].id != id)
        i++;
    if (i == RGPU_MAX_LAUNCH_ATTRIBUTES)
        return CUDA_ERROR_INVALID_VALUE;
    tmp.attrs[i].id = id;
    tmp.attrs[i].value = *v;
    if (i == tmp.n_attrs)
        tmp.n_attrs++;
    return send_attributes(h, &tmp);
}

/* Every launch attribute of kernel node src, and only those, onto kernel node dst. */
API CUresult cuGraphKernelNodeCopyAttributes(CUgraphNode dst, CUgraphNode src)
{
    struct gnode *tmp = malloc(sizeof *tmp); /* (a node is big for a thread's stack) */
    if (!tmp)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&rgpu_graph_nodes_lock);
    struct gnode *to = rgpu_node_typed(dst, CU_GRAPH_NODE_TYPE_KERNEL);
    struct gnode *from = rgpu_node_typed(src, CU_GRAPH_NODE_TYPE_KERNEL);
    if (to && from) { /* (what dst has and src lacks goes back to its default, zero, on the server too) */
        *tmp = *to;
        memcpy(tmp->attrs, from->attrs, sizeof tmp->attrs);
        tmp->n_attrs = from->n_attrs;
        for (unsigned i = 0; i < to->n_attrs; i++) {
            unsigned k = 0;
            while (k < tmp->n_attrs && tmp->attrs[k].id != to->attrs[i].id)
                k++;
            if (k == tmp->n_attrs && k < RGPU_MAX_LAUNCH_ATTRIBUTES) {
                memset(&tmp->attrs[k], 0, sizeof tmp->attrs[k]);
                tmp->attrs[k].id = to->attrs[i].id;
                tmp->n_attrs++;
            }
        }
    }
    pthread_mutex_unlock(&rgpu_graph_nodes_lock);
    CUresult r = to && from ? send_attributes(dst, tmp) : CUDA_ERROR_INVALID_VALUE;
    free(tmp);
    return r;
}

/* -- memset and memcpy nodes --------------------------------------------------------------------------------- */
static CUresult send_memset(const struct gnode *node, uint64_t graph, uint64_t exec)
{
    uint8_t a[RGPU_GRAPH_MEMSET_NODE_REQ_SIZE], *bulk = malloc(8 * node->n_deps + 1);
    if (!bulk)
        return CUDA_ERROR_OUT_OF_MEMORY;
    size_t len = graph ? rgpu_node_deps_bulk(bulk, node) : 0;
    const CUDA_MEMSET_NODE_PARAMS *m = &node->memset;
    rgpu_pack_graph_memset_node(a, &(struct rgpu_graph_memset_node_req){graph, node->handle, exec,
                                                                        graph ? (uint32_t)node->n_deps : 0, m->dst,
                                                                        m->pitch, m->value, m->elementSize,
                                                                        m->width, m->height});
    CUresult r = rgpu_defer(RGPU_OP_GRAPH_MEMSET_NODE, a, sizeof a, bulk, len);
    free(bulk);
    return r;
}

API CUresult cuGraphAddMemsetNode(CUgraphNode *out, CUgraph g, const CUgraphNode *deps, size_t n,
                                  const CUDA_MEMSET_NODE_PARAMS *p, CUcontext ctx)
{
    CUresult r;
    if (!out || !p || (p->elementSize != 1 && p->elementSize != 2 && p->elementSize != 4))
        return CUDA_ERROR_INVALID_VALUE;
    struct gnode *node = rgpu_node_new(g, deps, n, CU_GRAPH_NODE_TYPE_MEMSET, &r);
    if (!node)
        return r;
    node->memset = *p;
    node->ctx = ctx;
    return rgpu_node_added(node, send_memset(node, H(g), 0), out);
}

API CUresult cuGraphMemsetNodeGetParams(CUgraphNode h, CUDA_MEMSET_NODE_PARAMS *p)
{
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&rgpu_graph_nodes_lock);
    struct gnode *n = rgpu_node_typed(h, CU_GRAPH_NODE_TYPE_MEMSET);
    if (n)
        *p = n->memset;
    pthread_mutex_unlock(&rgpu_graph_nodes_lock);
    return n ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

static CUresult send_memcpy(const struct gnode *node, uint64_t graph, uint64_t exec)
{
    static int logged;
    const CUDA_MEMCPY3D *m = &node->memcpy;
    int device = (m->srcMemoryType == CU_MEMORYTYPE_DEVICE ||
                  (m->srcMemoryType == CU_MEMORYTYPE_UNIFIED && rgpu_is_device_range(m->srcDevice, 1))) &&
                 (m->dstMemoryType == CU_MEMORYTYPE_DEVICE ||
                  (m->dstMemoryType == CU_MEMORYTYPE_UNIFIED && rgpu_is_device_range(m->dstDevice, 1)));
    if (!device || m->Depth > 1 || m->srcXInBytes || m->srcY || m->srcZ || m->dstXInBytes || m->dstY || m->dstZ)
        return rgpu_unsupported(&logged, "graph memcpy nodes other than plain device-to-device 1D/2D copies");
    if (m->Height > 1 && ((m->srcPitch && m->srcPitch < m->WidthInBytes) ||
                          (m->dstPitch && m->dstPitch < m->WidthInBytes)))
        return CUDA_ERROR_INVALID_VALUE; /* rows that overlap: refused here, as by the driver, not at the next call */
    uint8_t a[RGPU_GRAPH_MEMCPY_NODE_REQ_SIZE], *bulk = malloc(8 * node->n_deps + 1);
    if (!bulk)
        return CUDA_ERROR_OUT_OF_MEMORY;
    size_t len = graph ? rgpu_node_deps_bulk(bulk, node) : 0;
    rgpu_pack_graph_memcpy_node(a, &(struct rgpu_graph_memcpy_node_req){
                                       graph, node->handle, exec, graph ? (uint32_t)node->n_deps : 0,
                                       m->dstDevice, m->dstPitch, m->srcDevice, m->srcPitch, m->WidthInBytes,
                                       m->Height ? m->Height : 1});
    CUresult r = rgpu_defer(RGPU_OP_GRAPH_MEMCPY_NODE, a, sizeof a, bulk, len);
    free(bulk);
    return r;
}

API CUresult cuGraphAddMemcpyNode(CUgraphNode *out, CUgraph g, const CUgraphNode *deps, size_t n,
                                  const CUDA_MEMCPY3D *p, CUcontext ctx)
{
    CUresult r;
    if (!out || !p)
        return CUDA_ERROR_INVALID_VALUE;
    int client = rgpu_copy_on_client(p);
    if (client < 0)
        return CUDA_ERROR_NOT_SUPPORTED; /* logged there */
    int owner = client ? rgpu_graph_owner_type(H(g)) : -1;
    if (owner == CU_GRAPH_NODE_TYPE_CONDITIONAL)
        return CUDA_ERROR_INVALID_VALUE; /* a conditional body runs on the device alone */
    if (owner >= 0) {
        static int logged; /* a child graph's: its node's graph would need stages */
        return rgpu_unsupported(&logged, "memcpy nodes with host memory in a child graph");
    }
    struct gnode *node = rgpu_node_new(g, deps, n, CU_GRAPH_NODE_TYPE_MEMCPY, &r);
    if (!node)
        return r;
    node->memcpy = *p;
    node->ctx = ctx;
    node->client = client;
    if (client)
        rgpu_client_node_made();
    return rgpu_node_added(node, client ? rgpu_send_placeholder(node) : send_memcpy(node, H(g), 0), out);
}

API CUresult cuGraphMemcpyNodeGetParams(CUgraphNode h, CUDA_MEMCPY3D *p)
{
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&rgpu_graph_nodes_lock);
    struct gnode *n = rgpu_node_typed(h, CU_GRAPH_NODE_TYPE_MEMCPY);
    if (n)
        *p = n->memcpy;
    pthread_mutex_unlock(&rgpu_graph_nodes_lock);
    return n ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* Set-params of memset and memcpy nodes: in the graph (the mirror changes too) or in an exec (exec != 0). */
static CUresult copy_or_set_params(CUgraphNode h, CUgraphNodeType type, const void *p, uint64_t exec)
{
    struct gnode tmp;
    static int logged;
    if (!p || (exec && !rgpu_graph_is_live(exec, KIND_GRAPH_EXEC)))
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&rgpu_graph_nodes_lock);
    struct gnode *n = rgpu_node_typed(h, type);
    if (n)
        tmp = *n;
    pthread_mutex_unlock(&rgpu_graph_nodes_lock);
    if (!n)
        return CUDA_ERROR_INVALID_VALUE;
    int client = type == CU_GRAPH_NODE_TYPE_MEMCPY ? rgpu_copy_on_client(p) : 0;
    if (client < 0)
        return CUDA_ERROR_NOT_SUPPORTED;
    if (client != tmp.client) /* the server has an empty node, or a copy, in its place: not the other */
        return rgpu_unsupported(&logged, "changing a graph memcpy node between device memory and host memory");
    if (client && exec)
        return rgpu_exec_set_copy(exec, H(h), p);
    if (client) {
        pthread_mutex_lock(&rgpu_graph_nodes_lock);
        if ((n = rgpu_node_typed(h, type)))
            n->memcpy = *(const CUDA_MEMCPY3D *)p;
        pthread_mutex_unlock(&rgpu_graph_nodes_lock);
        return n ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    }
    if (exec && !(exec = rgpu_exec_target(exec, H(h)))) /* a graph with host nodes: the stage with the node */
        return CUDA_ERROR_INVALID_VALUE;
    if (type == CU_GRAPH_NODE_TYPE_MEMSET)
        tmp.memset = *(const CUDA_MEMSET_NODE_PARAMS *)p;
    else
        tmp.memcpy = *(const CUDA_MEMCPY3D *)p;
    if (type == CU_GRAPH_NODE_TYPE_MEMSET && tmp.memset.elementSize != 1 && tmp.memset.elementSize != 2 &&
        tmp.memset.elementSize != 4)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = type == CU_GRAPH_NODE_TYPE_MEMSET ? send_memset(&tmp, 0, exec) : send_memcpy(&tmp, 0, exec);
    if (r == CUDA_SUCCESS && !exec) {
        pthread_mutex_lock(&rgpu_graph_nodes_lock);
        if ((n = rgpu_node_typed(h, type)))
            n->memset = tmp.memset, n->memcpy = tmp.memcpy;
        pthread_mutex_unlock(&rgpu_graph_nodes_lock);
    }
    return r;
}

API CUresult cuGraphMemsetNodeSetParams(CUgraphNode h, const CUDA_MEMSET_NODE_PARAMS *p)
{
    return copy_or_set_params(h, CU_GRAPH_NODE_TYPE_MEMSET, p, 0);
}
API CUresult cuGraphExecMemsetNodeSetParams(CUgraphExec e, CUgraphNode h, const CUDA_MEMSET_NODE_PARAMS *p,
                                            CUcontext ctx)
{
    (void)ctx; /* the node's own context, on the server */
    return copy_or_set_params(h, CU_GRAPH_NODE_TYPE_MEMSET, p, H(e) ? H(e) : ~0ull);
}
API CUresult cuGraphMemcpyNodeSetParams(CUgraphNode h, const CUDA_MEMCPY3D *p)
{
    return copy_or_set_params(h, CU_GRAPH_NODE_TYPE_MEMCPY, p, 0);
}
API CUresult cuGraphExecMemcpyNodeSetParams(CUgraphExec e, CUgraphNode h, const CUDA_MEMCPY3D *p, CUcontext ctx)
{
    (void)ctx;
    return copy_or_set_params(h, CU_GRAPH_NODE_TYPE_MEMCPY, p, H(e) ? H(e) : ~0ull);
}
