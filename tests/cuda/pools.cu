// Stream-ordered memory: the device's default pool with a release threshold, cudaMallocAsync / cudaFreeAsync
// around a kernel on a stream, an explicit pool made current, pool attributes and access, trimming, and bad
// input (a second free, a pointer that was never allocated, more memory than there is).
#include <vector>

#include "check.cuh"

__global__ void vadd(const float *a, const float *b, float *c, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        c[i] = a[i] + b[i];
}

int main()
{
    int supported = 0;
    CHECK(cudaDeviceGetAttribute(&supported, cudaDevAttrMemoryPoolsSupported, 0));
    EXPECT(supported == 1);
    cudaMemPool_t def, cur;
    CHECK(cudaDeviceGetDefaultMemPool(&def, 0));
    CHECK(cudaDeviceGetMemPool(&cur, 0));
    EXPECT(cur == def);
#if CUDART_VERSION >= 13000
    // CUDA 13's forms by location name the same pools.
    cudaMemLocation dev0 = {cudaMemLocationTypeDevice, 0};
    cudaMemPool_t by_location;
    CHECK(cudaMemGetDefaultMemPool(&by_location, &dev0, cudaMemAllocationTypePinned));
    EXPECT(by_location == def);
    CHECK(cudaMemGetMemPool(&by_location, &dev0, cudaMemAllocationTypePinned));
    EXPECT(by_location == cur);
#endif
    unsigned long long threshold = 64ull << 20, got = 0;
    CHECK(cudaMemPoolSetAttribute(def, cudaMemPoolAttrReleaseThreshold, &threshold));
    CHECK(cudaMemPoolGetAttribute(def, cudaMemPoolAttrReleaseThreshold, &got));
    EXPECT(got == threshold);

    const int n = 1 << 16;
    std::vector<float> ha(n), hb(n), hc(n);
    for (int i = 0; i < n; i++)
        ha[i] = float(i % 313), hb[i] = float(i % 17) * 0.5f;
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    double sum = 0;
    for (int round = 0; round < 3; round++) { // the pool hands freed memory out again
        float *a, *b, *c;
        CHECK(cudaMallocAsync(&a, n * sizeof(float), s));
        CHECK(cudaMallocAsync(&b, n * sizeof(float), s));
        CHECK(cudaMallocAsync(&c, n * sizeof(float), s));
        CHECK(cudaMemcpyAsync(a, ha.data(), n * sizeof(float), cudaMemcpyHostToDevice, s));
        CHECK(cudaMemcpyAsync(b, hb.data(), n * sizeof(float), cudaMemcpyHostToDevice, s));
        vadd<<<n / 256, 256, 0, s>>>(a, b, c, n);
        CHECK(cudaGetLastError());
        CHECK(cudaMemcpyAsync(hc.data(), c, n * sizeof(float), cudaMemcpyDeviceToHost, s));
        CHECK(cudaFreeAsync(a, s));
        CHECK(cudaFreeAsync(b, s));
        CHECK(cudaStreamSynchronize(s));
        for (int i = 0; i < n; i++) {
            EXPECT(hc[i] == ha[i] + hb[i]);
            sum += hc[i];
        }
        if (round == 0) {
            EXPECT(cudaFreeAsync(a, s) != cudaSuccess); // freed already
            cudaGetLastError();
        }
        CHECK(cudaFree(c)); // cudaFree takes stream-ordered memory too
    }

    // An explicit pool, made the device's current one.
    cudaMemPoolProps props = {};
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = 0;
    cudaMemPool_t pool;
    CHECK(cudaMemPoolCreate(&pool, &props));
    CHECK(cudaDeviceSetMemPool(0, pool));
    CHECK(cudaDeviceGetMemPool(&cur, 0));
    EXPECT(cur == pool);
    void *p, *q;
    CHECK(cudaMallocAsync(&p, 1 << 20, s)); // from the current pool
    CHECK(cudaMallocFromPoolAsync(&q, 1 << 20, pool, s));
    CHECK(cudaMemsetAsync(p, 0x11, 1 << 20, s));
    CHECK(cudaMemcpyAsync(q, p, 1 << 20, cudaMemcpyDeviceToDevice, s));
    unsigned char back[16];
    CHECK(cudaMemcpyAsync(back, (char *)q + (1 << 19), 16, cudaMemcpyDeviceToHost, s));
    CHECK(cudaStreamSynchronize(s));
    EXPECT(back[0] == 0x11 && back[15] == 0x11);
    unsigned long long used = 0;
    CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &used));
    EXPECT(used >= (2u << 20));
    int follow = -1;
    CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolReuseFollowEventDependencies, &follow));
    EXPECT(follow == 0 || follow == 1);
    cudaMemAccessDesc access = {};
    access.location.type = cudaMemLocationTypeDevice;
    access.location.id = 0;
    access.flags = cudaMemAccessFlagsProtReadWrite;
    CHECK(cudaMemPoolSetAccess(pool, &access, 1));
    cudaMemAccessFlags flags;
    cudaMemLocation here = {cudaMemLocationTypeDevice, 0};
    CHECK(cudaMemPoolGetAccess(&flags, pool, &here));
    EXPECT(flags == cudaMemAccessFlagsProtReadWrite);
    CHECK(cudaFreeAsync(p, s));
    CHECK(cudaFreeAsync(q, s));
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaMemPoolTrimTo(pool, 0));

    // Bad input fails and the program goes on.
    void *huge = nullptr;
    EXPECT(cudaMallocAsync(&huge, (size_t)1 << 40, s) != cudaSuccess);
    cudaGetLastError();
    int on_stack = 0;
    EXPECT(cudaFreeAsync(&on_stack, s) != cudaSuccess);
    cudaGetLastError();

    CHECK(cudaDeviceSetMemPool(0, def));
    CHECK(cudaMemPoolDestroy(pool));
    CHECK(cudaStreamDestroy(s));
    CHECK(cudaDeviceSynchronize());
    std::printf("pools OK sum=%.1f\n", sum);
    return 0;
}
