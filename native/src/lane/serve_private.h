/* What serve.c (the worker's C request loop), serve_io.c (its socket and replies) and serve_copy.c (the
 * host-to-device copies it streams) share; private to the lane library, like lane_private.h. */
#ifndef RGPU_SERVE_PRIVATE_H
#define RGPU_SERVE_PRIVATE_H
#include <stddef.h>
#include <stdint.h>

#include "lane.h"
#include "rgpu_consts.h"
#include "rgpu_ops.h"
#include "rgpu_wire.h"

/* The most a streamed copy's frame head takes (MEMCPY_HTOD_ASYNC's; MEMCPY_HTOD's is 8 bytes shorter). */
#define STREAM_HEAD (RGPU_PREFIX_SIZE + RGPU_HEADER_SIZE + RGPU_MEMCPY_HTOD_ASYNC_REQ_SIZE)

/* A host-to-device copy being streamed, as its frame asked: MEMCPY_HTOD_ASYNC on the client's `stream`, or
 * MEMCPY_HTOD (`sync`: on the NULL stream, finished before the frame counts as served), with or without a
 * reply. */
struct copy_in {
    const rgpu_header *h;
    int sync;
    uint64_t dst, stream;
    size_t args_len;
};

struct rgpu_aead;
/* seal.c: whether both counters are far from their end (else the turn is Python's); each direction's AEAD state
 * (crypto.h: a record opened or sealed whole or piece by piece, its counter advanced). */
int seal_counters_low(const rgpu_lane_seal *s);
struct rgpu_aead *seal_rx(rgpu_lane_seal *s);
struct rgpu_aead *seal_tx(rgpu_lane_seal *s);

/* Kernel output waits to go ahead of any reply (serve_io.c). */
int serve_output_waiting(const rgpu_lane_serve_io *io);
/* The reply to `h`, status 0 (counted as its operation's): `args_len` bytes of arguments in lane_reply, then
 * `bulk_len` of bulk at `bulk_at` or after the arguments (NULL). 0, or -1 with errno in out->error. */
int serve_send_reply(rgpu_lane *lane, const rgpu_lane_serve_io *io, rgpu_lane_served *out, const rgpu_header *h,
                     size_t args_len, size_t bulk_len, const uint8_t *bulk_at);
/* Bytes into p[0, n), polling up to spin_ns: >0 how many, 0 none within the spin, -1 end, error or signal. */
long serve_receive_into(const rgpu_lane_serve_io *io, uint8_t *p, size_t n, rgpu_lane_served *out);
/* The same into buf[*end, upto) (upto at most cap, beyond *end), moving *end: 1, 0 or -1 likewise. */
int serve_receive_some(const rgpu_lane_serve_io *io, size_t *end, size_t upto, rgpu_lane_served *out);

/* The copy a frame asks for, if it is one serve_stream_htod may take: its arguments complete in buf. */
int serve_copy_asked(const rgpu_header *h, const uint8_t *args, size_t args_len, struct copy_in *c);
/* The copy whose frame starts at buf[*start] streamed through its stream's copy ring (serve_copy.c says how).
 * 1: handed back (out says how); 0: served, buf[*start, *end) still held. */
int serve_stream_htod(rgpu_lane *lane, const rgpu_lane_serve_io *io, rgpu_lane_served *out, const struct copy_in *c,
                      size_t *start, size_t *end);
/* A sealed session's copy `c` that fits consecutive slots of its copy ring (lane_ring_slots: up to half the ring),
 * its record opened (rx begun) as far as its arguments: the rest -- its bulk's ciphertext at `sealed`, then the
 * tag -- is opened straight into the ring slots the copy goes from, one pass over memory fewer than opening it into
 * plain and copying it from there. Before its tag is checked the record's header and arguments only choose the
 * slots (docs/protocol.md allows that much), and nothing goes to the GPU. -1: not taken, nothing of the bulk opened (serve.c opens it into plain); 0: served;
 * 1: handed back as serve_stream_htod does (io->buf is plain), or failed authentication (out->tampered, the slots
 * wiped). */
int serve_open_htod(rgpu_lane *lane, const rgpu_lane_serve_io *io, rgpu_lane_served *out, const struct copy_in *c,
                    struct rgpu_aead *rx, const uint8_t *sealed);
/* serve_open_htod for a record still arriving: its bulk's ciphertext from `sealed` on, in socket_io's buf, which
 * holds *end bytes and room for the whole record. The bulk is opened into the slots by the AEAD pipe a piece at a
 * time as it arrives, receiving meanwhile (socket_io: more of it lands in buf and *end moves). -1: not taken -- no
 * slots or no pipe, or the client paused or the socket ended before the record did -- and nothing of the bulk kept
 * (the slots wiped; the record, with what arrived meanwhile, still sealed in buf); else as serve_open_htod. */
int serve_open_htod_arriving(rgpu_lane *lane, const rgpu_lane_serve_io *io, const rgpu_lane_serve_io *socket_io,
                             rgpu_lane_served *out, const struct copy_in *c, struct rgpu_aead *rx,
                             const uint8_t *sealed, size_t *end);

#endif
