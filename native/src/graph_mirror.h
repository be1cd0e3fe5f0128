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
    struct gnode *next;
};

extern pthread_mutex_t rgpu_graph_nodes_lock; /* the mirror: every node of every mirrored graph */
struct gnode *rgpu_node_find(uint64_t h);     /* under the lock */
struct gnode *rgpu_node_typed(CUgraphNode h, CUgraphNodeType type); /* under the lock; NULL: not of that type */
/* A new node of graph g after deps (all of g), not yet linked in; NULL with *r set on failure. */
struct gnode *rgpu_node_new(CUgraph g, const CUgraphNode *deps, size_t n, CUgraphNodeType type, CUresult *r);
void rgpu_node_link(struct gnode *node, CUgraphNode *out);
void rgpu_node_free(struct gnode *node);
/* Link a new node (sent == CUDA_SUCCESS) or free it; returns `sent`. */
CUresult rgpu_node_added(struct gnode *node, CUresult sent, CUgraphNode *out);
size_t rgpu_node_deps_bulk(uint8_t *out, const struct gnode *node); /* the node's dependencies, as wire bulk */
/* cuGraphAddDependencies_v2 / cuGraphRemoveDependencies_v2: edge data (programmatic edges) included. */
CUresult rgpu_graph_edges(CUgraph g, const CUgraphNode *from, const CUgraphNode *to, const CUgraphEdgeData *data,
                          size_t n, int remove);

static inline uint64_t H(const void *p) { return (uint64_t)(uintptr_t)p; }

#endif
