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

/* launch.c: the server handle of a function, and back (NULL: one this process never looked up) */
uint64_t rgpu_function_handle(CUfunction f);
CUfunction rgpu_function_by_handle(uint64_t handle);

#endif
