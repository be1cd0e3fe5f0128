/* The wire codec (docs/protocol.md): little-endian helpers, frame header pack/parse. Sans-IO, no cuda.h. */
#ifndef RGPU_WIRE_H
#define RGPU_WIRE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define RGPU_PREFIX_SIZE 4
#define RGPU_HEADER_SIZE 20
#define RGPU_FLAG_REPLY 0x1
#define RGPU_FLAG_NO_REPLY 0x2
#define RGPU_FLAG_DEFERRED_ERROR 0x4
#define RGPU_KNOWN_FLAGS 0x7

typedef struct {
    uint16_t opcode;
    uint16_t flags;
    uint32_t request_id;
    uint32_t status;
    uint32_t deferred_status;
    uint32_t bulk_len;
} rgpu_header;

static inline void rgpu_put_u16(uint8_t *p, uint64_t v) { p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); }
static inline void rgpu_put_u32(uint8_t *p, uint64_t v) { for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i)); }
static inline void rgpu_put_u64(uint8_t *p, uint64_t v) { for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i)); }
static inline void rgpu_put_f32(uint8_t *p, double v) { float f = (float)v; uint32_t u; memcpy(&u, &f, 4); rgpu_put_u32(p, u); }
static inline void rgpu_put_f64(uint8_t *p, double v) { uint64_t u; memcpy(&u, &v, 8); rgpu_put_u64(p, u); }
static inline uint16_t rgpu_get_u16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static inline uint32_t rgpu_get_u32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static inline uint64_t rgpu_get_u64(const uint8_t *p) { return (uint64_t)rgpu_get_u32(p) | ((uint64_t)rgpu_get_u32(p + 4) << 32); }
static inline float rgpu_get_f32(const uint8_t *p) { uint32_t u = rgpu_get_u32(p); float f; memcpy(&f, &u, 4); return f; }
static inline double rgpu_get_f64(const uint8_t *p) { uint64_t u = rgpu_get_u64(p); double d; memcpy(&d, &u, 8); return d; }

/* Writes the 4-byte length prefix and the 20-byte header for a frame of args_len + h->bulk_len. */
void rgpu_pack_prefix_header(uint8_t out[RGPU_PREFIX_SIZE + RGPU_HEADER_SIZE], const rgpu_header *h, size_t args_len);
/* Parses a record payload; 0 on success, -1 if malformed. *args_len = bytes between header and bulk. */
int rgpu_parse_header(const uint8_t *body, size_t body_len, rgpu_header *h, size_t *args_len);

#endif
