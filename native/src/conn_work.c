/* Which device work a connection has sent and not yet seen finished, by stream: the basis of sync.c's choice
 * to send a stream synchronize without waiting for it. Which operations are work, and which replies say that
 * work is done, comes from the operation spec (src/rgpu/protocol/ops.py, work_stream_field and completes).
 *
 * An operation's stream is read from its request bytes at the offset the spec gives; ids order everything:
 * a reply finishes only the work sent before its request. Too many streams at once: the oldest is folded into
 * "work on an unknown stream", which only a context synchronize clears. Being wrong here never changes a
 * result (the server still runs a deferred synchronize in order); it changes only when the program's thread
 * gets to run on. Called with the connection's lock held. */
#include <stdlib.h>
#include <string.h>

#include "conn.h"

uint64_t conn_u64_at(const void *args, size_t args_len, int offset)
{
    uint64_t s = 0;
    if (offset >= 0 && (size_t)offset + 8 <= args_len)
        memcpy(&s, (const uint8_t *)args + offset, 8); /* little-endian on every supported client */
    return s;
}

/* `entries` (n of cap, newest id last written) remember `stream` at `id`; a full table folds its oldest entry
 * into *unknown (the latest id of a stream no longer tracked). */
static void remember(struct conn_work_entry *entries, unsigned *n, unsigned cap, uint32_t *unknown, uint64_t stream,
                     uint32_t id)
{
    for (unsigned i = 0; i < *n; i++)
        if (entries[i].stream == stream) {
            entries[i].id = id;
            return;
        }
    if (*n == cap) {
        unsigned oldest = 0;
        for (unsigned i = 1; i < *n; i++)
            if ((int32_t)(entries[i].id - entries[oldest].id) < 0)
                oldest = i;
        if (!*unknown || (int32_t)(entries[oldest].id - *unknown) > 0)
            *unknown = entries[oldest].id;
        entries[oldest] = entries[--*n];
    }
    entries[(*n)++] = (struct conn_work_entry){stream, id};
}

void conn_note_sent(uint16_t op, const void *args, size_t args_len, uint32_t id)
{
    struct conn_work *w = &rgpu_conn.work;
    int touched = rgpu_op_touches_stream(op);
    if (touched >= 0)
        remember(w->touched, &w->ntouched, CONN_TOUCHED_STREAMS, &w->touched_unknown,
                 conn_u64_at(args, args_len, touched), id);
    int at = rgpu_op_work_stream(op);
    if (at == -1)
        return;
    remember(w->streams, &w->n, CONN_WORK_STREAMS, &w->unknown,
             at == RGPU_NULL_STREAM_WORK ? 0 : conn_u64_at(args, args_len, at), id);
}

uint32_t rgpu_stream_seq(uint64_t stream)
{
    if (!stream) /* the NULL stream's synchronize waits for every blocking stream: any request counts */
        return rgpu_request_seq();
    uint32_t seq = 0; /* over every server (a handle names one; the others add what they add each time) */
    for (int c = 0; c < rgpu_nservers; c++) {
        pthread_mutex_lock(&rgpu_conns[c].lock);
        const struct conn_work *w = &rgpu_conns[c].work;
        seq += w->touched_unknown;
        for (unsigned i = 0; i < w->ntouched; i++)
            if (w->touched[i].stream == stream)
                seq += w->touched[i].id;
        pthread_mutex_unlock(&rgpu_conns[c].lock);
    }
    return seq;
}

/* The streams the server made for us, so that only those (and the NULL stream) are synchronized without a
 * reply: a bad handle must get its error from the call that named it. */
static void streams_add(struct conn_work *w, uint64_t stream)
{
    if (w->nlive == w->live_cap) {
        size_t cap = w->live_cap ? 2 * w->live_cap : 64;
        uint64_t *p = realloc(w->live, cap * sizeof *p);
        if (!p)
            return; /* not remembered: its synchronizations wait for their replies */
        w->live = p, w->live_cap = cap;
    }
    w->live[w->nlive++] = stream;
}

static void streams_remove(struct conn_work *w, uint64_t stream)
{
    for (size_t i = 0; i < w->nlive; i++)
        if (w->live[i] == stream) {
            w->live[i] = w->live[--w->nlive];
            return;
        }
}

static void finished(struct conn_work *w, int what, uint64_t stream, uint32_t id)
{
    for (unsigned i = 0; i < w->n;) {
        int before = (int32_t)(w->streams[i].id - id) < 0;
        if (before && (what == RGPU_ALL_WORK || w->streams[i].stream == stream))
            w->streams[i] = w->streams[--w->n];
        else
            i++;
    }
    if (what == RGPU_ALL_WORK && w->unknown && (int32_t)(w->unknown - id) < 0)
        w->unknown = 0;
}

void conn_note_reply(uint16_t op, const void *args, size_t args_len, const void *reply, size_t reply_len,
                     uint32_t id)
{
    struct conn_work *w = &rgpu_conn.work;
    int what = rgpu_op_completes(op);
    if (what != -1)
        finished(w, what, what == RGPU_NULL_STREAM_WORK ? 0 : conn_u64_at(args, args_len, what), id);
    if (rgpu_op_makes_stream(op) && reply_len >= 8)
        streams_add(w, conn_u64_at(reply, reply_len, 0));
    else if (op == RGPU_OP_STREAM_DESTROY)
        streams_remove(w, conn_u64_at(args, args_len, 0));
}

int rgpu_stream_known(uint64_t stream)
{
    int known = stream == 0;
    pthread_mutex_lock(&rgpu_conn.lock);
    for (size_t i = 0; i < rgpu_conn.work.nlive && !known; i++)
        known = rgpu_conn.work.live[i] == stream;
    pthread_mutex_unlock(&rgpu_conn.lock);
    return known;
}

int rgpu_work_unfinished(void)
{
    pthread_mutex_lock(&rgpu_conn.lock);
    int busy = rgpu_conn.work.n || rgpu_conn.work.unknown;
    pthread_mutex_unlock(&rgpu_conn.lock);
    return busy;
}
