/* Synchronous calls: request out (after any queued deferred calls), reply in, checked to be the one asked
 * for; pipelined calls of one opcode; replies that do not fit the request close the connection. Also the
 * private interface of rgpu's other stand-ins (libcublas, libcublasLt, libcudnn): the same one connection. */
#include <errno.h>
#include <pthread.h>
#include <string.h>

#include "conn.h"
#include "rgpu_clock.h"

static CUresult status_to_result(uint32_t status)
{
    if (status >= RGPU_STATUS_BASE) {
        /* (an earlier asynchronous call's status comes without its message: the server logged it) */
        rgpu_log(RGPU_LOG_ERROR, "rgpu-server: status 0x%x%s: %s", status,
                 status == RGPU_STATUS_PROTOCOL_ERROR ? " (protocol error)" : "",
                 rgpu_conn.message[0] ? rgpu_conn.message : "see the server's log");
        return CUDA_ERROR_UNKNOWN;
    }
    return (CUresult)status;
}

/* Read the reply to request `id` of opcode `op`. Returns 0 and sets *result (the call's outcome, or an earlier
 * deferred call's failure), or -1 when the connection is lost or out of step (then *result is rgpu_conn.failure). */
static int take_reply(uint16_t op, uint32_t id, void *reply, size_t reply_len, struct rgpu_sink *sink,
                      CUresult *result)
{
    rgpu_header h;
    rgpu_conn.message[0] = 0;
    uint64_t since = rgpu_now_ns();
    int failed = conn_recv_reply(&h, reply, reply_len, sink);
    rgpu_stats_waited(since);
    if (failed) {
        conn_lost("receive");
        *result = rgpu_conn.failure;
        return -1;
    }
    if (h.opcode == RGPU_OP_PROTOCOL_ERROR) {
        rgpu_log(RGPU_LOG_ERROR, "rgpu-server closed the session: %s", rgpu_conn.message);
        errno = ECONNRESET;
        conn_lost("protocol error");
        *result = rgpu_conn.failure;
        return -1;
    }
    if (h.request_id != id || h.opcode != op) {
        errno = EPROTO;
        conn_lost("reply out of step");
        *result = rgpu_conn.failure;
        return -1;
    }
    if (h.deferred_status) {
        rgpu_log(RGPU_LOG_INFO, "an earlier asynchronous call failed with %u; reported now", h.deferred_status);
        *result = status_to_result(h.deferred_status);
        return 0;
    }
    if (h.status && h.status != CUDA_ERROR_NOT_READY)
        rgpu_log(RGPU_LOG_DEBUG, "opcode 0x%04x failed with %u: %s", op, h.status, rgpu_conn.message);
    *result = status_to_result(h.status);
    return 0;
}

/* Send request `op` (after any queued deferred calls, in the same write); its id goes to *id. */
static int send_request(uint16_t op, const void *args, size_t args_len, const void *bulk, size_t bulk_len,
                        uint32_t *id)
{
    struct out_frame f[2];
    conn_sync_context(op); /* (first: a change of context sends a held synchronize of the NULL stream) */
    if (conn_before(op, args, args_len)) {
        errno = ENOMEM;
        conn_lost("queueing a held synchronize");
        return -1;
    }
    int n = conn_take_batch(f);
    *id = rgpu_conn.next_id++;
    conn_note_sent(op, args, args_len, *id);
    f[n] = (struct out_frame){{op, 0, *id, 0, 0, (uint32_t)bulk_len}, args, args_len, bulk};
    if (conn_send_frames(f, n + 1)) {
        conn_lost("send");
        return -1;
    }
    conn_batch_sent();
    conn_batch_restart();
    return 0;
}

CUresult conn_call_locked(uint16_t op, const void *args, size_t args_len, const void *bulk, size_t bulk_len,
                            void *reply, size_t reply_len, struct rgpu_sink *sink)
{
    uint32_t id;
    CUresult r;
    if (send_request(op, args, args_len, bulk, bulk_len, &id))
        return rgpu_conn.failure;
    if (take_reply(op, id, reply, reply_len, sink, &r) == 0 && r == CUDA_SUCCESS)
        conn_note_reply(op, args, args_len, reply, reply_len, id);
    return r;
}

CUresult conn_not_ready(void)
{
    return rgpu_conn.state == 0 ? CUDA_ERROR_NOT_INITIALIZED : rgpu_conn.failure;
}

CUresult rgpu_call(uint16_t op, const void *args, size_t args_len, const void *bulk, size_t bulk_len, void *reply,
                   size_t reply_len, struct rgpu_sink *sink)
{
    uint8_t routed[RGPU_ROUTE_BUF];
    rgpu_managed_enter(bulk, bulk_len, sink, sink ? 1 : 0);
    CUresult r = conn_select(op, &args, args_len, routed);
    if (r != CUDA_SUCCESS) {
        rgpu_managed_leave();
        return r;
    }
    pthread_mutex_lock(&rgpu_conn.lock);
    r = rgpu_conn.state == 1 ? conn_call_locked(op, args, args_len, bulk, bulk_len, reply, reply_len, sink)
                             : conn_not_ready();
    if (r == CUDA_SUCCESS)
        r = conn_after(op, reply, reply_len);
    pthread_mutex_unlock(&rgpu_conn.lock);
    rgpu_managed_leave();
    if (r == CUDA_SUCCESS && (op == RGPU_OP_STREAM_SYNCHRONIZE || op == RGPU_OP_CTX_SYNCHRONIZE ||
                              op == RGPU_OP_EVENT_SYNCHRONIZE))
        rgpu_shadows_pull(); /* the GPU's work is done: page-locked memory it wrote comes back (shadow.c) */
    return r;
}

static CUresult call_pipelined(uint16_t op, size_t count, const uint8_t *args, size_t args_len,
                               struct rgpu_sink *sinks, unsigned window)
{
    uint8_t routed[RGPU_ROUTE_BUF];
    const void *first_args = args;
    CUresult routing = count ? conn_select(op, &first_args, args_len, routed) : CUDA_SUCCESS;
    if (routing != CUDA_SUCCESS)
        return routing; /* (pipelined operations name no device: every request goes where the first does) */
    pthread_mutex_lock(&rgpu_conn.lock);
    if (rgpu_conn.state != 1) {
        CUresult r = conn_not_ready();
        pthread_mutex_unlock(&rgpu_conn.lock);
        return r;
    }
    CUresult first = CUDA_SUCCESS;
    uint32_t ids[RGPU_MAX_WINDOW];
    size_t sent = 0, taken = 0, to_send = count;
    window = window < 1 ? 1 : window > RGPU_MAX_WINDOW ? RGPU_MAX_WINDOW : window;
    while (taken < to_send) {
        while (sent < to_send && sent - taken < window) {
            if (send_request(op, args + sent * args_len, args_len, NULL, 0, &ids[sent % window])) {
                pthread_mutex_unlock(&rgpu_conn.lock);
                return rgpu_conn.failure;
            }
            sent++;
        }
        CUresult r;
        if (take_reply(op, ids[taken % window], NULL, 0, &sinks[taken], &r)) {
            pthread_mutex_unlock(&rgpu_conn.lock);
            return r;
        }
        if (r == CUDA_SUCCESS)
            conn_note_reply(op, args + taken * args_len, args_len, NULL, 0, ids[taken % window]);
        taken++;
        if (r != CUDA_SUCCESS && first == CUDA_SUCCESS) {
            first = r;
            to_send = sent; /* send no more; the replies already on their way keep the connection in step */
        }
    }
    pthread_mutex_unlock(&rgpu_conn.lock);
    return first;
}

CUresult rgpu_call_pipelined(uint16_t op, size_t count, const uint8_t *args, size_t args_len,
                             struct rgpu_sink *sinks, unsigned window)
{
    rgpu_managed_enter(NULL, 0, sinks, count);
    CUresult r = call_pipelined(op, count, args, args_len, sinks, window);
    rgpu_managed_leave();
    return r;
}

uint32_t rgpu_request_seq(void)
{
    uint32_t seq = 0; /* over every server: unchanged only if nothing at all was issued */
    for (int i = 0; i < rgpu_nservers; i++) {
        pthread_mutex_lock(&rgpu_conns[i].lock);
        seq += rgpu_conns[i].next_id;
        pthread_mutex_unlock(&rgpu_conns[i].lock);
    }
    return seq;
}

CUresult rgpu_ready(void)
{
    conn_select_current(); /* ready: the server of the thread's current context (the first before any) */
    pthread_mutex_lock(&rgpu_conn.lock);
    CUresult r = rgpu_conn.state == 1 ? CUDA_SUCCESS : conn_not_ready();
    pthread_mutex_unlock(&rgpu_conn.lock);
    return r;
}

CUresult rgpu_bad_reply(uint16_t op, const char *what)
{
    pthread_mutex_lock(&rgpu_conn.lock);
    if (rgpu_conn.state == 1) {
        rgpu_log(RGPU_LOG_ERROR, "rgpu-server's reply to opcode 0x%04x is inconsistent (%s); closing the "
                                 "connection, further CUDA calls fail", op, what);
        conn_hang_up();
    }
    CUresult r = rgpu_conn.state == 0 ? CUDA_ERROR_NOT_INITIALIZED : rgpu_conn.failure;
    pthread_mutex_unlock(&rgpu_conn.lock);
    return r;
}

__attribute__((visibility("default"))) CUresult rgpu_ext_call(uint16_t op, const void *args, size_t args_len,
                                                              const void *bulk, size_t bulk_len, void *reply,
                                                              size_t reply_len, void *out, size_t out_cap,
                                                              size_t *out_len)
{
    struct rgpu_sink sink = {out, out_cap, 0};
    CUresult r = rgpu_call(op, args, args_len, bulk, bulk_len, reply, reply_len, out ? &sink : NULL);
    if (out_len)
        *out_len = sink.len;
    return r;
}

__attribute__((visibility("default"))) CUresult rgpu_ext_defer(uint16_t op, const void *args, size_t args_len,
                                                               const void *bulk, size_t bulk_len)
{
    return rgpu_defer(op, args, args_len, bulk, bulk_len);
}

__attribute__((visibility("default"))) int rgpu_ext_bad_reply(uint16_t op, const char *what)
{
    return rgpu_bad_reply(op, what);
}

__attribute__((visibility("default"))) uint64_t rgpu_ext_stream(void *stream) { return rgpu_stream_handle(stream); }

