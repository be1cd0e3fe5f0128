// Driver and runtime API in one program, as CUDA allows: a context made with cuCtxCreate is the one the runtime
// works in, so a stream made with cudaStreamCreate can carry a cuLaunchKernel of a function from cuModuleLoadData
// in that context (this used to fail with error 400 through rgpu when cudaSetDevice had been called first).
// Build with -lcuda.
#include <cuda.h>
#include <vector>

#include "check.cuh"

#define CU(call)                                                                                                    \
    do {                                                                                                            \
        CUresult r_ = (call);                                                                                       \
        if (r_ != CUDA_SUCCESS) {                                                                                   \
            std::fprintf(stderr, "%s:%d: %s -> %d\n", __FILE__, __LINE__, #call, (int)r_);                          \
            std::exit(1);                                                                                           \
        }                                                                                                           \
    } while (0)

#include "vadd_ptx.h"

static double run(CUfunction f, int n)
{
    std::vector<float> a(n), b(n), c(n);
    for (int i = 0; i < n; i++)
        a[i] = float(i % 101), b[i] = 2.0f * float(i % 7);
    float *da, *db, *dc;
    CHECK(cudaMalloc(&da, n * sizeof(float)));
    CHECK(cudaMalloc(&db, n * sizeof(float)));
    CHECK(cudaMalloc(&dc, n * sizeof(float)));
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    CHECK(cudaMemcpyAsync(da, a.data(), n * sizeof(float), cudaMemcpyHostToDevice, s));
    CHECK(cudaMemcpyAsync(db, b.data(), n * sizeof(float), cudaMemcpyHostToDevice, s));
    void *args[] = {&da, &db, &dc, &n};
    CU(cuLaunchKernel(f, (n + 127) / 128, 1, 1, 128, 1, 1, 0, (CUstream)s, args, nullptr));
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaMemcpy(c.data(), dc, n * sizeof(float), cudaMemcpyDeviceToHost));
    double sum = 0;
    for (int i = 0; i < n; i++) {
        EXPECT(c[i] == a[i] + b[i]);
        sum += c[i];
    }
    CHECK(cudaStreamDestroy(s));
    CHECK(cudaFree(da));
    CHECK(cudaFree(db));
    CHECK(cudaFree(dc));
    return sum;
}

int main()
{
    CHECK(cudaSetDevice(0)); // the runtime's primary context is current ...
    CHECK(cudaFree(0));
    CU(cuInit(0));
    CUdevice dev;
    CU(cuDeviceGet(&dev, 0));
    CUcontext ctx, cur;
#if CUDA_VERSION >= 13000
    CU(cuCtxCreate(&ctx, nullptr, 0, dev)); // ... until the program makes its own
#else
    CU(cuCtxCreate(&ctx, 0, dev));
#endif
    CUmodule mod;
    CUfunction f;
    CU(cuModuleLoadData(&mod, ptx));
    CU(cuModuleGetFunction(&f, mod, "vadd"));
    CUmodule of = nullptr;
    CU(cuFuncGetModule(&of, f));
    EXPECT(of == mod);
    CUfunctionLoadingState state;
    CU(cuFuncIsLoaded(&state, f));
    EXPECT(state == CU_FUNCTION_LOADING_STATE_LOADED);
    CU(cuFuncLoad(f));
    unsigned long long own_id = 0, current_id = 0;
    CU(cuCtxGetId(ctx, &own_id));
    CU(cuCtxGetId(nullptr, &current_id)); // (the current context: this one)
    EXPECT(own_id == current_id);
    double in_own = run(f, 5000);
    CU(cuCtxGetCurrent(&cur));
    EXPECT(cur == ctx); // the runtime worked in it and left it current
    int d = -1;
    CHECK(cudaGetDevice(&d));
    EXPECT(d == 0);
#if CUDA_VERSION >= 13000
    // CUDA 13's forms that name their context: this one while another is current, and the current one (NULL).
    CUcontext primary13;
    CU(cuDevicePrimaryCtxRetain(&primary13, dev));
    CU(cuCtxPushCurrent(primary13));
    CUdevice of_ctx = -1;
    CU(cuCtxGetDevice_v2(&of_ctx, ctx));
    EXPECT(of_ctx == dev);
    CU(cuCtxSynchronize_v2(ctx));
    CU(cuCtxSynchronize_v2(nullptr));
    CU(cuCtxGetCurrent(&cur));
    EXPECT(cur == primary13); // (synchronizing another context left the current one current)
    CU(cuCtxPopCurrent(&cur));
    CU(cuDevicePrimaryCtxRelease(dev));
#endif
    // A 3D copy between the two contexts (cuMemcpy3DPeer): three rows of 16 bytes, from (4, 1) of a 32-byte pitch
    // in this one into a 64-byte pitch in the primary context.
    CUcontext prim;
    CU(cuDevicePrimaryCtxRetain(&prim, dev));
    CUdeviceptr own_buf, prim_buf;
    unsigned char pattern[256], got[256];
    for (int i = 0; i < 256; i++)
        pattern[i] = (unsigned char)i;
    CU(cuMemAlloc(&own_buf, sizeof pattern));
    CU(cuMemcpyHtoD(own_buf, pattern, sizeof pattern));
    CU(cuCtxPushCurrent(prim));
    CU(cuMemAlloc(&prim_buf, sizeof got));
    CU(cuMemsetD8(prim_buf, 0, sizeof got));
    CU(cuCtxPopCurrent(&cur));
    CUDA_MEMCPY3D_PEER peer = {};
    peer.srcMemoryType = CU_MEMORYTYPE_DEVICE, peer.srcDevice = own_buf, peer.srcContext = ctx;
    peer.srcPitch = 32, peer.srcHeight = 8, peer.srcXInBytes = 4, peer.srcY = 1;
    peer.dstMemoryType = CU_MEMORYTYPE_DEVICE, peer.dstDevice = prim_buf, peer.dstContext = prim;
    peer.dstPitch = 64, peer.dstHeight = 4;
    peer.WidthInBytes = 16, peer.Height = 3, peer.Depth = 1;
    CU(cuMemcpy3DPeer(&peer));
    CU(cuCtxGetCurrent(&cur));
    EXPECT(cur == ctx); // (the copy left the current context current)
    // A copy between device buffers does not wait for itself; built with per-thread default streams, nothing
    // orders it before the read in the other context either (the H100 showed its rows unwritten): wait for it.
    CU(cuCtxSynchronize());
    CU(cuCtxPushCurrent(prim));
    CU(cuMemcpyDtoH(got, prim_buf, sizeof got));
    CU(cuMemFree(prim_buf));
    CU(cuCtxPopCurrent(&cur));
    for (int i = 0; i < 256; i++) {
        int row = i / 64, col = i % 64;
        EXPECT(got[i] == (row < 3 && col < 16 ? pattern[(1 + row) * 32 + 4 + col] : 0));
    }
    CU(cuMemFree(own_buf));
    CU(cuDevicePrimaryCtxRelease(dev));

    CU(cuModuleUnload(mod));
    CU(cuCtxDestroy(ctx));
    // cuCtxCreate pushed the context; destroying it pops back to the primary context cudaSetDevice made current.
    CUcontext primary;
    CU(cuDevicePrimaryCtxRetain(&primary, dev));
    CU(cuCtxGetCurrent(&cur));
    EXPECT(cur == primary);
    CU(cuModuleLoadData(&mod, ptx));
    CU(cuModuleGetFunction(&f, mod, "vadd"));
    unsigned long long primary_id = 0;
    CU(cuCtxGetId(primary, &primary_id));
    EXPECT(primary_id != own_id);
    double in_primary = run(f, 3000);
    CU(cuModuleUnload(mod));
    CU(cuDevicePrimaryCtxRelease(dev));
    std::printf("mixed_contexts OK own=%.1f primary=%.1f\n", in_own, in_primary);
    return 0;
}
