/* A stream synchronize sent without waiting (sync.c) is held here rather than queued at once, and queued just
 * before the next request that is not allowed to pass it: an operation of the same stream that the spec lets pass
 * (ops.passes_held_sync_field: host-to-device copies, event records, and a later synchronize of that stream,
 * which replaces it). Those are ordered on the stream after the synchronize and take no time worth waiting for,
 * so the synchronize, sent after them, still makes every later request see at least what the program's call
 * promised; it only waits for a little more. llama.cpp copies an input and synchronizes six times per generated
 * token: held, those synchronizes become one.
 *
 * The NULL stream's meaning follows the context the server runs calls in: a held synchronize of it is queued
 * before any change of that context. Called with the connection's lock held. */
#include "conn.h"

int conn_release_held(void)
{
    if (!rgpu_conn.held_sync)
        return 0;
    rgpu_conn.held_sync = 0;
    uint8_t a[RGPU_STREAM_SYNCHRONIZE_REQ_SIZE];
    rgpu_pack_stream_synchronize(a, &(struct rgpu_stream_synchronize_req){.stream = rgpu_conn.held_stream});
    return conn_batch_append(RGPU_OP_STREAM_SYNCHRONIZE, a, sizeof a, NULL, 0);
}

int conn_before(uint16_t op, const void *args, size_t args_len)
{
    if (!rgpu_conn.held_sync)
        return 0;
    if (op == RGPU_OP_CTX_SET_CURRENT) /* a stream the server made names its own context; the NULL stream not */
        return rgpu_conn.held_stream || conn_u64_at(args, args_len, 0) == rgpu_conn.server_ctx ? 0 : conn_release_held();
    int at = rgpu_op_passes_held_sync(op);
    if (at < 0 || conn_u64_at(args, args_len, at) != rgpu_conn.held_stream)
        return conn_release_held();
    if (op == RGPU_OP_STREAM_SYNCHRONIZE) /* a later one of the same stream covers it, waited for or not */
        rgpu_conn.held_sync = 0;
    return 0;
}

int conn_hold_sync(uint64_t stream)
{
    uint8_t a[RGPU_STREAM_SYNCHRONIZE_REQ_SIZE];
    rgpu_pack_stream_synchronize(a, &(struct rgpu_stream_synchronize_req){.stream = stream});
    conn_sync_context(RGPU_OP_STREAM_SYNCHRONIZE); /* the context it runs in, as if it were queued now */
    if (conn_before(RGPU_OP_STREAM_SYNCHRONIZE, a, sizeof a)) /* another stream's goes first */
        return -1;
    rgpu_conn.held_sync = 1;
    rgpu_conn.held_stream = stream;
    return 0;
}
