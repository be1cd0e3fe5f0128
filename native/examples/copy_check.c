/* Host-to-device copies of awkward sizes, synchronous and asynchronous, each read back and compared; then an
 * asynchronous copy to memory that is not allocated, whose error must come back, and a good copy after it. With
 * RGPU_COPY_LINKS=n the big ones go over copy links (native/src/conn_links.c); the bytes must not change. */
#include <string.h>

#include "check.h"

static void fill(unsigned char *p, size_t n, unsigned seed)
{
    unsigned x = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        x = x * 1103515245u + 12345u;
        p[i] = (unsigned char)(x >> 16);
    }
}

int main(void)
{
    static const size_t sizes[] = {(128u << 10), (200u << 10) + 3, 1u << 20, (5u << 20) + 7, 4096, 65537};
    const size_t most = (5u << 20) + 7;
    CUdevice dev;
    CUcontext ctx;
    CUstream s;
    CUdeviceptr d;
    CHECK(cuInit(0));
    CHECK(cuDeviceGet(&dev, 0));
    CHECK(cuCtxCreate(&ctx, NULL, 0, dev));
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CHECK(cuMemAlloc(&d, most));
    unsigned char *in = malloc(most), *out = malloc(most);
    int copies = 0, wrong = 0;
    for (unsigned i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        for (int async = 0; async < 2; async++) {
            size_t n = sizes[i];
            fill(in, n, i * 2 + async);
            if (async) {
                CHECK(cuMemcpyHtoDAsync(d, in, n, s));
                CHECK(cuStreamSynchronize(s));
            } else {
                CHECK(cuMemcpyHtoD(d, in, n));
            }
            memset(out, 0, n);
            CHECK(cuMemcpyDtoH(out, d, n));
            copies++;
            if (memcmp(in, out, n)) {
                wrong++;
                printf("copy_check: %s copy of %zu bytes MISMATCH\n", async ? "asynchronous" : "synchronous", n);
            }
        }
    }
    /* Past the allocation's end: the copy fails (reported by the next call that waits), and the next copy works. */
    fill(in, 1u << 20, 99);
    CUresult bad = cuMemcpyHtoDAsync(d + most - 4096, in, 1u << 20, s);
    if (bad == CUDA_SUCCESS)
        bad = cuStreamSynchronize(s);
    if (bad == CUDA_SUCCESS) /* (a synchronize with nothing unfinished may go without waiting: a copy back waits) */
        bad = cuMemcpyDtoH(out, d, 16);
    CHECK(cuMemcpyHtoDAsync(d, in, 1u << 20, s));
    CHECK(cuStreamSynchronize(s));
    CHECK(cuMemcpyDtoH(out, d, 1u << 20));
    copies++;
    wrong += memcmp(in, out, 1u << 20) != 0;
    printf("copy_check: %d copies, %d wrong; copy past the end: %d\n", copies, wrong, (int)bad);
    return wrong || bad != CUDA_ERROR_INVALID_VALUE;
}
