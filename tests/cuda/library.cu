// Context-independent loading: a library loaded once, its kernel launched (as CUDA allows, the CUkernel cast
// to a CUfunction), looked up again in a second context with cuKernelGetFunction, its global read, then the
// runtime's cudaLibraryLoadData / cudaLibraryGetKernel. Build with -lcuda.
#include <cuda.h>
#include <cstring>
#include <vector>

#include "check.cuh"
#include "vadd_ptx.h"

#define CU(call)                                                                                                    \
    do {                                                                                                            \
        CUresult r_ = (call);                                                                                       \
        if (r_ != CUDA_SUCCESS) {                                                                                   \
            std::fprintf(stderr, "%s:%d: %s -> %d\n", __FILE__, __LINE__, #call, (int)r_);                          \
            std::exit(1);                                                                                           \
        }                                                                                                           \
    } while (0)

__global__ void scale(float *x, float a, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        x[i] *= a;
}

static double vadd_with(CUfunction f, int n)
{
    std::vector<float> a(n), b(n), c(n);
    for (int i = 0; i < n; i++)
        a[i] = float(i % 37), b[i] = float(i % 5);
    CUdeviceptr da, db, dc;
    CU(cuMemAlloc(&da, n * 4));
    CU(cuMemAlloc(&db, n * 4));
    CU(cuMemAlloc(&dc, n * 4));
    CU(cuMemcpyHtoD(da, a.data(), n * 4));
    CU(cuMemcpyHtoD(db, b.data(), n * 4));
    void *args[] = {&da, &db, &dc, &n};
    CU(cuLaunchKernel(f, (n + 127) / 128, 1, 1, 128, 1, 1, 0, nullptr, args, nullptr));
    CU(cuMemcpyDtoH(c.data(), dc, n * 4));
    double sum = 0;
    for (int i = 0; i < n; i++) {
        EXPECT(c[i] == a[i] + b[i]);
        sum += c[i];
    }
    CU(cuMemFree(da));
    CU(cuMemFree(db));
    CU(cuMemFree(dc));
    return sum;
}

int main()
{
    CU(cuInit(0));
    CUdevice dev;
    CU(cuDeviceGet(&dev, 0));
    CUcontext first, second;
    CU(cuDevicePrimaryCtxRetain(&first, dev));
    CU(cuCtxSetCurrent(first));
    CUlibrary lib;
    CU(cuLibraryLoadData(&lib, ptx, nullptr, nullptr, 0, nullptr, nullptr, 0));
    CUkernel k;
    CU(cuLibraryGetKernel(&k, lib, "vadd"));
    const char *name = nullptr;
    CU(cuKernelGetName(&name, k));
    EXPECT(name && std::strcmp(name, "vadd") == 0);
    CUlibrary back;
    CU(cuKernelGetLibrary(&back, k));
    EXPECT(back == lib);
    int threads = 0;
    CU(cuKernelGetAttribute(&threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, k, dev));
    EXPECT(threads > 0);
    size_t offset = 99, size = 99;
    CU(cuKernelGetParamInfo(k, 1, &offset, &size)); // vadd(const float *a, const float *b, float *c, int n)
    EXPECT(offset == 8 && size == 8);
    double s1 = vadd_with((CUfunction)k, 3000);
    CUdeviceptr counters;
    size_t bytes = 0;
    CU(cuLibraryGetGlobal(&counters, &bytes, lib, "counters"));
    EXPECT(bytes == 16);
    CUkernel missing;
    EXPECT(cuLibraryGetKernel(&missing, lib, "no_such_kernel") != CUDA_SUCCESS);

#if CUDA_VERSION >= 13000
    CU(cuCtxCreate(&second, nullptr, 0, dev));
#else
    CU(cuCtxCreate(&second, 0, dev));
#endif
    CUfunction in_second;
    CU(cuKernelGetFunction(&in_second, k));
    double s2 = vadd_with(in_second, 2000);
    CU(cuCtxDestroy(second));
    CU(cuCtxSetCurrent(first));
    CU(cuLibraryUnload(lib));

    // The runtime's spelling of the same.
    cudaLibrary_t rlib;
    cudaKernel_t rk;
    CHECK(cudaLibraryLoadData(&rlib, ptx, nullptr, nullptr, 0, nullptr, nullptr, 0));
    CHECK(cudaLibraryGetKernel(&rk, rlib, "vadd"));
    CUfunction rf;
    CU(cuKernelGetFunction(&rf, (CUkernel)rk));
    double s3 = vadd_with(rf, 1000);
    CHECK(cudaLibraryUnload(rlib));

    // cudaGetKernel: this program's own kernel, launched by its handle.
    cudaKernel_t own;
    CHECK(cudaGetKernel(&own, scale));
    struct cudaFuncAttributes fa;
    CHECK(cudaFuncGetAttributes(&fa, (const void *)own));
    EXPECT(fa.maxThreadsPerBlock > 0);
    CU(cuDevicePrimaryCtxRelease(dev));
    std::printf("library OK %.1f %.1f %.1f\n", s1, s2, s3);
    return 0;
}
