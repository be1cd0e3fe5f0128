/* Asynchronous host-to-device copies of bytes that code as runs (llama.cpp's KV-cache row indices and attention
 * masks, zeros, progressions that wrap) and of bytes that code only in part, all queued on one stream with the
 * host buffer overwritten after each call, then read back and compared; then a coded copy to memory that is not
 * allocated, whose error must come back, and a good copy after it. Through rgpu they travel as MEMCPY_HTOD_RUNS
 * (native/src/copy_coded.c) unless RGPU_CODED_COPIES=0; the bytes must not change either way. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "check.h"

enum { PATTERNS = 10 };
static const size_t sizes[PATTERNS] = {1u << 20,         128u << 10, (64u << 10) + 3, (5u << 20) + 7, 3u << 20,
                                       1u << 20,         1u << 20,   (1u << 20) + 5,  64u << 10,      (2u << 20) + 1};

static uint64_t noise(uint64_t *x)
{
    *x = *x * 6364136223846793005ull + 1442695040888963407ull;
    return *x >> 11;
}

static void fill(int pattern, unsigned char *p, size_t n)
{
    uint64_t x = 12345 + (uint64_t)pattern, *w = (uint64_t *)p;
    size_t words = n / 8;
    memset(p, 0, n);
    switch (pattern) {
    case 0: /* llama.cpp's V row indices at flash attention off: token i, row j -> j * kv_size + cell */
        for (size_t i = 0; i < words; i++)
            w[i] = (i % 1024) * 256 + i / 1024;
        break;
    case 1: /* its float mask: a token sees the cells up to its own */
        for (size_t i = 0; i < n / 4; i++)
            ((float *)p)[i] = i % 256 <= i / 256 ? 0.0f : -INFINITY;
        break;
    case 2: /* the half-precision mask, with 3 bytes past the last whole word */
        for (size_t i = 0; i < n / 2; i++)
            ((uint16_t *)p)[i] = i % 256 <= i / 256 ? 0 : 0xFC00;
        p[n - 1] = 0x7F;
        break;
    case 3: /* zeros, over three pieces, and a tail */
        p[n - 1] = 1;
        break;
    case 4: /* a progression for 2 MiB (coded), then noise (not: the rest goes as it is) */
        for (size_t i = 0; i < words; i++)
            w[i] = i < (2u << 20) / 8 ? 7 + 3 * i : noise(&x);
        break;
    case 5: /* noise, then zeros: given up on at once */
        for (size_t i = 0; i < words / 2; i++)
            w[i] = noise(&x);
        break;
    case 6: /* a progression that wraps past 2^64 */
        for (size_t i = 0; i < words; i++)
            w[i] = UINT64_MAX - 5 + 0x0123456789ABCDEFull * i;
        break;
    case 7: /* runs of 39 words broken by one word of noise each, and a tail */
        for (size_t i = 0; i < words; i++)
            w[i] = i % 40 == 39 ? noise(&x) : 1000 * (i / 40) + i % 40;
        for (size_t i = words * 8; i < n; i++)
            p[i] = (unsigned char)i;
        break;
    case 8: /* the smallest copy coded: 64 KiB of one value */
        for (size_t i = 0; i < words; i++)
            w[i] = 0x3F8000003F800000ull;
        break;
    case 9: /* the largest piece and a byte: two pieces */
        for (size_t i = 0; i < words; i++)
            w[i] = i / 4096;
        p[n - 1] = 9;
        break;
    }
}

int main(void)
{
    CUdevice dev;
    CUcontext ctx;
    CUstream s;
    CUdeviceptr d;
    size_t offsets[PATTERNS], total = 0, most = 0;
    for (int i = 0; i < PATTERNS; i++) {
        offsets[i] = total;
        total += (sizes[i] + 255) & ~(size_t)255;
        most = sizes[i] > most ? sizes[i] : most;
    }
    CHECK(cuInit(0));
    CHECK(cuDeviceGet(&dev, 0));
    CHECK(cuCtxCreate(&ctx, NULL, 0, dev));
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CHECK(cuMemAlloc(&d, total));
    unsigned char *in = malloc(most), *want = malloc(most), *out = malloc(most);
    if (!in || !want || !out) {
        fprintf(stderr, "coded_copy_check: out of memory\n");
        return 2;
    }
    /* All queued before one synchronize: each copy's bytes are taken when it is called (the buffer is scribbled on
     * after), and none may overwrite another's before the GPU has read it. */
    for (int i = 0; i < PATTERNS; i++) {
        fill(i, in, sizes[i]);
        CHECK(cuMemcpyHtoDAsync(d + offsets[i], in, sizes[i], s));
        memset(in, 0xA5, sizes[i]);
    }
    CHECK(cuStreamSynchronize(s));
    int wrong = 0;
    for (int i = 0; i < PATTERNS; i++) {
        fill(i, want, sizes[i]);
        CHECK(cuMemcpyDtoH(out, d + offsets[i], sizes[i]));
        if (memcmp(want, out, sizes[i])) {
            size_t at = 0;
            while (want[at] == out[at])
                at++;
            printf("coded_copy_check: pattern %d (%zu bytes) MISMATCH from byte %zu\n", i, sizes[i], at);
            wrong++;
        }
    }
    /* Past the allocation's end: the copy fails (reported by the next call that waits), and the next works. */
    fill(3, in, 1u << 20);
    CUresult bad = cuMemcpyHtoDAsync(d + total - 4096, in, 1u << 20, s);
    if (bad == CUDA_SUCCESS)
        bad = cuStreamSynchronize(s);
    if (bad == CUDA_SUCCESS) /* (a synchronize with nothing unfinished may go without waiting: a copy back waits) */
        bad = cuMemcpyDtoH(out, d, 16);
    fill(0, in, 1u << 20);
    CHECK(cuMemcpyHtoDAsync(d, in, 1u << 20, s));
    CHECK(cuStreamSynchronize(s));
    CHECK(cuMemcpyDtoH(out, d, 1u << 20));
    wrong += memcmp(in, out, 1u << 20) != 0;
    printf("coded_copy_check: %d patterns, %d wrong; copy past the end: %d\n", PATTERNS + 1, wrong, (int)bad);
    return wrong || bad != CUDA_ERROR_INVALID_VALUE;
}
