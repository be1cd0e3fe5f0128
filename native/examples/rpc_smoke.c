/* Smallest end-to-end check of the driver API: init, device queries, context, memory round trip. */
#include <string.h>

#include "check.h"

int main(void)
{
    int version = 0, count = 0, major = 0, minor = 0;
    char name[256];
    CUdevice dev;
    CUcontext ctx;
    CHECK(cuInit(0));
    CHECK(cuDriverGetVersion(&version));
    CHECK(cuDeviceGetCount(&count));
    CHECK(cuDeviceGet(&dev, 0));
    CHECK(cuDeviceGetName(name, sizeof name, dev));
    CHECK(cuDeviceComputeCapability(&major, &minor, dev));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CHECK(cuCtxSetCurrent(ctx));
    size_t n = 3u << 20, free_mem = 0, total = 0;
    unsigned char *in = malloc(n), *out = malloc(n);
    for (size_t i = 0; i < n; i++)
        in[i] = (unsigned char)(i * 7 + 3);
    CUdeviceptr d;
    CHECK(cuMemAlloc(&d, n));
    CHECK(cuMemcpyHtoD(d, in, n));
    CHECK(cuMemsetD8(d + 16, 0xAB, 16));
    CHECK(cuMemcpyDtoH(out, d, n));
    memset(in + 16, 0xAB, 16);
    /* Several chunks (device->host ones are pipelined), the last one partial; then a copy whose second chunk
     * runs past the allocation: refused, and the connection stays in step. */
    size_t big = (9u << 20) + 5;
    unsigned char *bin = malloc(big), *bout = malloc(big);
    for (size_t i = 0; i < big; i++)
        bin[i] = (unsigned char)(i * 13 + 1);
    CUdeviceptr d2;
    CHECK(cuMemAlloc(&d2, big));
    CHECK(cuMemcpyHtoD(d2, bin, big));
    CHECK(cuMemcpyDtoH(bout, d2, big));
    int big_ok = memcmp(bin, bout, big) == 0;
    CUresult overrun = cuMemcpyDtoH(bout, d2 + big - (4u << 20), 8u << 20);
    CHECK(cuMemFree(d2));
    printf("rpc_smoke: pipelined round trip of %zu bytes %s; overrunning copy: %d\n", big,
           big_ok ? "OK" : "MISMATCH", (int)overrun);
    CHECK(cuMemGetInfo(&free_mem, &total));
    CHECK(cuMemFree(d));
    CHECK(cuDevicePrimaryCtxRelease(dev));
    int ok = memcmp(in, out, n) == 0 && big_ok && overrun == CUDA_ERROR_INVALID_VALUE;
    printf("rpc_smoke: driver %d, %d device(s), %s (cc %d.%d), %zu MiB free of %zu, round trip of %zu bytes %s\n",
           version, count, name, major, minor, free_mem >> 20, total >> 20, n, ok ? "OK" : "MISMATCH");
    return ok ? 0 : 1;
}
