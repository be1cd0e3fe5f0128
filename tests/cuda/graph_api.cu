// The explicit graph API: a graph built node by node (memset, kernel, device-to-device copy, empty, event
// record, child graph), edges, queries (nodes, roots, edges, types, parameters), kernel-node parameters changed
// in the graph and in an instantiated exec, a clone, and a node destroyed.
#include <cstring>
#include <unistd.h>

#include "check.cuh"

#include "graph_saxpy.cuh"

// y = 1, then y = 4 * 2 + y through cudaGraphAddNode; then the exec's kernel node set to a = 6.
static void generic_nodes(float *x, float *y, cudaStream_t s)
{
    cudaGraph_t g;
    CHECK(cudaGraphCreate(&g, 0));
    cudaGraphNodeParams p = {};
    p.type = cudaGraphNodeTypeMemset;
    p.memset.dst = y, p.memset.value = 0x3F800000, p.memset.elementSize = 4, p.memset.width = n, p.memset.height = 1;
    cudaGraphNode_t set, axpy;
#if CUDART_VERSION >= 13000
    CHECK(cudaGraphAddNode(&set, g, nullptr, nullptr, 0, &p));
#else
    CHECK(cudaGraphAddNode(&set, g, nullptr, 0, &p));
#endif
    float a = 4.0f;
    int count = n;
    void *args[] = {&a, &x, &y, &count};
    cudaGraphNodeParams k = {};
    k.type = cudaGraphNodeTypeKernel;
    k.kernel.func = (void *)saxpy, k.kernel.gridDim = dim3(n / 256), k.kernel.blockDim = dim3(256);
    k.kernel.kernelParams = args;
#if CUDART_VERSION >= 13000
    CHECK(cudaGraphAddNode(&axpy, g, &set, nullptr, 1, &k));
#else
    CHECK(cudaGraphAddNode(&axpy, g, &set, 1, &k));
#endif
#if CUDART_VERSION >= 13000
    // z += x after axpy through a programmatic edge (x is complete before axpy starts).
    float *z, one = 1.0f;
    CHECK(cudaMalloc(&z, n * sizeof(float)));
    CHECK(cudaMemset(z, 0, n * sizeof(float)));
    void *args2[] = {&one, &x, &z, &count};
    cudaGraphNodeParams k2 = k;
    k2.kernel.kernelParams = args2;
    cudaGraphEdgeData pdl = {};
    pdl.from_port = cudaGraphKernelNodePortProgrammatic, pdl.type = cudaGraphDependencyTypeProgrammatic;
    cudaGraphNode_t axpy2;
    CHECK(cudaGraphAddNode(&axpy2, g, &axpy, &pdl, 1, &k2));
    cudaGraphEdgeData back = {};
    cudaGraphNode_t from = nullptr;
    size_t count_deps = 1;
    CHECK(cudaGraphNodeGetDependencies(axpy2, &from, &back, &count_deps));
    EXPECT(count_deps == 1 && from == axpy && back.type == cudaGraphDependencyTypeProgrammatic);
#endif
    cudaGraphExec_t exec;
    CHECK(cudaGraphInstantiate(&exec, g, 0));
    CHECK(cudaGraphLaunch(exec, s));
    CHECK(cudaStreamSynchronize(s));
    expect_all(y, 9.0f); // x is 2 (the main graph's memset)
#if CUDART_VERSION >= 13000
    expect_all(z, 2.0f);
#endif
    a = 6.0f;
    CHECK(cudaGraphExecNodeSetParams(exec, axpy, &k));
    CHECK(cudaGraphLaunch(exec, s));
    CHECK(cudaStreamSynchronize(s));
    expect_all(y, 13.0f);
#if CUDART_VERSION >= 13000
    expect_all(z, 4.0f);
    CHECK(cudaFree(z));
#endif
    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaGraphDestroy(g));
}

int main()
{
    float *x, *y, *out;
    CHECK(cudaMalloc(&x, n * sizeof(float)));
    CHECK(cudaMalloc(&y, n * sizeof(float)));
    CHECK(cudaMalloc(&out, n * sizeof(float)));
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaEvent_t done;
    CHECK(cudaEventCreate(&done));

    cudaGraph_t g;
    CHECK(cudaGraphCreate(&g, 0));
    cudaGraphNode_t set_x, set_y, axpy, copy, join, record;
    cudaMemsetParams ms = {};
    ms.dst = x, ms.value = 0x40000000, ms.elementSize = 4, ms.width = n, ms.height = 1; // 2.0f
    CHECK(cudaGraphAddMemsetNode(&set_x, g, nullptr, 0, &ms));
    ms.dst = y, ms.value = 0x3F800000; // 1.0f
    CHECK(cudaGraphAddMemsetNode(&set_y, g, nullptr, 0, &ms));
    float a = 3.0f;
    int count = n;
    void *args[] = {&a, &x, &y, &count};
    cudaKernelNodeParams kp = {};
    kp.func = (void *)saxpy, kp.gridDim = dim3(n / 256), kp.blockDim = dim3(256), kp.kernelParams = args;
    cudaGraphNode_t both[] = {set_x, set_y};
    CHECK(cudaGraphAddKernelNode(&axpy, g, both, 2, &kp));
    CHECK(cudaGraphAddMemcpyNode1D(&copy, g, &axpy, 1, out, y, n * sizeof(float), cudaMemcpyDeviceToDevice));
    CHECK(cudaGraphAddEmptyNode(&join, g, nullptr, 0));
#if CUDART_VERSION >= 13000
    CHECK(cudaGraphAddDependencies(g, &copy, &join, nullptr, 1));
#else
    CHECK(cudaGraphAddDependencies(g, &copy, &join, 1));
#endif
    CHECK(cudaGraphAddEventRecordNode(&record, g, &join, 1, done));

    size_t count_nodes = 0, roots = 0, edges = 0;
    CHECK(cudaGraphGetNodes(g, nullptr, &count_nodes));
    CHECK(cudaGraphGetRootNodes(g, nullptr, &roots));
    // Room for fewer nodes than the graph has: that many filled in, and that many said obtained.
    cudaGraphNode_t first_only[1] = {nullptr};
    size_t room = 1;
    CHECK(cudaGraphGetNodes(g, first_only, &room));
    EXPECT(room == 1 && first_only[0] != nullptr);
#if CUDART_VERSION >= 13000
    CHECK(cudaGraphGetEdges(g, nullptr, nullptr, nullptr, &edges));
#else
    CHECK(cudaGraphGetEdges(g, nullptr, nullptr, &edges));
#endif
    EXPECT(count_nodes == 6 && roots == 2 && edges == 5);
    cudaGraphNode_t listed[6];
    CHECK(cudaGraphGetNodes(g, listed, &count_nodes));
    int kernels = 0;
    for (size_t i = 0; i < count_nodes; i++) {
        cudaGraphNodeType type;
        CHECK(cudaGraphNodeGetType(listed[i], &type));
        kernels += type == cudaGraphNodeTypeKernel;
    }
    EXPECT(kernels == 1);
    size_t after_axpy = 0;
#if CUDART_VERSION >= 13000
    CHECK(cudaGraphNodeGetDependentNodes(axpy, nullptr, nullptr, &after_axpy));
#else
    CHECK(cudaGraphNodeGetDependentNodes(axpy, nullptr, &after_axpy));
#endif
    EXPECT(after_axpy == 1);
    cudaEvent_t recorded = nullptr;
    CHECK(cudaGraphEventRecordNodeGetEvent(record, &recorded));
    EXPECT(recorded == done);
    cudaKernelNodeParams got = {};
    CHECK(cudaGraphKernelNodeGetParams(axpy, &got));
    EXPECT(got.func == (void *)saxpy && got.gridDim.x == n / 256 && got.blockDim.x == 256);
    EXPECT(*(float *)got.kernelParams[0] == 3.0f);
    cudaMemsetParams got_ms = {};
    CHECK(cudaGraphMemsetNodeGetParams(set_y, &got_ms));
    EXPECT(got_ms.dst == y && got_ms.value == 0x3F800000 && got_ms.width == n);

    cudaGraphExec_t exec;
    CHECK(cudaGraphInstantiate(&exec, g, 0));
    CHECK(cudaGraphLaunch(exec, s));
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaEventSynchronize(done));
    expect_all(out, 7.0f); // 3 * 2 + 1

    // New parameters in the graph do not reach the exec; in the exec they do.
    a = 5.0f;
    CHECK(cudaGraphKernelNodeSetParams(axpy, &kp));
    CHECK(cudaGraphLaunch(exec, s));
    CHECK(cudaStreamSynchronize(s));
    expect_all(out, 7.0f);
    a = 10.0f;
    CHECK(cudaGraphExecKernelNodeSetParams(exec, axpy, &kp));
    CHECK(cudaGraphLaunch(exec, s));
    CHECK(cudaStreamSynchronize(s));
    expect_all(out, 21.0f);
    cudaMemsetParams two = ms; // y = 2.0f, in the exec only
    two.value = 0x40000000;
    CHECK(cudaGraphExecMemsetNodeSetParams(exec, set_y, &two));
    CHECK(cudaGraphLaunch(exec, s));
    CHECK(cudaStreamSynchronize(s));
    expect_all(out, 22.0f);

    // A kernel-node attribute, set and read back.
    cudaKernelNodeAttrValue v = {};
    v.priority = 0;
    CHECK(cudaGraphKernelNodeSetAttribute(axpy, cudaKernelNodeAttributePriority, &v));
    cudaKernelNodeAttrValue back = {};
    back.priority = 99;
    CHECK(cudaGraphKernelNodeGetAttribute(axpy, cudaKernelNodeAttributePriority, &back));
    EXPECT(back.priority == 0);
    // Copied onto another kernel node: the highest priority the device has, which is not the default.
    int least = 0, greatest = 0;
    CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    cudaGraphNode_t spare;
    CHECK(cudaGraphAddKernelNode(&spare, g, nullptr, 0, &kp));
    cudaKernelNodeAttrValue high = {};
    high.priority = greatest;
    cudaGraph_t scratch;
    cudaGraphNode_t source;
    CHECK(cudaGraphCreate(&scratch, 0));
    CHECK(cudaGraphAddKernelNode(&source, scratch, nullptr, 0, &kp));
    CHECK(cudaGraphKernelNodeSetAttribute(source, cudaKernelNodeAttributePriority, &high));
    CHECK(cudaGraphKernelNodeCopyAttributes(spare, source));
    back.priority = 99;
    CHECK(cudaGraphKernelNodeGetAttribute(spare, cudaKernelNodeAttributePriority, &back));
    std::printf("a copied priority is the source's: %s (%d..%d)\n", back.priority == greatest ? "yes" : "NO", least,
                greatest);
    CHECK(cudaGraphDestroy(scratch));
    EXPECT(cudaGraphKernelNodeCopyAttributes(spare, set_y) != cudaSuccess); // (a memset node has none)
    cudaGetLastError();
    CHECK(cudaGraphDestroyNode(spare));

    // A clone (parameters as of now: a = 5) inside another graph as a child.
    cudaGraph_t clone, outer;
    CHECK(cudaGraphClone(&clone, g));
    cudaGraphNode_t axpy_in_clone;
    CHECK(cudaGraphNodeFindInClone(&axpy_in_clone, axpy, clone));
    cudaGraphNodeType type;
    CHECK(cudaGraphNodeGetType(axpy_in_clone, &type));
    EXPECT(type == cudaGraphNodeTypeKernel);
    CHECK(cudaGraphCreate(&outer, 0));
    cudaGraphNode_t child;
    CHECK(cudaGraphAddChildGraphNode(&child, outer, nullptr, 0, clone));
    cudaGraphExec_t outer_exec;
    CHECK(cudaGraphInstantiate(&outer_exec, outer, 0));
    CHECK(cudaGraphLaunch(outer_exec, s));
    CHECK(cudaStreamSynchronize(s));
    expect_all(out, 11.0f);

    // An executable graph's flags, as it was instantiated.
    cudaGraphExec_t flagged;
    unsigned long long got_flags = 99;
    CHECK(cudaGraphInstantiateWithFlags(&flagged, g, cudaGraphInstantiateFlagAutoFreeOnLaunch));
    CHECK(cudaGraphExecGetFlags(flagged, &got_flags));
    EXPECT(got_flags == cudaGraphInstantiateFlagAutoFreeOnLaunch);
    CHECK(cudaGraphExecDestroy(flagged));
    CHECK(cudaGraphInstantiateWithFlags(&flagged, g, cudaGraphInstantiateFlagUseNodePriority));
    CHECK(cudaGraphExecGetFlags(flagged, &got_flags));
    EXPECT(got_flags == 0); // (the driver does not report this one: the H100 showed so)
    CHECK(cudaGraphExecDestroy(flagged));
    CHECK(cudaGraphExecGetFlags(exec, &got_flags));
    EXPECT(got_flags == 0);

    // The graph as Graphviz DOT (what PyTorch's CUDAGraph.debug_dump writes).
    char dot_path[64];
    std::snprintf(dot_path, sizeof dot_path, "/tmp/graph_api_%d.dot", (int)getpid());
    CHECK(cudaGraphDebugDotPrint(g, dot_path, cudaGraphDebugDotFlagsVerbose));
    char dot[65536] = {0};
    FILE *df = std::fopen(dot_path, "r");
    EXPECT(df != nullptr);
    size_t dot_len = std::fread(dot, 1, sizeof dot - 1, df);
    std::fclose(df);
    std::remove(dot_path);
    std::printf("debug dot: a digraph %s, names saxpy %s\n", dot_len && std::strstr(dot, "digraph") ? "yes" : "no",
                std::strstr(dot, "saxpy") ? "yes" : "no");
    EXPECT(cudaGraphDebugDotPrint(g, "/nonexistent-dir/x.dot", 0) != cudaSuccess);
    cudaGetLastError();

    // Destroying the event-record node takes its edge with it.
    CHECK(cudaGraphDestroyNode(record));
    CHECK(cudaGraphGetNodes(g, nullptr, &count_nodes));
    EXPECT(count_nodes == 5);

    generic_nodes(x, y, s);
    CHECK(cudaGraphExecDestroy(outer_exec));
    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaGraphDestroy(outer));
    CHECK(cudaGraphDestroy(clone));
    CHECK(cudaGraphDestroy(g));
    CHECK(cudaEventDestroy(done));
    CHECK(cudaStreamDestroy(s));
    std::printf("graph_api OK\n");
    return 0;
}
