// cudaLaunchKernelEx with launch attributes, as llama.cpp launches: programmatic stream serialization (PDL),
// priority, cluster dimension, a launch-completion event; an unknown attribute is refused.
#include "check.cuh"

__global__ void saxpy(float a, const float *x, float *y, int n)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    cudaGridDependencySynchronize(); // with PDL the previous kernel may still run: wait for its results
#endif
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = a * x[i] + y[i];
}

static cudaError_t launch(cudaStream_t s, float a, const float *x, float *y, int n, cudaLaunchAttribute *attrs,
                          unsigned count)
{
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3((n + 255) / 256);
    config.blockDim = dim3(256);
    config.stream = s;
    config.attrs = attrs;
    config.numAttrs = count;
    return cudaLaunchKernelEx(&config, saxpy, a, x, y, n);
}

int main()
{
    const int n = 1 << 16;
    float *hx = new float[n], *hy = new float[n], *dx, *dy;
    for (int i = 0; i < n; i++)
        hx[i] = float(i % 7), hy[i] = 1.0f;
    CHECK(cudaMalloc(&dx, n * sizeof(float)));
    CHECK(cudaMalloc(&dy, n * sizeof(float)));
    CHECK(cudaMemcpy(dx, hx, n * sizeof(float), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(dy, hy, n * sizeof(float), cudaMemcpyHostToDevice));
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

    // PDL lets a launch start before the one ahead of it ends; the sm_90 build waits in
    // cudaGridDependencySynchronize, other builds cannot, so these launches read nothing the one ahead writes.
    cudaLaunchAttribute pdl[1];
    pdl[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    pdl[0].val.programmaticStreamSerializationAllowed = 1;
    float *outs[10];
    for (int k = 0; k < 10; k++) {
        CHECK(cudaMalloc(&outs[k], n * sizeof(float)));
        CHECK(cudaMemcpy(outs[k], hy, n * sizeof(float), cudaMemcpyHostToDevice));
    }
    for (int k = 0; k < 10; k++)
        CHECK(launch(s, float(k), dx, outs[k], n, pdl, 1));
    CHECK(cudaStreamSynchronize(s));
    for (int k = 0; k < 10; k++) {
        CHECK(cudaMemcpy(hy, outs[k], n * sizeof(float), cudaMemcpyDeviceToHost));
        for (int i = 0; i < n; i++)
            EXPECT(hy[i] == 1.0f + float(k) * float(i % 7));
        CHECK(cudaFree(outs[k]));
    }

    int least, greatest;
    CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    cudaEvent_t done;
    CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    cudaLaunchAttribute more[3];
    more[0].id = cudaLaunchAttributePriority;
    more[0].val.priority = greatest;
    more[1].id = cudaLaunchAttributeClusterDimension;
    more[1].val.clusterDim.x = 1, more[1].val.clusterDim.y = 1, more[1].val.clusterDim.z = 1;
    more[2].id = cudaLaunchAttributeLaunchCompletionEvent;
    more[2].val.launchCompletionEvent.event = done;
    more[2].val.launchCompletionEvent.flags = 0;
    CHECK(launch(s, 2.0f, dx, dy, n, more, 3));
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaEventSynchronize(done));
    CHECK(cudaMemcpy(hy, dy, n * sizeof(float), cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++)
        EXPECT(hy[i] == 1.0f + 2.0f * float(i % 7));

    // An attribute id no driver knows: refused at the launch (natively) or at the next synchronisation
    // (through rgpu, where launches are deferred); either way the program hears of it and can go on.
    cudaLaunchAttribute bogus[1];
    bogus[0].id = (cudaLaunchAttributeID)99;
    cudaError_t at_launch = launch(s, 1.0f, dx, dy, n, bogus, 1);
    cudaError_t at_sync = cudaStreamSynchronize(s);
    EXPECT(at_launch != cudaSuccess || at_sync != cudaSuccess);
    cudaGetLastError();
    CHECK(launch(s, 1.0f, dx, dy, n, pdl, 1));
    CHECK(cudaStreamSynchronize(s));

    CHECK(cudaEventDestroy(done));
    CHECK(cudaStreamDestroy(s));
    CHECK(cudaFree(dx));
    CHECK(cudaFree(dy));
    std::printf("launch_attributes OK\n");
    return 0;
}
