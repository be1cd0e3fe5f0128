// Graph memory nodes: an allocation node, work on its memory (memset, a kernel, a copy out), a free node; the
// graph launched twice; the nodes' parameters read back; the generic node API; bad input. Build with -lcuda.
#include <cuda.h>
#include <cstdio>

#include "check.cuh"

#include "graph_saxpy.cuh"

static cudaMemAllocNodeParams alloc_params(int device)
{
    cudaMemAllocNodeParams p = {};
    p.poolProps.allocType = cudaMemAllocationTypePinned;
    p.poolProps.location.type = cudaMemLocationTypeDevice;
    p.poolProps.location.id = device;
    p.bytesize = n * sizeof(float);
    return p;
}

int main()
{
    int device;
    CHECK(cudaGetDevice(&device));
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    float *x, *out;
    CHECK(cudaMalloc(&x, n * sizeof(float)));
    CHECK(cudaMalloc(&out, n * sizeof(float)));
    CHECK(cudaMemset(out, 0, n * sizeof(float)));
    cudaMemsetParams ones = {};
    ones.dst = x, ones.value = 0x3F800000, ones.elementSize = 4, ones.width = n, ones.height = 1; // 1.0f
    CHECK(cudaMemset(x, 0, n * sizeof(float)));

    // alloc -> memset(tmp, 2.0) -> tmp += 3 * x (x = 1) -> out = tmp -> free
    cudaGraph_t g;
    CHECK(cudaGraphCreate(&g, 0));
    cudaGraphNode_t set_x, alloc, set, axpy, copy, release;
    CHECK(cudaGraphAddMemsetNode(&set_x, g, nullptr, 0, &ones));
    cudaMemAllocNodeParams ap = alloc_params(device);
    CHECK(cudaGraphAddMemAllocNode(&alloc, g, nullptr, 0, &ap));
    EXPECT(ap.dptr != nullptr);
    float *tmp = static_cast<float *>(ap.dptr);
    cudaMemsetParams twos = ones;
    twos.dst = tmp, twos.value = 0x40000000; // 2.0f
    CHECK(cudaGraphAddMemsetNode(&set, g, &alloc, 1, &twos));
    float three = 3.0f;
    int count = n;
    void *args[] = {&three, &x, &tmp, &count};
    cudaKernelNodeParams k = {};
    k.func = (void *)saxpy, k.gridDim = dim3(n / 256), k.blockDim = dim3(256), k.kernelParams = args;
    cudaGraphNode_t before_axpy[] = {set, set_x};
    CHECK(cudaGraphAddKernelNode(&axpy, g, before_axpy, 2, &k));
    CHECK(cudaGraphAddMemcpyNode1D(&copy, g, &axpy, 1, out, tmp, n * sizeof(float), cudaMemcpyDeviceToDevice));
    CHECK(cudaGraphAddMemFreeNode(&release, g, &copy, 1, tmp));

    cudaMemAllocNodeParams got = {};
    CHECK(cudaGraphMemAllocNodeGetParams(alloc, &got));
    EXPECT(got.dptr == tmp && got.bytesize == n * sizeof(float) && got.poolProps.location.id == device);
    void *freed = nullptr;
    CHECK(cudaGraphMemFreeNodeGetParams(release, &freed));
    EXPECT(freed == tmp);
    cudaGraphNodeType type;
    CHECK(cudaGraphNodeGetType(alloc, &type));
    EXPECT(type == cudaGraphNodeTypeMemAlloc);

    cudaGraphExec_t exec;
    CHECK(cudaGraphInstantiate(&exec, g, 0));
    for (int round = 0; round < 2; round++) {
        CHECK(cudaMemsetAsync(out, 0, n * sizeof(float), s));
        CHECK(cudaGraphLaunch(exec, s));
        CHECK(cudaStreamSynchronize(s));
        expect_all(out, 5.0f);
    }

    // Bad input: a free node of an address no allocation node gave, an allocation of nothing.
    cudaGraphNode_t bad;
    EXPECT(cudaGraphAddMemFreeNode(&bad, g, &release, 1, x) == cudaErrorInvalidValue);
    cudaGetLastError();
    cudaMemAllocNodeParams none = alloc_params(device);
    none.bytesize = 0;
    EXPECT(cudaGraphAddMemAllocNode(&bad, g, nullptr, 0, &none) == cudaErrorInvalidValue);
    cudaGetLastError();
    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaGraphDestroy(g));

    // The generic node API: allocation and free nodes through cudaGraphAddNode.
    CHECK(cudaGraphCreate(&g, 0));
    cudaGraphNodeParams p = {};
    p.type = cudaGraphNodeTypeMemAlloc;
    p.alloc.poolProps = ap.poolProps;
    p.alloc.bytesize = 1 << 20;
#if CUDART_VERSION >= 13000
    CHECK(cudaGraphAddNode(&alloc, g, nullptr, nullptr, 0, &p));
#else
    CHECK(cudaGraphAddNode(&alloc, g, nullptr, 0, &p));
#endif
    EXPECT(p.alloc.dptr != nullptr);
    cudaGraphNodeParams f = {};
    f.type = cudaGraphNodeTypeMemFree;
    f.free.dptr = p.alloc.dptr;
#if CUDART_VERSION >= 13000
    CHECK(cudaGraphAddNode(&release, g, &alloc, nullptr, 1, &f));
#else
    CHECK(cudaGraphAddNode(&release, g, &alloc, 1, &f));
#endif
    CHECK(cudaGraphInstantiate(&exec, g, 0));
    CHECK(cudaGraphLaunch(exec, s));
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaGraphDestroy(g));

    CHECK(cudaFree(x));
    CHECK(cudaFree(out));
    CHECK(cudaStreamDestroy(s));
    std::printf("graph_memory OK\n");
    return 0;
}
