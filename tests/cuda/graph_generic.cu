// The driver's generic graph-node API (cuGraphAddNode, cuGraphNodeSetParams, cuGraphExecNodeSetParams), as XLA
// builds its command buffers: memset, kernel and copy nodes made from CUgraphNodeParams, an executable graph's
// kernel node changed, a graph's memset node changed, a programmatic (PDL) edge with its edge data, and refusals
// of bad parameters. Build with -lcuda.
#include <cuda.h>

#include "check.cuh"

#define CU(call) EXPECT((call) == CUDA_SUCCESS)

#include "graph_saxpy.cuh"

static CUgraphNodeParams memset_params(float *dst, unsigned bits)
{
    CUgraphNodeParams p = {};
    p.type = CU_GRAPH_NODE_TYPE_MEMSET;
    p.memset.dst = (CUdeviceptr)dst, p.memset.value = bits, p.memset.elementSize = 4;
    p.memset.width = n, p.memset.height = 1;
    return p;
}

int main()
{
    float *x, *y, *out, *z;
    CHECK(cudaMalloc(&z, n * sizeof(float)));
    CHECK(cudaMemset(z, 0, n * sizeof(float)));
    CHECK(cudaMalloc(&x, n * sizeof(float)));
    CHECK(cudaMalloc(&y, n * sizeof(float)));
    CHECK(cudaMalloc(&out, n * sizeof(float)));
    CUcontext ctx;
    CU(cuCtxGetCurrent(&ctx));
    cudaFunction_t fn;
    CHECK(cudaGetFuncBySymbol(&fn, (const void *)saxpy));
    CUstream s;
    CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));

    CUgraph g;
    CU(cuGraphCreate(&g, 0));
    CUgraphNode set_x, set_y, axpy, copy;
    CUgraphNodeParams p = memset_params(x, 0x40000000); // 2.0f
    CU(cuGraphAddNode(&set_x, g, nullptr, nullptr, 0, &p));
    p = memset_params(y, 0x3F800000); // 1.0f
    CU(cuGraphAddNode(&set_y, g, nullptr, nullptr, 0, &p));

    float a = 3.0f;
    int count = n;
    void *args[] = {&a, &x, &y, &count};
    CUgraphNodeParams k = {};
    k.type = CU_GRAPH_NODE_TYPE_KERNEL;
    k.kernel.func = (CUfunction)fn, k.kernel.gridDimX = n / 256, k.kernel.gridDimY = 1, k.kernel.gridDimZ = 1;
    k.kernel.blockDimX = 256, k.kernel.blockDimY = 1, k.kernel.blockDimZ = 1, k.kernel.kernelParams = args;
    CUgraphNode both[] = {set_x, set_y};
    CU(cuGraphAddNode(&axpy, g, both, nullptr, 2, &k));

    CUgraphNodeParams c = {};
    c.type = CU_GRAPH_NODE_TYPE_MEMCPY;
    c.memcpy.copyCtx = ctx;
    c.memcpy.copyParams.srcMemoryType = CU_MEMORYTYPE_DEVICE, c.memcpy.copyParams.srcDevice = (CUdeviceptr)y;
    c.memcpy.copyParams.dstMemoryType = CU_MEMORYTYPE_DEVICE, c.memcpy.copyParams.dstDevice = (CUdeviceptr)out;
    c.memcpy.copyParams.WidthInBytes = n * sizeof(float), c.memcpy.copyParams.Height = 1;
    c.memcpy.copyParams.Depth = 1;
    CU(cuGraphAddNode(&copy, g, &axpy, nullptr, 1, &c));

    // z += 1 * x after axpy, through a programmatic edge (x is complete: set_x ran before axpy started).
    float one = 1.0f;
    void *args2[] = {&one, &x, &z, &count};
    CUgraphNodeParams k2 = k;
    k2.kernel.kernelParams = args2;
    CUgraphEdgeData pdl = {};
    pdl.from_port = CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC, pdl.type = CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC;
    CUgraphNode axpy2;
    CU(cuGraphAddNode(&axpy2, g, &axpy, &pdl, 1, &k2));
    CUgraphNode from[8], to[8];
    CUgraphEdgeData data[8];
    size_t edges = 8;
    CU(cuGraphGetEdges(g, from, to, data, &edges));
    EXPECT(edges == 4);
    int programmatic = 0;
    for (size_t i = 0; i < edges; i++)
        programmatic += to[i] == axpy2 && from[i] == axpy && data[i].type == CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC &&
                        data[i].from_port == CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC;
    EXPECT(programmatic == 1);

    CUgraphNodeType type;
    CU(cuGraphNodeGetType(axpy, &type));
    EXPECT(type == CU_GRAPH_NODE_TYPE_KERNEL);
    size_t nodes = 0;
    CU(cuGraphGetNodes(g, nullptr, &nodes));
    EXPECT(nodes == 5);

    CUgraphExec exec;
    CU(cuGraphInstantiate(&exec, g, 0));
    CU(cuGraphLaunch(exec, s));
    CU(cuStreamSynchronize(s));
    expect_all(out, 7.0f); // 3 * 2 + 1
    expect_all(z, 2.0f);

    a = 5.0f; // the executable graph's kernel node changes; the graph's does not
    CU(cuGraphExecNodeSetParams(exec, axpy, &k));
    CU(cuGraphLaunch(exec, s));
    CU(cuStreamSynchronize(s));
    expect_all(out, 11.0f); // 5 * 2 + 1
    expect_all(z, 4.0f);

    p = memset_params(y, 0); // the graph's memset node changes: a new instance sees it, with a = 3
    CU(cuGraphNodeSetParams(set_y, &p));
    CUgraphExec again;
    CU(cuGraphInstantiate(&again, g, 0));
    CU(cuGraphLaunch(again, s));
    CU(cuStreamSynchronize(s));
    expect_all(out, 6.0f); // 3 * 2 + 0
    expect_all(z, 6.0f);

    CUgraphNode none;
    EXPECT(cuGraphAddNode(&none, g, nullptr, nullptr, 0, nullptr) == CUDA_ERROR_INVALID_VALUE);
    c.memcpy.flags = 1; // must be zero
    EXPECT(cuGraphAddNode(&none, g, nullptr, nullptr, 0, &c) == CUDA_ERROR_INVALID_VALUE);

    CU(cuGraphExecDestroy(again));
    CU(cuGraphExecDestroy(exec));
    CU(cuGraphDestroy(g));
    CU(cuStreamDestroy(s));
    std::printf("graph_generic OK\n");
    return 0;
}
