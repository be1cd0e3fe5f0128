/* libFuzzer target for the C frame codec: any byte stream is split into records the way the shim reads them;
 * every record either fails to parse or parses into a header that re-encodes to the same bytes.
 *   native/tests/run_fuzz.sh [runs]      (clang with libFuzzer; ASan + UBSan) */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rgpu_wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    while (size >= RGPU_PREFIX_SIZE) {
        size_t len = rgpu_get_u32(data);
        if (len > size - RGPU_PREFIX_SIZE)
            return 0; /* the shim would wait for more bytes */
        const uint8_t *body = data + RGPU_PREFIX_SIZE;
        rgpu_header h;
        size_t args_len;
        if (rgpu_parse_header(body, len, &h, &args_len) == 0) {
            if (RGPU_HEADER_SIZE + args_len + h.bulk_len != len)
                abort();
            uint8_t again[RGPU_PREFIX_SIZE + RGPU_HEADER_SIZE];
            rgpu_pack_prefix_header(again, &h, args_len);
            if (memcmp(again, data, sizeof again) != 0)
                abort();
        }
        data += RGPU_PREFIX_SIZE + len;
        size -= RGPU_PREFIX_SIZE + len;
    }
    return 0;
}
