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
#include <string.h>

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
                serve_copy_asked(&h, io->buf + start + RGPU_PREFIX_SIZE + RGPU_HEADER_SIZE, args_len, &copy)) {
                out->receive_ns += lane_now_ns() - mark;
                if (serve_stream_htod(lane, io, out, &copy, &start, &end))
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
                        serve_output_waiting(io))
                        HAND_BACK(RGPU_SERVE_PYTHON, start, end);
                    out->frames++;
                    unsigned long long ran = lane_now_ns();
                    lane_count_call(lane, h.opcode, ran - received);
                    out->run_ns += ran - received;
                    start += RGPU_PREFIX_SIZE + len;
                    if (serve_send_reply(lane, io, out, &h, reply_args_len, bulk_len, bulk_at))
                        HAND_BACK(RGPU_SERVE_FAILED, start, end);
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
        int got = serve_receive_some(io, &end, out);
        if (got <= 0) {
            out->receive_ns += lane_now_ns() - mark;
            HAND_BACK(got == 0 ? RGPU_SERVE_IDLE : RGPU_SERVE_PYTHON, start, end);
        }
    }
}
