/* Deferred calls: queued as NO_REPLY frames and sent as one BATCH before the next synchronous call, or when
 * the queue is full; large payloads go as their own frame. With RGPU_BATCH=0 each is a plain call.
 *
 * "Full" starts small and doubles: after the program waited for a reply (the GPU is likely idle), the first
 * BATCH_FIRST_CALLS calls go out at once, then twice as many, up to BATCH_MAX_CALLS. Natively the GPU starts
 * on the first launch while the program still enqueues the rest; a batch sent only when full (or at the next
 * synchronize) makes the GPU wait for up to 256 launches' worth of enqueueing first (a program launching
 * kernels one by one: PyTorch eager, llama.cpp without CUDA graphs). RGPU_BATCH_FIRST=N (benchmarks) starts
 * from N instead; 256 is the old rule. RGPU_BATCH_GRAPH=1 (benchmarks, to measure before it is a rule) sends the
 * queue at each graph launch: the GPU then starts on the graph while the program goes on to its next wait (llama.cpp
 * prepares its next inputs and asks for the logits), where otherwise the graph waits in the queue until then. */
#include <stdlib.h>
#include <string.h>

#include "conn.h"

#define BATCH_FIRST_CALLS 8
#define BATCH_MAX_CALLS 256
#define BATCH_MAX_BYTES (1u << 20)
#define INLINE_BULK_LIMIT (64u << 10) /* larger deferred payloads go as their own frame, not copied */

int conn_batch_append(uint16_t op, const void *args, size_t args_len, const void *bulk, size_t bulk_len)
{
    if (conn_before(op, args, args_len))
        return -1;
    size_t need = RGPU_PREFIX_SIZE + RGPU_HEADER_SIZE + args_len + bulk_len;
    if (rgpu_conn.batch_len + need > rgpu_conn.batch_cap) {
        size_t cap = rgpu_conn.batch_cap ? rgpu_conn.batch_cap : 64 * 1024;
        while (cap < rgpu_conn.batch_len + need)
            cap *= 2;
        uint8_t *p = realloc(rgpu_conn.batch, cap);
        if (!p)
            return -1;
        rgpu_conn.batch = p;
        rgpu_conn.batch_cap = cap;
    }
    rgpu_header h = {op, RGPU_FLAG_NO_REPLY, rgpu_conn.next_id++, 0, 0, (uint32_t)bulk_len};
    conn_note_sent(op, args, args_len, h.request_id);
    uint8_t *p = rgpu_conn.batch + rgpu_conn.batch_len;
    rgpu_pack_prefix_header(p, &h, args_len);
    if (args_len) /* args may be NULL when empty, and memcpy's pointers may not */
        memcpy(p + RGPU_PREFIX_SIZE + RGPU_HEADER_SIZE, args, args_len);
    if (bulk_len)
        memcpy(p + RGPU_PREFIX_SIZE + RGPU_HEADER_SIZE + args_len, bulk, bulk_len);
    rgpu_conn.batch_len += need;
    rgpu_conn.batch_calls++;
    return 0;
}

/* The queued calls as one BATCH frame (to send before anything else), or 0 frames. */
int conn_take_batch(struct out_frame *f)
{
    if (!rgpu_conn.batch_calls)
        return 0;
    rgpu_header h = {RGPU_OP_BATCH, RGPU_FLAG_NO_REPLY, rgpu_conn.next_id++, 0, 0, (uint32_t)rgpu_conn.batch_len};
    *f = (struct out_frame){h, NULL, 0, rgpu_conn.batch};
    return 1;
}

void conn_batch_sent(void)
{
    rgpu_conn.batch_len = 0;
    rgpu_conn.batch_calls = 0;
}

static unsigned first_limit(void)
{
    unsigned first = rgpu_conn.batch_first ? rgpu_conn.batch_first : BATCH_FIRST_CALLS;
    return first < BATCH_MAX_CALLS ? first : BATCH_MAX_CALLS;
}

void conn_batch_restart(void) { rgpu_conn.batch_limit = first_limit(); }

/* Whether the queue should go out now, and the next queue's limit if so. */
static int batch_full(void)
{
    unsigned limit = rgpu_conn.batch_limit ? rgpu_conn.batch_limit : first_limit();
    if (rgpu_conn.batch_calls < limit && rgpu_conn.batch_len < BATCH_MAX_BYTES)
        return 0;
    rgpu_conn.batch_limit = limit * 2 < BATCH_MAX_CALLS ? limit * 2 : BATCH_MAX_CALLS;
    return 1;
}

static CUresult flush_locked(void)
{
    struct out_frame f[1];
    if (conn_release_held())
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (!conn_take_batch(f))
        return CUDA_SUCCESS;
    if (conn_send_frames(f, 1)) {
        conn_lost("send");
        return rgpu_conn.failure;
    }
    conn_batch_sent();
    return CUDA_SUCCESS;
}

static CUresult defer(uint16_t op, const void *args, size_t args_len, const void *bulk, size_t bulk_len)
{
    uint8_t routed[RGPU_ROUTE_BUF];
    CUresult r = conn_select(op, &args, args_len, routed);
    if (r != CUDA_SUCCESS)
        return r;
    pthread_mutex_lock(&rgpu_conn.lock);
    if (rgpu_conn.state != 1) {
        r = conn_not_ready();
    } else if (!rgpu_conn.batching) {
        r = conn_call_locked(op, args, args_len, bulk, bulk_len, NULL, 0, NULL);
    } else {
        conn_sync_context(op);
        r = CUDA_SUCCESS;
        if (bulk_len > INLINE_BULK_LIMIT) {
            /* Big payload: send the queue, then this call as its own NO_REPLY frame (no copy into the batch). */
            struct out_frame f[2];
            if (conn_before(op, args, args_len)) {
                pthread_mutex_unlock(&rgpu_conn.lock);
                return CUDA_ERROR_OUT_OF_MEMORY;
            }
            int n = conn_take_batch(f);
            int failed;
            if (conn_links_carry(op, bulk_len)) {
                failed = conn_links_copy(op, args, args_len, bulk, bulk_len, f, n);
            } else {
                f[n] = (struct out_frame){{op, RGPU_FLAG_NO_REPLY, rgpu_conn.next_id++, 0, 0, (uint32_t)bulk_len},
                                          args, args_len, bulk};
                conn_note_sent(op, args, args_len, f[n].h.request_id);
                failed = conn_send_frames(f, n + 1);
            }
            if (failed) {
                conn_lost("send");
                r = rgpu_conn.failure;
            } else {
                conn_batch_sent();
            }
        } else if (conn_batch_append(op, args, args_len, bulk, bulk_len)) {
            r = CUDA_ERROR_OUT_OF_MEMORY;
        } else if ((op == RGPU_OP_GRAPH_LAUNCH && rgpu_conn.batch_graph) || batch_full()) {
            r = flush_locked();
        }
    }
    pthread_mutex_unlock(&rgpu_conn.lock);
    return r;
}

CUresult rgpu_defer(uint16_t op, const void *args, size_t args_len, const void *bulk, size_t bulk_len)
{
    rgpu_managed_enter(bulk, bulk_len, NULL, 0);
    CUresult r = defer(op, args, args_len, bulk, bulk_len);
    rgpu_managed_leave();
    return r;
}

/* A stream synchronize sent without waiting (sync.c): held back while only operations that may pass it follow
 * (conn_held.c), queued as any deferred call where it cannot be held. */
CUresult rgpu_defer_sync(const void *args, size_t args_len)
{
    uint8_t routed[RGPU_ROUTE_BUF];
    CUresult r = conn_select(RGPU_OP_STREAM_SYNCHRONIZE, &args, args_len, routed);
    if (r != CUDA_SUCCESS)
        return r;
    pthread_mutex_lock(&rgpu_conn.lock);
    int held = rgpu_conn.state == 1 && rgpu_conn.batching && conn_hold_sync(conn_u64_at(args, args_len, 0)) == 0;
    pthread_mutex_unlock(&rgpu_conn.lock);
    return held ? CUDA_SUCCESS : rgpu_defer(RGPU_OP_STREAM_SYNCHRONIZE, args, args_len, NULL, 0);
}

CUresult rgpu_flush(void)
{
    pthread_mutex_lock(&rgpu_conn.lock);
    CUresult r = rgpu_conn.state == 1 ? flush_locked() : conn_not_ready();
    pthread_mutex_unlock(&rgpu_conn.lock);
    return r;
}
