// Cluster occupancy, as Hopper-era kernels ask before launching in clusters: the largest cluster size a launch
// could take and how many clusters of 2 blocks can be resident at once, through the runtime and the driver. What
// the device answers is printed as it is (natively and through rgpu the same), and the two APIs must agree.
#include <cuda.h>

#include "check.cuh"

__global__ void saxpy(float a, const float *x, float *y, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = a * x[i] + y[i];
}

int main()
{
    CHECK(cudaFree(0));
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(64);
    config.blockDim = dim3(256);
    int size = -1;
    cudaError_t potential = cudaOccupancyMaxPotentialClusterSize(&size, saxpy, &config);
    cudaGetLastError();

    cudaLaunchAttribute cluster[1];
    cluster[0].id = cudaLaunchAttributeClusterDimension;
    cluster[0].val.clusterDim.x = 2, cluster[0].val.clusterDim.y = 1, cluster[0].val.clusterDim.z = 1;
    config.attrs = cluster;
    config.numAttrs = 1;
    int active = -1, driver_active = -1;
    cudaError_t runtime = cudaOccupancyMaxActiveClusters(&active, saxpy, &config);
    cudaGetLastError();
    cudaFunction_t f;
    CHECK(cudaGetFuncBySymbol(&f, (const void *)saxpy));
    CUlaunchConfig d = {64, 1, 1, 256, 1, 1, 0, nullptr, (CUlaunchAttribute *)cluster, 1};
    CUresult driver = cuOccupancyMaxActiveClusters(&driver_active, (CUfunction)f, &d);
    EXPECT((runtime == cudaSuccess) == (driver == CUDA_SUCCESS) && active == driver_active);
    EXPECT(runtime != cudaSuccess || active > 0);

    // No cluster size: the H200's driver counted clusters of one block, at least as many as clusters of two; the
    // H100's answered 0 (both CUDA 13).
    config.numAttrs = 0;
    int unsized = -1;
    cudaError_t without = cudaOccupancyMaxActiveClusters(&unsized, saxpy, &config);
    cudaGetLastError();
    EXPECT(without != cudaSuccess || unsized == 0 || runtime != cudaSuccess || unsized >= active);
    EXPECT(cudaOccupancyMaxActiveClusters(nullptr, saxpy, &config) == cudaErrorInvalidValue);
    cudaGetLastError();

    CHECK(cudaDeviceSynchronize()); // (the device is still there to use, whatever the queries answered)
    std::printf("largest cluster: %s %d; resident clusters of 2: %s %d; without a size: %s %d\n",
                cudaGetErrorName(potential), potential == cudaSuccess ? size : -1, cudaGetErrorName(runtime),
                runtime == cudaSuccess ? active : -1, cudaGetErrorName(without), without == cudaSuccess ? unsized : -1);
    std::printf("clusters OK\n");
    return 0;
}
