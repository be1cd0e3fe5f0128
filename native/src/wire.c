/* Frame header codec (docs/protocol.md section 1); tested against tests/vectors by tests/test_native.py. */
#include "rgpu_wire.h"

void rgpu_pack_prefix_header(uint8_t out[RGPU_PREFIX_SIZE + RGPU_HEADER_SIZE], const rgpu_header *h,
                             size_t args_len)
{
    rgpu_put_u32(out, RGPU_HEADER_SIZE + args_len + h->bulk_len);
    rgpu_put_u16(out + 4, h->opcode);
    rgpu_put_u16(out + 6, h->flags);
    rgpu_put_u32(out + 8, h->request_id);
    rgpu_put_u32(out + 12, h->status);
    rgpu_put_u32(out + 16, h->deferred_status);
    rgpu_put_u32(out + 20, h->bulk_len);
}

int rgpu_parse_header(const uint8_t *body, size_t body_len, rgpu_header *h, size_t *args_len)
{
    if (body_len < RGPU_HEADER_SIZE)
        return -1;
    h->opcode = rgpu_get_u16(body);
    h->flags = rgpu_get_u16(body + 2);
    h->request_id = rgpu_get_u32(body + 4);
    h->status = rgpu_get_u32(body + 8);
    h->deferred_status = rgpu_get_u32(body + 12);
    h->bulk_len = rgpu_get_u32(body + 16);
    if (h->flags & ~RGPU_KNOWN_FLAGS)
        return -1;
    if ((size_t)h->bulk_len > body_len - RGPU_HEADER_SIZE)
        return -1;
    *args_len = body_len - RGPU_HEADER_SIZE - h->bulk_len;
    return 0;
}

/* Test hooks (exported): encode a frame into out; returns its length, or -1 if out is too small. */
__attribute__((visibility("default"))) long rgpu_test_encode(uint16_t op, uint16_t flags, uint32_t rid,
                                                             uint32_t status, uint32_t deferred,
                                                             const uint8_t *args, size_t args_len,
                                                             const uint8_t *bulk, size_t bulk_len,
                                                             uint8_t *out, size_t cap)
{
    size_t total = RGPU_PREFIX_SIZE + RGPU_HEADER_SIZE + args_len + bulk_len;
    if (total > cap)
        return -1;
    rgpu_header h = {op, flags, rid, status, deferred, (uint32_t)bulk_len};
    rgpu_pack_prefix_header(out, &h, args_len);
    memcpy(out + RGPU_PREFIX_SIZE + RGPU_HEADER_SIZE, args, args_len);
    memcpy(out + RGPU_PREFIX_SIZE + RGPU_HEADER_SIZE + args_len, bulk, bulk_len);
    return (long)total;
}

/* Decode a whole record (length prefix included): fields out, offsets of args and bulk; -1 if malformed. */
__attribute__((visibility("default"))) int rgpu_test_decode(const uint8_t *rec, size_t len, uint32_t fields[6],
                                                            size_t *args_off, size_t *args_len, size_t *bulk_off)
{
    if (len < RGPU_PREFIX_SIZE || rgpu_get_u32(rec) != len - RGPU_PREFIX_SIZE)
        return -1;
    rgpu_header h;
    if (rgpu_parse_header(rec + RGPU_PREFIX_SIZE, len - RGPU_PREFIX_SIZE, &h, args_len))
        return -1;
    fields[0] = h.opcode;
    fields[1] = h.flags;
    fields[2] = h.request_id;
    fields[3] = h.status;
    fields[4] = h.deferred_status;
    fields[5] = h.bulk_len;
    *args_off = RGPU_PREFIX_SIZE + RGPU_HEADER_SIZE;
    *bulk_off = *args_off + *args_len;
    return 0;
}
