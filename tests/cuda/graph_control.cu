// Control flow and node-by-node changes in CUDA graphs, as XLA's command buffers and PyTorch's captured
// conditionals use them: conditional nodes (WHILE, IF with an ELSE body, SWITCH) whose condition kernels set on
// the GPU, capture into an existing graph and into a conditional body, nodes of an executable graph disabled and
// enabled again, event nodes given another event, a child graph node's graph changed in an exec, and the graph
// memory figures. Every line it prints is the same natively and through rgpu.
#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "check.cuh"

#include "graph_saxpy.cuh"

// p[i] = v (the fake backend knows it by name).
__global__ void fill(float *p, float v, int count)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < count)
        p[i] = v;
}

// One thread: the condition is *value.
__global__ void set_condition(cudaGraphConditionalHandle handle, const unsigned *value)
{
    cudaGraphSetConditional(handle, *value);
}

// One thread: --*left, and the condition is whether any are left (a WHILE body that runs *left times).
__global__ void count_down(cudaGraphConditionalHandle handle, int *left)
{
    cudaGraphSetConditional(handle, --*left > 0);
}

static float first(const float *d)
{
    float h;
    CHECK(cudaMemcpy(&h, d, sizeof h, cudaMemcpyDeviceToHost));
    return h;
}

static cudaGraphNode_t add(cudaGraph_t g, const cudaGraphNode_t *deps, size_t count, cudaGraphNodeParams *p)
{
    cudaGraphNode_t node;
#if CUDART_VERSION >= 13000
    CHECK(cudaGraphAddNode(&node, g, deps, nullptr, count, p));
#else
    CHECK(cudaGraphAddNode(&node, g, deps, count, p));
#endif
    return node;
}

static cudaGraphNodeParams kernel(void *func, void **args, unsigned blocks, unsigned threads)
{
    cudaGraphNodeParams k = {};
    k.type = cudaGraphNodeTypeKernel;
    k.kernel.func = func, k.kernel.gridDim = dim3(blocks), k.kernel.blockDim = dim3(threads);
    k.kernel.kernelParams = args;
    return k;
}

static cudaGraphNodeParams conditional(cudaGraphConditionalHandle h, cudaGraphConditionalNodeType type, unsigned size)
{
    cudaGraphNodeParams c = {};
    c.type = cudaGraphNodeTypeConditional;
    c.conditional.handle = h, c.conditional.type = type, c.conditional.size = size;
    return c;
}

static void run(cudaGraph_t g, cudaStream_t s, int times = 1)
{
    cudaGraphExec_t exec;
    CHECK(cudaGraphInstantiate(&exec, g, 0));
    for (int i = 0; i < times; i++)
        CHECK(cudaGraphLaunch(exec, s));
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaGraphExecDestroy(exec));
}

// y += 2 * x while the count-down lasts: 5 rounds, then 3 more after the counter is set again.
static void while_loop(float *x, float *y, int *left, cudaStream_t s)
{
    cudaGraph_t g;
    cudaGraphConditionalHandle h;
    CHECK(cudaGraphCreate(&g, 0));
    CHECK(cudaGraphConditionalHandleCreate(&h, g, 1, cudaGraphCondAssignDefault));
    cudaGraphNodeParams c = conditional(h, cudaGraphCondTypeWhile, 1);
    add(g, nullptr, 0, &c);
    cudaGraph_t body = c.conditional.phGraph_out[0];
    float a = 2.0f;
    int count = n;
    void *axpy_args[] = {&a, &x, &y, &count}, *down_args[] = {&h, &left};
    cudaGraphNodeParams axpy = kernel((void *)saxpy, axpy_args, n / 256, 256);
    cudaGraphNodeParams down = kernel((void *)count_down, down_args, 1, 1);
    cudaGraphNode_t first_node = add(body, nullptr, 0, &axpy);
    add(body, &first_node, 1, &down);
    int five = 5, three = 3;
    CHECK(cudaMemset(y, 0, n * sizeof(float)));
    CHECK(cudaMemcpy(left, &five, sizeof five, cudaMemcpyHostToDevice));
    run(g, s);
    int after;
    CHECK(cudaMemcpy(&after, left, sizeof after, cudaMemcpyDeviceToHost));
    std::printf("while: y %g, counter %d\n", first(y), after);
    CHECK(cudaMemcpy(left, &three, sizeof three, cudaMemcpyHostToDevice));
    run(g, s);
    std::printf("while again: y %g\n", first(y));
    size_t nodes = 0;
    CHECK(cudaGraphGetNodes(body, nullptr, &nodes));
    std::printf("while body nodes %zu\n", nodes);
    CHECK(cudaGraphDestroy(g));
}

// IF with an ELSE body: y = 7 when the flag is set, y = -1 when it is not.
static void if_else(float *y, unsigned *flag, cudaStream_t s)
{
    cudaGraph_t g;
    cudaGraphConditionalHandle h;
    CHECK(cudaGraphCreate(&g, 0));
    CHECK(cudaGraphConditionalHandleCreate(&h, g, 0, 0));
    void *set_args[] = {&h, &flag};
    cudaGraphNodeParams set = kernel((void *)set_condition, set_args, 1, 1);
    cudaGraphNode_t setter = add(g, nullptr, 0, &set);
    cudaGraphNodeParams c = conditional(h, cudaGraphCondTypeIf, 2);
    add(g, &setter, 1, &c);
    float yes = 7.0f, no = -1.0f;
    int count = n;
    void *yes_args[] = {&y, &yes, &count}, *no_args[] = {&y, &no, &count};
    cudaGraphNodeParams then_fill = kernel((void *)fill, yes_args, n / 256, 256);
    cudaGraphNodeParams else_fill = kernel((void *)fill, no_args, n / 256, 256);
    add(c.conditional.phGraph_out[0], nullptr, 0, &then_fill);
    add(c.conditional.phGraph_out[1], nullptr, 0, &else_fill);
    cudaGraphExec_t exec;
    CHECK(cudaGraphInstantiate(&exec, g, 0));
    for (unsigned v : {1u, 0u, 5u}) {
        CHECK(cudaMemcpy(flag, &v, sizeof v, cudaMemcpyHostToDevice));
        CHECK(cudaGraphLaunch(exec, s));
        CHECK(cudaStreamSynchronize(s));
        std::printf("if %u: y %g\n", v, first(y));
    }
    CHECK(cudaGraphExecDestroy(exec));
    cudaGraphNodeParams three = conditional(h, cudaGraphCondTypeIf, 3); // IF has one or two bodies
    cudaGraphNode_t bad;
#if CUDART_VERSION >= 13000
    cudaError_t e = cudaGraphAddNode(&bad, g, nullptr, nullptr, 0, &three);
#else
    cudaError_t e = cudaGraphAddNode(&bad, g, nullptr, 0, &three);
#endif
    std::printf("if with 3 bodies: %s\n", cudaGetErrorName(e));
    cudaGetLastError();
    CHECK(cudaGraphDestroy(g));
}

// SWITCH over three bodies filling 100, 200, 300; a selector past them runs none. The third body is filled by
// capturing a launch into it (as PyTorch captures a conditional's branches).
static void switch_bodies(float *y, unsigned *sel, cudaStream_t s)
{
    cudaGraph_t g;
    cudaGraphConditionalHandle h;
    CHECK(cudaGraphCreate(&g, 0));
    CHECK(cudaGraphConditionalHandleCreate(&h, g, 0, 0));
    void *set_args[] = {&h, &sel};
    cudaGraphNodeParams set = kernel((void *)set_condition, set_args, 1, 1);
    cudaGraphNode_t setter = add(g, nullptr, 0, &set);
    cudaGraphNodeParams c = conditional(h, cudaGraphCondTypeSwitch, 3);
    add(g, &setter, 1, &c);
    float values[3] = {100.0f, 200.0f, 300.0f};
    int count = n;
    for (int i = 0; i < 2; i++) {
        void *args[] = {&y, &values[i], &count};
        cudaGraphNodeParams f = kernel((void *)fill, args, n / 256, 256);
        add(c.conditional.phGraph_out[i], nullptr, 0, &f);
    }
    cudaStream_t cap;
    CHECK(cudaStreamCreateWithFlags(&cap, cudaStreamNonBlocking));
    CHECK(cudaStreamBeginCaptureToGraph(cap, c.conditional.phGraph_out[2], nullptr, nullptr, 0,
                                        cudaStreamCaptureModeThreadLocal));
    fill<<<n / 256, 256, 0, cap>>>(y, values[2], n);
    cudaGraph_t captured;
    CHECK(cudaStreamEndCapture(cap, &captured));
    EXPECT(captured == c.conditional.phGraph_out[2]);
    cudaGraphExec_t exec;
    CHECK(cudaGraphInstantiate(&exec, g, 0));
    CHECK(cudaMemset(y, 0, n * sizeof(float)));
    for (unsigned v : {2u, 0u, 1u, 9u}) {
        CHECK(cudaMemcpy(sel, &v, sizeof v, cudaMemcpyHostToDevice));
        CHECK(cudaGraphLaunch(exec, s));
        CHECK(cudaStreamSynchronize(s));
        std::printf("switch %u: y %g\n", v, first(y));
    }
    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaStreamDestroy(cap));
    CHECK(cudaGraphDestroy(g));
}

static int host_runs;
static void CUDART_CB count_run(void *) { host_runs++; }

// A graph made node by node, then added to by capture: after its root, a launch, a copy and a host function.
static void capture_into(float *x, float *y, cudaStream_t s)
{
    cudaGraph_t g;
    CHECK(cudaGraphCreate(&g, 0));
    float one = 1.0f;
    int count = n;
    void *args[] = {&y, &one, &count};
    cudaGraphNodeParams f = kernel((void *)fill, args, n / 256, 256);
    cudaGraphNode_t root = add(g, nullptr, 0, &f);
    cudaStream_t cap;
    CHECK(cudaStreamCreateWithFlags(&cap, cudaStreamNonBlocking));
    CHECK(cudaStreamBeginCaptureToGraph(cap, g, &root, nullptr, 1, cudaStreamCaptureModeGlobal));
    cudaStreamCaptureStatus status;
    CHECK(cudaStreamIsCapturing(cap, &status));
    saxpy<<<n / 256, 256, 0, cap>>>(3.0f, x, y, n);
    CHECK(cudaMemcpyAsync(x, y, n * sizeof(float), cudaMemcpyDeviceToDevice, cap));
    CHECK(cudaLaunchHostFunc(cap, count_run, nullptr));
    cudaGraph_t captured;
    CHECK(cudaStreamEndCapture(cap, &captured));
    size_t nodes = 0, roots = 0;
    CHECK(cudaGraphGetNodes(g, nullptr, &nodes));
    CHECK(cudaGraphGetRootNodes(g, nullptr, &roots));
    std::printf("capture into a graph: same graph %d, capturing %d, %zu nodes, %zu root\n", captured == g,
                status == cudaStreamCaptureStatusActive, nodes, roots);
    run(g, s);
    std::printf("captured: y %g, x %g, host function ran %d\n", first(y), first(x), host_runs);
    CHECK(cudaStreamDestroy(cap));
    CHECK(cudaGraphDestroy(g));
}

// y = 1, then y += 5 * x, the second node disabled in the exec and enabled again.
static void enable_nodes(float *x, float *y, cudaStream_t s)
{
    cudaGraph_t g;
    CHECK(cudaGraphCreate(&g, 0));
    float one = 1.0f, five = 5.0f;
    int count = n;
    void *fill_args[] = {&y, &one, &count}, *axpy_args[] = {&five, &x, &y, &count};
    cudaGraphNodeParams f = kernel((void *)fill, fill_args, n / 256, 256);
    cudaGraphNodeParams a = kernel((void *)saxpy, axpy_args, n / 256, 256);
    cudaGraphNode_t filled = add(g, nullptr, 0, &f);
    cudaGraphNode_t axpy = add(g, &filled, 1, &a);
    cudaGraphExec_t exec;
    CHECK(cudaGraphInstantiate(&exec, g, 0));
    unsigned on = 7;
    CHECK(cudaGraphNodeGetEnabled(exec, axpy, &on));
    std::printf("enabled at first: %u\n", on);
    CHECK(cudaGraphNodeSetEnabled(exec, axpy, 0));
    CHECK(cudaGraphNodeGetEnabled(exec, axpy, &on));
    CHECK(cudaGraphLaunch(exec, s));
    CHECK(cudaStreamSynchronize(s));
    std::printf("disabled (%u): y %g\n", on, first(y));
    CHECK(cudaGraphNodeSetEnabled(exec, axpy, 1));
    CHECK(cudaGraphNodeGetEnabled(exec, axpy, &on));
    CHECK(cudaGraphLaunch(exec, s));
    CHECK(cudaStreamSynchronize(s));
    std::printf("enabled again (%u): y %g\n", on, first(y));
    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaGraphDestroy(g));
}

// An event record node moved to another event, in the graph and then in the exec.
static void event_nodes(cudaStream_t s)
{
    cudaEvent_t e1, e2;
    CHECK(cudaEventCreate(&e1));
    CHECK(cudaEventCreate(&e2));
    cudaGraph_t g;
    CHECK(cudaGraphCreate(&g, 0));
    cudaGraphNode_t rec;
    CHECK(cudaGraphAddEventRecordNode(&rec, g, nullptr, 0, e1));
    CHECK(cudaGraphEventRecordNodeSetEvent(rec, e2));
    cudaEvent_t got;
    CHECK(cudaGraphEventRecordNodeGetEvent(rec, &got));
    cudaGraphExec_t exec;
    CHECK(cudaGraphInstantiate(&exec, g, 0));
    CHECK(cudaGraphLaunch(exec, s));
    CHECK(cudaStreamSynchronize(s));
    std::printf("event node: set %d, recorded e2 %s, e1 %s\n", got == e2, cudaGetErrorName(cudaEventQuery(e2)),
                cudaGetErrorName(cudaEventQuery(e1)));
    CHECK(cudaGraphExecEventRecordNodeSetEvent(exec, rec, e1));
    CHECK(cudaGraphLaunch(exec, s));
    CHECK(cudaStreamSynchronize(s));
    std::printf("exec's event node: e1 %s\n", cudaGetErrorName(cudaEventQuery(e1)));
    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaGraphDestroy(g));
    CHECK(cudaEventDestroy(e1));
    CHECK(cudaEventDestroy(e2));
}

// A child graph node filling 3, changed in the exec to a graph of the same shape filling 4.
static void child_in_exec(float *y, cudaStream_t s)
{
    float three = 3.0f, four = 4.0f;
    int count = n;
    cudaGraph_t a, b, parent;
    void *a_args[] = {&y, &three, &count}, *b_args[] = {&y, &four, &count};
    cudaGraphNodeParams fa = kernel((void *)fill, a_args, n / 256, 256), fb = kernel((void *)fill, b_args, n / 256, 256);
    CHECK(cudaGraphCreate(&a, 0));
    CHECK(cudaGraphCreate(&b, 0));
    CHECK(cudaGraphCreate(&parent, 0));
    add(a, nullptr, 0, &fa);
    add(b, nullptr, 0, &fb);
    cudaGraphNode_t child;
    CHECK(cudaGraphAddChildGraphNode(&child, parent, nullptr, 0, a));
    cudaGraphExec_t exec;
    CHECK(cudaGraphInstantiate(&exec, parent, 0));
    CHECK(cudaGraphLaunch(exec, s));
    CHECK(cudaStreamSynchronize(s));
    float before = first(y);
    CHECK(cudaGraphExecChildGraphNodeSetParams(exec, child, b));
    CHECK(cudaGraphLaunch(exec, s));
    CHECK(cudaStreamSynchronize(s));
    std::printf("child in exec: y %g, then %g\n", before, first(y));
    CHECK(cudaGraphExecDestroy(exec));
    for (cudaGraph_t g : {parent, a, b})
        CHECK(cudaGraphDestroy(g));
}

// A child graph moved into its node (as XLA nests command buffers): the parent's exec changes the child's kernel
// node by the handle it had in the child.
static void moved_child(float *y, cudaStream_t s)
{
    float five = 5.0f, six = 6.0f;
    int count = n;
    cudaGraph_t child, parent;
    CHECK(cudaGraphCreate(&child, 0));
    CHECK(cudaGraphCreate(&parent, 0));
    void *args[] = {&y, &five, &count}, *args6[] = {&y, &six, &count};
    cudaGraphNodeParams f = kernel((void *)fill, args, n / 256, 256);
    cudaGraphNode_t inner = add(child, nullptr, 0, &f);
    cudaGraphNodeParams c = {};
    c.type = cudaGraphNodeTypeGraph;
    c.graph.graph = child, c.graph.ownership = cudaGraphChildGraphOwnershipMove;
    cudaGraphNode_t moved = add(parent, nullptr, 0, &c);
    cudaGraphExec_t exec;
    CHECK(cudaGraphInstantiate(&exec, parent, 0));
    CHECK(cudaGraphLaunch(exec, s));
    CHECK(cudaStreamSynchronize(s));
    float before = first(y);
    cudaKernelNodeParams k = {};
    k.func = (void *)fill, k.gridDim = dim3(n / 256), k.blockDim = dim3(256), k.kernelParams = args6;
    CHECK(cudaGraphExecKernelNodeSetParams(exec, inner, &k));
    CHECK(cudaGraphLaunch(exec, s));
    CHECK(cudaStreamSynchronize(s));
    cudaGraph_t own;
    CHECK(cudaGraphChildGraphNodeGetGraph(moved, &own));
    std::printf("moved child: y %g, then %g; the node's graph is the one moved %d\n", before, first(y), own == child);
    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaGraphDestroy(parent)); // the child goes with it
}

// A cloned child graph node's own graph, read back and added to: the node runs what was added.
static void embedded_child(float *y, cudaStream_t s)
{
    float seven = 7.0f, twelve = 12.0f;
    int count = n;
    cudaGraph_t child, parent, own;
    CHECK(cudaGraphCreate(&child, 0));
    CHECK(cudaGraphCreate(&parent, 0));
    void *args[] = {&y, &seven, &count}, *args12[] = {&y, &twelve, &count};
    cudaGraphNodeParams f = kernel((void *)fill, args, n / 256, 256), f12 = kernel((void *)fill, args12, n / 256, 256);
    add(child, nullptr, 0, &f);
    cudaGraphNode_t node;
    CHECK(cudaGraphAddChildGraphNode(&node, parent, nullptr, 0, child));
    CHECK(cudaGraphDestroy(child)); // the node has its own copy
    CHECK(cudaGraphChildGraphNodeGetGraph(node, &own));
    cudaGraph_t again;
    CHECK(cudaGraphChildGraphNodeGetGraph(node, &again));
    cudaGraphNode_t first_node;
    size_t count_nodes = 1;
    CHECK(cudaGraphGetNodes(own, &first_node, &count_nodes));
    add(own, &first_node, 1, &f12);
    run(parent, s);
    std::printf("a child node's own graph: the same twice %d, %zu node at first, then y %g\n", again == own,
                count_nodes, first(y));
    CHECK(cudaGraphDestroy(parent));
}

// The device's graph memory while a graph with a 1 MiB allocation lives, and after.
static void graph_memory(cudaStream_t s)
{
    int dev;
    CHECK(cudaGetDevice(&dev));
    cudaGraph_t g;
    CHECK(cudaGraphCreate(&g, 0));
    cudaMemAllocNodeParams p = {};
    p.poolProps.allocType = cudaMemAllocationTypePinned;
    p.poolProps.location.type = cudaMemLocationTypeDevice, p.poolProps.location.id = dev;
    p.bytesize = 1 << 20;
    cudaGraphNode_t alloc, free_node;
    CHECK(cudaGraphAddMemAllocNode(&alloc, g, nullptr, 0, &p));
    CHECK(cudaGraphAddMemFreeNode(&free_node, g, &alloc, 1, p.dptr));
    run(g, s);
    unsigned long long used = 0, high = 0;
    CHECK(cudaDeviceGetGraphMemAttribute(dev, cudaGraphMemAttrReservedMemCurrent, &used));
    CHECK(cudaDeviceGetGraphMemAttribute(dev, cudaGraphMemAttrReservedMemHigh, &high));
    std::printf("graph memory while the graph lives: at least 1 MiB %d, high at least current %d\n", used >= (1 << 20),
                high >= used);
    unsigned long long nonzero = 1;
    std::printf("setting a high-water mark to 1: %s\n",
                cudaGetErrorName(cudaDeviceSetGraphMemAttribute(dev, cudaGraphMemAttrUsedMemHigh, &nonzero)));
    cudaGetLastError();
    CHECK(cudaGraphDestroy(g));
    CHECK(cudaDeviceGraphMemTrim(dev));
    CHECK(cudaDeviceGetGraphMemAttribute(dev, cudaGraphMemAttrReservedMemCurrent, &used));
    unsigned long long zero = 0;
    CHECK(cudaDeviceSetGraphMemAttribute(dev, cudaGraphMemAttrReservedMemHigh, &zero));
    CHECK(cudaDeviceGetGraphMemAttribute(dev, cudaGraphMemAttrReservedMemHigh, &high));
    std::printf("after the graph and a trim: reserved %llu, high reset to %llu\n", used, high);
}

__device__ float table[8];

// Memcpy nodes to and from a __device__ variable, their parameters read back and changed (the runtime's symbol and
// cudaMemcpy3DParms forms of the memcpy node calls).
static void symbol_copies(float *y, float *out, cudaStream_t s)
{
    int count = n;
    float nine = 9.0f;
    fill<<<n / 256, 256, 0, s>>>(y, nine, count);
    CHECK(cudaMemset(out, 0, 8 * sizeof(float)));
    CHECK(cudaStreamSynchronize(s));
    cudaGraph_t g;
    CHECK(cudaGraphCreate(&g, 0));
    cudaGraphNode_t to, from;
    CHECK(cudaGraphAddMemcpyNodeToSymbol(&to, g, nullptr, 0, table, y, 4 * sizeof(float), 2 * sizeof(float),
                                         cudaMemcpyDeviceToDevice));
    CHECK(cudaGraphAddMemcpyNodeFromSymbol(&from, g, &to, 1, out, table, sizeof table, 0, cudaMemcpyDeviceToDevice));
    run(g, s);
    float h[8];
    CHECK(cudaMemcpy(h, out, sizeof h, cudaMemcpyDeviceToHost));
    std::printf("to and from a symbol: %g %g %g %g %g %g %g %g\n", h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7]);
    void *at;
    CHECK(cudaGetSymbolAddress(&at, table));
    cudaMemcpy3DParms p = {};
    CHECK(cudaGraphMemcpyNodeGetParams(to, &p));
    std::printf("node's parameters: width %zu height %zu depth %zu, from y %d, to table + 8 %d\n", p.extent.width,
                p.extent.height, p.extent.depth, p.srcPtr.ptr == y, p.dstPtr.ptr == (char *)at + 8);
    CHECK(cudaGraphMemcpyNodeSetParamsToSymbol(to, table, y, 2 * sizeof(float), 6 * sizeof(float),
                                               cudaMemcpyDeviceToDevice));
    p = {};
    p.srcPtr = make_cudaPitchedPtr(at, sizeof table, 8, 1);
    p.dstPtr = make_cudaPitchedPtr(out, sizeof table, 8, 1);
    p.extent = make_cudaExtent(sizeof table, 1, 1);
    p.kind = cudaMemcpyDeviceToDevice;
    CHECK(cudaGraphMemcpyNodeSetParams(from, &p));
    run(g, s);
    CHECK(cudaMemcpy(h, out, sizeof h, cudaMemcpyDeviceToHost));
    std::printf("changed: %g %g %g %g %g %g %g %g\n", h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7]);
    std::printf("past the symbol's end: %s\n",
                cudaGetErrorName(cudaGraphMemcpyNodeSetParamsToSymbol(to, table, y, 8, sizeof table - 4,
                                                                      cudaMemcpyDeviceToDevice)));
    cudaGetLastError();
    CHECK(cudaGraphDestroy(g));
}

static std::atomic<int> destroyed{0};

static void CUDART_CB destroy_object(void *tag)
{
    destroyed += *(int *)tag;
}

static int wait_destroyed(int want) // destructors run on a thread of the driver's, some time after the last release
{
    for (int i = 0; i < 400 && destroyed.load() < want; i++)
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    return destroyed.load();
}

// User objects: their references held by the program, a graph, and the exec made from it; destroyed once the
// last holder lets go.
static void user_objects(float *y, cudaStream_t s)
{
    static int one = 1, ten = 10;
    cudaUserObject_t a, b;
    std::printf("user object without the required flag: %s\n",
                cudaGetErrorName(cudaUserObjectCreate(&a, &one, destroy_object, 1, 0)));
    cudaGetLastError();
    CHECK(cudaUserObjectCreate(&a, &one, destroy_object, 1, cudaUserObjectNoDestructorSync));
    CHECK(cudaUserObjectCreate(&b, &ten, destroy_object, 2, cudaUserObjectNoDestructorSync));
    cudaGraph_t g;
    CHECK(cudaGraphCreate(&g, 0));
    float v = 8.0f;
    int count = n;
    void *args[] = {&y, &v, &count};
    cudaGraphNodeParams f = kernel((void *)fill, args, n / 256, 256);
    add(g, nullptr, 0, &f);
    CHECK(cudaGraphRetainUserObject(g, a, 1, cudaGraphUserObjectMove)); // the graph takes the program's reference
    CHECK(cudaGraphRetainUserObject(g, b, 1, 0));                       // and a new one to b
    CHECK(cudaUserObjectRelease(b, 2));                                 // the graph's keeps b
    cudaGraphExec_t exec;
    CHECK(cudaGraphInstantiate(&exec, g, 0));
    CHECK(cudaGraphDestroy(g)); // the exec holds both still
    CHECK(cudaGraphLaunch(exec, s));
    CHECK(cudaStreamSynchronize(s));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    std::printf("user objects while the exec lives: destroyed %d, y %g\n", destroyed.load(), first(y));
    CHECK(cudaGraphExecDestroy(exec));
    std::printf("after the exec: destroyed %d\n", wait_destroyed(11));
}

// A user object held by a child graph moved into its node: the exec made from the parent holds it too, a clone of
// the parent holds its own copies, and it is destroyed once the exec, the last holder, goes.
static void objects_in_moved_child(float *y, cudaStream_t s)
{
    static int hundred = 100;
    cudaUserObject_t o;
    CHECK(cudaUserObjectCreate(&o, &hundred, destroy_object, 1, cudaUserObjectNoDestructorSync));
    cudaGraph_t child, parent, clone;
    CHECK(cudaGraphCreate(&child, 0));
    CHECK(cudaGraphCreate(&parent, 0));
    float v = 3.0f;
    int count = n;
    void *args[] = {&y, &v, &count};
    cudaGraphNodeParams f = kernel((void *)fill, args, n / 256, 256);
    add(child, nullptr, 0, &f);
    CHECK(cudaGraphRetainUserObject(child, o, 1, cudaGraphUserObjectMove));
    cudaGraphNodeParams c = {};
    c.type = cudaGraphNodeTypeGraph;
    c.graph.graph = child, c.graph.ownership = cudaGraphChildGraphOwnershipMove;
    add(parent, nullptr, 0, &c);
    cudaGraphExec_t exec;
    CHECK(cudaGraphInstantiate(&exec, parent, 0));
    CHECK(cudaGraphClone(&clone, parent));
    CHECK(cudaGraphDestroy(clone));
    CHECK(cudaGraphDestroy(parent));
    CHECK(cudaGraphLaunch(exec, s));
    CHECK(cudaStreamSynchronize(s));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    int before = destroyed.load();
    CHECK(cudaGraphExecDestroy(exec));
    std::printf("an object a moved child holds: kept by the exec %d, then destroyed %d\n", before == 11,
                wait_destroyed(111) == 111);
}

int main()
{
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    float *x, *y;
    int *left;
    unsigned *flag;
    CHECK(cudaMalloc(&x, n * sizeof(float)));
    CHECK(cudaMalloc(&y, n * sizeof(float)));
    CHECK(cudaMalloc(&left, sizeof(int)));
    CHECK(cudaMalloc(&flag, sizeof(unsigned)));
    std::vector<float> ones(n, 1.0f);
    CHECK(cudaMemcpy(x, ones.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    while_loop(x, y, left, s);
    if_else(y, flag, s);
    switch_bodies(y, flag, s);
    capture_into(x, y, s);
    enable_nodes(x, y, s);
    event_nodes(s);
    child_in_exec(y, s);
    moved_child(y, s);
    embedded_child(y, s);
    graph_memory(s);
    symbol_copies(y, x, s);
    user_objects(y, s);
    objects_in_moved_child(y, s);
    CHECK(cudaFree(x));
    CHECK(cudaFree(y));
    CHECK(cudaFree(left));
    CHECK(cudaFree(flag));
    std::printf("graph_control OK\n");
    return 0;
}
