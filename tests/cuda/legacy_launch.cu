// The launch API from before CUDA 4, as old driver-API programs still call it: a block shape, parameters placed
// with cuParamSetv/cuParamSeti at their offsets and their size set, cuLaunchGrid, cuLaunchGridAsync on a stream;
// a parameter past the parameter space refused. Build with -lcuda.
#include <cuda.h>
#include <cstdio>
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

int main()
{
    const int n = 1000;
    CU(cuInit(0));
    CUdevice dev;
    CUcontext ctx;
    CU(cuDeviceGet(&dev, 0));
    CU(cuDevicePrimaryCtxRetain(&ctx, dev));
    CU(cuCtxSetCurrent(ctx));
    CUmodule mod;
    CUfunction f;
    CU(cuModuleLoadData(&mod, ptx));
    CU(cuModuleGetFunction(&f, mod, "vadd"));
    std::vector<float> a(n), b(n), c(n);
    for (int i = 0; i < n; i++)
        a[i] = 0.5f * i, b[i] = float(i % 13);
    CUdeviceptr da, db, dc;
    CU(cuMemAlloc(&da, n * 4));
    CU(cuMemAlloc(&db, n * 4));
    CU(cuMemAlloc(&dc, n * 4));
    CU(cuMemcpyHtoD(da, a.data(), n * 4));
    CU(cuMemcpyHtoD(db, b.data(), n * 4));
    // vadd(const float *a, const float *b, float *c, int n): three pointers, then the count
    CU(cuFuncSetBlockShape(f, 128, 1, 1));
    CU(cuParamSetv(f, 0, &da, sizeof da));
    CU(cuParamSetv(f, 8, &db, sizeof db));
    CU(cuParamSetv(f, 16, &dc, sizeof dc));
    CU(cuParamSeti(f, 24, n));
    CU(cuParamSetSize(f, 28));
    CU(cuLaunchGrid(f, (n + 127) / 128, 1));
    CU(cuMemcpyDtoH(c.data(), dc, n * 4));
    bool ok = true;
    for (int i = 0; i < n; i++)
        ok &= c[i] == a[i] + b[i];
    std::printf("cuLaunchGrid ran the kernel: %s\n", ok ? "yes" : "NO");
    CUstream s;
    CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CU(cuMemsetD32Async(dc, 0, n, s)); // (on the stream: a non-blocking one does not wait for the NULL stream)
    CU(cuParamSetv(f, 16, &dc, sizeof dc));
    CU(cuLaunchGridAsync(f, (n + 127) / 128, 1, s));
    CU(cuStreamSynchronize(s));
    CU(cuMemcpyDtoH(c.data(), dc, n * 4));
    bool ok2 = true;
    for (int i = 0; i < n; i++)
        ok2 &= c[i] == a[i] + b[i];
    std::printf("cuLaunchGridAsync on a stream: %s\n", ok2 ? "yes" : "NO");
    unsigned big = 0;
    // Past the old API's 4 KiB, within what a launch carries now: CUDA 13's driver takes it (the H200 showed so).
    std::printf("a parameter at offset 4094: %s\n", cuParamSeti(f, 4094, big) == CUDA_SUCCESS ? "taken" : "refused");
    bool refused = cuParamSeti(f, 1 << 20, big) != CUDA_SUCCESS;
    std::printf("a parameter 1 MiB in refused: %s\n", refused ? "yes" : "NO");
    CU(cuStreamDestroy(s));
    CU(cuMemFree(da));
    CU(cuMemFree(db));
    CU(cuMemFree(dc));
    CU(cuModuleUnload(mod));
    CU(cuDevicePrimaryCtxRelease(dev));
    if (!ok || !ok2 || !refused)
        return 1;
    std::printf("legacy_launch OK\n");
    return 0;
}
