/* Shared by graph.c (capture, executable graphs) and graph_nodes.c (the explicit graph API). */
#ifndef RGPU_GRAPH_H
#define RGPU_GRAPH_H

#include "rgpu_consts.h"
#include <cuda.h>
#include <stdint.h>

/* Kinds of client-minted handles (rgpu.session.handles.Kind), in bits 56..62 under bit 63. */
enum { KIND_GRAPH = RGPU_KIND_GRAPH, KIND_GRAPH_EXEC = RGPU_KIND_GRAPH_EXEC, KIND_GRAPH_NODE = RGPU_KIND_GRAPH_NODE };

uint64_t rgpu_graph_mint(int kind);
int rgpu_graph_live_add(uint64_t h);        /* 0: the table is full */
int rgpu_graph_is_live(uint64_t h, int kind);
CUresult rgpu_graph_need(void);             /* a connected server that speaks protocol 1.2 */
int rgpu_default_edges(const CUgraphEdgeData *data, size_t n); /* no edge data, or only the default kind */
void rgpu_graph_forget(uint64_t graph);     /* graph_nodes.c: drop the mirror of a destroyed graph */
void rgpu_graph_live_drop(uint64_t h);      /* a graph that went with its node (a conditional node's body) */
/* graph_nodes.c: nodes the server added to a mirrored graph (a capture into it): fetched at the next use */
void rgpu_graph_grew(uint64_t graph);
/* graph_nodes.c: CUDA_SUCCESS if deps[n] are nodes of graph g (which is live), else INVALID_VALUE */
CUresult rgpu_graph_nodes_of(CUgraph g, const CUgraphNode *deps, size_t n);
/* graph_nodes.c: g belongs to a node (a conditional node's body, a child graph node's graph); the owner's
 * CUgraphNodeType, or -1 */
int rgpu_graph_is_body(uint64_t g);
int rgpu_graph_owner_type(uint64_t g);
/* graph.c: a stream is capturing into graph g (cuStreamBeginCaptureToGraph) */
int rgpu_graph_captured_into(uint64_t g);
/* graph_nodes.c: a new graph, live and mirrored with no nodes, not yet told to the server (0: tables full) */
uint64_t rgpu_graph_mint_empty(void);
/* graph_conditional.c: cuGraphAddNode of a conditional node; sets p->phGraph_out */
CUresult rgpu_graph_add_conditional(CUgraphNode *out, CUgraph g, const CUgraphNode *deps, size_t n,
                                    CUDA_CONDITIONAL_NODE_PARAMS *p);
/* graph_nodes.c: cuGraphAddNode of a child graph node with CU_GRAPH_CHILD_GRAPH_OWNERSHIP_MOVE */
CUresult rgpu_graph_move_child(CUgraphNode *out, CUgraph g, const CUgraphNode *deps, size_t n, CUgraph child);
/* graph_user_objects.c: a new holder (an exec, a clone, a child graph node) takes copies of another's user object
 * references; a destroyed holder's go */
CUresult rgpu_user_objects_copy(uint64_t from, uint64_t to);
void rgpu_user_objects_release(uint64_t holder);
int rgpu_user_objects_held(uint64_t holder);
/* graph_nodes.c: to (an exec) takes copies of what graph g holds, and its nodes and the graphs they own */
CUresult rgpu_graph_hold_within(uint64_t g, uint64_t to);
/* graph_exec_nodes.c: an executable graph is gone; what was kept of its nodes goes too */
void rgpu_exec_nodes_forget(uint64_t exec);

/* graph.c: the capture a stream is in (1, *graph set), none (0), or an invalidated one (-1) */
int rgpu_capture_graph(CUstream s, uint64_t *graph);

/* graph_host.c and graph_stages.c: nodes the client runs (host nodes, memcpy nodes with host memory), and
 * executable graphs run in stages around them. A graph without such nodes is none of their business (each says
 * "not mine" at once). */
int rgpu_graph_has_host_nodes(CUgraph g, CUresult *r); /* fetches a captured graph's mirror if it has host nodes */
CUresult rgpu_staged_instantiate(CUgraph g, unsigned long long flags, uint64_t exe); /* exe: minted and live */
int rgpu_staged_run(uint16_t op, uint64_t exe, CUstream s, CUresult *r); /* 1: exe is staged, *r its result */
int rgpu_staged_destroy(uint64_t exe);            /* 1: it was staged, and its stages are destroyed */
int rgpu_is_staged(uint64_t exe);
uint64_t rgpu_exec_target(uint64_t exe, uint64_t node); /* the stage of exe with node (exe itself: not staged) */
void rgpu_host_forget(uint64_t graph);            /* captured host functions of a destroyed graph */

/* launch.c: the server handle of a function, and back (NULL: one this process never looked up) */
uint64_t rgpu_function_handle(CUfunction f);
CUfunction rgpu_function_by_handle(uint64_t handle);

#endif
