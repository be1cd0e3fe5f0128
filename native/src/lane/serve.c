/* The worker's request loop in C for the frames the lane serves whole: BATCH frames whose every record the lane
 * runs, NOPs, cuMemGetInfo, blocking stream synchronizes and device-to-host copies on streams bound for the lane,
 * and host-to-device copies sent as frames of their own, received straight into page-locked memory. Python's loop (rgpu/serving/worker.py) hands the socket here whenever it has no deferred error
 * to report, with the bytes it had received but not taken; this loop receives into Python's buffer, serves what
 * it may, and returns as soon as a frame is not its own, with the bytes it holds for Python's decoder to take. So
 * Python sees every other frame exactly as it would have, and a batch the lane stops in comes back to Python at
 * the record it stopped at.
 *
 * Why: per frame, Python's loop cost 7 us on the 2-core CPU machine (parse 2.1, dispatch 2.3, reply 1.6, plus
 * its socket calls), and about twice that on the H200 box, where a whole null call took 43.5 us against a
 * 10.2 us C echo (bench/results/gpu-2026-12-03-sealed, run 12). */
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "lane.h"
#include "lane_private.h"
#include "rgpu_ops.h"
#include "rgpu_wire.h"

/* Kernel output is on its way to the client (in the pipe, or taken by Python's reader): a reply must follow it,
 * so it is Python's to send. The pipe is polled first: Python's reader marks output as held before it empties
 * the pipe, so output is always in one place or the other. */
static int output_waiting(const rgpu_lane_serve_io *io)
{
    if (io->output_fd >= 0) {
        struct pollfd p = {io->output_fd, POLLIN, 0};
        if (poll(&p, 1, 0) != 0)
            return 1;
    }
    return io->output_held && __atomic_load_n(io->output_held, __ATOMIC_ACQUIRE);
}

/* a[0, na) then b[0, nb), whole. */
static int send_all(int fd, const uint8_t *a, size_t na, const uint8_t *b, size_t nb)
{
    while (na + nb) {
        struct iovec v[2] = {{(void *)a, na}, {(void *)b, nb}};
        struct msghdr msg = {.msg_iov = na ? v : v + 1, .msg_iovlen = na && nb ? 2 : 1};
        ssize_t k = sendmsg(fd, &msg, MSG_NOSIGNAL);
        if (k < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        size_t done = (size_t)k, first = done < na ? done : na;
        a += first, na -= first, done -= first;
        b += done, nb -= done;
    }
    return 0;
}

/* The reply to `h`, status 0, with `args_len` bytes of arguments in lane_reply after its prefix and header, then
 * `bulk_len` of bulk: at `bulk_at`, or after the arguments when NULL. 0, or -1 with errno in out->error. */
static int send_reply(rgpu_lane *lane, const rgpu_lane_serve_io *io, rgpu_lane_served *out, const rgpu_header *h,
                      size_t args_len, size_t bulk_len, const uint8_t *bulk_at)
{
    rgpu_header r = {h->opcode, RGPU_FLAG_REPLY, h->request_id, 0, 0, (uint32_t)bulk_len};
    uint8_t *reply = lane_reply(lane);
    rgpu_pack_prefix_header(reply, &r, args_len);
    size_t head = RGPU_PREFIX_SIZE + RGPU_HEADER_SIZE + args_len;
    if (bulk_at ? send_all(io->fd, reply, head, bulk_at, bulk_len) : send_all(io->fd, reply, head + bulk_len, NULL, 0)) {
        out->error = errno;
        return -1;
    }
    out->replies++;
    out->bytes_out += head + bulk_len;
    return 0;
}

/* Bytes from the socket into p[0, n), polling up to spin_ns for them. >0: how many came; 0: none within the
 * spin; -1: the peer closed, the socket failed or a signal came (Python's receive or handler takes over). */
static long receive_into(const rgpu_lane_serve_io *io, uint8_t *p, size_t n, rgpu_lane_served *out)
{
    unsigned long long started = lane_now_ns(), deadline = started + (unsigned long long)io->spin_ns;
    for (;;) {
        ssize_t k = recv(io->fd, p, n, MSG_DONTWAIT);
        if (k > 0) {
            out->bytes_in += (unsigned long long)k;
            out->wait_ns += lane_now_ns() - started;
            return k;
        }
        if (k == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) {
            out->wait_ns += lane_now_ns() - started;
            return -1;
        }
        unsigned long long now = lane_now_ns();
        if (now >= deadline) {
            out->wait_ns += now - started;
            return 0;
        }
        if (io->spin_yield)
            sched_yield();
    }
}

static int receive_some(const rgpu_lane_serve_io *io, size_t *end, rgpu_lane_served *out)
{
    long k = receive_into(io, io->buf + *end, io->cap - *end, out);
    if (k > 0)
        *end += (size_t)k;
    return k > 0 ? 1 : (int)k;
}

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

/* The copy a frame asks for, if it is one stream_htod may take: its arguments complete in buf. */
static int copy_asked(const rgpu_header *h, const uint8_t *args, size_t args_len, struct copy_in *c)
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
 * A synchronous copy ends with a synchronize of the NULL stream, as cuMemcpyHtoD waits.
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
static int stream_htod(rgpu_lane *lane, const rgpu_lane_serve_io *io, rgpu_lane_served *out, const struct copy_in *c,
                       size_t *start, size_t *end)
{
    uintptr_t stream;
    int code;
    const char *what = "";
    size_t total = c->h->bulk_len;
    rgpu_lane_ring *ring = lane_htod_ring(lane, c->dst, c->stream, total, 0, io->current_ctx, io->capture_possible,
                                          &stream, &code, &what);
    /* (What goes back to Python -- a head, then up to a slot's bytes -- must fit in buf.) */
    if (!ring || ring->slot_bytes > io->cap - STREAM_HEAD) {
        out->outcome = RGPU_SERVE_PYTHON, out->rest_at = *start, out->rest_end = *end;
        return 1;
    }
    const rgpu_lane_driver *d = lane_driver(lane);
    unsigned long long began = lane_now_ns();
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
            while (got < want && (k = receive_into(io, (uint8_t *)slot + got, want - got, out)) > 0)
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
    int reply = c->h->flags != RGPU_FLAG_NO_REPLY;
    if ((c->sync && d->stream_synchronize(stream)) || (reply && output_waiting(io))) {
        copy_rest_for_python(io, out, c, total - last_len, last, last_carry);
        return 1;
    }
    unsigned long long ended = lane_now_ns();
    lane_count_call(lane, c->h->opcode, ended - began);
    out->run_ns += ended - began;
    out->frames++;
    if (reply) {
        if (send_reply(lane, io, out, c->h, 0, 0, NULL)) {
            out->outcome = RGPU_SERVE_FAILED, out->rest_at = *start, out->rest_end = *end;
            return 1;
        }
        if (c->sync)
            out->htod_replies++;
        else
            out->htod_async_replies++;
        out->reply_ns += lane_now_ns() - ended;
    }
    return 0;
}

/* Back to Python, which takes buf[rest_at, rest_end) into its decoder (nothing of it was served). */
#define HAND_BACK(how, at, to)                                                                                    \
    do {                                                                                                          \
        out->outcome = (how), out->rest_at = (at), out->rest_end = (to);                                          \
        return;                                                                                                   \
    } while (0)

void rgpu_lane_serve(rgpu_lane *lane, const rgpu_lane_serve_io *io, rgpu_lane_served *out)
{
    memset(out, 0, sizeof *out);
    size_t start = 0, end = io->have <= io->cap ? io->have : io->cap;
    unsigned long long mark = lane_now_ns();
    for (;;) {
        size_t have = end - start;
        if (have >= RGPU_PREFIX_SIZE) {
            size_t len = rgpu_get_u32(io->buf + start);
            rgpu_header h;
            size_t args_len;
            /* Beyond the limit: Python answers that with its protocol error. */
            if (len > io->max_record)
                HAND_BACK(RGPU_SERVE_PYTHON, start, end);
            struct copy_in copy;
            int opened = have >= STREAM_HEAD; /* enough to know a host-to-device copy */
            if (opened && !rgpu_parse_header(io->buf + start + RGPU_PREFIX_SIZE, len, &h, &args_len) &&
                args_len <= STREAM_HEAD - RGPU_PREFIX_SIZE - RGPU_HEADER_SIZE &&
                copy_asked(&h, io->buf + start + RGPU_PREFIX_SIZE + RGPU_HEADER_SIZE, args_len, &copy)) {
                out->receive_ns += lane_now_ns() - mark;
                if (stream_htod(lane, io, out, &copy, &start, &end))
                    return;
                mark = lane_now_ns();
                if (out->frames >= io->max_frames)
                    HAND_BACK(RGPU_SERVE_LIMIT, start, end);
                continue;
            }
            /* Too big for this buffer: Python's. */
            if (opened && len > io->cap - RGPU_PREFIX_SIZE)
                HAND_BACK(RGPU_SERVE_PYTHON, start, end);
            if (have >= RGPU_PREFIX_SIZE + len) {
                const uint8_t *body = io->buf + start + RGPU_PREFIX_SIZE;
                if (rgpu_parse_header(body, len, &h, &args_len) || (h.flags & RGPU_FLAG_REPLY))
                    HAND_BACK(RGPU_SERVE_PYTHON, start, end);
                const uint8_t *bulk = body + RGPU_HEADER_SIZE + args_len;
                unsigned long long received = lane_now_ns();
                out->receive_ns += received - mark;
                if (h.opcode == RGPU_OP_BATCH) {
                    if (rgpu_lane_check_batch(bulk, h.bulk_len, io->max_record))
                        HAND_BACK(RGPU_SERVE_PYTHON, start, end);
                    rgpu_lane_run(lane, bulk, h.bulk_len, 0, io->current_ctx, io->capture_possible, &out->stop);
                    out->frames++;
                    mark = lane_now_ns();
                    out->run_ns += mark - received;
                    start += RGPU_PREFIX_SIZE + len;
                    if (out->stop.pos < h.bulk_len || out->stop.status) {
                        out->frame_at = start - RGPU_PREFIX_SIZE - len;
                        out->frame_len = RGPU_PREFIX_SIZE + len;
                        HAND_BACK(RGPU_SERVE_BATCH_STOPPED, start, end);
                    }
                } else {
                    /* A blocking call the lane answers whole (a NOP, a synchronize, a copy back), or Python's.
                     * None of them writes anything: when one fails, or kernel output must go first, Python runs
                     * it again and answers as it always has (the same status: an error of a synchronize or a
                     * copy is the context's, sticky, or the arguments', the same again). */
                    size_t reply_args_len, bulk_len;
                    const uint8_t *bulk_at;
                    const char *what = "";
                    if (h.flags || h.bulk_len ||
                        lane_blocking_call(lane, h.opcode, body + RGPU_HEADER_SIZE, args_len, io->current_ctx,
                                           io->capture_possible, io->memory_limited, &reply_args_len, &bulk_len,
                                           &bulk_at, &what) ||
                        output_waiting(io))
                        HAND_BACK(RGPU_SERVE_PYTHON, start, end);
                    out->frames++;
                    unsigned long long ran = lane_now_ns();
                    lane_count_call(lane, h.opcode, ran - received);
                    out->run_ns += ran - received;
                    start += RGPU_PREFIX_SIZE + len;
                    if (send_reply(lane, io, out, &h, reply_args_len, bulk_len, bulk_at))
                        HAND_BACK(RGPU_SERVE_FAILED, start, end);
                    if (h.opcode == RGPU_OP_NOP)
                        out->nop_replies++;
                    else if (h.opcode == RGPU_OP_STREAM_SYNCHRONIZE)
                        out->sync_replies++;
                    else if (h.opcode == RGPU_OP_MEM_GET_INFO)
                        out->info_replies++;
                    else if (h.opcode == RGPU_OP_MEMCPY_DTOH)
                        out->dtoh_sync_replies++;
                    else if (h.opcode == RGPU_OP_CTX_SYNCHRONIZE)
                        out->ctx_sync_replies++;
                    else
                        out->dtoh_replies++;
                    mark = lane_now_ns();
                    out->reply_ns += mark - ran;
                }
                if (out->frames >= io->max_frames)
                    HAND_BACK(RGPU_SERVE_LIMIT, start, end);
                continue;
            }
        }
        /* More bytes wanted: what is held moves to the front first. */
        if (start) {
            memmove(io->buf, io->buf + start, end - start);
            end -= start, start = 0;
        }
        int got = receive_some(io, &end, out);
        if (got <= 0) {
            out->receive_ns += lane_now_ns() - mark;
            HAND_BACK(got == 0 ? RGPU_SERVE_IDLE : RGPU_SERVE_PYTHON, start, end);
        }
    }
}
