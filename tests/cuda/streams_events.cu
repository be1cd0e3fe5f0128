// Streams, events and asynchronous copies from page-locked memory; ordering across streams via events.
#include "check.cuh"

__global__ void saxpy(float a, const float *x, float *y, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = a * x[i] + y[i];
}

int main()
{
    const int n = 1 << 18;
    float *hx, *hy, *dx, *dy;
    CHECK(cudaMallocHost(&hx, n * sizeof(float)));
    CHECK(cudaHostAlloc(&hy, n * sizeof(float), cudaHostAllocDefault));
    for (int i = 0; i < n; i++)
        hx[i] = float(i % 100), hy[i] = 1.0f;
    CHECK(cudaMalloc(&dx, n * sizeof(float)));
    CHECK(cudaMalloc(&dy, n * sizeof(float)));

    int least, greatest;
    CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    cudaStream_t s1, s2;
    CHECK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
    CHECK(cudaStreamCreateWithPriority(&s2, cudaStreamNonBlocking, greatest));
    int prio;
    unsigned flags;
    CHECK(cudaStreamGetPriority(s2, &prio));
    CHECK(cudaStreamGetFlags(s1, &flags));
    EXPECT(prio == greatest && flags == cudaStreamNonBlocking);

    cudaEvent_t start, copied, done;
    CHECK(cudaEventCreate(&start));
    CHECK(cudaEventCreateWithFlags(&copied, cudaEventDisableTiming));
    CHECK(cudaEventCreate(&done));
    CHECK(cudaEventRecord(start, s1));
    CHECK(cudaMemcpyAsync(dx, hx, n * sizeof(float), cudaMemcpyHostToDevice, s1));
    CHECK(cudaMemcpyAsync(dy, hy, n * sizeof(float), cudaMemcpyHostToDevice, s1));
    CHECK(cudaEventRecord(copied, s1));
    CHECK(cudaStreamWaitEvent(s2, copied, 0));
    saxpy<<<(n + 255) / 256, 256, 0, s2>>>(2.0f, dx, dy, n);
    saxpy<<<(n + 255) / 256, 256, 0, s2>>>(1.0f, dx, dy, n);
    CHECK(cudaGetLastError());
    CHECK(cudaEventRecord(done, s2));
    CHECK(cudaMemcpyAsync(hy, dy, n * sizeof(float), cudaMemcpyDeviceToHost, s2));
    CHECK(cudaStreamSynchronize(s2));
    CHECK(cudaEventSynchronize(done));
    EXPECT(cudaEventQuery(done) == cudaSuccess && cudaStreamQuery(s2) == cudaSuccess);
    float ms = -1.0f;
    CHECK(cudaEventElapsedTime(&ms, start, done));
    EXPECT(ms >= 0.0f);
    EXPECT(cudaEventElapsedTime(&ms, start, copied) != cudaSuccess); // no timing on that event
    EXPECT(cudaGetLastError() != cudaSuccess);
    for (int i = 0; i < n; i++)
        EXPECT(hy[i] == 3.0f * float(i % 100) + 1.0f);

    int called = 0;
    CHECK(cudaLaunchHostFunc(s1, [](void *p) { *(int *)p = 1; }, &called));
    CHECK(cudaStreamSynchronize(s1));
    EXPECT(called == 1);
    cudaStreamCaptureStatus capture;
    CHECK(cudaStreamIsCapturing(s1, &capture));
    EXPECT(capture == cudaStreamCaptureStatusNone);

    CHECK(cudaEventDestroy(start));
    CHECK(cudaEventDestroy(copied));
    CHECK(cudaEventDestroy(done));
    CHECK(cudaStreamDestroy(s1));
    CHECK(cudaStreamDestroy(s2));
    CHECK(cudaFree(dx));
    CHECK(cudaFree(dy));
    CHECK(cudaFreeHost(hx));
    CHECK(cudaFreeHost(hy));
    std::printf("streams_events OK y[7]=%.1f\n", 3.0f * 7 + 1);
    return 0;
}
