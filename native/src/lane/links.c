/* A session's copy links (docs/protocol.md, "Copy links"): extra connections that carry the bytes of big
 * host-to-device copies as LINK_PART frames, each received by a thread of its own so that one copy's bytes cross
 * several cores. The session's loop takes the parts in the order its MEMCPY_HTOD_LINKED frames name them.
 *
 * Each link has two buffers of part_max bytes, filled in turn by its thread and taken in turn by the loop, so the
 * thread receives the next part while the loop copies the last; a thread with no free buffer stops reading, and
 * TCP holds the client back. A link's bytes are hostile like any other: every length is checked before a byte of
 * bulk is read, and a bad frame, the end of the connection or an error fails the link (each later take says why),
 * never the process. A sealed session's links carry protected records under a key of each link's own (keys given
 * by Python, which derives them from the session's): a part is opened, on its link's thread, before the loop can
 * take it, and one that fails authentication fails the link. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "crypto.h"
#include "lane.h"
#include "quiet_thread.h"
#include "rgpu_ops.h"
#include "rgpu_wire.h"
#include "send_iov.h"

#define LINK_HEAD (RGPU_PREFIX_SIZE + RGPU_HEADER_SIZE + RGPU_LINK_PART_REQ_SIZE)
#define PART_BODY_HEAD (RGPU_HEADER_SIZE + RGPU_LINK_PART_REQ_SIZE) /* a part's frame body before its bulk */
#define TAG 16

enum { BUF_FREE, BUF_READY, BUF_TAKEN };

struct link_buffer {
    uint8_t *bytes; /* the buffer: a sealed link's whole record lands here and is opened in place */
    const uint8_t *data; /* the part's bulk, in it */
    int state;
    uint32_t seq, part, len;
    uint64_t offset;
};

struct link {
    int fd;     /* -1 until attached */
    int failed; /* the thread stopped: error says why */
    int started;
    char error[160];
    pthread_t thread;
    struct link_buffer buf[2];
    int fill_next, take_next;
    int sealed;
    struct rgpu_aead rx; /* a sealed link's: used by its thread only */
    struct rgpu_lane_links *owner;
};

struct rgpu_lane_links {
    pthread_mutex_t lock;
    pthread_cond_t changed; /* any buffer's state, a failure, closing */
    int closing;
    unsigned count;
    uint32_t part_max;
    struct link links[];
};

static void link_fail(struct link *k, const char *fmt, const char *detail, int err)
{
    pthread_mutex_lock(&k->owner->lock);
    if (!k->failed) {
        k->failed = 1;
        int n = snprintf(k->error, sizeof k->error, fmt, detail);
        if (err && n > 0 && (size_t)n < sizeof k->error)
            snprintf(k->error + n, sizeof k->error - (size_t)n, " (%s)", strerror(err));
    }
    pthread_cond_broadcast(&k->owner->changed);
    pthread_mutex_unlock(&k->owner->lock);
}

/* The part frame's head at `head`: its bulk length and where it goes, or a reason it is not one. */
static const char *parse_part(const uint8_t *head, uint32_t part_max, struct link_buffer *into)
{
    rgpu_header h;
    size_t args_len;
    uint32_t record = rgpu_get_u32(head);
    if (record < RGPU_HEADER_SIZE + RGPU_LINK_PART_REQ_SIZE)
        return "a record too short for a LINK_PART";
    /* (the header is parsed against the record's length; only the bulk lies beyond what was read) */
    if (rgpu_parse_header(head + RGPU_PREFIX_SIZE, record, &h, &args_len))
        return "a malformed frame header";
    if (h.opcode != RGPU_OP_LINK_PART)
        return "a frame other than LINK_PART";
    if (h.flags != RGPU_FLAG_NO_REPLY)
        return "a LINK_PART that asks for a reply";
    if (args_len != RGPU_LINK_PART_REQ_SIZE)
        return "a LINK_PART with arguments of the wrong size";
    if (!h.bulk_len || h.bulk_len > part_max)
        return "a LINK_PART of no bytes or more than the session's part size";
    struct rgpu_link_part_req m;
    if (rgpu_unpack_link_part_req(head + RGPU_PREFIX_SIZE + RGPU_HEADER_SIZE, args_len, &m))
        return "a LINK_PART whose arguments do not unpack";
    into->seq = m.seq, into->part = m.part, into->offset = m.offset, into->len = h.bulk_len;
    return NULL;
}

/* A plain part: its head, checked, then its bulk into the buffer. NULL, or why the link fails. */
static const char *receive_plain(struct link *k, uint32_t part_max, struct link_buffer *b, struct link_buffer *meta)
{
    uint8_t head[LINK_HEAD];
    if (rgpu_recv_all(k->fd, head, sizeof head))
        return "ended or failed";
    const char *bad = parse_part(head, part_max, meta);
    if (bad)
        return bad;
    if (rgpu_recv_all(k->fd, b->bytes, meta->len))
        return "ended or failed in a part";
    meta->data = b->bytes;
    return NULL;
}

/* A sealed part: its record's length, checked against the most a part may take, the record, opened in place, then
 * its head checked. NULL, or why the link fails. */
static const char *receive_sealed(struct link *k, uint32_t part_max, struct link_buffer *b, struct link_buffer *meta)
{
    uint8_t prefix[RGPU_PREFIX_SIZE];
    if (rgpu_recv_all(k->fd, prefix, sizeof prefix))
        return "ended or failed";
    uint32_t record = rgpu_get_u32(prefix);
    if (record < PART_BODY_HEAD + 1 + TAG || record > PART_BODY_HEAD + part_max + TAG)
        return "a record too short or too long for a LINK_PART";
    if (rgpu_recv_all(k->fd, b->bytes + RGPU_PREFIX_SIZE, record))
        return "ended or failed in a part";
    if (rgpu_aead_open(&k->rx, prefix, b->bytes + RGPU_PREFIX_SIZE, record, b->bytes + RGPU_PREFIX_SIZE)) {
        memset(b->bytes, 0, RGPU_PREFIX_SIZE + record);
        return "a part that failed authentication";
    }
    rgpu_put_u32(b->bytes, record - TAG); /* (the frame's own length prefix, for parse_part) */
    meta->data = b->bytes + LINK_HEAD;
    return parse_part(b->bytes, part_max, meta); /* (its bulk is the rest of the record: args_len is checked) */
}

static void *link_receive(void *arg)
{
    struct link *k = arg;
    struct rgpu_lane_links *l = k->owner;
    for (;;) {
        struct link_buffer *b = &k->buf[k->fill_next];
        pthread_mutex_lock(&l->lock);
        while (b->state != BUF_FREE && !l->closing)
            pthread_cond_wait(&l->changed, &l->lock);
        int closing = l->closing;
        pthread_mutex_unlock(&l->lock);
        if (closing)
            return NULL;
        struct link_buffer meta = {0};
        const char *bad = k->sealed ? receive_sealed(k, l->part_max, b, &meta)
                                    : receive_plain(k, l->part_max, b, &meta);
        if (bad) {
            link_fail(k, strncmp(bad, "ended", 5) ? "the copy link sent %s" : "the copy link %s", bad,
                      strncmp(bad, "ended", 5) ? 0 : errno);
            return NULL;
        }
        pthread_mutex_lock(&l->lock);
        b->seq = meta.seq, b->part = meta.part, b->offset = meta.offset, b->len = meta.len, b->data = meta.data;
        b->state = BUF_READY;
        pthread_cond_broadcast(&l->changed);
        pthread_mutex_unlock(&l->lock);
        k->fill_next ^= 1;
    }
}

rgpu_lane_links *rgpu_lane_links_new(unsigned count, uint32_t part_max, int cipher, const uint8_t *keys)
{
    if (!count || count > RGPU_LANE_MAX_LINKS || !part_max || part_max > (1u << 30))
        return NULL;
    if (keys && ((cipher != RGPU_CIPHER_AES_256_GCM && cipher != RGPU_CIPHER_CHACHA20_POLY1305) || rgpu_crypto_load()))
        return NULL;
    struct rgpu_lane_links *l = calloc(1, sizeof *l + count * sizeof(struct link));
    if (!l)
        return NULL;
    pthread_mutex_init(&l->lock, NULL);
    pthread_cond_init(&l->changed, NULL);
    l->count = count, l->part_max = part_max;
    for (unsigned i = 0; i < count; i++) /* (first: a failure below frees them all, and 0 is someone's fd) */
        l->links[i].fd = -1, l->links[i].owner = l;
    for (unsigned i = 0; i < count; i++) {
        struct link *k = &l->links[i];
        if (keys) {
            k->sealed = 1;
            k->rx.cipher = cipher;
            memcpy(k->rx.key, keys + 32 * i, 32);
        }
        for (int j = 0; j < 2; j++) /* (room for a sealed record: its prefix, head and tag too) */
            if (!(k->buf[j].bytes = malloc(LINK_HEAD + (size_t)part_max + TAG))) {
                rgpu_lane_links_free(l);
                return NULL;
            }
    }
    return l;
}

int rgpu_lane_links_attach(rgpu_lane_links *l, unsigned index, int fd)
{
    int ok = 0;
    pthread_mutex_lock(&l->lock);
    if (index < l->count && l->links[index].fd < 0 && !l->closing) {
        struct link *k = &l->links[index];
        k->fd = fd;
        ok = rgpu_quiet_thread(&k->thread, 0, link_receive, k) == 0;
        if (ok)
            k->started = 1;
        else
            k->fd = -1;
    }
    pthread_cond_broadcast(&l->changed);
    pthread_mutex_unlock(&l->lock);
    if (!ok)
        close(fd);
    return ok ? 0 : -1;
}

/* (on the realtime clock, the condition's own: pthread_condattr_setclock is newer than the glibc the lane is built
 * for; a jump of the clock only moves one wait of at most timeout_ms, which the caller repeats) */
static void deadline_after(struct timespec *t, unsigned ms)
{
    clock_gettime(CLOCK_REALTIME, t);
    t->tv_sec += ms / 1000;
    t->tv_nsec += (long)(ms % 1000) * 1000000L;
    if (t->tv_nsec >= 1000000000L)
        t->tv_sec++, t->tv_nsec -= 1000000000L;
}

int rgpu_lane_links_take(rgpu_lane_links *l, unsigned index, uint32_t seq, uint32_t part, unsigned timeout_ms,
                         const uint8_t **data, uint64_t *offset, uint32_t *len, char *why, size_t why_len)
{
    if (index >= l->count) {
        snprintf(why, why_len, "no copy link %u (the session has %u)", index, l->count);
        return -1;
    }
    struct link *k = &l->links[index];
    struct timespec until;
    deadline_after(&until, timeout_ms);
    int r = 0;
    pthread_mutex_lock(&l->lock);
    struct link_buffer *b = &k->buf[k->take_next];
    for (;;) {
        if (b->state == BUF_TAKEN) {
            snprintf(why, why_len, "copy link %u: a part taken before the last was released", index);
            r = -1;
            break;
        }
        if (b->state == BUF_READY) {
            if (b->seq != seq || b->part != part) {
                snprintf(why, why_len, "copy link %u sent part %u of linked copy %u where part %u of copy %u was due",
                         index, b->part, b->seq, part, seq);
                r = -1;
                break;
            }
            b->state = BUF_TAKEN;
            *data = b->data, *offset = b->offset, *len = b->len;
            r = 1;
            break;
        }
        if (k->failed) {
            snprintf(why, why_len, "copy link %u: %s", index, k->error);
            r = -1;
            break;
        }
        if (pthread_cond_timedwait(&l->changed, &l->lock, &until) == ETIMEDOUT)
            break; /* r = 0: nothing taken; the caller may wait again */
    }
    pthread_mutex_unlock(&l->lock);
    return r;
}

void rgpu_lane_links_release(rgpu_lane_links *l, unsigned index)
{
    if (index >= l->count)
        return;
    struct link *k = &l->links[index];
    pthread_mutex_lock(&l->lock);
    struct link_buffer *b = &k->buf[k->take_next];
    if (b->state == BUF_TAKEN) {
        b->state = BUF_FREE;
        k->take_next ^= 1;
        pthread_cond_broadcast(&l->changed);
    }
    pthread_mutex_unlock(&l->lock);
}

void rgpu_lane_links_free(rgpu_lane_links *l)
{
    if (!l)
        return;
    pthread_mutex_lock(&l->lock);
    l->closing = 1;
    pthread_cond_broadcast(&l->changed);
    pthread_mutex_unlock(&l->lock);
    for (unsigned i = 0; i < l->count; i++) {
        struct link *k = &l->links[i];
        if (k->fd >= 0)
            shutdown(k->fd, SHUT_RDWR); /* (a thread in recv returns) */
        if (k->started)
            pthread_join(k->thread, NULL);
        if (k->fd >= 0)
            close(k->fd);
        for (int j = 0; j < 2; j++)
            free(k->buf[j].bytes);
        rgpu_aead_free(&k->rx);
        memset(k->rx.key, 0, sizeof k->rx.key);
    }
    pthread_cond_destroy(&l->changed);
    pthread_mutex_destroy(&l->lock);
    free(l);
}
