// Stream capture and CUDA graphs the way llama.cpp and PyTorch use them: capture (relaxed, with PDL launches
// inside), instantiate, replay with changing inputs, exec update (same topology: updated; another topology:
// refused, destroy and instantiate again), and the calls CUDA forbids during capture.
#include <cstdlib>
#include <cstring>

#include "check.cuh"

__global__ void saxpy(float a, const float *x, float *y, int n)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    cudaGridDependencySynchronize();
#endif
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = a * x[i] + y[i];
}

__global__ void vadd(const float *a, const float *b, float *c, int n)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    cudaGridDependencySynchronize();
#endif
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        c[i] = a[i] + b[i];
}

__global__ void fill(float *p, float v, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        p[i] = v;
}

static const int n = 1 << 14;
static const dim3 grid((n + 255) / 256), block(256);

static float *w[3]; // what the PDL launches write

static void capture_step(cudaStream_t s, float a, const float *x, float *y, int pdl_launches)
{
    // y = 0.5; y += a*x; then w[k] = x + x with PDL. A PDL launch may start before the kernel ahead of it ends
    // (the sm_90 build waits in cudaGridDependencySynchronize; others cannot): none reads what the one ahead
    // writes, so every build gets the same answer.
    fill<<<grid, block, 0, s>>>(y, 0.5f, n);
    saxpy<<<grid, block, 0, s>>>(a, x, y, n);
    cudaLaunchAttribute pdl[1];
    pdl[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    pdl[0].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t c = {};
    c.gridDim = grid, c.blockDim = block, c.stream = s, c.attrs = pdl, c.numAttrs = 1;
    for (int k = 0; k < pdl_launches; k++)
        CHECK(cudaLaunchKernelEx(&c, vadd, (const float *)x, (const float *)x, w[k], n));
}

static void expect_all(const float *d, float want)
{
    static float h[n];
    CHECK(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++)
        EXPECT(h[i] == want);
}

int main()
{
    float *x, *y, *z;
    CHECK(cudaMalloc(&x, n * sizeof(float)));
    CHECK(cudaMalloc(&y, n * sizeof(float)));
    CHECK(cudaMalloc(&z, n * sizeof(float)));
    for (int k = 0; k < 3; k++)
        CHECK(cudaMalloc(&w[k], n * sizeof(float)));
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    fill<<<grid, block>>>(x, 1.0f, n);
    CHECK(cudaMemset(y, 0, n * sizeof(float)));
    CHECK(cudaDeviceSynchronize());

    // Capture: nothing runs until the graph is launched.
    cudaStreamCaptureStatus status;
    CHECK(cudaStreamIsCapturing(s, &status));
    EXPECT(status == cudaStreamCaptureStatusNone);
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
    CHECK(cudaStreamIsCapturing(s, &status));
    EXPECT(status == cudaStreamCaptureStatusActive);
    unsigned long long id = 0;
    cudaGraph_t during = nullptr;
#if CUDART_VERSION >= 13000
    CHECK(cudaStreamGetCaptureInfo(s, &status, &id, &during));
#else
    CHECK(cudaStreamGetCaptureInfo_v2(s, &status, &id, &during));
#endif
    EXPECT(status == cudaStreamCaptureStatusActive && id != 0 && during != nullptr);
    capture_step(s, 2.0f, x, y, 3);
    CHECK(cudaMemsetAsync(z, 0, n * sizeof(float), s));
    cudaGraph_t graph;
    CHECK(cudaStreamEndCapture(s, &graph));
    EXPECT(graph == during);
    CHECK(cudaStreamIsCapturing(s, &status));
    EXPECT(status == cudaStreamCaptureStatusNone);
    CHECK(cudaStreamSynchronize(s));
    expect_all(y, 0.0f);

    // Instantiate once, replay with new inputs each time.
    cudaGraphExec_t exec;
    CHECK(cudaGraphInstantiate(&exec, graph, 0));
    for (int step = 1; step <= 5; step++) {
        fill<<<grid, block, 0, s>>>(x, float(step), n);
        CHECK(cudaGraphLaunch(exec, s));
        CHECK(cudaStreamSynchronize(s));
        expect_all(y, 0.5f + 2.0f * float(step));
        expect_all(w[2], 2.0f * float(step));
    }

    // Reading the captured graph back and patching a node, as programs that tune captured graphs do.
    size_t nn = 0;
    CHECK(cudaGraphGetNodes(graph, nullptr, &nn));
    EXPECT(nn == 6);
    cudaGraphNode_t nodes[6], fill_node = nullptr;
    CHECK(cudaGraphGetNodes(graph, nodes, &nn));
    int saxpys = 0, vadds = 0, memsets = 0;
    for (size_t i = 0; i < nn; i++) {
        cudaGraphNodeType type;
        CHECK(cudaGraphNodeGetType(nodes[i], &type));
        if (type == cudaGraphNodeTypeKernel) {
            cudaKernelNodeParams p = {};
            CHECK(cudaGraphKernelNodeGetParams(nodes[i], &p));
            if (p.func == (void *)saxpy) {
                saxpys++;
                EXPECT(*(float *)p.kernelParams[0] == 2.0f && *(float **)p.kernelParams[2] == y);
            } else if (p.func == (void *)vadd) {
                vadds++;
            } else if (p.func == (void *)fill) {
                fill_node = nodes[i];
            }
        } else {
            memsets += type == cudaGraphNodeTypeMemset;
        }
    }
    EXPECT(saxpys == 1 && vadds == 3 && memsets == 1 && fill_node != nullptr);
    float start = 1.5f;
    int count = n;
    void *fill_args[] = {&y, &start, &count};
    cudaKernelNodeParams fp = {};
    fp.func = (void *)fill, fp.gridDim = grid, fp.blockDim = block, fp.kernelParams = fill_args;
    CHECK(cudaGraphKernelNodeSetParams(fill_node, &fp));
    cudaGraphExecUpdateResultInfo info;
    CHECK(cudaGraphExecUpdate(exec, graph, &info));
    CHECK(cudaGraphLaunch(exec, s));
    CHECK(cudaStreamSynchronize(s));
    expect_all(y, 1.5f + 2.0f * 5.0f);

    // Same topology, new pointers and scalar: the exec is updated in place.
    cudaGraph_t graph2;
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
    capture_step(s, 3.0f, x, z, 3);
    CHECK(cudaMemsetAsync(y, 0, n * sizeof(float), s));
    CHECK(cudaStreamEndCapture(s, &graph2));
    CHECK(cudaGraphExecUpdate(exec, graph2, &info));
    EXPECT(info.result == cudaGraphExecUpdateSuccess);
    CHECK(cudaGraphLaunch(exec, s));
    CHECK(cudaStreamSynchronize(s));
    expect_all(z, 0.5f + 3.0f * 5.0f);
    expect_all(y, 0.0f);

    // Another topology: the update is refused; destroy and instantiate again (llama.cpp's fallback).
    cudaGraph_t graph3;
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    capture_step(s, 1.0f, x, y, 1);
    CHECK(cudaStreamEndCapture(s, &graph3));
    EXPECT(cudaGraphExecUpdate(exec, graph3, &info) == cudaErrorGraphExecUpdateFailure);
    EXPECT(info.result != cudaGraphExecUpdateSuccess);
    cudaGetLastError();
    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaGraphInstantiateWithFlags(&exec, graph3, 0));
    CHECK(cudaGraphUpload(exec, s));
    CHECK(cudaGraphLaunch(exec, s));
    CHECK(cudaStreamSynchronize(s));
    expect_all(y, 0.5f + 5.0f);

    // The capture's dependency set, read and extended (PyTorch's allocator does this).
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
    CHECK(cudaMemsetAsync(z, 0, n * sizeof(float), s));
    const cudaGraphNode_t *deps = nullptr;
    size_t ndeps = 0;
#if CUDART_VERSION >= 13000
    CHECK(cudaStreamGetCaptureInfo(s, &status, nullptr, nullptr, &deps, nullptr, &ndeps));
#else
    CHECK(cudaStreamGetCaptureInfo_v2(s, &status, nullptr, nullptr, &deps, &ndeps));
#endif
    EXPECT(status == cudaStreamCaptureStatusActive && ndeps == 1 && deps != nullptr);
    cudaGraphNode_t memset_node = deps[0];
    fill<<<grid, block, 0, s>>>(y, 2.0f, n);
#if CUDART_VERSION >= 13000
    CHECK(cudaStreamUpdateCaptureDependencies(s, &memset_node, nullptr, 1, cudaStreamAddCaptureDependencies));
#else
    CHECK(cudaStreamUpdateCaptureDependencies(s, &memset_node, 1, cudaStreamAddCaptureDependencies));
#endif
    fill<<<grid, block, 0, s>>>(z, 4.0f, n);
    cudaGraph_t graph4;
    CHECK(cudaStreamEndCapture(s, &graph4));
    size_t nodes4 = 0, edges4 = 0;
    CHECK(cudaGraphGetNodes(graph4, nullptr, &nodes4));
#if CUDART_VERSION >= 13000
    CHECK(cudaGraphGetEdges(graph4, nullptr, nullptr, nullptr, &edges4));
#else
    CHECK(cudaGraphGetEdges(graph4, nullptr, nullptr, &edges4));
#endif
    EXPECT(nodes4 == 3 && edges4 == 3);
    cudaGraphExec_t exec4;
    CHECK(cudaGraphInstantiate(&exec4, graph4, 0));
    CHECK(cudaGraphLaunch(exec4, s));
    CHECK(cudaStreamSynchronize(s));
    expect_all(y, 2.0f);
    expect_all(z, 4.0f);
    CHECK(cudaGraphExecDestroy(exec4));
    CHECK(cudaGraphDestroy(graph4));

    // Calls CUDA forbids during capture: they fail, and so does the capture.
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
    EXPECT(cudaStreamSynchronize(s) == cudaErrorStreamCaptureUnsupported);
    cudaGraph_t broken = graph;
    EXPECT(cudaStreamEndCapture(s, &broken) == cudaErrorStreamCaptureInvalidated && broken == nullptr);
    cudaGetLastError();

    float *pageable = (float *)std::malloc(n * sizeof(float));
    std::memset(pageable, 0, n * sizeof(float));
    // A host-to-device copy during a relaxed capture: NVIDIA's driver captures it (measured on the H200), rgpu
    // refuses it (the server's staging buffer is not the program's memory; docs/protocol.md). Not compared here;
    // tests/test_graphs.py checks rgpu's answer.

    // Global mode: an allocation (a potentially unsafe call) is refused unless the thread relaxes its mode.
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    void *p = nullptr;
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
    EXPECT(mode == cudaStreamCaptureModeGlobal);
    CHECK(cudaMalloc(&p, 256)); // relaxed for this thread: allowed
    CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
    void *q = nullptr;
    EXPECT(cudaMalloc(&q, 256) == cudaErrorStreamCaptureUnsupported);
    EXPECT(cudaStreamEndCapture(s, &broken) == cudaErrorStreamCaptureInvalidated);
    cudaGetLastError();
    CHECK(cudaFree(p));

    // Ending a capture that never began.
    EXPECT(cudaStreamEndCapture(s, &broken) == cudaErrorIllegalState);
    cudaGetLastError();
    // The stream works as before.
    fill<<<grid, block, 0, s>>>(y, 7.0f, n);
    CHECK(cudaStreamSynchronize(s));
    expect_all(y, 7.0f);

    if (std::getenv("RGPU_SERVER")) {
        // Through rgpu only (natively this is undefined behaviour): a destroyed exec is refused, not a crash.
        cudaGraphExec_t gone = exec;
        CHECK(cudaGraphExecDestroy(exec));
        EXPECT(cudaGraphLaunch(gone, s) != cudaSuccess);
        cudaGetLastError();
    } else {
        CHECK(cudaGraphExecDestroy(exec));
    }
    CHECK(cudaGraphDestroy(graph));
    CHECK(cudaGraphDestroy(graph2));
    CHECK(cudaGraphDestroy(graph3));
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaStreamDestroy(s));
    std::free(pageable);
    std::printf("graphs OK\n");
    return 0;
}
