/* Fuzz target for the reply decoders the stand-ins trust with the caller's memory: the generated bounds-checked
 * unpackers of reply arrays (rgpu_ops.h) and the parameter-layout check (rgpu_layout.h). Input: an operation
 * selector, a claimed count, a capacity, then the bulk. Whatever the bytes, a decoder either refuses or stays
 * within the capacity it was given (ASan checks the writes), and what it accepts holds exactly count items.
 *   libFuzzer: clang -fsanitize=fuzzer,address,undefined ... (native/tests/run_fuzz.sh)
 *   without:   cc -DRGPU_FUZZ_MAIN -fsanitize=address,undefined: N pseudo-random inputs (tests/test_hostile_server.py) */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rgpu_layout.h"
#include "rgpu_ops.h"

#define CHECK(cond)                                                                                                \
    do {                                                                                                           \
        if (!(cond))                                                                                               \
            abort();                                                                                               \
    } while (0)

/* Decode into an array of exactly `cap` items on the heap, so a write past it is an ASan report; what is
 * accepted must be exactly `count` items, no more than `cap`. Then `use` (may be empty) on the items. */
#define DECODE(low, SIZE, use)                                                                                     \
    do {                                                                                                           \
        struct rgpu_##low##_item *items = malloc((cap ? cap : 1) * sizeof *items);                                 \
        if (!items)                                                                                                \
            return 0;                                                                                              \
        int rc = rgpu_unpack_##low##_items(bulk, len, count, items, cap);                                          \
        CHECK(rc == -1 || (count <= cap && count * SIZE == len));                                                  \
        if (rc == 0)                                                                                               \
            use;                                                                                                   \
        free(items);                                                                                               \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 7)
        return 0;
    unsigned which = data[0] % 5;
    uint64_t count = rgpu_get_u32(data + 1);
    if (data[5] & 1)
        count &= 0x3FF; /* small counts too, so accepted inputs are common */
    size_t cap = data[6] * 4u;
    const uint8_t *bulk = data + 7;
    size_t len = size - 7;
    switch (which) {
    case 0: DECODE(module_get_function, RGPU_MODULE_GET_FUNCTION_ITEM_SIZE,
                   CHECK(rgpu_layout_bytes(items, (uint32_t)count) <= RGPU_MAX_PARAM_BYTES)); break;
    case 1: DECODE(func_get_param_info, RGPU_FUNC_GET_PARAM_INFO_ITEM_SIZE, (void)0); break;
    case 2: DECODE(device_get_attributes, RGPU_DEVICE_GET_ATTRIBUTES_ITEM_SIZE, (void)0); break;
    case 3: DECODE(func_get_attributes, RGPU_FUNC_GET_ATTRIBUTES_ITEM_SIZE, (void)0); break;
    default: DECODE(lt_heuristic, RGPU_LT_HEURISTIC_ITEM_SIZE, (void)0); break;
    }
    return 0;
}

#ifdef RGPU_FUZZ_MAIN
/* Without libFuzzer: pseudo-random inputs, biased towards well-formed ones (count matching the bulk). */
int main(int argc, char **argv)
{
    unsigned long runs = argc > 1 ? strtoul(argv[1], NULL, 10) : 100000;
    uint64_t x = 0x9E3779B97F4A7C15u;
    static uint8_t buf[7 + 96 * 64];
    for (unsigned long i = 0; i < runs; i++) {
        for (size_t k = 0; k < sizeof buf; k++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            buf[k] = (uint8_t)x;
        }
        size_t item = (size_t[]){8, 8, 4, 4, 96}[buf[0] % 5];
        size_t n = buf[1] % 64, len = n * item + (buf[2] % 8 == 0 ? buf[3] % 5 : 0);
        if (buf[4] % 2) { /* claim what is there */
            buf[1] = (uint8_t)n, buf[2] = buf[3] = buf[4] = 0;
            buf[5] |= 1;
        }
        LLVMFuzzerTestOneInput(buf, 7 + len);
    }
    printf("fuzz_replies: %lu inputs, no failure\n", runs);
    return 0;
}
#endif
