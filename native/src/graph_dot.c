/* cuGraphDebugDotPrint: a graph as Graphviz DOT, from the stand-in's mirror of it through the public graph API
 * (PyTorch's CUDAGraph.debug_dump calls it). One level of detail whatever the flags ask: each node's type and its
 * main parameters (a kernel's name and launch shape, a copy's or a memset's extent), and every edge, programmatic
 * ones marked. */
#include <stdio.h>
#include <stdlib.h>

#include "rgpu_shim.h"

#define API __attribute__((visibility("default")))

static const char *type_name(CUgraphNodeType t)
{
    static const char *names[] = {"kernel", "memcpy", "memset", "host", "child graph", "empty", "wait event",
                                  "event record", "external semaphore signal", "external semaphore wait",
                                  "mem alloc", "mem free", "batch mem op", "conditional"};
    return (unsigned)t < sizeof names / sizeof *names ? names[t] : "unknown";
}

/* A label's text as a DOT string holds it: quotes and backslashes escaped, anything unprintable a '?'. */
static void put_escaped(FILE *f, const char *s)
{
    for (; *s; s++)
        if (*s == '"' || *s == '\\')
            fprintf(f, "\\%c", *s);
        else
            fputc(*s >= 0x20 && *s < 0x7f ? *s : '?', f);
}

static void put_node(FILE *f, size_t i, CUgraphNode node)
{
    CUgraphNodeType type = CU_GRAPH_NODE_TYPE_EMPTY;
    cuGraphNodeGetType(node, &type);
    fprintf(f, "  node%zu [shape=box, label=\"%zu: %s", i, i, type_name(type));
    CUDA_KERNEL_NODE_PARAMS k;
    CUDA_MEMCPY3D c;
    CUDA_MEMSET_NODE_PARAMS m;
    const char *name = NULL;
    if (type == CU_GRAPH_NODE_TYPE_KERNEL && cuGraphKernelNodeGetParams_v2(node, &k) == CUDA_SUCCESS) {
        if (k.func && cuFuncGetName(&name, k.func) == CUDA_SUCCESS && name) {
            fputs("\\n", f);
            put_escaped(f, name);
        }
        fprintf(f, "\\ngrid (%u, %u, %u), block (%u, %u, %u), %u bytes shared", k.gridDimX, k.gridDimY, k.gridDimZ,
                k.blockDimX, k.blockDimY, k.blockDimZ, k.sharedMemBytes);
    } else if (type == CU_GRAPH_NODE_TYPE_MEMCPY && cuGraphMemcpyNodeGetParams(node, &c) == CUDA_SUCCESS) {
        fprintf(f, "\\n%zu x %zu x %zu bytes", c.WidthInBytes, c.Height, c.Depth);
    } else if (type == CU_GRAPH_NODE_TYPE_MEMSET && cuGraphMemsetNodeGetParams(node, &m) == CUDA_SUCCESS) {
        fprintf(f, "\\n0x%llx: %zu x %zu elements of %u bytes = 0x%x", (unsigned long long)m.dst, m.width, m.height,
                m.elementSize, m.value);
    }
    fputs("\"];\n", f);
}

API CUresult cuGraphDebugDotPrint(CUgraph g, const char *path, unsigned int flags)
{
    (void)flags;
    if (!path)
        return CUDA_ERROR_INVALID_VALUE;
    size_t n = 0, e = 0;
    CUresult r = cuGraphGetNodes(g, NULL, &n);
    if (r == CUDA_SUCCESS)
        r = cuGraphGetEdges_v2(g, NULL, NULL, NULL, &e);
    if (r != CUDA_SUCCESS)
        return r;
    CUgraphNode *nodes = calloc(n + 1, sizeof *nodes), *from = calloc(e + 1, sizeof *from),
                *to = calloc(e + 1, sizeof *to);
    CUgraphEdgeData *data = calloc(e + 1, sizeof *data);
    if (!nodes || !from || !to || !data)
        r = CUDA_ERROR_OUT_OF_MEMORY;
    /* (the graph may have grown since it was counted: what it holds now, up to what was counted) */
    size_t counted_n = n, counted_e = e;
    if (r == CUDA_SUCCESS)
        r = cuGraphGetNodes(g, nodes, &n);
    if (r == CUDA_SUCCESS)
        r = cuGraphGetEdges_v2(g, from, to, data, &e);
    n = n < counted_n ? n : counted_n, e = e < counted_e ? e : counted_e;
    FILE *f = r == CUDA_SUCCESS ? fopen(path, "w") : NULL;
    if (r == CUDA_SUCCESS && !f) {
        rgpu_log(RGPU_LOG_INFO, "cuGraphDebugDotPrint: cannot write %s", path); /* the program has the error */
        r = CUDA_ERROR_OPERATING_SYSTEM;
    }
    if (f) {
        fprintf(f, "digraph dot {\n  label=\"graph 0x%llx (rgpu)\";\n", (unsigned long long)(uintptr_t)g);
        for (size_t i = 0; i < n; i++)
            put_node(f, i, nodes[i]);
        for (size_t j = 0; j < e; j++) {
            size_t a = n, b = n;
            for (size_t i = 0; i < n; i++)
                a = nodes[i] == from[j] ? i : a, b = nodes[i] == to[j] ? i : b;
            if (a < n && b < n)
                fprintf(f, "  node%zu -> node%zu%s;\n", a, b,
                        data[j].type == CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC ? " [style=dashed, label=\"programmatic\"]"
                                                                              : "");
        }
        fputs("}\n", f);
        if (fclose(f))
            r = CUDA_ERROR_OPERATING_SYSTEM;
    }
    free(nodes), free(from), free(to), free(data);
    return r;
}
