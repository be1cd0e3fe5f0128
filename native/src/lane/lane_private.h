/* What the lane's own files share beyond lane.h (not exported: the library's version script exports rgpu_lane_*
 * only, and cffi never sees this header). */
#ifndef RGPU_LANE_PRIVATE_H
#define RGPU_LANE_PRIVATE_H
#include <stdint.h>

#include "lane.h"
#include "rgpu_clock.h"

/* One call of `opcode` served outside rgpu_lane_run (serve.c's), and one reply sent for one, in the counts
 * rgpu_lane_take_counts gives. */
void lane_count_call(rgpu_lane *lane, unsigned opcode, unsigned long long ns);
void lane_count_reply(rgpu_lane *lane, unsigned opcode);

/* The most a device-to-host copy may read into the reply buffer (larger ones go through the copy ring). */
#define LANE_REPLY_BULK (64u << 10)

/* A blocking call serve.c may run (NOP; MEM_GET_INFO unless `memory_limited`; CTX_SYNCHRONIZE, STREAM_SYNCHRONIZE,
 * MEMCPY_DTOH_ASYNC and MEMCPY_DTOH while no capture may be under way); its reply's arguments (*args_len bytes),
 * then its bulk (*bulk_len), land in lane_reply(lane) after room for a prefix and header -- or the bulk at
 * *bulk_at, when not NULL (a copy back larger than LANE_REPLY_BULK, in the stream's copy ring until the next call).
 * -1: Python's (nothing was done); else the CUresult (a failure names its call in *what). */
int lane_blocking_call(rgpu_lane *lane, unsigned opcode, const uint8_t *args, size_t args_len, uint64_t current_ctx,
                       int capture_possible, int memory_limited, size_t *reply_args_len, size_t *bulk_len,
                       const uint8_t **bulk_at, const char **what);
uint8_t *lane_reply(rgpu_lane *lane); /* RGPU_PREFIX_SIZE + RGPU_HEADER_SIZE + LANE_REPLY_BULK bytes */
/* A copy back through the ring (lane_blocking_call's *bulk_at) lands a slot at a time: how many pieces of
 * *piece_bytes it has (0: none is pending, its bulk is there whole); lane_copy_back_wait waits until piece `i`
 * has landed (0, or the CUresult with the call in *what; the first has landed when the call returned; a wait
 * may find later pieces landed too, which lane_copy_back_landed then says without a driver call), and
 * lane_copy_back_done forgets it once its reply is sent. */
size_t lane_copy_back_pieces(const rgpu_lane *lane, size_t *piece_bytes);
int lane_copy_back_wait(rgpu_lane *lane, size_t i, const char **what);
int lane_copy_back_landed(const rgpu_lane *lane, size_t i);
void lane_copy_back_done(rgpu_lane *lane);

/* The ring a host-to-device copy of `n` bytes to `dst` on the client's `stream` (0: the current context's NULL
 * stream) may go through (in one slot, if `one_slot`), the stream's context made current; that context and the
 * driver's stream land in *driver_ctx and *driver_stream. NULL with *code -1 when the copy is Python's (a capture
 * may be under way, an unbound stream, a range outside the session's memory); NULL with *code the CUresult when
 * making the context current failed. */
rgpu_lane_ring *lane_htod_ring(rgpu_lane *lane, uint64_t dst, uint64_t stream, size_t n, int one_slot,
                               uint64_t current_ctx, int capture_possible, uintptr_t *driver_ctx,
                               uintptr_t *driver_stream, int *code, const char **what);
const rgpu_lane_driver *lane_driver(const rgpu_lane *lane);

/* A synchronous copy up that had no reply to send (the C stand-ins' cuMemcpyHtoD: the program goes on once its
 * bytes are sent) leaves its stream's synchronize owed (lane_owe_sync, naming its request) instead of waiting for
 * the device there: what comes next on the same stream is ordered after the copy by the stream itself, and a run
 * of such copies waited for the last slot's device copy after each (bench/results/gpu-2026-12-04h-records: 44 us
 * of a sealed 1 MiB copy's ~290). lane_settle_sync synchronizes the owed stream before anything else is run:
 * anything but a copy up on that same (context, stream) -- ctx 0 matches nothing -- and before the loop hands the
 * socket back; after it, ctx (when not 0) is current again. 0, or the CUresult -- then the failure is kept for
 * the copy's request (lane_take_sync_failure gives it, once, for the caller's deferred error) and every later
 * settle answers it again, so that the loop runs nothing more and hands back. lane_sync_covered: the owed stream
 * was just synchronized anyway (a synchronous copy with a reply on it). */
void lane_owe_sync(rgpu_lane *lane, uintptr_t ctx, uintptr_t stream, unsigned opcode, unsigned request_id);
int lane_settle_sync(rgpu_lane *lane, uintptr_t ctx, uintptr_t stream);
void lane_sync_covered(rgpu_lane *lane);
void lane_take_sync_failure(rgpu_lane *lane, rgpu_lane_stop *into);

/* The ring's next slot (waiting until the GPU has read it), or NULL with the CUresult in *code; then
 * lane_ring_send queues the copy of its first n bytes to dst and moves on to the next slot. */
char *lane_ring_slot(const rgpu_lane_driver *d, rgpu_lane_ring *r, const char **what, int *code);
/* Slot i's copy (either way) is queued on `stream`: its event, after it, says when the GPU is done with the slot;
 * lane_ring_wait waits for that, if it is pending. 0, or the CUresult with the call in *what. _range: one copy
 * over slots [first, first + count), none wrapping, marked with one event (its last slot's). */
int lane_ring_mark(const rgpu_lane_driver *d, rgpu_lane_ring *r, int i, uintptr_t stream, const char **what);
int lane_ring_mark_range(const rgpu_lane_driver *d, rgpu_lane_ring *r, int first, int count, uintptr_t stream,
                         const char **what);
int lane_ring_wait(const rgpu_lane_driver *d, rgpu_lane_ring *r, int i, const char **what);
int lane_ring_send(const rgpu_lane_driver *d, rgpu_lane_ring *r, unsigned long long dst, size_t n,
                   uintptr_t stream, const char **what);
/* A copy of n bytes over consecutive slots: lane_ring_slots waits until each is free and gives the first's place
 * (its index in *first), from the ring's next or, when they would wrap, from its first slot -- at most half the
 * ring, so that one such copy is read by the GPU while the next is written -- or NULL with *code; then
 * lane_ring_send_slots queues the copy of those n bytes to dst, marked with one event, and moves the ring on. */
char *lane_ring_slots(const rgpu_lane_driver *d, rgpu_lane_ring *r, size_t n, int *first, const char **what,
                      int *code);
int lane_ring_send_slots(const rgpu_lane_driver *d, rgpu_lane_ring *r, int first, unsigned long long dst, size_t n,
                         uintptr_t stream, const char **what);
/* The same slots holding a coded copy's fill plan (copy_runs.h, n bytes of it, `entries` entries) instead:
 * rgpu_runs_fill (the ring's runs_fill) queued to write dst from it, marked with one event. */
int lane_ring_fill_slots(const rgpu_lane_driver *d, rgpu_lane_ring *r, int first, size_t n, size_t entries,
                         unsigned long long dst, uintptr_t stream, const char **what);

/* One deferred record of a batch, as rgpu_lane_run hands it to the function that runs its opcode: its arguments
 * and bulk (within the batch, lengths checked against the record's), the session's current context, and whether a
 * capture may be under way. */
struct lane_record {
    const uint8_t *args;
    size_t args_len;
    const uint8_t *bulk;
    size_t bulk_len;
    uint64_t current_ctx;
    int capture_possible;
};

/* dnn.c: the cuDNN calls bound -- batch norms' shapes (rgpu_lane_bind_batch_norm), plans' executions
 * (rgpu_lane_bind_dnn_execute) -- and the records that run them. */
#define LANE_BN_TENSORS (3 * 72) /* x, y and the statistics' tensor descriptors, as on the wire */
#define LANE_BATCH_NORMS 64
#define LANE_EXECUTES 256
#define LANE_EXECUTE_PACK 2048 /* the longest variant pack kept (a ResNet's: ~200 bytes) */
#define LANE_EXECUTE_RANGES 32
struct lane_batch_norm {
    uint64_t handle;
    uint8_t tensors[LANE_BN_TENSORS];
    uintptr_t ctx, handle_obj, x_desc, y_desc, bn_desc;
    uint64_t x_bytes, y_bytes, bn_bytes;
    int doubles;
};
struct lane_execute;
struct lane_dnn_bound {
    rgpu_lane_dnn dnn;
    size_t batch_norms;
    struct lane_batch_norm shapes[LANE_BATCH_NORMS];
    size_t executes;
    struct lane_execute *execute[LANE_EXECUTES];
};
struct lane_dnn_bound *lane_dnn_bound(rgpu_lane *lane);
void lane_dnn_forget(struct lane_dnn_bound *t); /* (frees what it holds) */
int lane_batch_norm(rgpu_lane *lane, const struct lane_record *r, const char **what);
int lane_dnn_execute(rgpu_lane *lane, const struct lane_record *r, const char **what);
/* lane.c's, for dnn.c: whether [ptr, ptr + n) lies in one of the session's regions; the bound stream's context and
 * driver stream (0: not bound); making a context current (0, or the CUresult with the call in *what). */
int lane_owned(const rgpu_lane *lane, uint64_t ptr, uint64_t n);
int lane_stream_of(rgpu_lane *lane, uint64_t stream, uint64_t current_ctx, uintptr_t *ctx, uintptr_t *driver_stream);
int lane_set_current(rgpu_lane *lane, uintptr_t ctx, const char **what);

#endif
