/* Driver-API vector add: loads the module image given on the command line (PTX, cubin or fatbin, e.g. built
 * with `nvcc --ptx|--cubin|--fatbin` from src/rgpu/kernels/demo.cu) and checks c = a + b. */
#include <math.h>
#include <string.h>

#include "check.h"

static void *read_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        exit(2);
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = calloc(1, (size_t)n + 1); /* NUL-terminated, as PTX must be */
    if (fread(buf, 1, (size_t)n, f) != (size_t)n)
        exit(2);
    fclose(f);
    return buf;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s MODULE_IMAGE [n]\n", argv[0]);
        return 2;
    }
    int n = argc > 2 ? atoi(argv[2]) : 1 << 20;
    CUdevice dev;
    CUcontext ctx;
    CUmodule mod;
    CUfunction vadd;
    CHECK(cuInit(0));
    CHECK(cuDeviceGet(&dev, 0));
    CHECK(cuCtxCreate(&ctx, NULL, 0, dev));
    void *image = read_file(argv[1]);
    CHECK(cuModuleLoadData(&mod, image));
    CHECK(cuModuleGetFunction(&vadd, mod, "vadd"));
    size_t bytes = (size_t)n * sizeof(float);
    float *a = malloc(bytes), *b = malloc(bytes), *c = malloc(bytes);
    for (int i = 0; i < n; i++) {
        a[i] = (float)i * 0.5f;
        b[i] = 1.0f - (float)i;
    }
    CUdeviceptr da, db, dc;
    CHECK(cuMemAlloc(&da, bytes));
    CHECK(cuMemAlloc(&db, bytes));
    CHECK(cuMemAlloc(&dc, bytes));
    CUstream s;
    CHECK(cuStreamCreate(&s, 0));
    CHECK(cuMemcpyHtoDAsync(da, a, bytes, s));
    CHECK(cuMemcpyHtoDAsync(db, b, bytes, s));
    void *params[] = {&da, &db, &dc, &n};
    CUevent start, stop;
    CHECK(cuEventCreate(&start, 0));
    CHECK(cuEventCreate(&stop, 0));
    CHECK(cuEventRecord(start, s));
    CHECK(cuLaunchKernel(vadd, (unsigned)(n + 255) / 256, 1, 1, 256, 1, 1, 0, s, params, NULL));
    CHECK(cuEventRecord(stop, s));
    CHECK(cuStreamSynchronize(s));
    CHECK(cuMemcpyDtoH(c, dc, bytes));
    float ms = 0;
    CHECK(cuEventElapsedTime(&ms, start, stop));
    int bad = 0;
    for (int i = 0; i < n; i++)
        bad += c[i] != a[i] + b[i];
    CHECK(cuMemFree(da));
    CHECK(cuMemFree(db));
    CHECK(cuMemFree(dc));
    CHECK(cuModuleUnload(mod));
    CHECK(cuCtxDestroy(ctx));
    printf("vecadd n=%d image=%s: %s (%d wrong), kernel %.3f ms\n", n, argv[1], bad ? "FAILED" : "OK", bad, ms);
    return bad ? 1 : 0;
}
