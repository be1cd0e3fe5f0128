/* The C request loop's socket: receiving with a bounded poll, and replies (serve.c, serve_copy.c). */
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>

#include "aead_pipe.h"
#include "crypto.h"
#include "lane.h"
#include "lane_private.h"
#include "rgpu_ops.h"
#include "rgpu_wire.h"
#include "send_iov.h"
#include "serve_private.h"

/* Kernel output is on its way to the client (in the pipe, or taken by Python's reader): a reply must follow it,
 * so it is Python's to send. The pipe is polled first: Python's reader marks output as held before it empties
 * the pipe, so output is always in one place or the other. */
int serve_output_waiting(const rgpu_lane_serve_io *io)
{
    if (io->output_fd >= 0) {
        struct pollfd p = {io->output_fd, POLLIN, 0};
        if (poll(&p, 1, 0) != 0)
            return 1;
    }
    return io->output_held && __atomic_load_n(io->output_held, __ATOMIC_ACQUIRE);
}

/* A sealed reply's bytes, encrypted where they lie (the lane's reply buffer and copy ring, whose plaintext is
 * not needed once sent); nothing when the session is plain. */
static int seal_part(struct rgpu_aead *tx, const uint8_t *p, size_t n)
{
    return tx && n ? rgpu_aead_update(tx, p, n, (uint8_t *)p) : 0;
}

/* Until `ns` from now: sleeping is too coarse below a millisecond (it overshoots by ~50 us), so the last part
 * polls the clock (as Python's loop holds its replies, rgpu/serving/worker.py). */
static void hold(long long ns)
{
    unsigned long long until = rgpu_now_ns() + (unsigned long long)ns;
    if (ns > 2000000) {
        long long sleep_ns = ns - 1000000;
        struct timespec t = {sleep_ns / 1000000000, sleep_ns % 1000000000};
        while (nanosleep(&t, &t) && errno == EINTR)
            ;
    }
    while (rgpu_now_ns() < until)
        ;
}

/* The bulk after the head (sealed already, when `tx`), `pieces` slots of `piece` bytes as they land (0: all there,
 * at once). Plain, the slots that have landed go in one send: fewer, larger sends are faster (the copy back
 * groups the slots after the first). Sealed without the pipe, one at a time, so that the client opens one while
 * the next is sealed here. 0, or -1 as serve_send_reply. */
static int send_pieces(rgpu_lane *lane, const rgpu_lane_serve_io *io, rgpu_lane_served *out, struct rgpu_aead *tx,
                       uint8_t *reply, size_t head, uint8_t *bulk, size_t bulk_len, size_t piece, size_t pieces)
{
    uint8_t tag[RGPU_TAG_SIZE];
    for (size_t i = 0, sent = 0, span = 1; i == 0 || sent < bulk_len; i += span) {
        if (i) {
            const char *what = "";
            int code = lane_copy_back_wait(lane, i, &what);
            if (code) {
                out->error = EIO, out->failed_status = code, out->failed_what = what;
                return -1;
            }
        }
        for (span = 1; !tx && i + span < pieces && lane_copy_back_landed(lane, i + span); span++)
            ;
        size_t k = bulk_len - sent < piece * span ? bulk_len - sent : piece * span;
        int last = sent + k == bulk_len;
        if (seal_part(tx, bulk + sent, k) || (tx && last && rgpu_aead_seal_end(tx, tag))) {
            out->error = EIO;
            return -1;
        }
        struct iovec v[3] = {{reply, i ? 0 : head}, {bulk + sent, k}, {tag, tx && last ? RGPU_TAG_SIZE : 0}};
        if (rgpu_send_iov(io->fd, v, 3)) {
            out->error = errno;
            return -1;
        }
        sent += k;
    }
    return 0;
}

/* A sealed copy back's bulk (its head sealed already), sent in the pipe's pieces: this thread waits for each slot
 * to land, hands its pieces to the pipe, and sends each once sealed (those sealed by then in one send), while the
 * pipe seals the next; it seals the first piece itself, while the pipe's thread wakes. The tag follows the last.
 * 0, or -1 as serve_send_reply. */
static int send_sealed_piped(rgpu_lane *lane, const rgpu_lane_serve_io *io, rgpu_lane_served *out,
                             struct rgpu_aead_pipe *pipe, struct rgpu_aead *tx, uint8_t *reply, size_t head,
                             uint8_t *bulk, size_t bulk_len, size_t slot_bytes)
{
    const size_t step = RGPU_AEAD_PIPE_PIECE, steps = (bulk_len + step - 1) / step;
    uint8_t tag[RGPU_TAG_SIZE];
    int error = rgpu_aead_update(tx, bulk, step, bulk) ? EIO : 0;
    size_t next = 1, sent = 0; /* step i > 0 is the pipe's piece i - 1 */
    while (!error && sent < steps) {
        for (; next < steps && next - sent <= RGPU_AEAD_PIPE_DEPTH; next++) {
            /* A slot not yet seen to land is waited for only once the pipe would otherwise run dry (its piece is
             * the one after the next to send): what is sealed goes out first, and the later slots land meanwhile. */
            const char *what = "";
            size_t slot = next * step / slot_bytes;
            if (next > sent + 1 && !lane_copy_back_landed(lane, slot))
                break;
            int code = lane_copy_back_wait(lane, slot, &what);
            if (code) {
                out->failed_status = code, out->failed_what = what;
                error = EIO;
                break;
            }
            size_t at = next * step, k = bulk_len - at < step ? bulk_len - at : step;
            rgpu_aead_pipe_give(pipe, tx, bulk + at, k, bulk + at);
        }
        /* Step `sent` is sealed once the pipe's pieces before it are; send every step sealed by then. */
        size_t upto = error || (sent && rgpu_aead_pipe_take(pipe, (unsigned)sent)) ? 0 : 1 + rgpu_aead_pipe_done(pipe);
        upto = upto < steps ? upto : steps;
        if (!upto || (upto == steps && rgpu_aead_seal_end(tx, tag))) {
            error = EIO;
            break;
        }
        size_t at = sent * step, end = upto == steps ? bulk_len : upto * step;
        struct iovec v[3] = {{reply, sent ? 0 : head}, {bulk + at, end - at}, {tag, upto == steps ? RGPU_TAG_SIZE : 0}};
        if (rgpu_send_iov(io->fd, v, 3))
            error = errno;
        sent = upto;
    }
    if (rgpu_aead_pipe_release(pipe) && !error)
        error = EIO;
    if (error)
        out->error = error;
    return error ? -1 : 0;
}

/* The reply to `h`, status 0, with `args_len` bytes of arguments in lane_reply after its prefix and header, then
 * `bulk_len` of bulk: at `bulk_at`, or after the arguments when NULL. A copy back through the ring goes out a
 * piece at a time, each once the GPU has written it. 0, or -1 with errno in out->error (and, when the context
 * failed between pieces, its CUresult in out->failed_status). */
int serve_send_reply(rgpu_lane *lane, const rgpu_lane_serve_io *io, rgpu_lane_served *out, const rgpu_header *h,
                      size_t args_len, size_t bulk_len, const uint8_t *bulk_at)
{
    rgpu_header r = {h->opcode, RGPU_FLAG_REPLY, h->request_id, 0, 0, (uint32_t)bulk_len};
    uint8_t *reply = lane_reply(lane);
    if (io->inject_ns > 0)
        hold(io->inject_ns);
    rgpu_pack_prefix_header(reply, &r, args_len);
    size_t head = RGPU_PREFIX_SIZE + RGPU_HEADER_SIZE + args_len, piece = bulk_len;
    size_t pieces = bulk_at ? lane_copy_back_pieces(lane, &piece) : 0;
    if (!pieces)
        piece = bulk_len;
    uint8_t *bulk = bulk_at ? (uint8_t *)bulk_at : reply + head;
    /* Sealed: one AEAD message over the body, its tag after the last piece (sent as each piece lands). */
    struct rgpu_aead *tx = io->seal ? seal_tx(io->seal) : NULL;
    struct rgpu_aead_pipe *pipe = NULL;
    int failed = 0;
    if (tx) {
        rgpu_put_u32(reply, (uint32_t)(head - RGPU_PREFIX_SIZE + bulk_len + RGPU_TAG_SIZE));
        failed = rgpu_aead_begin(tx, 1, reply) || seal_part(tx, reply + RGPU_PREFIX_SIZE, head - RGPU_PREFIX_SIZE);
        if (failed)
            out->error = EIO;
        else if (pieces && piece % RGPU_AEAD_PIPE_PIECE == 0 && bulk_len > RGPU_AEAD_PIPE_PIECE)
            pipe = rgpu_aead_pipe_acquire();
    }
    if (!failed)
        failed = pipe ? send_sealed_piped(lane, io, out, pipe, tx, reply, head, bulk, bulk_len, piece)
                      : send_pieces(lane, io, out, tx, reply, head, bulk, bulk_len, piece, pieces);
    if (pieces)
        lane_copy_back_done(lane);
    if (failed)
        return -1;
    lane_count_reply(lane, h->opcode);
    out->bytes_out += head + bulk_len + (tx ? RGPU_TAG_SIZE : 0);
    return 0;
}

/* Bytes from the socket into p[0, n), polling up to spin_ns for them. >0: how many came; 0: none within the
 * spin; -1: the peer closed, the socket failed or a signal came (Python's receive or handler takes over). */
long serve_receive_into(const rgpu_lane_serve_io *io, uint8_t *p, size_t n, rgpu_lane_served *out)
{
    unsigned long long started = rgpu_now_ns(), deadline = started + (unsigned long long)io->spin_ns;
    for (;;) {
        ssize_t k = recv(io->fd, p, n, MSG_DONTWAIT);
        if (k > 0) {
            out->bytes_in += (unsigned long long)k;
            out->wait_ns += rgpu_now_ns() - started;
            return k;
        }
        if (k == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) {
            out->wait_ns += rgpu_now_ns() - started;
            return -1;
        }
        unsigned long long now = rgpu_now_ns();
        if (now >= deadline) {
            out->wait_ns += now - started;
            return 0;
        }
        if (io->spin_yield)
            sched_yield();
    }
}

int serve_receive_some(const rgpu_lane_serve_io *io, size_t *end, size_t upto, rgpu_lane_served *out)
{
    upto = upto < io->cap ? upto : io->cap;
    long k = serve_receive_into(io, io->buf + *end, upto > *end ? upto - *end : 0, out);
    if (k > 0)
        *end += (size_t)k;
    return k > 0 ? 1 : (int)k;
}
