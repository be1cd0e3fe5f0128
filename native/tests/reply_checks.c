/* Drives every driver-shim path that reads a count, length or layout from a reply, for tests/test_hostile_server.py
 * (which puts a proxy that corrupts one kind of reply between this and a real server) and for the kernel-parameter
 * limit. Usage: reply_checks PTX_FILE KERNEL [limit]
 *   default: device attributes, module + function (parameter layout), function attributes, a launch of KERNEL
 *            as vadd(a, b, c, n), copies both ways; prints "reply_checks OK" or the first failing call.
 *   limit:   KERNEL takes (u64 out, 32756-byte struct): a launch with every parameter byte up to the driver's
 *            limit, read back (when the server reports the layout); then packed buffers of 32764 and 32765 bytes
 *            (refused when there is no layout to go by); prints each outcome.
 *   copyback: 3 MiB of a pattern to the device and back into a buffer filled with 0xAB; with a tampered reply
 *            the copy must fail and leave no byte of the pattern behind ("pattern bytes received: N").
 * Exit status: 0 all calls succeeded, 3 a call failed cleanly (its CUresult printed). */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TRY(call)                                                                                                  \
    do {                                                                                                           \
        CUresult r_ = (call);                                                                                      \
        if (r_ != CUDA_SUCCESS) {                                                                                  \
            const char *name_ = NULL;                                                                              \
            cuGetErrorName(r_, &name_);                                                                            \
            printf("reply_checks: %s -> %s\n", #call, name_ ? name_ : "?");                                        \
            return 3;                                                                                              \
        }                                                                                                          \
    } while (0)

static char *read_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = calloc(1, (size_t)n + 1);
    if (text && fread(text, 1, (size_t)n, f) != (size_t)n) {
        free(text);
        text = NULL;
    }
    fclose(f);
    return text;
}

static int vadd(CUfunction fn)
{
    enum { N = 1000 };
    static float a[N], b[N], c[N];
    for (int i = 0; i < N; i++)
        a[i] = (float)i, b[i] = 0.5f;
    CUdeviceptr da, db, dc;
    TRY(cuMemAlloc(&da, sizeof a));
    TRY(cuMemAlloc(&db, sizeof b));
    TRY(cuMemAlloc(&dc, sizeof c));
    TRY(cuMemcpyHtoD(da, a, sizeof a));
    TRY(cuMemcpyHtoD(db, b, sizeof b));
    int n = N;
    void *params[] = {&da, &db, &dc, &n};
    TRY(cuLaunchKernel(fn, (N + 255) / 256, 1, 1, 256, 1, 1, 0, NULL, params, NULL));
    TRY(cuMemcpyDtoH(c, dc, sizeof c));
    for (int i = 0; i < N; i++)
        if (c[i] != a[i] + b[i]) {
            printf("reply_checks: wrong result at %d\n", i);
            return 1;
        }
    return 0;
}

#define HUGE_BYTES 32756

static int limit(CUfunction fn)
{
    static unsigned char p[HUGE_BYTES + 64], back[HUGE_BYTES];
    for (int i = 0; i < HUGE_BYTES; i++)
        p[i] = (unsigned char)(i * 31 + 7);
    CUdeviceptr out;
    TRY(cuMemAlloc(&out, HUGE_BYTES));
    size_t offset = 0, size = 0;
    CUresult info = cuFuncGetParamInfo(fn, 1, &offset, &size);
    if (info == CUDA_SUCCESS) { /* the layout is known: kernelParams */
        void *params[] = {&out, p};
        TRY(cuLaunchKernel(fn, HUGE_BYTES / 4 / 256 + 1, 1, 1, 256, 1, 1, 0, NULL, params, NULL));
        TRY(cuMemcpyDtoH(back, out, HUGE_BYTES));
        for (int i = 0; i < HUGE_BYTES / 4; i++) {
            unsigned w, got;
            memcpy(&w, p + 4 * i, 4), memcpy(&got, back + 4 * i, 4);
            if (got != w * 3u + (unsigned)i) {
                printf("reply_checks: parameter word %d came back wrong\n", i);
                return 1;
            }
        }
        printf("reply_checks: %zu+%zu parameter bytes intact\n", offset, size);
    }
    /* Packed buffers: the driver's limit exactly, then one byte more. */
    static unsigned char buf[32765 + 8];
    memcpy(buf, &out, 8);
    memcpy(buf + 8, p, HUGE_BYTES);
    size_t bytes = 32764;
    void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, buf, CU_LAUNCH_PARAM_BUFFER_SIZE, &bytes, CU_LAUNCH_PARAM_END};
    CUresult at = cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, extra);
    bytes = 32765;
    CUresult over = cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, extra);
    CUresult sync = cuCtxSynchronize();
    printf("reply_checks: packed 32764 -> %d, 32765 -> %d, sync %d\n", (int)at, (int)over, (int)sync);
    return 0;
}

static int copyback(void)
{
    size_t n = 3u << 20, seen = 0;
    unsigned char *host = malloc(n);
    CUdeviceptr d;
    if (!host)
        return 2;
    memset(host, 0x5A, n);
    TRY(cuMemAlloc(&d, n));
    TRY(cuMemcpyHtoD(d, host, n));
    memset(host, 0xAB, n);
    CUresult r = cuMemcpyDtoH(host, d, n);
    for (size_t i = 0; i < n; i++)
        seen += host[i] == 0x5A;
    printf("reply_checks: copy back -> %d, pattern bytes received: %zu\n", (int)r, seen);
    free(host);
    return r == CUDA_SUCCESS ? 0 : 3;
}

int main(int argc, char **argv)
{
    if (argc < 3)
        return 2;
    char *ptx = read_file(argv[1]);
    if (!ptx)
        return 2;
    CUdevice dev;
    CUcontext ctx;
    CUmodule mod;
    CUfunction fn;
    int value = 0;
    TRY(cuInit(0));
    TRY(cuDeviceGet(&dev, 0));
    TRY(cuDeviceGetAttribute(&value, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
    TRY(cuDevicePrimaryCtxRetain(&ctx, dev));
    TRY(cuCtxSetCurrent(ctx));
    TRY(cuModuleLoadData(&mod, ptx));
    TRY(cuModuleGetFunction(&fn, mod, argv[2]));
    TRY(cuFuncGetAttribute(&value, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, fn));
    int rc = argc > 3 && !strcmp(argv[3], "limit") ? limit(fn) : argc > 3 && !strcmp(argv[3], "copyback") ? copyback()
                                                                                                : vadd(fn);
    if (rc)
        return rc;
    TRY(cuCtxSynchronize());
    printf("reply_checks OK\n");
    free(ptx);
    return 0;
}
