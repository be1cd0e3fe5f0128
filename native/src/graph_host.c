/* Host nodes and host functions in graphs, in the driver shim. The GPU cannot call back across the wire, so a host
 * function runs here, on the client: a host node (cuGraphAddHostNode, or cuLaunchHostFunc on a capturing stream)
 * is a node of the client's graph mirror with its function and argument, and an empty node on the server that
 * keeps its place among the edges. A memcpy node with host memory (the server cannot reach the program's memory)
 * is run here the same way, as an asynchronous copy on the launch stream. Executable graphs with such nodes are
 * cut into stages around them (graph_stages.c).
 *
 * Limits (docs/protocol.md, "Graphs, host nodes"): a child graph with host nodes, a memcpy node changed between
 * host and device memory, and more than 1024 host functions captured and not yet looked at are not supported. */
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "graph.h"
#include "graph_mirror.h"
#include "rgpu_consts.h"
#include "rgpu_shim.h"

#define API __attribute__((visibility("default")))
#define MAX_CAPTURED_HOST 1024

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
RGPU_FORK_RESET(lock, &lock)
static int ever; /* a node the client runs was ever made: until then no graph needs looking at (llama.cpp's) */

void rgpu_client_node_made(void) { __atomic_store_n(&ever, 1, __ATOMIC_RELEASE); }

/* -- host functions captured from a stream: their nodes until the graph's mirror is fetched ------------------ */
static struct {
    uint64_t graph, node;
    CUDA_HOST_NODE_PARAMS host;
} captured[MAX_CAPTURED_HOST];

CUresult rgpu_capture_host_func(CUstream s, CUhostFn fn, void *data, int *was_captured)
{
    uint64_t graph = 0;
    int state = rgpu_capture_graph(s, &graph);
    *was_captured = state != 0;
    if (state <= 0)
        return state ? CUDA_ERROR_STREAM_CAPTURE_INVALIDATED : CUDA_SUCCESS;
    if (rgpu_server_minor() < 5)
        return rgpu_capture_refuse(s, "host functions during capture with a server older than protocol 1.5");
    if (rgpu_graph_is_body(graph))
        return rgpu_capture_refuse(s, "a host function captured into a conditional node's body");
    uint64_t node = rgpu_graph_mint(KIND_GRAPH_NODE);
    int slot = -1;
    rgpu_client_node_made();
    pthread_mutex_lock(&lock);
    for (int i = 0; i < MAX_CAPTURED_HOST && slot < 0; i++)
        if (!captured[i].node)
            slot = i;
    if (slot >= 0)
        captured[slot].graph = graph, captured[slot].node = node, captured[slot].host = (CUDA_HOST_NODE_PARAMS){fn, data};
    pthread_mutex_unlock(&lock);
    if (slot < 0)
        return rgpu_capture_refuse(s, "more than 1024 captured host functions");
    uint8_t a[RGPU_STREAM_CAPTURE_EMPTY_NODE_REQ_SIZE];
    rgpu_pack_stream_capture_empty_node(a, &(struct rgpu_stream_capture_empty_node_req){rgpu_stream_handle(s), graph,
                                                                                        node});
    CUresult r = rgpu_defer(RGPU_OP_STREAM_CAPTURE_EMPTY_NODE, a, sizeof a, NULL, 0);
    if (r != CUDA_SUCCESS) {
        pthread_mutex_lock(&lock);
        captured[slot].node = 0;
        pthread_mutex_unlock(&lock);
    }
    return r;
}

void rgpu_host_claim(struct gnode *node)
{
    pthread_mutex_lock(&lock);
    for (int i = 0; i < MAX_CAPTURED_HOST; i++)
        if (captured[i].node && captured[i].node == node->handle && captured[i].graph == node->graph) {
            node->type = CU_GRAPH_NODE_TYPE_HOST;
            node->host = captured[i].host;
            captured[i].node = 0;
        }
    pthread_mutex_unlock(&lock);
}

void rgpu_host_forget(uint64_t graph)
{
    pthread_mutex_lock(&lock);
    for (int i = 0; i < MAX_CAPTURED_HOST; i++)
        if (captured[i].graph == graph)
            captured[i].node = 0;
    pthread_mutex_unlock(&lock);
}

int rgpu_graph_has_host_nodes(CUgraph g, CUresult *r)
{
    int pending = 0;
    *r = CUDA_SUCCESS;
    if (!__atomic_load_n(&ever, __ATOMIC_ACQUIRE))
        return 0;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < MAX_CAPTURED_HOST && !pending; i++)
        pending = captured[i].node && captured[i].graph == H(g);
    pthread_mutex_unlock(&lock);
    if (pending && (*r = rgpu_graph_mirrored(g)) != CUDA_SUCCESS) /* a captured graph: its nodes, once */
        return 0;
    int found = 0;
    pthread_mutex_lock(&rgpu_graph_nodes_lock);
    size_t n = rgpu_graph_members(H(g), NULL, 0);
    struct gnode **members = n ? malloc(n * sizeof *members) : NULL;
    if (members) {
        rgpu_graph_members(H(g), members, n);
        for (size_t i = 0; i < n && !found; i++)
            found = rgpu_node_on_client(members[i]);
    } else if (n) {
        *r = CUDA_ERROR_OUT_OF_MEMORY;
    }
    pthread_mutex_unlock(&rgpu_graph_nodes_lock);
    free(members);
    return found;
}

/* -- host node parameters -------------------------------------------------------------------------------------- */
API CUresult cuGraphHostNodeGetParams(CUgraphNode h, CUDA_HOST_NODE_PARAMS *p)
{
    return rgpu_node_field(h, CU_GRAPH_NODE_TYPE_HOST, offsetof(struct gnode, host), p, sizeof *p);
}

API CUresult cuGraphHostNodeSetParams(CUgraphNode h, const CUDA_HOST_NODE_PARAMS *p)
{
    if (!p || !p->fn)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&rgpu_graph_nodes_lock);
    struct gnode *n = rgpu_node_typed(h, CU_GRAPH_NODE_TYPE_HOST);
    if (n)
        n->host = *p; /* the server's empty node has nothing to change */
    pthread_mutex_unlock(&rgpu_graph_nodes_lock);
    return n ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* -- memcpy nodes with host memory ----------------------------------------------------------------------------- */
static int on_host(CUmemorytype type, CUdeviceptr dev)
{
    return type == CU_MEMORYTYPE_HOST || (type == CU_MEMORYTYPE_UNIFIED && !rgpu_is_device_range(dev, 1));
}

int rgpu_copy_on_client(const CUDA_MEMCPY3D *m)
{
    static int logged;
    if (!on_host(m->srcMemoryType, m->srcDevice) && !on_host(m->dstMemoryType, m->dstDevice))
        return 0;
    if (m->srcMemoryType == CU_MEMORYTYPE_ARRAY || m->dstMemoryType == CU_MEMORYTYPE_ARRAY || m->Depth > 1 ||
        m->srcZ || m->dstZ || m->srcLOD || m->dstLOD) {
        rgpu_unsupported(&logged, "graph memcpy nodes with host memory other than 1D/2D copies");
        return -1;
    }
    return 1;
}

CUresult rgpu_client_copy(const CUDA_MEMCPY3D *m, CUstream s)
{
    CUDA_MEMCPY2D c = {.srcXInBytes = m->srcXInBytes, .srcY = m->srcY, .srcMemoryType = m->srcMemoryType,
                       .srcHost = m->srcHost, .srcDevice = m->srcDevice, .srcPitch = m->srcPitch,
                       .dstXInBytes = m->dstXInBytes, .dstY = m->dstY, .dstMemoryType = m->dstMemoryType,
                       .dstHost = m->dstHost, .dstDevice = m->dstDevice, .dstPitch = m->dstPitch,
                       .WidthInBytes = m->WidthInBytes, .Height = m->Height ? m->Height : 1};
    return cuMemcpy2DAsync_v2(&c, s);
}
