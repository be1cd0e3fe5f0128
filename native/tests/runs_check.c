/* Drives native/src/copy_runs.c for tests/test_coded_copies.py (built there with ASan and UBSan): reads cases from
 * stdin, each `kind:u8 n:u32 len:u32` and len bytes, and writes one line per case: for kind 'E' the coding of the
 * bytes into at most n bytes, for 'D' the n bytes the bytes decode to; in hex, or "-" where it gives none. */
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
        } else {
            rgpu_runs_decode(in, len, out, n) == 0 ? put_hex(out, n) : (void)printf("-\n");
        }
        free(in);
        free(out);
    }
    return 0;
}
