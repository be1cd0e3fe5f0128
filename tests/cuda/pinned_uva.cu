// Unified addressing with page-locked host memory, as XLA uses it: a pointer into memory from cuMemHostAlloc is
// also a valid "device" pointer, so cuMemcpyDtoH(Async) may copy out of it, memsets (XLA's autotuner clears
// 8 pinned bytes with cuMemsetD32Async) and copies to and from device memory may name it, and kernels read and
// write it (XLA's redzone checker counts mismatches into it). Build with -lcuda.
#include <cuda.h>
#include <cstdio>

#include "check.cuh"

#define CU(call) EXPECT((call) == CUDA_SUCCESS)

__global__ void vadd(const float *a, const float *b, float *c, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        c[i] = a[i] + b[i];
}

// Kernels reading and writing page-locked memory directly, on a stream of their own; the host reads the result
// after synchronizing, changes an input, and launches again.
static void kernels_on_pinned_memory()
{
    const int n = 1000;
    float *a, *b, *c;
    CHECK(cudaMallocHost(&a, n * sizeof(float)));
    CHECK(cudaMallocHost(&b, n * sizeof(float)));
    CHECK(cudaMallocHost(&c, n * sizeof(float)));
    for (int i = 0; i < n; i++)
        a[i] = float(i), b[i] = 0.25f * float(i), c[i] = -1.0f;
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    vadd<<<(n + 127) / 128, 128, 0, s>>>(a, b, c, n);
    CHECK(cudaStreamSynchronize(s));
    for (int i = 0; i < n; i++)
        EXPECT(c[i] == 1.25f * float(i));
    b[7] = 100.0f; // the host's change is seen by the next launch
    vadd<<<(n + 127) / 128, 128, 0, s>>>(c, b, c, n);
    CHECK(cudaStreamSynchronize(s));
    EXPECT(c[7] == 1.25f * 7.0f + 100.0f && c[8] == 1.25f * 8.0f + 2.0f);
    float copied[4]; // rgpu's own copy out of it sees the kernel's results
    vadd<<<(n + 127) / 128, 128, 0, s>>>(a, a, c, n);
    CHECK(cudaMemcpyAsync(copied, c + 10, sizeof copied, cudaMemcpyDefault, s));
    CHECK(cudaStreamSynchronize(s));
    EXPECT(copied[0] == 20.0f && copied[3] == 26.0f);
    CHECK(cudaStreamDestroy(s));
    CHECK(cudaFreeHost(a));
    CHECK(cudaFreeHost(b));
    CHECK(cudaFreeHost(c));
}

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

    CUstream stream;
    CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    CU(cuMemsetD32Async((CUdeviceptr)(pinned + 8), 0xabcd1234u, 2, stream));
    CU(cuMemsetD8Async((CUdeviceptr)(pinned + 16), 0x5a, 3, stream));
    CU(cuMemsetD32((CUdeviceptr)(pinned + 20), 7u, 1));
    CUdeviceptr dev;
    CU(cuMemAlloc(&dev, n * sizeof(unsigned)));
    CU(cuMemcpyDtoDAsync(dev, (CUdeviceptr)pinned, n * sizeof(unsigned), stream));   // pinned -> device
    CU(cuMemsetD32Async((CUdeviceptr)pinned, 0, n, stream));
    CU(cuMemcpyDtoDAsync((CUdeviceptr)(pinned + 100), dev + 8 * sizeof(unsigned), 16, stream));  // device -> pinned
    CU(cuMemcpyHtoDAsync((CUdeviceptr)(pinned + 200), &one, sizeof one, stream));  // host -> pinned
    CU(cuStreamSynchronize(stream));
    EXPECT(pinned[100] == 0xabcd1234u && pinned[101] == 0xabcd1234u && pinned[103] == (0x9e3779b9u * 11u));
    EXPECT((pinned[104 + 0] == 0) && pinned[200] == one && pinned[0] == 0);
    unsigned back[24];
    CU(cuMemcpyDtoH(back, dev, sizeof back));
    EXPECT(back[16] == (0x9e3779b9u * 16u & 0xff000000u) + 0x5a5a5a && back[20] == 7u);
    for (int i = 0; i < 24; i++)
        sum += back[i];
    CU(cuMemFree(dev));
    CU(cuStreamDestroy(stream));
    CU(cuMemFreeHost(pinned));
    kernels_on_pinned_memory();
    std::printf("pinned_uva OK sum=%llu one=%u\n", sum, one);
    return 0;
}
