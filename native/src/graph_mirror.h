/* The driver shim's mirror of graphs (graph_nodes.c): shared with graph_params.c, which builds and changes
 * kernel, memset and memcpy nodes. */
#ifndef RGPU_GRAPH_MIRROR_H
#define RGPU_GRAPH_MIRROR_H

#include <cuda.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "rgpu_consts.h"

#define MAX_PARAMS 4096

struct gnode {
    uint64_t handle, graph;
    CUgraphNodeType type;
    size_t n_deps;
    uint64_t *deps;
    CUgraphEdgeData *dep_data; /* beside deps once an edge with data was added; NULL: every edge default */
    /* kernel nodes */
    CUfunction func;
    unsigned dims[7]; /* grid xyz, block xyz, shared memory */
    uint8_t params[MAX_PARAMS];
    size_t n_params;
    void *param_ptrs[64]; /* what cuGraphKernelNodeGetParams hands back as kernelParams */
    CUlaunchAttribute attrs[RGPU_MAX_LAUNCH_ATTRIBUTES];
    unsigned n_attrs;
    /* other nodes */
    CUDA_MEMSET_NODE_PARAMS memset;
    CUDA_MEMCPY3D memcpy;
    CUcontext ctx;
    uint64_t object; /* event or child graph */
    CUDA_HOST_NODE_PARAMS host; /* host nodes: what the client runs (graph_host.c); an empty node on the server */
    CUDA_MEM_ALLOC_NODE_PARAMS alloc; /* mem-alloc nodes (accessDescs not kept); the address is `object` */
    int client; /* a memcpy node with host memory: the client copies (graph_host.c); an empty node on the server */
    /* graphs the node owns: a conditional node's bodies (graph_conditional.c; its handle is `object`), which the
     * program reads through the node's phGraph_out, or a child graph node's graph (moved into it, or named) */
    unsigned n_bodies;
    CUgraph *bodies;
    struct gnode *next;
};

extern pthread_mutex_t rgpu_graph_nodes_lock; /* the mirror: every node of every mirrored graph */
struct gnode *rgpu_node_find(uint64_t h);     /* under the lock */
struct gnode *rgpu_node_typed(CUgraphNode h, CUgraphNodeType type); /* under the lock; NULL: not of that type */
/* The get-params functions: `size` bytes of node h's field at `offset` into out, if h is of `type`. */
CUresult rgpu_node_field(CUgraphNode h, CUgraphNodeType type, size_t offset, void *out, size_t size);
/* A new node of graph g after deps (all of g), not yet linked in; NULL with *r set on failure. */
struct gnode *rgpu_node_new(CUgraph g, const CUgraphNode *deps, size_t n, CUgraphNodeType type, CUresult *r);
void rgpu_node_link(struct gnode *node, CUgraphNode *out);
void rgpu_node_free(struct gnode *node);
/* The graphs a node owns go with it: out of the live table and the mirror (not under the lock). */
void rgpu_node_forget_bodies(struct gnode *node);
/* Link a new node (sent == CUDA_SUCCESS) or free it; returns `sent`. */
CUresult rgpu_node_added(struct gnode *node, CUresult sent, CUgraphNode *out);
size_t rgpu_node_deps_bulk(uint8_t *out, const struct gnode *node); /* the node's dependencies, as wire bulk */
/* The server's empty node in the place of a node the client runs (host nodes, copies of host memory). */
CUresult rgpu_send_placeholder(const struct gnode *node);
/* graph_host.c: whether the client runs this node (under the lock) */
static inline int rgpu_node_on_client(const struct gnode *n) { return n->type == CU_GRAPH_NODE_TYPE_HOST || n->client; }
/* graph_host.c: a memcpy node's copy of host memory: whether it is one (0: device only), and running it */
int rgpu_copy_on_client(const CUDA_MEMCPY3D *m);
void rgpu_client_node_made(void); /* before a node the client runs joins a mirror */
CUresult rgpu_client_copy(const CUDA_MEMCPY3D *m, CUstream s);
CUresult rgpu_exec_set_copy(uint64_t exe, uint64_t node, const CUDA_MEMCPY3D *m); /* graph_stages.c: a copy step */
/* cuGraphAddDependencies_v2 / cuGraphRemoveDependencies_v2: edge data (programmatic edges) included. */
CUresult rgpu_graph_edges(CUgraph g, const CUgraphNode *from, const CUgraphNode *to, const CUgraphEdgeData *data,
                          size_t n, int remove);

CUresult rgpu_graph_mirrored(CUgraph g);
/* Under the lock: graph g's mirror nodes, oldest first, into out[cap] (out NULL: none); returns how many. */
size_t rgpu_graph_members(uint64_t g, struct gnode **out, size_t cap); /* the graph's mirror, fetched once for a captured graph */
/* graph_host.c: a node of a fetched mirror that the server keeps as an empty node for a captured host function
 * becomes the host node again. */
void rgpu_host_claim(struct gnode *node);

static inline uint64_t H(const void *p) { return (uint64_t)(uintptr_t)p; }

#endif
