/* Copy links (docs/protocol.md, "Copy links"): with RGPU_COPY_LINKS=n, a plain connection opens n more TCP
 * connections to its server, and a big host-to-device copy's bytes go over them as LINK_PARTs, each link sent by a
 * thread of its own, while the copy itself (MEMCPY_HTOD_LINKED) goes over the connection in its place among the
 * other calls. Over one connection a copy crosses one core at each end (on loopback, the sender's core does the
 * receiver's protocol work too); over n, n cores. With a PSK each link's parts go as records sealed under a key of
 * the link's own (derived from the connection's), so sealing is spread over the links' threads too.
 *
 * The caller's thread waits until every part is sent: the program may reuse its memory when the call returns,
 * as after any pageable copy. The LINKED frame is sent before any part, so the server's loop, which takes the
 * parts when it reaches that frame, never waits for a part held back behind it. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "conn.h"
#include "crypto.h"
#include "quiet_thread.h"
#include "send_iov.h"

#define LINKS_MAX 8
#define LINK_HEAD (RGPU_PREFIX_SIZE + RGPU_HEADER_SIZE + RGPU_LINK_PART_REQ_SIZE)
#define TAG 16
/* Copies below this go as one frame ($RGPU_COPY_LINK_MIN_KIB overrides it): a linked copy costs the link threads'
 * wake-ups on both sides and the worker's Python dispatcher (the C loop streams a copy of one frame into the copy
 * ring itself). On the H200 box 4 links lifted 64 MiB copies up from 0.96x to 1.22x of a C TCP copy, and slowed
 * 1 MiB ones from 0.58x to 0.36x and llama.cpp's pp128 (512 KiB of inputs) from 76.7%/90.0% to 73.4%/70.2% of
 * native (bench/results/gpu-2026-12-05-links). */
#define LINK_MIN_BYTES (2u << 20)

struct conn_links {
    size_t min_bytes; /* copies up from this size go over the links */
    pid_t pid; /* of the process whose threads send them: a forked child has none of them, and no links */
    unsigned count;
    uint32_t part_max;
    uint32_t seq; /* of the last linked copy */
    int fds[LINKS_MAX];
    int sealed;
    struct rgpu_aead tx[LINKS_MAX]; /* sealed: link i's, used by the one thread that sends it */
    uint8_t *records[LINKS_MAX];   /* sealed: where link i's record is sealed, LINK_HEAD + part_max + TAG */
    pthread_t threads[LINKS_MAX]; /* links 1.. (link 0 is sent by the copying thread) */
    unsigned started;
    pthread_mutex_t lock;
    pthread_cond_t go, done;
    /* the copy being sent: its bytes, size, parts of part_size (the last shorter), which link sends which */
    const uint8_t *src;
    uint64_t size;
    uint32_t part_size, parts, job_seq;
    unsigned generation, pending;
    int failed, failed_errno, closing; /* failed_errno: the first failing send's */
};

struct link_arg {
    struct conn_links *links;
    unsigned index;
};

/* One part over link `index`: its head and bulk as they are, or sealed into one record. 0, or -1 (errno set). */
static int send_part(struct conn_links *l, unsigned index, const uint8_t *bulk, uint32_t n, uint32_t seq,
                     uint32_t part, uint64_t off)
{
    uint8_t head[LINK_HEAD];
    rgpu_header h = {RGPU_OP_LINK_PART, RGPU_FLAG_NO_REPLY, 0, 0, 0, n};
    rgpu_pack_prefix_header(head, &h, RGPU_LINK_PART_REQ_SIZE);
    rgpu_pack_link_part(head + RGPU_PREFIX_SIZE + RGPU_HEADER_SIZE,
                        &(struct rgpu_link_part_req){.seq = seq, .part = part, .offset = off});
    if (!l->sealed) {
        struct iovec v[2] = {{head, sizeof head}, {(void *)bulk, n}};
        return rgpu_send_iov(l->fds[index], v, 2);
    }
    uint8_t *r = l->records[index];
    struct rgpu_aead *a = &l->tx[index];
    size_t body = LINK_HEAD - RGPU_PREFIX_SIZE + (size_t)n;
    rgpu_put_u32(r, body + TAG);
    if (rgpu_aead_begin(a, 1, r) ||
        rgpu_aead_update(a, head + RGPU_PREFIX_SIZE, LINK_HEAD - RGPU_PREFIX_SIZE, r + RGPU_PREFIX_SIZE) ||
        rgpu_aead_update(a, bulk, n, r + LINK_HEAD) || rgpu_aead_seal_end(a, r + RGPU_PREFIX_SIZE + body)) {
        errno = EPROTO;
        return -1;
    }
    struct iovec v = {r, RGPU_PREFIX_SIZE + body + TAG};
    return rgpu_send_iov(l->fds[index], &v, 1);
}

/* Link `index`'s parts of the copy being sent: j = index, index + count, ... 0, or -1 (errno set). */
static int send_parts(struct conn_links *l, unsigned index, const uint8_t *src, uint64_t size, uint32_t part_size,
                      uint32_t parts, uint32_t seq)
{
    for (uint32_t j = index; j < parts; j += l->count) {
        uint64_t off = (uint64_t)j * part_size;
        uint32_t n = (uint32_t)(size - off < part_size ? size - off : part_size);
        if (send_part(l, index, src + off, n, seq, j, off))
            return -1;
    }
    return 0;
}

/* Links 1.. each have a thread; link 0 is sent by the caller's thread, which would otherwise only wait. */
static void *link_send(void *p)
{
    struct link_arg a = *(struct link_arg *)p;
    free(p);
    struct conn_links *l = a.links;
    unsigned seen = 0;
    for (;;) {
        pthread_mutex_lock(&l->lock);
        while (l->generation == seen && !l->closing)
            pthread_cond_wait(&l->go, &l->lock);
        if (l->closing) {
            pthread_mutex_unlock(&l->lock);
            return NULL;
        }
        seen = l->generation;
        const uint8_t *src = l->src;
        uint64_t size = l->size;
        uint32_t part_size = l->part_size, parts = l->parts, seq = l->job_seq;
        pthread_mutex_unlock(&l->lock);
        int failed = send_parts(l, a.index, src, size, part_size, parts, seq);
        int err = errno;
        pthread_mutex_lock(&l->lock);
        if (failed && !l->failed)
            l->failed = 1, l->failed_errno = err;
        if (!--l->pending)
            pthread_cond_signal(&l->done);
        pthread_mutex_unlock(&l->lock);
    }
}

static void links_free(struct conn_links *l)
{
    /* (a forked child's copy: the threads are the parent's, and so is the lock they may have held) */
    int forked = l->pid && l->pid != getpid();
    if (!forked) {
        pthread_mutex_lock(&l->lock);
        l->closing = 1;
        pthread_cond_broadcast(&l->go);
        pthread_mutex_unlock(&l->lock);
        for (unsigned i = 0; i < l->started; i++)
            pthread_join(l->threads[i], NULL);
    }
    for (unsigned i = 0; i < l->count; i++) {
        if (l->fds[i] >= 0)
            close(l->fds[i]);
        rgpu_aead_free(&l->tx[i]);
        free(l->records[i]);
    }
    memset(l->tx, 0, sizeof l->tx); /* (the keys) */
    if (!forked) {
        pthread_cond_destroy(&l->go);
        pthread_cond_destroy(&l->done);
        pthread_mutex_destroy(&l->lock);
    }
    free(l);
}

/* HMAC-SHA256(token, "rgpu copy link" || u32 link): what LINK_JOIN shows for the link (the token itself never
 * crosses a link). On sha256.c, so that plain connections need no libcrypto. */
static int join_proof(const uint8_t token[32], unsigned link, uint8_t out[32])
{
    static const char label[] = "rgpu copy link";
    uint8_t block[64 + 32], inner[32];
    uint8_t *msg = block + 64;
    for (int pass = 0; pass < 2; pass++) {
        memset(block, 0, 64);
        memcpy(block, token, 32);
        for (int i = 0; i < 64; i++)
            block[i] ^= pass ? 0x5c : 0x36;
        size_t len = 32;
        if (!pass) {
            memcpy(msg, label, sizeof label - 1);
            rgpu_put_u32(msg + sizeof label - 1, link);
            len = sizeof label - 1 + 4;
        } else {
            memcpy(msg, inner, 32);
        }
        if (rgpu_sha256(block, 64 + len, pass ? out : inner))
            return -1;
    }
    return 0;
}

/* Open link `index` to `server`: dial, LINK_JOIN, the server's answer. The fd, or -1 (logged). */
static int join(const char *server, const uint8_t token[32], unsigned index)
{
    int fd = conn_dial(server);
    if (fd < 0)
        return -1;
    struct timeval tv = {5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    uint8_t frame[RGPU_PREFIX_SIZE + RGPU_HEADER_SIZE + RGPU_LINK_JOIN_REQ_SIZE];
    rgpu_header h = {RGPU_OP_LINK_JOIN, 0, 1, 0, 0, 0};
    rgpu_pack_prefix_header(frame, &h, RGPU_LINK_JOIN_REQ_SIZE);
    struct rgpu_link_join_req m = {.link = index};
    if (join_proof(token, index, m.proof)) {
        close(fd);
        return -1;
    }
    rgpu_pack_link_join(frame + RGPU_PREFIX_SIZE + RGPU_HEADER_SIZE, &m);
    struct iovec v = {frame, sizeof frame};
    /* The answer: a header with no arguments; a refusal carries a message, which the server also logs. */
    uint8_t reply[RGPU_PREFIX_SIZE + RGPU_HEADER_SIZE];
    int got = rgpu_send_iov(fd, &v, 1) == 0 && rgpu_recv_all(fd, reply, sizeof reply) == 0;
    rgpu_header rh = {0};
    size_t args_len;
    uint32_t record = got ? rgpu_get_u32(reply) : 0;
    if (!got || record < RGPU_HEADER_SIZE ||
        rgpu_parse_header(reply + RGPU_PREFIX_SIZE, record, &rh, &args_len) || rh.opcode != RGPU_OP_LINK_JOIN ||
        rh.request_id != 1 || rh.status || record != RGPU_HEADER_SIZE) {
        rgpu_log(RGPU_LOG_WARN, "copy link %u to %s refused or failed (status %u); copies go over the one connection",
                 index, server, rh.status);
        close(fd);
        return -1;
    }
    struct timeval none = {0, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &none, sizeof none);
    return fd;
}

void conn_links_open(const char *server)
{
    const char *env = getenv("RGPU_COPY_LINKS");
    unsigned want = env && *env ? (unsigned)strtoul(env, NULL, 10) : 0;
    if (!want || rgpu_conn.links)
        return;
    if (!rgpu_conn.batching) { /* (every call then waits for its reply, none goes by rgpu_defer's path) */
        rgpu_log(RGPU_LOG_INFO, "RGPU_BATCH=0: no copy links");
        return;
    }
    if (!(rgpu_conn.features & RGPU_FEATURE_COPY_LINKS)) {
        rgpu_log(RGPU_LOG_INFO, "rgpu-server %s offers no copy links; copies go over the one connection", server);
        return;
    }
    uint8_t reply[RGPU_LINKS_OPEN_REP_SIZE];
    struct rgpu_links_open_rep offer;
    CUresult r = conn_call_locked(RGPU_OP_LINKS_OPEN, NULL, 0, NULL, 0, reply, sizeof reply, NULL);
    /* (the offer is the server's word: a part size outside what a client can hold is refused like no offer) */
    if (r != CUDA_SUCCESS || rgpu_unpack_links_open(reply, sizeof reply, &offer) || !offer.links ||
        offer.part_max < (64u << 10) || offer.part_max > (16u << 20)) {
        rgpu_log(RGPU_LOG_INFO, "rgpu-server %s offers no copy links (%d); copies go over the one connection", server,
                 (int)r);
        return;
    }
    struct conn_links *l = calloc(1, sizeof *l);
    if (!l)
        return;
    l->count = want < offer.links ? want : offer.links;
    l->count = l->count > LINKS_MAX ? LINKS_MAX : l->count;
    l->part_max = offer.part_max;
    const char *min_kib = getenv("RGPU_COPY_LINK_MIN_KIB");
    l->min_bytes = min_kib && *min_kib ? (size_t)strtoul(min_kib, NULL, 10) << 10 : LINK_MIN_BYTES;
    l->min_bytes = l->min_bytes < (64u << 10) ? (64u << 10) : l->min_bytes; /* (below: the batch takes them inline) */
    l->pid = getpid();
    pthread_mutex_init(&l->lock, NULL);
    pthread_cond_init(&l->go, NULL);
    pthread_cond_init(&l->done, NULL);
    for (unsigned i = 0; i < LINKS_MAX; i++)
        l->fds[i] = -1;
    l->sealed = rgpu_conn.protect;
    for (unsigned i = 0; i < l->count && l->sealed; i++) { /* HKDF(c2s key, salt token, "rgpu copy link key" || i) */
        static const char label[] = "rgpu copy link key";
        uint8_t info[sizeof label - 1 + 4];
        memcpy(info, label, sizeof label - 1);
        rgpu_put_u32(info + sizeof label - 1, i);
        l->tx[i].cipher = rgpu_conn.tx.cipher;
        if (rgpu_hkdf_sha256(rgpu_conn.tx.key, 32, offer.token, 32, info, sizeof info, l->tx[i].key, 32) ||
            !(l->records[i] = malloc(LINK_HEAD + (size_t)l->part_max + TAG))) {
            links_free(l);
            return;
        }
    }
    for (unsigned i = 0; i < l->count; i++)
        if ((l->fds[i] = join(server, offer.token, i)) < 0) {
            links_free(l);
            return;
        }
    for (; l->started + 1 < l->count; l->started++) {
        struct link_arg *a = malloc(sizeof *a);
        if (a)
            *a = (struct link_arg){l, l->started + 1};
        if (!a || rgpu_quiet_thread(&l->threads[l->started], 0, link_send, a)) {
            free(a);
            links_free(l);
            return;
        }
    }
    rgpu_conn.links = l;
    __atomic_store_n(&rgpu_conn.links_min_bytes, l->min_bytes, __ATOMIC_RELAXED);
    rgpu_log(RGPU_LOG_INFO, "%u copy links to %s%s: copies up of %u KiB or more go over them", l->count, server,
             l->sealed ? " (sealed)" : "", (unsigned)(l->min_bytes >> 10));
}

int conn_links_carry(uint16_t op, size_t bulk_len)
{
    return rgpu_conn.links && bulk_len >= rgpu_conn.links->min_bytes &&
           (op == RGPU_OP_MEMCPY_HTOD || op == RGPU_OP_MEMCPY_HTOD_ASYNC) && rgpu_conn.links->pid == getpid();
}

int conn_links_copy(uint16_t op, const void *args, size_t args_len, const void *bulk, size_t bulk_len,
                    struct out_frame *f, int n)
{
    struct conn_links *l = rgpu_conn.links;
    uint64_t dst = conn_u64_at(args, args_len, 0);
    uint64_t stream = op == RGPU_OP_MEMCPY_HTOD_ASYNC ? conn_u64_at(args, args_len, 8) : 0;
    /* Parts as even as a page allows, no bigger than the server takes; every link gets one before any gets two. */
    uint64_t per_link = (bulk_len + l->count - 1) / l->count;
    uint32_t part = (uint32_t)(((per_link + 4095) & ~(uint64_t)4095) < l->part_max ? ((per_link + 4095) & ~4095ull)
                                                                                   : l->part_max);
    uint32_t parts = (uint32_t)((bulk_len + part - 1) / part);
    uint8_t a[RGPU_MEMCPY_HTOD_LINKED_REQ_SIZE];
    rgpu_pack_memcpy_htod_linked(a, &(struct rgpu_memcpy_htod_linked_req){
                                        .dst = dst, .stream = stream, .size = bulk_len, .seq = ++l->seq,
                                        .parts = parts, .links = l->count, .sync = op == RGPU_OP_MEMCPY_HTOD});
    f[n] = (struct out_frame){{RGPU_OP_MEMCPY_HTOD_LINKED, RGPU_FLAG_NO_REPLY, rgpu_conn.next_id++, 0, 0, 0}, a,
                              sizeof a, NULL};
    conn_note_sent(RGPU_OP_MEMCPY_HTOD_LINKED, a, sizeof a, f[n].h.request_id);
    if (conn_send_frames(f, n + 1))
        return -1;
    pthread_mutex_lock(&l->lock);
    l->src = bulk, l->size = bulk_len, l->part_size = part, l->parts = parts, l->job_seq = l->seq;
    l->pending = l->count - 1;
    l->generation++;
    pthread_cond_broadcast(&l->go);
    pthread_mutex_unlock(&l->lock);
    int failed = send_parts(l, 0, bulk, bulk_len, part, parts, l->seq);
    int err = failed ? errno : 0;
    pthread_mutex_lock(&l->lock);
    while (l->pending)
        pthread_cond_wait(&l->done, &l->lock);
    if (!failed && l->failed)
        failed = 1, err = l->failed_errno;
    pthread_mutex_unlock(&l->lock);
    if (!failed)
        return 0;
    /* The copy is the server's to fail (its frame went; its parts did not all): it reports it with a later reply.
     * The links are done for -- the server closes them all once one is out of step -- but not the connection. */
    rgpu_log(RGPU_LOG_WARN, "a copy link failed (%s); copies go over the one connection from now on", strerror(err));
    conn_links_close();
    return 0;
}

void conn_links_close(void)
{
    __atomic_store_n(&rgpu_conn.links_min_bytes, 0, __ATOMIC_RELAXED);
    if (rgpu_conn.links) {
        links_free(rgpu_conn.links);
        rgpu_conn.links = NULL;
    }
}
