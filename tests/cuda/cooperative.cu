// Cooperative launches, as grid-synchronising programs make them: cudaLaunchCooperativeKernel, cudaLaunchKernelEx
// with the cooperative attribute and the driver's cuLaunchCooperativeKernel; a grid that cannot be resident at
// once is refused at the launch with cudaErrorCooperativeLaunchTooLarge, the error is not sticky, and nothing of
// the refused launch runs.
#include <cooperative_groups.h>
#include <cuda.h>

#include "check.cuh"

namespace cg = cooperative_groups;

// Every thread computes its element, then the whole grid meets at a barrier before any writes: only a
// cooperative launch may do that.
__global__ void saxpy(float a, const float *x, float *y, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = i < n ? a * x[i] + y[i] : 0.0f;
    cg::this_grid().sync();
    if (i < n)
        y[i] = v;
}

static void expect_saxpy(const float *dy, float *hy, int n, float total)
{
    CHECK(cudaMemcpy(hy, dy, n * sizeof(float), cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++)
        EXPECT(hy[i] == 1.0f + total * float(i % 5));
}

int main()
{
    int supported = 0, sms = 0, per_sm = 0;
    CHECK(cudaDeviceGetAttribute(&supported, cudaDevAttrCooperativeLaunch, 0));
    EXPECT(supported == 1);
    CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, saxpy, 256, 0));
    EXPECT(per_sm >= 1);
    const int blocks = per_sm * sms < 16 ? per_sm * sms : 16, n = blocks * 256;
    float *hx = new float[n], *hy = new float[n], *dx, *dy;
    for (int i = 0; i < n; i++)
        hx[i] = float(i % 5), hy[i] = 1.0f;
    CHECK(cudaMalloc(&dx, n * sizeof(float)));
    CHECK(cudaMalloc(&dy, n * sizeof(float)));
    CHECK(cudaMemcpy(dx, hx, n * sizeof(float), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(dy, hy, n * sizeof(float), cudaMemcpyHostToDevice));
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

    float a = 2.0f;
    int count = n;
    void *args[] = {&a, &dx, &dy, &count};
    CHECK(cudaLaunchCooperativeKernel((const void *)saxpy, dim3(blocks), dim3(256), args, 0, s));
    CHECK(cudaStreamSynchronize(s));
    expect_saxpy(dy, hy, n, 2.0f);

    cudaLaunchAttribute cooperative[1];
    cooperative[0].id = cudaLaunchAttributeCooperative;
    cooperative[0].val.cooperative = 1;
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(blocks);
    config.blockDim = dim3(256);
    config.stream = s;
    config.attrs = cooperative;
    config.numAttrs = 1;
    CHECK(cudaLaunchKernelEx(&config, saxpy, 1.0f, (const float *)dx, dy, n));
    CHECK(cudaStreamSynchronize(s));
    expect_saxpy(dy, hy, n, 3.0f);

    // One block more than can be resident: refused where it is launched, the error cleared by reading it, and
    // the stream's work goes on as if the launch had never been asked for.
    EXPECT(cudaLaunchCooperativeKernel((const void *)saxpy, dim3(per_sm * sms + 1), dim3(256), args, 0, s) ==
           cudaErrorCooperativeLaunchTooLarge);
    EXPECT(cudaGetLastError() == cudaErrorCooperativeLaunchTooLarge);
    EXPECT(cudaGetLastError() == cudaSuccess);
    config.gridDim = dim3(per_sm * sms + 1);
    EXPECT(cudaLaunchKernelEx(&config, saxpy, 1.0f, (const float *)dx, dy, n) == cudaErrorCooperativeLaunchTooLarge);
    cudaGetLastError();
    CHECK(cudaStreamSynchronize(s));
    expect_saxpy(dy, hy, n, 3.0f);

    // The driver's own cooperative launch, of the same kernel.
    cudaFunction_t f;
    CHECK(cudaGetFuncBySymbol(&f, (const void *)saxpy));
    EXPECT(cuLaunchCooperativeKernel((CUfunction)f, blocks, 1, 1, 256, 1, 1, 0, (CUstream)s, args) == CUDA_SUCCESS);
    EXPECT(cuLaunchCooperativeKernel((CUfunction)f, per_sm * sms + 1, 1, 1, 256, 1, 1, 0, (CUstream)s, args) ==
           CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE);
    CHECK(cudaStreamSynchronize(s));
    expect_saxpy(dy, hy, n, 5.0f);

    CHECK(cudaStreamDestroy(s));
    CHECK(cudaFree(dx));
    CHECK(cudaFree(dy));
    delete[] hx;
    delete[] hy;
    std::printf("cooperative OK\n");
    return 0;
}
