/* Null-call latency and kernel launch rate through whatever libcuda.so.1 is loaded: run it natively and
 * through rgpu in the same session to get ratios (bench/shim_bench.py does). Prints one JSON line. */
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "check.h"

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    int calls = argc > 2 ? atoi(argv[2]) : 20000, launches = argc > 3 ? atoi(argv[3]) : 20000;
    if (argc < 2) {
        fprintf(stderr, "usage: %s MODULE_IMAGE [calls] [launches]\n", argv[0]);
        return 2;
    }
    CUdevice dev;
    CUcontext ctx;
    CUmodule mod;
    CUfunction fill;
    CHECK(cuInit(0));
    CHECK(cuDeviceGet(&dev, 0));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CHECK(cuCtxSetCurrent(ctx));
    FILE *f = fopen(argv[1], "rb");
    static char image[1 << 22];
    size_t n = fread(image, 1, sizeof image - 1, f);
    fclose(f);
    image[n] = 0;
    CHECK(cuModuleLoadData(&mod, image));
    CHECK(cuModuleGetFunction(&fill, mod, "fill"));
    CUdeviceptr p;
    CHECK(cuMemAlloc(&p, 1 << 20));
    /* null call: a synchronising call with no work behind it (one round trip through rgpu) */
    double *t = malloc(sizeof(double) * (size_t)calls);
    size_t free_mem, total;
    for (int i = 0; i < 200; i++)
        CHECK(cuMemGetInfo(&free_mem, &total));
    for (int i = 0; i < calls; i++) {
        double t0 = now();
        CHECK(cuMemGetInfo(&free_mem, &total));
        t[i] = (now() - t0) * 1e6;
    }
    qsort(t, (size_t)calls, sizeof *t, cmp);
    float v = 1.0f;
    int one = 1;
    void *params[] = {&p, &v, &one};
    CHECK(cuLaunchKernel(fill, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL));
    CHECK(cuCtxSynchronize());
    double t0 = now();
    for (int i = 0; i < launches; i++)
        CHECK(cuLaunchKernel(fill, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL));
    CHECK(cuCtxSynchronize());
    double rate = launches / (now() - t0);
    float out = 0;
    CHECK(cuMemcpyDtoH(&out, p, sizeof out));
    /* pageable copies of 64 MiB (best of 3 each way) and of 1 MiB (best of 20). A host-to-device copy is timed
     * until its bytes are in device memory (cuCtxSynchronize): rgpu's stand-ins may return from cuMemcpyHtoD once
     * the bytes are sent, as the driver may once it has staged them, and a copy back timed right after would
     * otherwise carry the rest of the copy up (bench/results/gpu-2026-12-04f-copies). */
    size_t big = 64u << 20, small = 1u << 20;
    unsigned char *host = malloc(big);
    /* (noise: bytes that would code as runs, copy_coded.c, would not measure moving them) */
    uint64_t x = 12345;
    for (size_t i = 0; i < big; i++, x = x * 6364136223846793005ull + 1442695040888963407ull)
        host[i] = (unsigned char)(x >> 56);
    CUdeviceptr d;
    CHECK(cuMemAlloc(&d, big));
    double rates[2][2] = {{0, 0}, {0, 0}}; /* [64 MiB, 1 MiB][H2D, D2H], bytes per second */
    for (int s = 0; s < 2; s++) {
        size_t n = s ? small : big;
        for (int i = 0; i < (s ? 20 : 3); i++) {
            double a = now();
            CHECK(cuMemcpyHtoD(d, host, n));
            CHECK(cuCtxSynchronize());
            double b = now();
            CHECK(cuMemcpyDtoH(host, d, n));
            double c = now();
            if (n / (b - a) > rates[s][0]) rates[s][0] = n / (b - a);
            if (n / (c - b) > rates[s][1]) rates[s][1] = n / (c - b);
        }
    }
    CHECK(cuMemFree(d));
    printf("{\"null_p50_us\": %.2f, \"null_p99_us\": %.2f, \"launches_per_s\": %.0f, \"h2d_gbps\": %.2f, "
           "\"d2h_gbps\": %.2f, \"h2d_1m_gbps\": %.2f, \"d2h_1m_gbps\": %.2f, \"result_ok\": %s}\n", t[calls / 2],
           t[calls * 99 / 100], rate, rates[0][0] / 1e9, rates[0][1] / 1e9, rates[1][0] / 1e9, rates[1][1] / 1e9,
           out == 1.0f ? "true" : "false");
    return out == 1.0f ? 0 : 1;
}
