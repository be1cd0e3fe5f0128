/* Drives native/src/copy_runs.c for tests/test_coded_copies.py (built there with ASan and UBSan): reads cases from
 * stdin, each `kind:u8 n:u32 len:u32` and len bytes, and writes one line per case: for kind 'E' the coding of the
 * bytes into at most n bytes, for 'D' the n bytes the bytes decode to, for 'P' the n bytes a device fill's plan of
 * them writes (each entry applied here as rgpu_runs_fill applies it); in hex, or "-" where it gives none. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "copy_runs.h"
#include "rgpu_wire.h"

static void put_hex(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        printf("%02x", p[i]);
    printf("\n");
}

/* What rgpu_runs_fill (rgpu/backends/runs_fill.py) does with a plan: one entry per block. */
static int plan_check(const uint8_t *in, size_t len, uint8_t *out, size_t n)
{
    size_t entries, bytes;
    if (rgpu_runs_plan_size(in, len, n, &entries, &bytes))
        return -1;
    uint8_t *plan = aligned_alloc(8, bytes ? (bytes + 7) / 8 * 8 : 8);
    if (!plan || rgpu_runs_plan(in, len, n, plan, entries, bytes))
        return 2;
    memset(out, 0xA5, n); /* (a word no entry writes shows) */
    for (size_t e = 0; e < entries; e++) {
        const uint8_t *p = plan + RGPU_RUNS_FILL_ENTRY * e;
        uint64_t first = rgpu_get_u64(p), step = rgpu_get_u64(p + 8), source = rgpu_get_u64(p + 16);
        size_t word = rgpu_get_u32(p + 24), words = rgpu_get_u32(p + 28);
        if (words > RGPU_RUNS_FILL_WORDS || word + words > n / 8 ||
            (source && (source < (uintptr_t)plan || source + 8 * words > (uintptr_t)plan + bytes)))
            return 2;
        for (size_t k = 0; k < words; k++) {
            uint64_t v = source ? rgpu_get_u64((const uint8_t *)(uintptr_t)source + 8 * k) : first + k * step;
            for (int b = 0; b < 8; b++)
                out[8 * (word + k) + b] = (uint8_t)(v >> (8 * b));
        }
    }
    free(plan);
    return 0;
}

int main(void)
{
    uint8_t head[9];
    while (fread(head, 1, sizeof head, stdin) == sizeof head) {
        size_t n = rgpu_get_u32(head + 1), len = rgpu_get_u32(head + 5);
        /* (exactly as long as said: a sanitizer sees any read or write past either end) */
        uint8_t *in = malloc(len ? len : 1), *out = malloc(n ? n : 1);
        if (!in || !out || fread(in, 1, len, stdin) != len)
            return 2;
        if (head[0] == 'E') {
            size_t coded = rgpu_runs_encode(in, len, out, n);
            coded ? put_hex(out, coded) : (void)printf("-\n");
        } else if (head[0] == 'P') {
            int r = plan_check(in, len, out, n);
            if (r > 1)
                return r; /* (a plan out of its bounds: the test fails on the exit status) */
            r == 0 ? put_hex(out, n) : (void)printf("-\n");
        } else {
            rgpu_runs_decode(in, len, out, n) == 0 ? put_hex(out, n) : (void)printf("-\n");
        }
        free(in);
        free(out);
    }
    return 0;
}
