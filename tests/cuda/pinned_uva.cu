// Unified addressing with page-locked host memory, as XLA uses it: a pointer into memory from cuMemHostAlloc is
// also a valid "device" pointer, so cuMemcpyDtoH(Async) may copy out of it. Build with -lcuda.
#include <cuda.h>
#include <cstdio>

#include "check.cuh"

#define CU(call) EXPECT((call) == CUDA_SUCCESS)

int main()
{
    CHECK(cudaFree(nullptr));  // the runtime makes the primary context current
    const int n = 1024;
    unsigned *pinned = nullptr;
    CU(cuMemHostAlloc((void **)&pinned, n * sizeof(unsigned), CU_MEMHOSTALLOC_PORTABLE));
    for (int i = 0; i < n; i++)
        pinned[i] = 0x9e3779b9u * (unsigned)i;
    unsigned out[n] = {0}, one = 0;
    CU(cuMemcpyDtoH(out, (CUdeviceptr)pinned, sizeof out));
    CU(cuMemcpyDtoHAsync(&one, (CUdeviceptr)(pinned + 77), sizeof one, nullptr));
    CU(cuStreamSynchronize(nullptr));
    unsigned long long sum = 0;
    for (int i = 0; i < n; i++)
        sum += out[i];
    EXPECT(out[5] == pinned[5] && one == pinned[77]);
    CU(cuMemFreeHost(pinned));
    std::printf("pinned_uva OK sum=%llu one=%u\n", sum, one);
    return 0;
}
