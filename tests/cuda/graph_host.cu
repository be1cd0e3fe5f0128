// Host nodes and host functions in graphs, and memcpy nodes with host memory: the order of their effects (a host
// function sees what an earlier copy brought back, a later copy takes what the function wrote, a kernel after
// that computes with it), cudaLaunchHostFunc during stream capture replayed twice, host-node parameters in the
// graph and in an exec, the generic node API, and bad input. Build with -lcuda. Prints the host functions' log,
// which must be the same natively and through rgpu.
#include <cuda.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "check.cuh"

// y += a * x; with x all ones, y += a (the fake backend knows this kernel by name).
__global__ void saxpy(float a, const float *x, float *y, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = a * x[i] + y[i];
}

static const int n = 1024;
static int counter;
static float *ones;

struct seen {
    const char *name;
    const float *watch; // host memory an earlier copy filled: its first and last element are logged
    float *out;         // host memory a later copy takes to the GPU: the function fills it
    int base;
};

static void CUDART_CB record(void *data)
{
    seen *s = static_cast<seen *>(data);
    int k = ++counter;
    if (s->watch)
        std::printf("%s #%d sees %g..%g\n", s->name, k, s->watch[0], s->watch[n - 1]);
    else
        std::printf("%s #%d\n", s->name, k);
    for (int i = 0; s->out && i < n; i++)
        s->out[i] = (float)(s->base + k + i);
}

static void CUDART_CB callback(cudaStream_t, cudaError_t, void *data) { record(data); }

static void expect_device(const float *d, int first, int step)
{
    static float h[n];
    CHECK(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++)
        EXPECT(h[i] == (float)(first + step * i));
}

// memset a = 1; a += 10; copy a back; host fn (sees 11, writes 100 + k + i); copy it to a; a += 5; host fn.
// A kernel on b runs beside them all.
static void explicit_graph(float *a, float *b, float *back, float *ahead, cudaStream_t s)
{
    cudaGraph_t g;
    CHECK(cudaGraphCreate(&g, 0));
    cudaGraphNode_t set, k1, down, h1, up, k2, h2, side;
    cudaMemsetParams m = {};
    m.dst = a, m.value = 0x3F800000, m.elementSize = 4, m.width = n, m.height = 1; // 1.0f
    CHECK(cudaGraphAddMemsetNode(&set, g, nullptr, 0, &m));
    float ten = 10, five = 5;
    int count = n;
    void *args1[] = {&ten, &ones, &a, &count}, *args2[] = {&five, &ones, &a, &count};
    void *args3[] = {&five, &ones, &b, &count};
    cudaKernelNodeParams k = {};
    k.func = (void *)saxpy, k.gridDim = dim3(n / 256), k.blockDim = dim3(256), k.kernelParams = args1;
    CHECK(cudaGraphAddKernelNode(&k1, g, &set, 1, &k));
    CHECK(cudaGraphAddMemcpyNode1D(&down, g, &k1, 1, back, a, n * sizeof(float), cudaMemcpyDeviceToHost));
    seen first = {"first", back, ahead, 100}, second = {"second", nullptr, nullptr, 0};
    cudaHostNodeParams hp = {record, &first};
    CHECK(cudaGraphAddHostNode(&h1, g, &down, 1, &hp));
    CHECK(cudaGraphAddMemcpyNode1D(&up, g, &h1, 1, a, ahead, n * sizeof(float), cudaMemcpyHostToDevice));
    k.kernelParams = args2;
    CHECK(cudaGraphAddKernelNode(&k2, g, &up, 1, &k));
    hp.userData = &second;
    CHECK(cudaGraphAddHostNode(&h2, g, &k2, 1, &hp));
    k.kernelParams = args3;
    CHECK(cudaGraphAddKernelNode(&side, g, nullptr, 0, &k));

    cudaGraphNodeType type;
    CHECK(cudaGraphNodeGetType(h1, &type));
    EXPECT(type == cudaGraphNodeTypeHost);
    cudaHostNodeParams got = {};
    CHECK(cudaGraphHostNodeGetParams(h2, &got));
    EXPECT(got.fn == record && got.userData == &second);

    cudaGraphExec_t exec;
    CHECK(cudaGraphInstantiate(&exec, g, 0));
    CHECK(cudaMemset(b, 0, n * sizeof(float)));
    for (int round = 0; round < 2; round++) {
        std::memset(back, 0, n * sizeof(float));
        CHECK(cudaGraphLaunch(exec, s));
        CHECK(cudaStreamSynchronize(s));
        int k_first = counter - 1; // the first host function's number this round
        expect_device(a, 100 + k_first + 5, 1);
        EXPECT(back[0] == 11 && back[n - 1] == 11);
    }
    expect_device(b, 10, 0);

    // The exec's copy of a host node changes; the graph's does not, and the exec keeps its own.
    seen third = {"third", nullptr, nullptr, 0}, fourth = {"fourth", nullptr, nullptr, 0};
    cudaHostNodeParams changed = {record, &third};
    CHECK(cudaGraphExecHostNodeSetParams(exec, h2, &changed));
    changed.userData = &fourth;
    CHECK(cudaGraphHostNodeSetParams(h2, &changed));
    CHECK(cudaGraphHostNodeGetParams(h2, &got));
    EXPECT(got.userData == &fourth);
    CHECK(cudaGraphLaunch(exec, s));
    CHECK(cudaStreamSynchronize(s));

    // Bad input: a host node without a function, in the graph and in the exec.
    cudaGraphNode_t bad;
    cudaHostNodeParams none = {nullptr, &first};
    EXPECT(cudaGraphAddHostNode(&bad, g, &k2, 1, &none) == cudaErrorInvalidValue);
    cudaGetLastError();
    EXPECT(cudaGraphExecHostNodeSetParams(exec, h2, &none) == cudaErrorInvalidValue);
    cudaGetLastError();
    CUDA_HOST_NODE_PARAMS dnone = {nullptr, nullptr};
    CUgraphNode dbad;
    EXPECT(cuGraphAddHostNode(&dbad, (CUgraph)g, nullptr, 0, &dnone) == CUDA_ERROR_INVALID_VALUE);

    if (std::getenv("RGPU_SERVER")) {
        // Through rgpu only (natively this is undefined behaviour): a destroyed exec is refused, not run.
        cudaGraphExec_t gone = exec;
        CHECK(cudaGraphExecDestroy(exec));
        int before = counter;
        EXPECT(cudaGraphLaunch(gone, s) != cudaSuccess);
        cudaGetLastError();
        EXPECT(counter == before);
    } else {
        CHECK(cudaGraphExecDestroy(exec));
    }
    CHECK(cudaGraphDestroy(g));
}

// a += 1; host fn; a += 2; host fn; captured, then replayed twice.
static void captured(float *a, cudaStream_t s)
{
    seen one = {"captured one", nullptr, nullptr, 0}, two = {"captured two", nullptr, nullptr, 0};
    cudaGraph_t g;
    CHECK(cudaMemset(a, 0, n * sizeof(float)));
    CHECK(cudaStreamSynchronize(s));
    int before = counter;
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    saxpy<<<n / 256, 256, 0, s>>>(1.0f, ones, a, n);
    CHECK(cudaLaunchHostFunc(s, record, &one));
    saxpy<<<n / 256, 256, 0, s>>>(2.0f, ones, a, n);
    CHECK(cudaLaunchHostFunc(s, record, &two));
    CHECK(cudaStreamEndCapture(s, &g));
    EXPECT(counter == before); // captured, not run

    size_t count = 0;
    CHECK(cudaGraphGetNodes(g, nullptr, &count));
    EXPECT(count == 4);
    cudaGraphNode_t nodes[4];
    CHECK(cudaGraphGetNodes(g, nodes, &count));
    int hosts = 0;
    for (size_t i = 0; i < count; i++) {
        cudaGraphNodeType type;
        CHECK(cudaGraphNodeGetType(nodes[i], &type));
        if (type == cudaGraphNodeTypeHost) {
            cudaHostNodeParams p = {};
            CHECK(cudaGraphHostNodeGetParams(nodes[i], &p));
            EXPECT(p.fn == record && (p.userData == &one || p.userData == &two));
            hosts++;
        }
    }
    EXPECT(hosts == 2);

    cudaGraphExec_t exec;
    CHECK(cudaGraphInstantiate(&exec, g, 0));
    for (int round = 0; round < 2; round++)
        CHECK(cudaGraphLaunch(exec, s));
    CHECK(cudaStreamSynchronize(s));
    EXPECT(counter == before + 4);
    expect_device(a, 6, 0);
    // A clone keeps its host nodes.
    cudaGraph_t copy;
    cudaGraphExec_t exec2;
    CHECK(cudaGraphClone(&copy, g));
    CHECK(cudaGraphInstantiate(&exec2, copy, 0));
    CHECK(cudaGraphLaunch(exec2, s));
    CHECK(cudaStreamSynchronize(s));
    expect_device(a, 9, 0);
    CHECK(cudaGraphExecDestroy(exec2));
    CHECK(cudaGraphDestroy(copy));
    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaGraphDestroy(g));

    // A stream callback is not a host function: CUDA does not capture it, and the capture is lost.
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    EXPECT(cudaStreamAddCallback(s, callback, &one, 0) != cudaSuccess);
    cudaGetLastError();
    EXPECT(cudaStreamEndCapture(s, &g) != cudaSuccess);
    cudaGetLastError();
    EXPECT(counter == before + 6);
}

// A host function on a stream that joined the capture (fork and join through events): it runs after the work it
// waited for and before the work that waits for it.
static void forked(float *a, cudaStream_t s)
{
    seen side = {"forked", nullptr, nullptr, 0};
    cudaStream_t s2;
    cudaEvent_t fork, join;
    CHECK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    CHECK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
    CHECK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
    CHECK(cudaMemset(a, 0, n * sizeof(float)));
    cudaGraph_t g;
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    saxpy<<<n / 256, 256, 0, s>>>(1.0f, ones, a, n);
    CHECK(cudaEventRecord(fork, s));
    CHECK(cudaStreamWaitEvent(s2, fork, 0));
    CHECK(cudaLaunchHostFunc(s2, record, &side));
    CHECK(cudaEventRecord(join, s2));
    CHECK(cudaStreamWaitEvent(s, join, 0));
    saxpy<<<n / 256, 256, 0, s>>>(2.0f, ones, a, n);
    CHECK(cudaStreamEndCapture(s, &g));
    cudaGraphExec_t exec;
    CHECK(cudaGraphInstantiate(&exec, g, 0));
    int before = counter;
    CHECK(cudaGraphLaunch(exec, s));
    CHECK(cudaStreamSynchronize(s));
    EXPECT(counter == before + 1);
    expect_device(a, 3, 0);
    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaGraphDestroy(g));
    CHECK(cudaEventDestroy(fork));
    CHECK(cudaEventDestroy(join));
    CHECK(cudaStreamDestroy(s2));
}

// The generic node API: a host node through cudaGraphAddNode, its parameters through cudaGraphNodeSetParams.
static void generic(cudaStream_t s)
{
    seen one = {"generic one", nullptr, nullptr, 0}, two = {"generic two", nullptr, nullptr, 0};
    cudaGraph_t g;
    CHECK(cudaGraphCreate(&g, 0));
    cudaGraphNodeParams p = {};
    p.type = cudaGraphNodeTypeHost;
    p.host.fn = record, p.host.userData = &one;
    cudaGraphNode_t h;
#if CUDART_VERSION >= 13000
    CHECK(cudaGraphAddNode(&h, g, nullptr, nullptr, 0, &p));
#else
    CHECK(cudaGraphAddNode(&h, g, nullptr, 0, &p));
#endif
    cudaGraphExec_t exec;
    CHECK(cudaGraphInstantiate(&exec, g, 0));
    CHECK(cudaGraphLaunch(exec, s));
    p.host.userData = &two;
    CHECK(cudaGraphExecNodeSetParams(exec, h, &p));
    CHECK(cudaGraphLaunch(exec, s));
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaGraphDestroy(g));
}

int main()
{
    float *a, *b, *back, *ahead;
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CHECK(cudaMalloc(&a, n * sizeof(float)));
    CHECK(cudaMalloc(&b, n * sizeof(float)));
    CHECK(cudaMalloc(&ones, n * sizeof(float)));
    CHECK(cudaMallocHost(&back, n * sizeof(float)));
    CHECK(cudaMallocHost(&ahead, n * sizeof(float)));
    for (int i = 0; i < n; i++)
        back[i] = 1.0f;
    CHECK(cudaMemcpy(ones, back, n * sizeof(float), cudaMemcpyHostToDevice));
    explicit_graph(a, b, back, ahead, s);
    captured(a, s);
    forked(a, s);
    generic(s);
    // The stream works as before: a host function outside capture runs in stream order.
    seen last = {"outside", nullptr, nullptr, 0};
    CHECK(cudaLaunchHostFunc(s, record, &last));
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaFreeHost(back));
    CHECK(cudaFreeHost(ahead));
    CHECK(cudaFree(a));
    CHECK(cudaFree(b));
    CHECK(cudaFree(ones));
    CHECK(cudaStreamDestroy(s));
    std::printf("graph_host OK\n");
    return 0;
}
