/* The runtime shim's registration ABI driven by hand, in C: what nvcc's generated code does, without nvcc, so
 * libcudart.so.12 (whose nvcc this machine lacks) is exercised as well as .so.13. argv[1]: a PTX file with
 * vadd(const float *a, const float *b, float *c, int n). */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void **__cudaRegisterFatBinary(void *fatbin);
void __cudaRegisterFatBinaryEnd(void **handle);
void __cudaRegisterFunction(void **handle, const char *host, char *device_fun, const char *device_name, int limit,
                            void *tid, void *bid, void *bdim, void *gdim, int *wsize);
unsigned __cudaPushCallConfiguration(dim3 grid, dim3 block, size_t shmem, void *stream);
cudaError_t __cudaPopCallConfiguration(dim3 *grid, dim3 *block, size_t *shmem, void *stream);

#define CHECK(call)                                                                                                 \
    do {                                                                                                            \
        cudaError_t e_ = (call);                                                                                    \
        if (e_ != cudaSuccess) {                                                                                    \
            fprintf(stderr, "%s:%d: %s -> %s\n", __FILE__, __LINE__, #call, cudaGetErrorName(e_));                 \
            return 1;                                                                                               \
        }                                                                                                           \
    } while (0)

static void vadd_stub(void) {} /* the host-side address a kernel is registered under */

int main(int argc, char **argv)
{
    if (argc < 2)
        return 2;
    FILE *f = fopen(argv[1], "rb");
    if (!f)
        return 2;
    static char ptx[1 << 20];
    size_t n_read = fread(ptx, 1, sizeof ptx - 1, f);
    fclose(f);
    ptx[n_read] = 0;
    struct { int magic, version; const void *data; void *unused; } wrapper = {0x466243B1, 1, ptx, NULL};
    void **handle = __cudaRegisterFatBinary(&wrapper);
    __cudaRegisterFunction(handle, (const char *)vadd_stub, "vadd", "vadd", -1, NULL, NULL, NULL, NULL, NULL);
    __cudaRegisterFatBinaryEnd(handle);

    int runtime = 0;
    CHECK(cudaRuntimeGetVersion(&runtime));
    struct cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, 0));

    enum { N = 5000 };
    static float a[N], b[N], c[N];
    for (int i = 0; i < N; i++)
        a[i] = (float)i, b[i] = 2.0f * (float)i;
    float *da, *db, *dc;
    CHECK(cudaMalloc((void **)&da, sizeof a));
    CHECK(cudaMalloc((void **)&db, sizeof b));
    CHECK(cudaMalloc((void **)&dc, sizeof c));
    CHECK(cudaMemcpy(da, a, sizeof a, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(db, b, sizeof b, cudaMemcpyHostToDevice));
    int n = N;
    void *args[] = {&da, &db, &dc, &n};
    dim3 grid = {(N + 127) / 128, 1, 1}, block = {128, 1, 1}, g2, b2;
    size_t shmem;
    cudaStream_t stream;
    if (__cudaPushCallConfiguration(grid, block, 0, NULL) || __cudaPopCallConfiguration(&g2, &b2, &shmem, &stream))
        return 3;
    CHECK(cudaLaunchKernel((const void *)vadd_stub, g2, b2, args, shmem, stream));
    CHECK(cudaMemcpy(c, dc, sizeof c, cudaMemcpyDeviceToHost));
    for (int i = 0; i < N; i++)
        if (c[i] != 3.0f * (float)i) {
            fprintf(stderr, "c[%d] = %g\n", i, c[i]);
            return 4;
        }
    /* Launch attributes pass through to the driver: a scheduling hint runs; cooperative launches run on
     * NVIDIA's driver and are refused (not sticky) by rgpu's, which cannot forward them. */
    cudaLaunchAttribute attr;
    memset(&attr, 0, sizeof attr);
    attr.id = cudaLaunchAttributePriority;
    cudaLaunchConfig_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
    CHECK(cudaMemset(dc, 0, sizeof c));
    CHECK(cudaLaunchKernelExC(&cfg, (const void *)vadd_stub, args));
    CHECK(cudaMemcpy(c, dc, sizeof c, cudaMemcpyDeviceToHost));
    if (c[N - 1] != 3.0f * (float)(N - 1))
        return 8;
    attr.id = cudaLaunchAttributeCooperative;
    attr.val.cooperative = 1;
    cudaError_t coop = cudaLaunchKernelExC(&cfg, (const void *)vadd_stub, args);
    if (coop != cudaSuccess && coop != cudaErrorNotSupported)
        return 9;
    if (coop == cudaErrorNotSupported && (cudaGetLastError() != cudaErrorNotSupported || cudaGetLastError() != cudaSuccess))
        return 10;
    CHECK(cudaDeviceSynchronize());
#if CUDART_VERSION < 13000 /* CUDA 12's older names: the thread-named calls, the _v2 elapsed time */
    CHECK(cudaThreadSynchronize());
    size_t stack = 0;
    CHECK(cudaThreadGetLimit(&stack, cudaLimitStackSize));
    cudaEvent_t e0, e1;
    float ms = -1;
    CHECK(cudaEventCreate(&e0));
    CHECK(cudaEventCreate(&e1));
    CHECK(cudaEventRecord(e0, stream));
    CHECK(cudaEventRecord(e1, stream));
    CHECK(cudaEventSynchronize(e1));
    CHECK(cudaEventElapsedTime_v2(&ms, e0, e1));
    if (!stack || ms < 0)
        return 11;
#endif
    if (cudaLaunchKernel((const void *)main, grid, block, args, 0, NULL) != cudaErrorInvalidDeviceFunction)
        return 5; /* not a registered kernel */
    for (int i = 0; i < 2; i++) /* unsupported: an error each time, the log line once */
        if (cudaFreeMipmappedArray(NULL) != cudaErrorNotSupported)
            return 6;
    if (cudaGetLastError() != cudaErrorNotSupported || cudaGetLastError() != cudaSuccess)
        return 7;
    printf("runtime_abi OK runtime=%d device=%s sum=%g\n", runtime, prop.name, (double)c[N - 1]);
    return 0;
}
