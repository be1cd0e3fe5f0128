// The driver's generic graph-node API (cuGraphAddNode, cuGraphNodeSetParams, cuGraphExecNodeSetParams), as XLA
// builds its command buffers: memset, kernel and copy nodes made from CUgraphNodeParams, an executable graph's
// kernel node changed, a graph's memset node changed, and refusals of bad parameters. Build with -lcuda.
#include <cuda.h>

#include "check.cuh"

#define CU(call) EXPECT((call) == CUDA_SUCCESS)

__global__ void saxpy(float a, const float *x, float *y, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = a * x[i] + y[i];
}

static const int n = 4096;

static void expect_all(const float *d, float want)
{
    static float h[n];
    CHECK(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++)
        EXPECT(h[i] == want);
}

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
    float *x, *y, *out;
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

    CUgraphNodeType type;
    CU(cuGraphNodeGetType(axpy, &type));
    EXPECT(type == CU_GRAPH_NODE_TYPE_KERNEL);
    size_t nodes = 0;
    CU(cuGraphGetNodes(g, nullptr, &nodes));
    EXPECT(nodes == 4);

    CUgraphExec exec;
    CU(cuGraphInstantiate(&exec, g, 0));
    CU(cuGraphLaunch(exec, s));
    CU(cuStreamSynchronize(s));
    expect_all(out, 7.0f); // 3 * 2 + 1

    a = 5.0f; // the executable graph's kernel node changes; the graph's does not
    CU(cuGraphExecNodeSetParams(exec, axpy, &k));
    CU(cuGraphLaunch(exec, s));
    CU(cuStreamSynchronize(s));
    expect_all(out, 11.0f); // 5 * 2 + 1

    p = memset_params(y, 0); // the graph's memset node changes: a new instance sees it, with a = 3
    CU(cuGraphNodeSetParams(set_y, &p));
    CUgraphExec again;
    CU(cuGraphInstantiate(&again, g, 0));
    CU(cuGraphLaunch(again, s));
    CU(cuStreamSynchronize(s));
    expect_all(out, 6.0f); // 3 * 2 + 0

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
