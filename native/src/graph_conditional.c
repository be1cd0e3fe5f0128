/* Conditional nodes in the driver shim (IF, WHILE, SWITCH: cuGraphConditionalHandleCreate, and cuGraphAddNode of
 * type CONDITIONAL), as XLA builds loops and branches into its command buffers.
 *
 * The handle is the server driver's own value, one round trip: the program's kernels hand it to
 * cudaGraphSetConditional on the GPU. The node's bodies are graphs the driver makes with the node; here they get
 * handles minted by this side, sent with the node, and empty mirrors, so the program fills them with the explicit
 * API or cuStreamBeginCaptureToGraph like any graph of its own. The array the program reads them from
 * (phGraph_out) is the mirror node's, valid while the node lives, as CUDA's is. A body goes with its node
 * (cuGraphDestroy of one is refused); host nodes and host-memory copies are refused in bodies, as by CUDA. */
#include <stdlib.h>

#include "graph.h"
#include "graph_mirror.h"
#include "rgpu_shim.h"

#define API __attribute__((visibility("default")))
#define MAX_SWITCH_BODIES RGPU_MAX_SWITCH_BODIES

static CUresult need_conditionals(void)
{
    static int logged;
    CUresult r = rgpu_graph_need();
    return r == CUDA_SUCCESS ? rgpu_need_protocol(9, &logged, "conditional graph nodes") : r;
}

API CUresult cuGraphConditionalHandleCreate(CUgraphConditionalHandle *out, CUgraph g, CUcontext ctx,
                                            unsigned int value, unsigned int flags)
{
    (void)ctx; /* the graph's context, as CUDA requires: the server takes the graph's own */
    CUresult r = need_conditionals();
    if (r != CUDA_SUCCESS)
        return r;
    if (!out || (flags & ~(unsigned)CU_GRAPH_COND_ASSIGN_DEFAULT) || !rgpu_graph_is_live(H(g), KIND_GRAPH))
        return CUDA_ERROR_INVALID_VALUE;
    uint8_t a[RGPU_GRAPH_CONDITIONAL_HANDLE_REQ_SIZE], rep[RGPU_GRAPH_CONDITIONAL_HANDLE_REP_SIZE];
    struct rgpu_graph_conditional_handle_rep got;
    rgpu_pack_graph_conditional_handle(a, &(struct rgpu_graph_conditional_handle_req){H(g), value, flags});
    r = rgpu_call(RGPU_OP_GRAPH_CONDITIONAL_HANDLE, a, sizeof a, NULL, 0, rep, sizeof rep, NULL);
    if (r == CUDA_SUCCESS && rgpu_unpack_graph_conditional_handle(rep, sizeof rep, &got) < 0)
        r = rgpu_bad_reply(RGPU_OP_GRAPH_CONDITIONAL_HANDLE, "reply of the wrong size");
    if (r == CUDA_SUCCESS)
        *out = got.handle;
    return r;
}

CUresult rgpu_graph_add_conditional(CUgraphNode *out, CUgraph g, const CUgraphNode *deps, size_t n,
                                    CUDA_CONDITIONAL_NODE_PARAMS *p)
{
    CUresult r = need_conditionals();
    if (r != CUDA_SUCCESS)
        return r;
    unsigned most = p->type == CU_GRAPH_COND_TYPE_IF      ? 2
                    : p->type == CU_GRAPH_COND_TYPE_WHILE  ? 1
                    : p->type == CU_GRAPH_COND_TYPE_SWITCH ? MAX_SWITCH_BODIES
                                                           : 0;
    if (!out || p->size < 1 || p->size > most)
        return CUDA_ERROR_INVALID_VALUE;
    struct gnode *node = rgpu_node_new(g, deps, n, CU_GRAPH_NODE_TYPE_CONDITIONAL, &r);
    if (!node)
        return r;
    node->object = p->handle;
    node->ctx = p->ctx;
    uint8_t *bulk = malloc(8 * (n + p->size));
    if (!bulk || !(node->bodies = calloc(p->size, sizeof *node->bodies))) {
        free(bulk);
        return rgpu_node_added(node, CUDA_ERROR_OUT_OF_MEMORY, out);
    }
    size_t len = rgpu_node_deps_bulk(bulk, node);
    for (unsigned i = 0; i < p->size && r == CUDA_SUCCESS; i++, node->n_bodies++) {
        uint64_t body = rgpu_graph_mint_empty();
        node->bodies[i] = (CUgraph)(uintptr_t)body;
        rgpu_put_u64(bulk + len + 8 * i, body);
        if (!body)
            r = CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (r == CUDA_SUCCESS) {
        uint8_t a[RGPU_GRAPH_CONDITIONAL_NODE_REQ_SIZE];
        rgpu_pack_graph_conditional_node(a, &(struct rgpu_graph_conditional_node_req){
                                                H(g), node->handle, (uint32_t)n, p->handle, (uint32_t)p->type,
                                                p->size});
        r = rgpu_defer(RGPU_OP_GRAPH_CONDITIONAL_NODE, a, sizeof a, bulk, len + 8 * (size_t)p->size);
    }
    free(bulk);
    if (r != CUDA_SUCCESS)
        rgpu_node_forget_bodies(node);
    else
        p->phGraph_out = node->bodies;
    return rgpu_node_added(node, r, out);
}
