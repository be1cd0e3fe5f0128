/* What coding a copy costs (native/src/copy_runs.c, docs/protocol.md "Coded copies"): the C stand-ins' encoder, the
 * worker's decoder and its plan for the device fill (rgpu_runs_plan_size and rgpu_runs_plan: what the worker does
 * instead of decoding where the fill kernel writes the copy) on llama.cpp-shaped inputs and on bytes that do not
 * code, microseconds per call (best of 200 calls' mean over 5 tries), beside the coded size and the plan's. Build
 * and run from the repository root:
 *   gcc -O2 -Inative/src -Inative/gen bench/copy_runs_bench.c native/src/copy_runs.c -lm -o /tmp/copy_runs_bench
 *   /tmp/copy_runs_bench */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "copy_runs.h"
#include "rgpu_consts.h"

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static void bench(const char *name, const uint8_t *src, size_t n)
{
    uint8_t *coded = malloc(n), *back = malloc(n), *plan = malloc(n);
    size_t len = 0, entries = 0, bytes = 0;
    double enc = 1e9, dec = 1e9, pln = 1e9;
    int same = 0;
    for (int tries = 0; tries < 5; tries++) {
        double a = now();
        for (int r = 0; r < 200; r++)
            len = rgpu_runs_encode(src, n, coded, n / 4 < RGPU_RUNS_MAX_CODED_BYTES ? n / 4 : RGPU_RUNS_MAX_CODED_BYTES);
        double b = now();
        int decoded = 0;
        for (int r = 0; len && r < 200; r++)
            decoded += rgpu_runs_decode(coded, len, back, n) == 0;
        double c = now();
        int planned = 0;
        for (int r = 0; len && r < 200; r++)
            planned += !rgpu_runs_plan_size(coded, len, n, &entries, &bytes) && bytes <= n &&
                       !rgpu_runs_plan(coded, len, n, plan, entries, bytes);
        double d = now();
        same = decoded == 200 && !memcmp(src, back, n);
        enc = (b - a) / 200 < enc ? (b - a) / 200 : enc;
        dec = (c - b) / 200 < dec ? (c - b) / 200 : dec;
        pln = planned == 200 && (d - c) / 200 < pln ? (d - c) / 200 : pln;
    }
    if (len)
        printf("%-34s %8zu bytes -> %6zu coded: encode %6.1f us, decode %6.1f us, plan %5.2f us (%zu entries, "
               "%zu bytes)%s\n", name, n, len, enc * 1e6, dec * 1e6, pln * 1e6, entries, bytes,
               same ? "" : " (DIFFERENT)");
    else
        printf("%-34s %8zu bytes, not coded: gave up after %6.1f us\n", name, n, enc * 1e6);
    free(coded);
    free(back);
    free(plan);
}

int main(void)
{
    size_t mib = 1u << 20;
    uint64_t *rows = malloc(mib), x = 1;
    for (size_t i = 0; i < mib / 8; i++) /* 128 tokens x 1024 rows, kv_size 256 */
        rows[i] = (i % 1024) * 256 + i / 1024;
    bench("V row indices (fa 0, 128 tokens)", (uint8_t *)rows, mib);
    float *mask = malloc(128u << 10);
    for (size_t i = 0; i < (128u << 10) / 4; i++)
        mask[i] = i % 256 <= i / 256 ? 0.0f : -INFINITY;
    bench("KQ mask, f32 (fa 0)", (uint8_t *)mask, 128u << 10);
    uint16_t *half = malloc(64u << 10);
    for (size_t i = 0; i < (64u << 10) / 2; i++)
        half[i] = i % 256 <= i / 256 ? 0 : 0xFC00;
    bench("KQ mask, f16 (fa 1)", (uint8_t *)half, 64u << 10);
    uint8_t *noise = malloc(mib);
    for (size_t i = 0; i < mib; i++, x = x * 6364136223846793005ull + 1442695040888963407ull)
        noise[i] = (uint8_t)(x >> 56);
    bench("noise", noise, mib);
    memset(noise, 0, mib / 2);
    bench("zeros, then noise", noise, mib);
    memset(noise, 0, mib);
    bench("zeros", noise, mib);
    return 0;
}
