/* Host-to-device copies the C request loop streams from the socket through the copy ring (serve.c hands it
 * every copy sent as a frame of its own). */
#include <errno.h>
#include <string.h>

#include "aead_pipe.h"
#include "crypto.h"
#include "lane.h"
#include "lane_private.h"
#include "rgpu_ops.h"
#include "rgpu_wire.h"
#include "serve_private.h"

/* Where a streamed copy goes (copy_ring): its stream's ring, the context it is bound to and the driver's stream. */
struct copy_route {
    rgpu_lane_ring *ring;
    uintptr_t ctx, stream;
};

/* The part of copy `c` from `done` on, as a frame of its own at the front of buf for Python's decoder: its header
 * and arguments, then the `carried` bytes received after it (at `from`, which may lie in buf: the rest of the
 * copy's that came, and any frames after it). */
static void copy_rest_for_python(const rgpu_lane_serve_io *io, rgpu_lane_served *out, const struct copy_in *c,
                                 size_t done, const uint8_t *from, size_t carried)
{
    size_t head = RGPU_PREFIX_SIZE + RGPU_HEADER_SIZE + c->args_len;
    memmove(io->buf + head, from, carried);
    rgpu_header rest = {c->h->opcode, c->h->flags, c->h->request_id, 0, 0, c->h->bulk_len - (uint32_t)done};
    rgpu_pack_prefix_header(io->buf, &rest, c->args_len);
    uint8_t *args = io->buf + RGPU_PREFIX_SIZE + RGPU_HEADER_SIZE;
    if (c->sync)
        rgpu_pack_memcpy_htod(args, &(struct rgpu_memcpy_htod_req){.dst = c->dst + done});
    else
        rgpu_pack_memcpy_htod_async(args, &(struct rgpu_memcpy_htod_async_req){.dst = c->dst + done,
                                                                                .stream = c->stream});
    out->outcome = RGPU_SERVE_PYTHON, out->rest_at = 0, out->rest_end = head + carried;
}

/* The end of copy `c`, all of it queued (the last piece's `last_len` bytes at `last`, `last_carry` with all held
 * after them): a synchronous one waits for its stream, then the reply. 0: served; 1: handed back, the last piece
 * as a copy of its own for Python (the synchronize failed, or kernel output must go ahead of the reply), or
 * failed (the reply could not be sent; Python takes buf[rest_at, rest_end)). */
static int copy_queued(rgpu_lane *lane, const rgpu_lane_serve_io *io, rgpu_lane_served *out, const struct copy_in *c,
                       const struct copy_route *to, unsigned long long began, const uint8_t *last, size_t last_len,
                       size_t last_carry, size_t rest_at, size_t rest_end)
{
    const rgpu_lane_driver *d = lane_driver(lane);
    int reply = c->h->flags != RGPU_FLAG_NO_REPLY;
    if (c->sync && !reply) {
        lane_owe_sync(lane, to->ctx, to->stream, c->h->opcode, c->h->request_id); /* (what runs next elsewhere waits) */
    } else if ((c->sync && d->stream_synchronize(to->stream)) || (reply && serve_output_waiting(io))) {
        copy_rest_for_python(io, out, c, c->h->bulk_len - last_len, last, last_carry);
        return 1;
    } else if (c->sync) {
        lane_sync_covered(lane); /* (copy_ring settled one owed on any other stream) */
    }
    unsigned long long ended = rgpu_now_ns();
    lane_count_call(lane, c->h->opcode, ended - began);
    out->run_ns += ended - began;
    out->frames++;
    if (reply) {
        if (serve_send_reply(lane, io, out, c->h, 0, 0, NULL)) {
            out->outcome = RGPU_SERVE_FAILED, out->rest_at = rest_at, out->rest_end = rest_end;
            return 1;
        }
        out->reply_ns += rgpu_now_ns() - ended;
    }
    return 0;
}

/* Where copy `c` goes, its stream's context made current and any synchronize owed on another stream settled: its
 * ring (NULL: not the lane's to stream -- no ring bound, memory not the session's, a capture possible --, a slot too
 * big for what must go back to Python (a head, then up to a slot's bytes) to fit in buf, or the owed synchronize
 * failed), that context and the driver's stream. */
static struct copy_route copy_ring(rgpu_lane *lane, const rgpu_lane_serve_io *io, const struct copy_in *c)
{
    int code;
    const char *what = "";
    struct copy_route to;
    to.ring = lane_htod_ring(lane, c->dst, c->stream, c->h->bulk_len, 0, io->current_ctx, io->capture_possible,
                             &to.ctx, &to.stream, &code, &what);
    /* (an owed synchronize of another stream first: after a failed one, this copy and all after it are Python's,
     * behind the failed copy's deferred error) */
    if (to.ring && (to.ring->slot_bytes > io->cap - STREAM_HEAD || lane_settle_sync(lane, to.ctx, to.stream)))
        to.ring = NULL;
    return to;
}

int serve_copy_asked(const rgpu_header *h, const uint8_t *args, size_t args_len, struct copy_in *c)
{
    if ((h->flags != RGPU_FLAG_NO_REPLY && h->flags) || !h->bulk_len)
        return 0;
    *c = (struct copy_in){h, h->opcode == RGPU_OP_MEMCPY_HTOD, 0, 0, args_len};
    if (c->sync) {
        struct rgpu_memcpy_htod_req m;
        if (rgpu_unpack_memcpy_htod_req(args, args_len, &m))
            return 0;
        c->dst = m.dst;
        return 1;
    }
    struct rgpu_memcpy_htod_async_req m;
    if (h->opcode != RGPU_OP_MEMCPY_HTOD_ASYNC || rgpu_unpack_memcpy_htod_async_req(args, args_len, &m))
        return 0;
    c->dst = m.dst, c->stream = m.stream;
    return 1;
}

/* A host-to-device copy sent as a frame of its own (the C stand-ins send those over 64 KiB so; the Python client
 * sends every synchronous copy so) on a stream bound for the lane: its bytes go from the socket straight into the
 * stream's page-locked copy ring, a slot at a time, each slot's device copy queued as soon as it is full, so
 * receiving overlaps the device copies and nothing waits for the whole frame. Python's path received it whole
 * into pageable memory and copied from there, waiting for the stream after an asynchronous one (the driver may
 * still be reading pageable memory when the copy returns), which also waited for every kernel queued before it.
 * A synchronous copy ends with a synchronize of the NULL stream, as cuMemcpyHtoD waits; without a reply to send
 * (the C stand-ins': the program went on once the bytes were sent) that synchronize is owed instead, until
 * something other than a copy up on the same stream runs (lane_owe_sync).
 *
 * What it cannot finish -- the client pauses longer than the poll; the socket reports the end, an error or a
 * signal; a driver call fails -- goes back to Python as a copy of its own: the same request for the bytes not
 * yet queued, its destination advanced, with those of them received already. Python receives the rest and runs
 * it, or fails it, as it would have run the whole. So does the last piece when the synchronize fails or kernel
 * output must go ahead of the reply: Python copies those bytes again (the same bytes to the same place, in the
 * same stream's order) and answers.
 *
 * The frame's header and arguments are at buf[*start, ...). 1: handed back (out says how); 0: the frame was
 * served, and buf[*start, *end) is what is still held. */
int serve_stream_htod(rgpu_lane *lane, const rgpu_lane_serve_io *io, rgpu_lane_served *out, const struct copy_in *c,
                       size_t *start, size_t *end)
{
    int code;
    const char *what = "";
    size_t total = c->h->bulk_len;
    unsigned long long began = rgpu_now_ns(); /* (an owed synchronize copy_ring settles counts as the copy's) */
    const struct copy_route to = copy_ring(lane, io, c);
    rgpu_lane_ring *ring = to.ring;
    uintptr_t stream = to.stream;
    if (!ring) {
        out->outcome = RGPU_SERVE_PYTHON, out->rest_at = *start, out->rest_end = *end;
        return 1;
    }
    const rgpu_lane_driver *d = lane_driver(lane);
    const uint8_t *bulk = io->buf + *start + RGPU_PREFIX_SIZE + RGPU_HEADER_SIZE + c->args_len;
    /* The last piece queued: where its bytes are (with all held after them), until the copy is known done. */
    const uint8_t *last = NULL;
    size_t last_len = 0, last_carry = 0;
    size_t held = (size_t)(io->buf + *end - bulk), done = 0;
    if (held > total)
        held = total;
    while (done < held) { /* what the buffer holds already */
        size_t k = held - done < ring->slot_bytes ? held - done : ring->slot_bytes;
        if (rgpu_lane_ring_copy(d, ring, c->dst + done, bulk + done, k, stream, &what)) {
            copy_rest_for_python(io, out, c, done, bulk + done, (size_t)(io->buf + *end - (bulk + done)));
            return 1;
        }
        last = bulk + done, last_len = k, last_carry = (size_t)(io->buf + *end - last);
        done += k;
    }
    if (held == total) {
        *start = (size_t)(bulk + total - io->buf);
    } else {
        *start = *end = 0; /* everything buf held was this frame's */
        while (done < total) {
            char *slot = lane_ring_slot(d, ring, &what, &code);
            if (!slot) {
                copy_rest_for_python(io, out, c, done, bulk, 0);
                return 1;
            }
            size_t want = total - done < ring->slot_bytes ? total - done : ring->slot_bytes, got = 0;
            long k;
            while (got < want && (k = serve_receive_into(io, (uint8_t *)slot + got, want - got, out)) > 0)
                got += (size_t)k;
            if (got && lane_ring_send(d, ring, c->dst + done, got, stream, &what)) {
                copy_rest_for_python(io, out, c, done, (const uint8_t *)slot, got);
                return 1;
            }
            done += got;
            if (got < want) {
                copy_rest_for_python(io, out, c, done, bulk, 0);
                return 1;
            }
            last = (const uint8_t *)slot, last_len = last_carry = got;
        }
    }
    return copy_queued(lane, io, out, c, &to, began, last, last_len, last_carry, *start, *end);
}

/* The copy's bulk opened into `slot` (the ring's slots from `first` on; `opened`: without an error), its record's
 * tag at `tag`: queued once the tag checks, else the slots wiped and the session failed. 0 or 1 as
 * serve_open_htod. */
static int slot_opened(rgpu_lane *lane, const rgpu_lane_serve_io *io, rgpu_lane_served *out, const struct copy_in *c,
                       struct rgpu_aead *rx, const struct copy_route *to, int first, char *slot, int opened,
                       const uint8_t *tag, unsigned long long began)
{
    const char *what = "";
    size_t total = c->h->bulk_len;
    if (!opened || rgpu_aead_open_end(rx, tag)) {
        memset(slot, 0, total);
        out->tampered = 1, out->error = EBADMSG, out->outcome = RGPU_SERVE_FAILED;
        return 1;
    }
    if (lane_ring_send_slots(lane_driver(lane), to->ring, first, c->dst, total, to->stream, &what)) {
        copy_rest_for_python(io, out, c, 0, (const uint8_t *)slot, total);
        return 1;
    }
    return copy_queued(lane, io, out, c, to, began, (const uint8_t *)slot, total, total, 0, 0);
}

/* The consecutive ring slots copy `c` goes through whole (where, in *to; the first slot's index in *first), or
 * NULL: not the lane's, or more than lane_ring_slots gives one copy, or more than `io` could hand back to Python
 * behind a head (copy_rest_for_python). */
static char *copy_slots(rgpu_lane *lane, const rgpu_lane_serve_io *io, const struct copy_in *c, struct copy_route *to,
                        int *first)
{
    int code;
    const char *what = "";
    if (c->h->bulk_len > io->cap - STREAM_HEAD)
        return NULL;
    *to = copy_ring(lane, io, c);
    return to->ring ? lane_ring_slots(lane_driver(lane), to->ring, c->h->bulk_len, first, &what, &code) : NULL;
}

int serve_open_htod(rgpu_lane *lane, const rgpu_lane_serve_io *io, rgpu_lane_served *out, const struct copy_in *c,
                    struct rgpu_aead *rx, const uint8_t *sealed)
{
    struct copy_route to;
    int first;
    unsigned long long began = rgpu_now_ns();
    char *slot = copy_slots(lane, io, c, &to, &first);
    if (!slot)
        return -1; /* (serve.c opens it into plain and gives it to serve_stream_htod, which hands it to Python) */
    size_t total = c->h->bulk_len;
    int opened = !rgpu_aead_update(rx, sealed, total, (uint8_t *)slot);
    return slot_opened(lane, io, out, c, rx, &to, first, slot, opened, sealed + total, began);
}

int serve_open_htod_arriving(rgpu_lane *lane, const rgpu_lane_serve_io *io, const rgpu_lane_serve_io *socket_io,
                             rgpu_lane_served *out, const struct copy_in *c, struct rgpu_aead *rx,
                             const uint8_t *sealed, size_t *end)
{
    struct copy_route to;
    int first;
    const size_t total = c->h->bulk_len, piece = RGPU_AEAD_PIPE_PIECE;
    unsigned long long began = rgpu_now_ns();
    char *slot = copy_slots(lane, io, c, &to, &first);
    struct rgpu_aead_pipe *pipe = slot ? rgpu_aead_pipe_acquire() : NULL;
    if (!pipe)
        return -1;
    const uint8_t *tag = sealed + total;
    for (size_t given = 0;;) {
        const uint8_t *held_to = socket_io->buf + *end;
        size_t held = held_to > tag ? total : (size_t)(held_to - sealed);
        for (size_t k; given < held && (held - given >= piece || held == total); given += k) {
            k = held - given < piece ? held - given : piece;
            rgpu_aead_pipe_give(pipe, rx, sealed + given, k, (uint8_t *)slot + given);
        }
        if (held_to >= tag + RGPU_TAG_SIZE)
            break;
        rgpu_aead_pipe_help(pipe, 2); /* (what arrives meanwhile waits in the socket) */
        /* (up to the record's end: what follows is for serve.c to take in, LOOKAHEAD at a time) */
        if (serve_receive_some(socket_io, end, (size_t)(tag + RGPU_TAG_SIZE - socket_io->buf), out) <= 0) {
            /* the client paused, or the socket ended */
            rgpu_aead_pipe_release(pipe);
            memset(slot, 0, total);
            return -1;
        }
    }
    int opened = !rgpu_aead_pipe_release(pipe);
    return slot_opened(lane, io, out, c, rx, &to, first, slot, opened, tag, began);
}
