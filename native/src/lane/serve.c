/* The worker's request loop in C for the frames the lane serves whole: BATCH frames whose every record the lane
 * runs, NOPs, cuMemGetInfo, context and stream synchronizes and device-to-host copies (lane.c), and
 * host-to-device copies sent as frames of their own, streamed into page-locked memory (serve_copy.c). Python's
 * loop (rgpu/serving/worker.py) hands the socket here whenever it has no deferred error to report, with the bytes
 * it had received but not taken; this loop receives into Python's buffer (serve_io.c), serves what it may, and
 * returns as soon as a frame is not its own, with the bytes it holds for Python's decoder to take. So Python sees
 * every other frame exactly as it would have, and a batch the lane stops in comes back to Python at the record
 * it stopped at.
 *
 * Why: per frame, Python's loop cost 7 us on the 2-core CPU machine (parse 2.1, dispatch 2.3, reply 1.6, plus
 * its socket calls), and about twice that on the H200 box, where a whole null call took 43.5 us against a
 * 10.2 us C echo (bench/results/gpu-2026-12-03-sealed, run 12). */
#include <errno.h>
#include <string.h>

#include "aead_pipe.h"
#include "crypto.h"
#include "lane.h"
#include "lane_private.h"
#include "rgpu_ops.h"
#include "rgpu_wire.h"
#include "serve_private.h"

/* Back to Python, which takes buf[rest_at, rest_end) into its decoder (nothing of it was served). */
#define HAND_BACK(how, at, to)                                                                                    \
    do {                                                                                                          \
        out->outcome = (how), out->rest_at = (at), out->rest_end = (to);                                          \
        return;                                                                                                   \
    } while (0)

/* How far beyond the frame at hand the loop takes in bytes: as far as its whole buffer went before sealed records
 * grew it to four ring slots. What it holds when it hands the socket back goes to Python's decoder, which serves a
 * complete large frame among them itself (take_raw leaves those to it): reading ahead up to 1 MiB after a batch
 * it stopped in sent the 600 KiB copy behind it to Python (tests/test_native_loop.py's ring test, in CI). */
#define LOOKAHEAD (260u << 10)

/* The bytes wanted of the frame or record at buf[start] (`have` held): all of it once its head is in (before
 * that, what LOOKAHEAD brings; a copy's head is enough to stream the rest straight into the ring). */
static size_t wanted(const rgpu_lane_serve_io *io, size_t start, size_t have)
{
    return have >= STREAM_HEAD ? RGPU_PREFIX_SIZE + (size_t)rgpu_get_u32(io->buf + start) : 0;
}

/* More bytes wanted: what is held moves to the front first, then up to the end of the frame at *start (once its
 * head is in: wanted) or LOOKAHEAD, whichever is further, comes in. 0: some came; 1: handed back (none within the
 * spin, or the socket's end, error or a signal). */
static int serve_more(const rgpu_lane_serve_io *io, rgpu_lane_served *out, size_t *start, size_t *end,
                      unsigned long long *mark)
{
    size_t want = wanted(io, *start, *end - *start);
    if (*start) {
        memmove(io->buf, io->buf + *start, *end - *start);
        *end -= *start, *start = 0;
    }
    int got = serve_receive_some(io, end, want > LOOKAHEAD ? want : LOOKAHEAD, out);
    if (got > 0)
        return 0;
    out->receive_ns += rgpu_now_ns() - *mark;
    out->outcome = got == 0 ? RGPU_SERVE_IDLE : RGPU_SERVE_PYTHON, out->rest_at = *start, out->rest_end = *end;
    return 1;
}

/* A whole frame at frame[0, RGPU_PREFIX_SIZE + len) that is not a copy to stream: a BATCH whose records the lane
 * runs, or a blocking call it answers whole. 0: served; RGPU_SERVE_PYTHON: Python's, nothing done;
 * RGPU_SERVE_BATCH_STOPPED: the batch stopped (out->stop); RGPU_SERVE_FAILED: its reply could not be sent. The
 * last three consume the frame but Python's. */
static int serve_whole(rgpu_lane *lane, const rgpu_lane_serve_io *io, rgpu_lane_served *out, const uint8_t *frame,
                       size_t len, unsigned long long *mark)
{
    const uint8_t *body = frame + RGPU_PREFIX_SIZE;
    rgpu_header h;
    size_t args_len;
    if (rgpu_parse_header(body, len, &h, &args_len) || (h.flags & RGPU_FLAG_REPLY))
        return RGPU_SERVE_PYTHON;
    const uint8_t *bulk = body + RGPU_HEADER_SIZE + args_len;
    const char *what = "";
    unsigned long long received = rgpu_now_ns();
    out->receive_ns += received - *mark;
    if (lane_settle_sync(lane, 0, 0)) { /* (Python runs the frame, after the copy's deferred error) */
        *mark = received;
        return RGPU_SERVE_PYTHON;
    }
    if (h.opcode == RGPU_OP_BATCH) {
        if (rgpu_lane_check_batch(bulk, h.bulk_len, io->max_record))
            return RGPU_SERVE_PYTHON;
        rgpu_lane_run(lane, bulk, h.bulk_len, 0, io->current_ctx, io->capture_possible, &out->stop);
        out->frames++;
        *mark = rgpu_now_ns();
        out->run_ns += *mark - received;
        return out->stop.pos < h.bulk_len || out->stop.status ? RGPU_SERVE_BATCH_STOPPED : 0;
    }
    /* A blocking call the lane answers whole (a NOP, a synchronize, a copy back), or Python's. None of them
     * writes anything: when one fails, or kernel output must go first, Python runs it again and answers as it
     * always has (the same status: an error of a synchronize or a copy is the context's, sticky, or the
     * arguments', the same again). */
    size_t reply_args_len, bulk_len;
    const uint8_t *bulk_at;
    if (h.flags || h.bulk_len ||
        lane_blocking_call(lane, h.opcode, body + RGPU_HEADER_SIZE, args_len, io->current_ctx, io->capture_possible,
                           io->memory_limited, &reply_args_len, &bulk_len, &bulk_at, &what) ||
        serve_output_waiting(io)) {
        *mark = received;
        return RGPU_SERVE_PYTHON;
    }
    out->frames++;
    unsigned long long ran = rgpu_now_ns();
    lane_count_call(lane, h.opcode, ran - received);
    out->run_ns += ran - received;
    if (serve_send_reply(lane, io, out, &h, reply_args_len, bulk_len, bulk_at))
        return RGPU_SERVE_FAILED;
    *mark = rgpu_now_ns();
    out->reply_ns += *mark - ran;
    return 0;
}

/* What follows serve_whole's answer `r` other than RGPU_SERVE_PYTHON, for the frame at frame_at (in buf, or in plain
 * when `in_plain`): the outcome to hand back with, or -1 to go on serving. */
static int after_whole(const rgpu_lane_serve_io *io, rgpu_lane_served *out, int r, size_t frame_at, size_t frame_len,
                       int in_plain)
{
    if (r == RGPU_SERVE_BATCH_STOPPED)
        out->frame_at = frame_at, out->frame_len = frame_len, out->frame_in_plain = in_plain;
    if (r)
        return r;
    return out->frames >= io->max_frames ? RGPU_SERVE_LIMIT : -1;
}

/* The frame opened into plain (its prefix, then plain_len bytes): a host-to-device copy streamed from there, or
 * what serve_whole serves. serve_whole's answers, or -1: handed back as serve_stream_htod hands back, what goes to
 * Python in plain. */
static int serve_opened(rgpu_lane *lane, const rgpu_lane_serve_io *io, rgpu_lane_served *out, size_t plain_len,
                        unsigned long long *mark)
{
    uint8_t *plain = io->plain;
    rgpu_header h;
    size_t args_len;
    struct copy_in copy;
    if (rgpu_parse_header(plain + RGPU_PREFIX_SIZE, plain_len, &h, &args_len) ||
        !serve_copy_asked(&h, plain + RGPU_PREFIX_SIZE + RGPU_HEADER_SIZE, args_len, &copy))
        return serve_whole(lane, io, out, plain, plain_len, mark);
    /* All of it is in plain: serve_stream_htod copies it from there and receives nothing. */
    rgpu_lane_serve_io whole = *io;
    whole.buf = plain;
    size_t at = 0, to = RGPU_PREFIX_SIZE + plain_len;
    out->receive_ns += rgpu_now_ns() - *mark;
    int r = serve_stream_htod(lane, &whole, out, &copy, &at, &to) ? -1 : 0;
    *mark = rgpu_now_ns();
    return r;
}

/* Begins opening the sealed record at `record` (`len` long, `held` bytes of it here) into plain: its header and,
 * when they fit a stream head and have arrived, its arguments. The body bytes opened, 0 when an update failed;
 * *is_copy: it asks for a copy serve_open_htod(_arriving) may take, `copy` (whose header is *h). */
static size_t open_head(const rgpu_lane_serve_io *io, const uint8_t *record, size_t len, size_t held, rgpu_header *h,
                        struct copy_in *copy, int *is_copy)
{
    struct rgpu_aead *rx = seal_rx(io->seal);
    uint8_t *body = io->plain + RGPU_PREFIX_SIZE;
    size_t at = RGPU_HEADER_SIZE, args_len;
    *is_copy = 0;
    if (rgpu_aead_begin(rx, 0, record) || rgpu_aead_update(rx, record + RGPU_PREFIX_SIZE, at, body))
        return 0;
    if (rgpu_parse_header(body, len - RGPU_TAG_SIZE, h, &args_len) ||
        args_len > STREAM_HEAD - RGPU_PREFIX_SIZE - RGPU_HEADER_SIZE || held < RGPU_PREFIX_SIZE + at + args_len)
        return at;
    if (rgpu_aead_update(rx, record + RGPU_PREFIX_SIZE + at, args_len, body + at))
        return 0;
    *is_copy = serve_copy_asked(h, body + RGPU_HEADER_SIZE, args_len, copy);
    return at + args_len;
}

/* What serve_open_htod(_arriving) answered (`served`; -1: not taken) for a copy whose head was `opened` bytes:
 * 0 with *r as open_record's 0, or -1 when not taken. What it hands back goes to plain (its `io`: plain_io). */
static int copy_opened(const rgpu_lane_serve_io *io, rgpu_lane_served *out, int served, size_t opened, int *r)
{
    if (served < 0)
        return -1;
    if (out->tampered)
        memset(io->plain, 0, RGPU_PREFIX_SIZE + opened);
    *r = served ? -1 : 0;
    return 0;
}

static rgpu_lane_serve_io plain_io(const rgpu_lane_serve_io *io)
{
    rgpu_lane_serve_io whole = *io;
    whole.buf = io->plain;
    return whole;
}

/* Opens the sealed record at `record` (its prefix, then `len` bytes of ciphertext and tag). 1: opened whole into
 * plain, as a frame with its prefix, for serve_opened. 0: a host-to-device copy that fits its ring's slots, opened
 * only as far as its arguments and the rest straight into the slots by serve_open_htod, which served it (*r 0) or
 * handed it back (*r -1, out says how; a failed tag too). -1: authentication failed (out says so). Either way
 * what failed authentication is wiped. */
static int open_record(rgpu_lane *lane, const rgpu_lane_serve_io *io, rgpu_lane_served *out, const uint8_t *record,
                       size_t len, int *r)
{
    struct rgpu_aead *rx = seal_rx(io->seal);
    size_t plain_len = len - RGPU_TAG_SIZE;
    uint8_t *body = io->plain + RGPU_PREFIX_SIZE;
    rgpu_header h;
    struct copy_in copy;
    int is_copy;
    size_t at = open_head(io, record, len, RGPU_PREFIX_SIZE + len, &h, &copy, &is_copy);
    if (is_copy) {
        rgpu_lane_serve_io whole = plain_io(io);
        if (!copy_opened(io, out, serve_open_htod(lane, &whole, out, &copy, rx, record + RGPU_PREFIX_SIZE + at), at, r))
            return 0;
    }
    if (!at || rgpu_aead_update(rx, record + RGPU_PREFIX_SIZE + at, plain_len - at, body + at) ||
        rgpu_aead_open_end(rx, record + RGPU_PREFIX_SIZE + plain_len)) {
        memset(io->plain, 0, RGPU_PREFIX_SIZE + plain_len);
        out->tampered = 1, out->error = EBADMSG;
        return -1;
    }
    rgpu_put_u32(io->plain, (uint32_t)plain_len);
    return 1;
}

/* open_record for a big record still arriving at buf[start] (`len` long, *end bytes of buf held, room for all of
 * it): when it is a copy up that its ring's slots take, its header and arguments are opened as open_record opens
 * them, and its bulk is opened into the slots as it arrives (serve_open_htod_arriving), so that opening overlaps
 * receiving instead of following it. 0 as open_record's 0, the record all arrived (*end moved on). 1: not taken;
 * nothing opened is kept, the receive counter is back where it was, and the record (*end: with what arrived
 * meanwhile) is served whole once it has arrived, or is Python's, as before. */
#define ARRIVING_OPEN_MIN (2 * RGPU_AEAD_PIPE_PIECE) /* (a smaller record arrives whole in a receive or two) */
static int open_arriving(rgpu_lane *lane, const rgpu_lane_serve_io *io, rgpu_lane_served *out, size_t start,
                         size_t len, size_t *end, int *r)
{
    struct rgpu_aead *rx = seal_rx(io->seal);
    const uint64_t counter = rx->counter;
    rgpu_header h;
    struct copy_in copy;
    int is_copy;
    size_t at = open_head(io, io->buf + start, len, *end - start, &h, &copy, &is_copy);
    if (is_copy) {
        rgpu_lane_serve_io whole = plain_io(io);
        const uint8_t *sealed = io->buf + start + RGPU_PREFIX_SIZE + at;
        if (!copy_opened(io, out, serve_open_htod_arriving(lane, &whole, io, out, &copy, rx, sealed, end), at, r))
            return 0;
    }
    memset(io->plain, 0, STREAM_HEAD);
    rx->counter = counter;
    return 1;
}

/* A sealed session: each record is opened whole into io->plain once it has all arrived, so that nothing of it is
 * used before its tag is checked (but a copy's header and arguments choosing its ring slot: open_record), then
 * served as a plain one would be. Records too big for the buffer stay sealed for Python, which opens them as they
 * arrive; a frame C opened but does not serve goes to Python opened (its counter is taken). The C stand-ins send
 * sealed copies in pieces that fit (rgpu_htod_chunk, conn_context.c). */
static void serve_sealed(rgpu_lane *lane, const rgpu_lane_serve_io *io, rgpu_lane_served *out)
{
    size_t start = 0, end = io->have <= io->cap ? io->have : io->cap, tried_at = SIZE_MAX;
    unsigned long long mark = rgpu_now_ns();
    if (!seal_counters_low(io->seal))
        HAND_BACK(RGPU_SERVE_PYTHON, start, end);
    for (;;) {
        size_t have = end - start;
        if (have >= RGPU_PREFIX_SIZE) {
            size_t len = rgpu_get_u32(io->buf + start);
            /* Over the limit (Python answers with its protocol error), too short to hold a tag and a header
             * (Python's failure too), or too big for the buffer: Python's, still sealed. */
            if (len > io->max_record || len < RGPU_TAG_SIZE + RGPU_HEADER_SIZE || len > io->cap - RGPU_PREFIX_SIZE)
                HAND_BACK(RGPU_SERVE_PYTHON, start, end);
            int r = 0, opened = 1, arriving = have < RGPU_PREFIX_SIZE + len;
            unsigned long long opening = rgpu_now_ns();
            if (arriving && len > ARRIVING_OPEN_MIN && have >= STREAM_HEAD && tried_at != start) {
                /* The pipe reads the record where it lies, so it must not move while arriving: to the front only
                 * when the rest would not fit after it (moving up to a record's bytes costs tens of us). */
                if (start + RGPU_PREFIX_SIZE + len > io->cap) {
                    memmove(io->buf, io->buf + start, have);
                    start = 0, end = have;
                }
                tried_at = start;
                opened = open_arriving(lane, io, out, start, len, &end, &r);
            }
            if (!opened || !arriving) {
                size_t frame_len = RGPU_PREFIX_SIZE + len - RGPU_TAG_SIZE;
                if (opened)
                    opened = open_record(lane, io, out, io->buf + start, len, &r);
                start += RGPU_PREFIX_SIZE + len;
                tried_at = SIZE_MAX;
                if (opened < 0)
                    HAND_BACK(RGPU_SERVE_FAILED, start, end);
                if (opened)
                    r = serve_opened(lane, io, out, len - RGPU_TAG_SIZE, &mark);
                else /* (serve_open_htod counted the rest) */
                    out->receive_ns += opening - mark, mark = rgpu_now_ns();
                if (r < 0) {
                    /* What it hands back is in plain: the copy's rest as a frame of its own. */
                    if (out->outcome != RGPU_SERVE_FAILED)
                        out->opened_at = out->rest_at, out->opened_len = out->rest_end - out->rest_at;
                    HAND_BACK(out->outcome, start, end);
                }
                if (r == RGPU_SERVE_PYTHON) {
                    out->opened_at = 0, out->opened_len = frame_len;
                    HAND_BACK(RGPU_SERVE_PYTHON, start, end);
                }
                if ((r = after_whole(io, out, r, 0, frame_len, 1)) >= 0)
                    HAND_BACK(r, start, end);
                continue;
            }
        }
        size_t was = start;
        if (serve_more(io, out, &start, &end, &mark))
            return;
        if (tried_at == was) /* (the record not taken was moved to the front: not to be tried again) */
            tried_at = start;
    }
}

static void serve_plain(rgpu_lane *lane, const rgpu_lane_serve_io *io, rgpu_lane_served *out)
{
    size_t start = 0, end = io->have <= io->cap ? io->have : io->cap;
    unsigned long long mark = rgpu_now_ns();
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
                serve_copy_asked(&h, io->buf + start + RGPU_PREFIX_SIZE + RGPU_HEADER_SIZE, args_len, &copy)) {
                out->receive_ns += rgpu_now_ns() - mark;
                if (serve_stream_htod(lane, io, out, &copy, &start, &end))
                    return;
                mark = rgpu_now_ns();
                if (out->frames >= io->max_frames)
                    HAND_BACK(RGPU_SERVE_LIMIT, start, end);
                continue;
            }
            /* Too big for this buffer: Python's. */
            if (opened && len > io->cap - RGPU_PREFIX_SIZE)
                HAND_BACK(RGPU_SERVE_PYTHON, start, end);
            if (have >= RGPU_PREFIX_SIZE + len) {
                int r = serve_whole(lane, io, out, io->buf + start, len, &mark);
                if (r == RGPU_SERVE_PYTHON)
                    HAND_BACK(RGPU_SERVE_PYTHON, start, end);
                start += RGPU_PREFIX_SIZE + len;
                if ((r = after_whole(io, out, r, start - RGPU_PREFIX_SIZE - len, RGPU_PREFIX_SIZE + len, 0)) >= 0)
                    HAND_BACK(r, start, end);
                continue;
            }
        }
        if (serve_more(io, out, &start, &end, &mark))
            return;
    }
}

void rgpu_lane_serve(rgpu_lane *lane, const rgpu_lane_serve_io *io, rgpu_lane_served *out)
{
    memset(out, 0, sizeof *out);
    if (io->seal)
        serve_sealed(lane, io, out);
    else
        serve_plain(lane, io, out);
    /* Python runs nothing before a synchronize a copy left owed; a failure of it is the copy's deferred error. */
    unsigned long long settling = rgpu_now_ns();
    lane_settle_sync(lane, 0, 0);
    out->run_ns += rgpu_now_ns() - settling;
    lane_take_sync_failure(lane, &out->deferred);
}
