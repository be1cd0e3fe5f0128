/* The shim's one connection to rgpu-server: connect, HELLO (+ PSK authentication), request/reply calls,
 * and the batch of deferred calls. All state lives in `g`, guarded by g.lock: one call on the wire at a time,
 * from any thread.
 *
 * Configuration (environment): RGPU_SERVER=host:port (default 127.0.0.1:9713), RGPU_PSK_FILE=path,
 * RGPU_BATCH=0 (send asynchronous calls one by one and wait for each), RGPU_SPIN_US=n (how long to poll for a
 * reply before sleeping in recv; default 50, 0 = never poll), RGPU_LOG=level. */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "crypto.h"
#include "rgpu_shim.h"

#define PROTO_MAJOR 1
#define PROTO_MINOR 1
#define FEATURES 0x7ull
#define HELLO_ARGS 72
#define BATCH_MAX_CALLS 256
#define BATCH_MAX_BYTES (1u << 20)
#define INLINE_BULK_LIMIT (64u << 10) /* larger deferred payloads go as their own frame, not copied */
#define COPY_CHUNK (4u << 20)
#define STATUS_AUTH_FAILED 0x10003
#define STATUS_RGPU_BASE 0x10000
#define CTX_DEPENDENT_OPS 0x0036 /* opcodes from here on run in the current context */
#define DEFAULT_SPIN_US 50

static struct {
    pthread_mutex_t lock;
    int state;        /* 0 not connected, 1 ready, -1 failed or lost */
    CUresult failure; /* what every call returns once state is -1 */
    int fd;
    uint32_t next_id;
    uint32_t max_frame;
    uint16_t server_minor;
    int batching;
    uint8_t *batch;
    size_t batch_len, batch_cap;
    unsigned batch_calls;
    int protect;
    struct rgpu_aead tx, rx;
    uint64_t server_ctx; /* the context the server currently runs our calls in */
    uint8_t *scratch;
    size_t scratch_cap;
    char message[256]; /* last error message from the server */
    uint64_t spin_ns;
    /* Received bytes not yet consumed: a small reply arrives in one recv instead of one per field. */
    size_t in_pos, in_len;
    uint8_t in[16384];
} g = {PTHREAD_MUTEX_INITIALIZER, 0, CUDA_SUCCESS, -1, 1, 64u << 20, 1};

static __thread uint64_t t_ctx;

uint64_t rgpu_thread_ctx(void) { return t_ctx; }
void rgpu_set_thread_ctx(uint64_t ctx) { t_ctx = ctx; }

void rgpu_note_server_ctx(uint64_t ctx)
{
    pthread_mutex_lock(&g.lock);
    g.server_ctx = ctx;
    pthread_mutex_unlock(&g.lock);
}

void rgpu_forget_server_ctx(uint64_t ctx)
{
    pthread_mutex_lock(&g.lock);
    if (g.server_ctx == ctx)
        g.server_ctx = 0;
    pthread_mutex_unlock(&g.lock);
}

uint16_t rgpu_server_minor(void) { return g.server_minor; }

uint64_t rgpu_stream_handle(CUstream s)
{
    uintptr_t v = (uintptr_t)s;
    return (v == (uintptr_t)CU_STREAM_LEGACY || v == (uintptr_t)CU_STREAM_PER_THREAD) ? 0 : (uint64_t)v;
}

uint32_t rgpu_max_chunk(void)
{
    uint32_t limit = g.max_frame > 8192 ? g.max_frame - 4096 : 4096;
    return limit < COPY_CHUNK ? limit : COPY_CHUNK;
}

/* -- byte moving ------------------------------------------------------------------------------------------ */
static int write_iov(struct iovec *iov, int n)
{
    while (n > 0) {
        ssize_t w = writev(g.fd, iov, n > 64 ? 64 : n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        while (n > 0 && (size_t)w >= iov->iov_len) {
            w -= (ssize_t)iov->iov_len;
            iov++;
            n--;
        }
        if (n > 0) {
            iov->iov_base = (uint8_t *)iov->iov_base + w;
            iov->iov_len -= (size_t)w;
        }
    }
    return 0;
}

static uint64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* Poll briefly before sleeping: a reply usually comes within tens of microseconds, and waking a thread that
 * sleeps in recv costs a good part of that again (an idle CPU's wake-up, in a VM an interrupt to the host). */
static ssize_t recv_waiting(void *b, size_t n)
{
    if (g.spin_ns) {
        uint64_t deadline = 0;
        for (;;) {
            ssize_t r = recv(g.fd, b, n, MSG_DONTWAIT);
            if (r >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK))
                return r;
            uint64_t now = now_ns();
            if (!deadline)
                deadline = now + g.spin_ns;
            else if (now >= deadline)
                break;
        }
    }
    return recv(g.fd, b, n, 0);
}

static int read_all(void *p, size_t n)
{
    uint8_t *b = p;
    while (n) {
        if (g.in_pos < g.in_len) {
            size_t k = n < g.in_len - g.in_pos ? n : g.in_len - g.in_pos;
            memcpy(b, g.in + g.in_pos, k);
            g.in_pos += k;
            b += k;
            n -= k;
            continue;
        }
        int direct = n >= sizeof g.in; /* bulk goes straight to the caller's memory */
        ssize_t r = direct ? recv_waiting(b, n) : recv_waiting(g.in, sizeof g.in);
        if (r == 0)
            return -1;
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        if (direct) {
            b += r;
            n -= (size_t)r;
        } else {
            g.in_pos = 0;
            g.in_len = (size_t)r;
        }
    }
    return 0;
}

static uint8_t *scratch(size_t n)
{
    if (n > g.scratch_cap) {
        uint8_t *p = realloc(g.scratch, n);
        if (!p)
            return NULL;
        g.scratch = p;
        g.scratch_cap = n;
    }
    return g.scratch;
}

static void lost(const char *what)
{
    if (g.state == 1)
        rgpu_log(RGPU_LOG_ERROR, "connection to rgpu-server lost (%s: %s); further CUDA calls fail", what,
                 strerror(errno));
    g.state = -1;
    g.failure = CUDA_ERROR_DEVICE_UNAVAILABLE;
    if (g.fd >= 0)
        close(g.fd);
    g.fd = -1;
    g.in_pos = g.in_len = 0;
}

/* Send frames; each is (header, args, bulk). Plain: one writev, bulk never copied. Protected: sealed records. */
struct out_frame {
    rgpu_header h;
    const void *args;
    size_t args_len;
    const void *bulk;
};

static int send_frames(struct out_frame *f, int n)
{
    uint8_t heads[4][RGPU_PREFIX_SIZE + RGPU_HEADER_SIZE];
    if (!g.protect) {
        struct iovec iov[12];
        int k = 0;
        for (int i = 0; i < n; i++) {
            rgpu_pack_prefix_header(heads[i], &f[i].h, f[i].args_len);
            iov[k++] = (struct iovec){heads[i], sizeof heads[i]};
            if (f[i].args_len)
                iov[k++] = (struct iovec){(void *)f[i].args, f[i].args_len};
            if (f[i].h.bulk_len)
                iov[k++] = (struct iovec){(void *)f[i].bulk, f[i].h.bulk_len};
        }
        return write_iov(iov, k);
    }
    for (int i = 0; i < n; i++) {
        size_t body = RGPU_HEADER_SIZE + f[i].args_len + f[i].h.bulk_len;
        uint8_t *buf = scratch(2 * body + 2 * RGPU_PREFIX_SIZE + 16);
        if (!buf)
            return -1;
        uint8_t *plain = buf, *rec = buf + body + RGPU_PREFIX_SIZE;
        rgpu_pack_prefix_header(heads[0], &f[i].h, f[i].args_len);
        memcpy(plain, heads[0] + RGPU_PREFIX_SIZE, RGPU_HEADER_SIZE);
        memcpy(plain + RGPU_HEADER_SIZE, f[i].args, f[i].args_len);
        if (f[i].h.bulk_len)
            memcpy(plain + RGPU_HEADER_SIZE + f[i].args_len, f[i].bulk, f[i].h.bulk_len);
        rgpu_put_u32(rec, body + 16);
        if (rgpu_aead_seal(&g.tx, rec, plain, body, rec + RGPU_PREFIX_SIZE))
            return -1;
        struct iovec iov = {rec, RGPU_PREFIX_SIZE + body + 16};
        if (write_iov(&iov, 1))
            return -1;
    }
    return 0;
}

/* Read one reply. Its args land in `reply` (exactly reply_len bytes when status is 0), its bulk in `sink`. */
static int recv_reply(rgpu_header *h, void *reply, size_t reply_len, struct rgpu_sink *sink)
{
    uint8_t prefix[RGPU_PREFIX_SIZE];
    if (read_all(prefix, sizeof prefix))
        return -1;
    size_t len = rgpu_get_u32(prefix);
    if (len > (size_t)g.max_frame + 4096 + 16 || len < RGPU_HEADER_SIZE) {
        errno = EPROTO;
        return -1;
    }
    size_t args_len;
    const uint8_t *args, *bulk = NULL;
    if (g.protect) {
        uint8_t *buf = scratch(2 * len);
        if (!buf || read_all(buf, len) || rgpu_aead_open(&g.rx, prefix, buf, len, buf + len)) {
            errno = EBADMSG;
            return -1;
        }
        if (rgpu_parse_header(buf + len, len - 16, h, &args_len)) {
            errno = EPROTO;
            return -1;
        }
        args = buf + len + RGPU_HEADER_SIZE;
        bulk = args + args_len;
    } else {
        uint8_t head[RGPU_HEADER_SIZE];
        if (read_all(head, sizeof head) || rgpu_parse_header(head, len, h, &args_len)) {
            errno = EPROTO;
            return -1;
        }
        uint8_t *buf = scratch(args_len + 1);
        if (!buf || read_all(buf, args_len))
            return -1;
        args = buf;
    }
    if (h->status == 0 && args_len != reply_len) {
        errno = EPROTO;
        return -1;
    }
    if (h->status == 0 && reply_len)
        memcpy(reply, args, reply_len);
    size_t n = h->bulk_len, to_sink = 0;
    if (sink && h->status == 0) {
        to_sink = n < sink->cap ? n : sink->cap;
        sink->len = n;
    }
    if (g.protect) {
        if (to_sink)
            memcpy(sink->buf, bulk, to_sink);
        bulk += to_sink;
    } else if (to_sink && read_all(sink->buf, to_sink)) { /* plain: bulk lands straight in the caller's memory */
        return -1;
    }
    size_t rest = n - to_sink;
    if (h->status && rest) { /* keep the server's message for the log */
        size_t m = rest < sizeof g.message - 1 ? rest : sizeof g.message - 1;
        if (g.protect)
            memcpy(g.message, bulk, m);
        else if (read_all(g.message, m))
            return -1;
        g.message[m] = 0;
        rest -= m;
        bulk += m;
    }
    if (!g.protect) {
        uint8_t sink_buf[4096];
        while (rest) {
            size_t k = rest < sizeof sink_buf ? rest : sizeof sink_buf;
            if (read_all(sink_buf, k))
                return -1;
            rest -= k;
        }
    }
    return 0;
}

/* -- deferred calls ---------------------------------------------------------------------------------------- */
static int batch_append(uint16_t op, const void *args, size_t args_len, const void *bulk, size_t bulk_len)
{
    size_t need = RGPU_PREFIX_SIZE + RGPU_HEADER_SIZE + args_len + bulk_len;
    if (g.batch_len + need > g.batch_cap) {
        size_t cap = g.batch_cap ? g.batch_cap : 64 * 1024;
        while (cap < g.batch_len + need)
            cap *= 2;
        uint8_t *p = realloc(g.batch, cap);
        if (!p)
            return -1;
        g.batch = p;
        g.batch_cap = cap;
    }
    rgpu_header h = {op, RGPU_FLAG_NO_REPLY, g.next_id++, 0, 0, (uint32_t)bulk_len};
    uint8_t *p = g.batch + g.batch_len;
    rgpu_pack_prefix_header(p, &h, args_len);
    memcpy(p + RGPU_PREFIX_SIZE + RGPU_HEADER_SIZE, args, args_len);
    if (bulk_len)
        memcpy(p + RGPU_PREFIX_SIZE + RGPU_HEADER_SIZE + args_len, bulk, bulk_len);
    g.batch_len += need;
    g.batch_calls++;
    return 0;
}

/* The queued calls as one BATCH frame (to send before anything else), or 0 frames. */
static int take_batch(struct out_frame *f)
{
    if (!g.batch_calls)
        return 0;
    *f = (struct out_frame){{RGPU_OP_BATCH, RGPU_FLAG_NO_REPLY, g.next_id++, 0, 0, (uint32_t)g.batch_len},
                            NULL, 0, g.batch};
    return 1;
}

static void batch_sent(void)
{
    g.batch_len = 0;
    g.batch_calls = 0;
}

static void sync_context(uint16_t op)
{
    if (op >= CTX_DEPENDENT_OPS && t_ctx != g.server_ctx) {
        uint8_t a[8];
        rgpu_put_u64(a, t_ctx);
        if (batch_append(RGPU_OP_CTX_SET_CURRENT, a, 8, NULL, 0) == 0)
            g.server_ctx = t_ctx;
    }
}

static CUresult status_to_result(uint32_t status)
{
    if (status >= STATUS_RGPU_BASE) {
        rgpu_log(RGPU_LOG_ERROR, "rgpu-server: status 0x%x: %s", status, g.message);
        return CUDA_ERROR_UNKNOWN;
    }
    return (CUresult)status;
}

/* Read the reply to request `id` of opcode `op`. Returns 0 and sets *result (the call's outcome, or an earlier
 * deferred call's failure), or -1 when the connection is lost or out of step (then *result is g.failure). */
static int take_reply(uint16_t op, uint32_t id, void *reply, size_t reply_len, struct rgpu_sink *sink,
                      CUresult *result)
{
    rgpu_header h;
    g.message[0] = 0;
    if (recv_reply(&h, reply, reply_len, sink)) {
        lost("receive");
        *result = g.failure;
        return -1;
    }
    if (h.opcode == RGPU_OP_PROTOCOL_ERROR) {
        rgpu_log(RGPU_LOG_ERROR, "rgpu-server closed the session: %s", g.message);
        errno = ECONNRESET;
        lost("protocol error");
        *result = g.failure;
        return -1;
    }
    if (h.request_id != id || h.opcode != op) {
        errno = EPROTO;
        lost("reply out of step");
        *result = g.failure;
        return -1;
    }
    if (h.deferred_status) {
        rgpu_log(RGPU_LOG_INFO, "an earlier asynchronous call failed with %u; reported now", h.deferred_status);
        *result = status_to_result(h.deferred_status);
        return 0;
    }
    if (h.status && h.status != CUDA_ERROR_NOT_READY)
        rgpu_log(RGPU_LOG_DEBUG, "opcode 0x%04x failed with %u: %s", op, h.status, g.message);
    *result = status_to_result(h.status);
    return 0;
}

/* Send request `op` (after any queued deferred calls, in the same write); its id goes to *id. */
static int send_request(uint16_t op, const void *args, size_t args_len, const void *bulk, size_t bulk_len,
                        uint32_t *id)
{
    struct out_frame f[2];
    sync_context(op);
    int n = take_batch(f);
    *id = g.next_id++;
    f[n] = (struct out_frame){{op, 0, *id, 0, 0, (uint32_t)bulk_len}, args, args_len, bulk};
    if (send_frames(f, n + 1)) {
        lost("send");
        return -1;
    }
    batch_sent();
    return 0;
}

static CUresult call_locked(uint16_t op, const void *args, size_t args_len, const void *bulk, size_t bulk_len,
                            void *reply, size_t reply_len, struct rgpu_sink *sink)
{
    uint32_t id;
    CUresult r;
    if (send_request(op, args, args_len, bulk, bulk_len, &id))
        return g.failure;
    take_reply(op, id, reply, reply_len, sink, &r);
    return r;
}

static CUresult not_ready(void)
{
    return g.state == 0 ? CUDA_ERROR_NOT_INITIALIZED : g.failure;
}

CUresult rgpu_call(uint16_t op, const void *args, size_t args_len, const void *bulk, size_t bulk_len, void *reply,
                   size_t reply_len, struct rgpu_sink *sink)
{
    pthread_mutex_lock(&g.lock);
    CUresult r = g.state == 1 ? call_locked(op, args, args_len, bulk, bulk_len, reply, reply_len, sink) : not_ready();
    pthread_mutex_unlock(&g.lock);
    return r;
}

CUresult rgpu_call_pipelined(uint16_t op, size_t count, const uint8_t *args, size_t args_len,
                             struct rgpu_sink *sinks, unsigned window)
{
    pthread_mutex_lock(&g.lock);
    if (g.state != 1) {
        CUresult r = not_ready();
        pthread_mutex_unlock(&g.lock);
        return r;
    }
    CUresult first = CUDA_SUCCESS;
    uint32_t ids[RGPU_MAX_WINDOW];
    size_t sent = 0, taken = 0, to_send = count;
    window = window < 1 ? 1 : window > RGPU_MAX_WINDOW ? RGPU_MAX_WINDOW : window;
    while (taken < to_send) {
        while (sent < to_send && sent - taken < window) {
            if (send_request(op, args + sent * args_len, args_len, NULL, 0, &ids[sent % window])) {
                pthread_mutex_unlock(&g.lock);
                return g.failure;
            }
            sent++;
        }
        CUresult r;
        if (take_reply(op, ids[taken % window], NULL, 0, &sinks[taken], &r)) {
            pthread_mutex_unlock(&g.lock);
            return r;
        }
        taken++;
        if (r != CUDA_SUCCESS && first == CUDA_SUCCESS) {
            first = r;
            to_send = sent; /* send no more; the replies already on their way keep the connection in step */
        }
    }
    pthread_mutex_unlock(&g.lock);
    return first;
}

static CUresult flush_locked(void)
{
    struct out_frame f[1];
    if (!take_batch(f))
        return CUDA_SUCCESS;
    if (send_frames(f, 1)) {
        lost("send");
        return g.failure;
    }
    batch_sent();
    return CUDA_SUCCESS;
}

CUresult rgpu_defer(uint16_t op, const void *args, size_t args_len, const void *bulk, size_t bulk_len)
{
    pthread_mutex_lock(&g.lock);
    CUresult r;
    if (g.state != 1) {
        r = not_ready();
    } else if (!g.batching) {
        r = call_locked(op, args, args_len, bulk, bulk_len, NULL, 0, NULL);
    } else {
        sync_context(op);
        r = CUDA_SUCCESS;
        if (bulk_len > INLINE_BULK_LIMIT) {
            /* Big payload: send the queue, then this call as its own NO_REPLY frame (no copy into the batch). */
            struct out_frame f[2];
            int n = take_batch(f);
            f[n] = (struct out_frame){{op, RGPU_FLAG_NO_REPLY, g.next_id++, 0, 0, (uint32_t)bulk_len}, args,
                                      args_len, bulk};
            if (send_frames(f, n + 1)) {
                lost("send");
                r = g.failure;
            } else {
                batch_sent();
            }
        } else if (batch_append(op, args, args_len, bulk, bulk_len)) {
            r = CUDA_ERROR_OUT_OF_MEMORY;
        } else if (g.batch_calls >= BATCH_MAX_CALLS || g.batch_len >= BATCH_MAX_BYTES) {
            r = flush_locked();
        }
    }
    pthread_mutex_unlock(&g.lock);
    return r;
}

CUresult rgpu_ready(void)
{
    pthread_mutex_lock(&g.lock);
    CUresult r = g.state == 1 ? CUDA_SUCCESS : not_ready();
    pthread_mutex_unlock(&g.lock);
    return r;
}

/* -- connecting --------------------------------------------------------------------------------------------- */
static int dial(const char *spec)
{
    char host[256] = "127.0.0.1", port[16] = "9713";
    if (spec && *spec) {
        const char *colon;
        if (spec[0] == '[') {
            const char *end = strchr(spec, ']');
            if (!end || (size_t)(end - spec - 1) >= sizeof host)
                return -1;
            memcpy(host, spec + 1, (size_t)(end - spec - 1));
            host[end - spec - 1] = 0;
            colon = end[1] == ':' ? end + 1 : NULL;
        } else {
            colon = strrchr(spec, ':');
            size_t hl = colon ? (size_t)(colon - spec) : strlen(spec);
            if (hl >= sizeof host)
                return -1;
            memcpy(host, spec, hl);
            host[hl] = 0;
        }
        if (colon)
            snprintf(port, sizeof port, "%s", colon + 1);
    }
    struct addrinfo hints = {0}, *res, *ai;
    hints.ai_socktype = SOCK_STREAM;
    if (getaddrinfo(host, port, &hints, &res)) {
        errno = 0; /* not a system error: the caller says the address is bad */
        return -1;
    }
    int fd = -1;
    for (ai = res; ai && fd < 0; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0)
            continue;
        int fl = fcntl(fd, F_GETFL);
        fcntl(fd, F_SETFL, fl | O_NONBLOCK);
        int rc = connect(fd, ai->ai_addr, ai->ai_addrlen);
        if (rc && errno == EINPROGRESS) {
            struct pollfd p = {fd, POLLOUT, 0};
            int err = 0;
            socklen_t el = sizeof err;
            rc = poll(&p, 1, 10000) == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) == 0 && err == 0 ? 0 : -1;
            if (err)
                errno = err;
            else if (rc)
                errno = ETIMEDOUT;
        }
        if (rc) {
            close(fd);
            fd = -1;
            continue;
        }
        fcntl(fd, F_SETFL, fl);
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    }
    freeaddrinfo(res);
    return fd;
}

static int load_psk(const char *path, uint8_t *key, size_t *key_len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    uint8_t raw[1024];
    size_t n = fread(raw, 1, sizeof raw, f);
    fclose(f);
    size_t a = 0, b = n;
    while (a < b && (raw[a] == ' ' || raw[a] == '\n' || raw[a] == '\r' || raw[a] == '\t')) a++;
    while (b > a && (raw[b - 1] == ' ' || raw[b - 1] == '\n' || raw[b - 1] == '\r' || raw[b - 1] == '\t')) b--;
    int hex = (b - a) % 2 == 0 && b > a;
    for (size_t i = a; i < b && hex; i++)
        hex = (raw[i] >= '0' && raw[i] <= '9') || ((raw[i] | 32) >= 'a' && (raw[i] | 32) <= 'f');
    if (hex) {
        *key_len = (b - a) / 2;
        for (size_t i = 0; i < *key_len; i++) {
            unsigned v;
            sscanf((const char *)raw + a + 2 * i, "%2x", &v);
            key[i] = (uint8_t)v;
        }
    } else {
        memcpy(key, raw, n);
        *key_len = n;
    }
    return *key_len >= 32 ? 0 : -2;
}

static int ct_equal(const uint8_t *a, const uint8_t *b, size_t n)
{
    uint8_t d = 0;
    for (size_t i = 0; i < n; i++)
        d |= a[i] ^ b[i];
    return d == 0;
}

/* SHA-256 over the transcript label and both HELLOs' args and bulk, each length-prefixed. */
static int transcript(const uint8_t *cargs, const uint8_t *cbulk, size_t cbulk_len, const uint8_t *sargs,
                      const uint8_t *sbulk, size_t sbulk_len, uint8_t th[32])
{
    static const char label[] = "rgpu-v1 transcript";
    uint8_t buf[18 + 4 * 4 + 2 * HELLO_ARGS + 2 * 256];
    size_t n = 0;
    if (cbulk_len > 256 || sbulk_len > 256)
        return -1;
    memcpy(buf, label, 18);
    n = 18;
    const uint8_t *parts[4] = {cargs, cbulk, sargs, sbulk};
    size_t lens[4] = {HELLO_ARGS, cbulk_len, HELLO_ARGS, sbulk_len};
    for (int i = 0; i < 4; i++) {
        rgpu_put_u32(buf + n, lens[i]);
        memcpy(buf + n + 4, parts[i], lens[i]);
        n += 4 + lens[i];
    }
    return rgpu_sha256(buf, n, th);
}

static CUresult handshake(void)
{
    static const char agent[] = "rgpu-libcuda/0.1";
    uint8_t psk[1024];
    size_t psk_len = 0;
    const char *psk_file = getenv("RGPU_PSK_FILE");
    if (psk_file && *psk_file) {
        int rc = load_psk(psk_file, psk, &psk_len);
        if (rc) {
            rgpu_log(RGPU_LOG_ERROR, rc == -2 ? "PSK in %s is shorter than 32 bytes" : "cannot read PSK file %s",
                     psk_file);
            return CUDA_ERROR_NOT_INITIALIZED;
        }
        if (rgpu_crypto_load())
            return CUDA_ERROR_NOT_INITIALIZED;
    }
    uint8_t hello[HELLO_ARGS] = {0}, nonce[32];
    if (getrandom(nonce, sizeof nonce, 0) != sizeof nonce)
        return CUDA_ERROR_NOT_INITIALIZED;
    memcpy(hello, "RGPUWIRE", 8);
    rgpu_put_u16(hello + 8, PROTO_MAJOR);
    rgpu_put_u16(hello + 10, PROTO_MINOR);
    rgpu_put_u64(hello + 12, FEATURES);
    rgpu_put_u32(hello + 24, psk_len ? RGPU_CIPHER_AES_256_GCM | RGPU_CIPHER_CHACHA20_POLY1305 : 0);
    memcpy(hello + 28, nonce, 32);
    rgpu_put_u32(hello + 60, psk_len ? 1 : 0);
    struct out_frame f = {{RGPU_OP_HELLO, 0, g.next_id++, 0, 0, sizeof agent - 1}, hello, HELLO_ARGS, agent};
    uint8_t sh[HELLO_ARGS], sagent[256];
    struct rgpu_sink sink = {sagent, sizeof sagent, 0};
    rgpu_header h;
    if (send_frames(&f, 1) || recv_reply(&h, sh, HELLO_ARGS, &sink))
        return CUDA_ERROR_NOT_INITIALIZED;
    if (h.status) {
        rgpu_log(RGPU_LOG_ERROR, "rgpu-server refused the session (status 0x%x): %s", h.status, g.message);
        return CUDA_ERROR_NOT_INITIALIZED;
    }
    if (memcmp(sh, "RGPUWIRE", 8) || rgpu_get_u16(sh + 8) != PROTO_MAJOR) {
        rgpu_log(RGPU_LOG_ERROR, "rgpu-server speaks protocol %u.x, this library %d.%d", rgpu_get_u16(sh + 8),
                 PROTO_MAJOR, PROTO_MINOR);
        return CUDA_ERROR_NOT_INITIALIZED;
    }
    g.max_frame = rgpu_get_u32(sh + 20);
    g.server_minor = rgpu_get_u16(sh + 10);
    if (g.server_minor < PROTO_MINOR)
        rgpu_log(RGPU_LOG_WARN, "rgpu-server speaks protocol 1.%u, this library 1.%d: newer calls will fail with "
                                "CUDA_ERROR_NOT_SUPPORTED; upgrade the server", g.server_minor, PROTO_MINOR);
    int server_auth = rgpu_get_u32(sh + 60) & 1;
    if (server_auth && !psk_len) {
        rgpu_log(RGPU_LOG_ERROR, "authentication failed: the server requires a pre-shared key (set RGPU_PSK_FILE)");
        return CUDA_ERROR_NOT_INITIALIZED;
    }
    if (psk_len && !server_auth) {
        rgpu_log(RGPU_LOG_ERROR, "authentication failed: the server did not ask for the pre-shared key; refusing "
                                 "to talk to it in clear");
        return CUDA_ERROR_NOT_INITIALIZED;
    }
    if (!psk_len)
        return CUDA_SUCCESS;
    int cipher = (int)rgpu_get_u32(sh + 24);
    if (cipher != RGPU_CIPHER_AES_256_GCM && cipher != RGPU_CIPHER_CHACHA20_POLY1305)
        return CUDA_ERROR_NOT_INITIALIZED;
    uint8_t th[32], proof[32], sproof[32], info[12 + 32], salt[64], keys[64], buf[20 + 32];
    if (transcript(hello, (const uint8_t *)agent, sizeof agent - 1, sh, sagent, sink.len, th))
        return CUDA_ERROR_NOT_INITIALIZED;
    memcpy(buf, "rgpu-v1 client proof", 20);
    memcpy(buf + 20, th, 32);
    rgpu_hmac_sha256(psk, psk_len, buf, 52, proof);
    struct out_frame a = {{RGPU_OP_AUTH, 0, g.next_id++, 0, 0, 0}, proof, 32, NULL};
    if (send_frames(&a, 1) || recv_reply(&h, sproof, 32, NULL))
        return CUDA_ERROR_NOT_INITIALIZED;
    if (h.status) {
        rgpu_log(RGPU_LOG_ERROR, "authentication failed: %s", h.status == STATUS_AUTH_FAILED ? "wrong key" : g.message);
        return CUDA_ERROR_NOT_INITIALIZED;
    }
    memcpy(buf, "rgpu-v1 server proof", 20);
    rgpu_hmac_sha256(psk, psk_len, buf, 52, proof);
    if (!ct_equal(proof, sproof, 32)) {
        rgpu_log(RGPU_LOG_ERROR, "authentication failed: the server does not hold our key");
        return CUDA_ERROR_NOT_INITIALIZED;
    }
    memcpy(info, "rgpu-v1 keys", 12);
    memcpy(info + 12, th, 32);
    memcpy(salt, nonce, 32);
    memcpy(salt + 32, sh + 28, 32);
    if (rgpu_hkdf_sha256(psk, psk_len, salt, 64, info, sizeof info, keys, 64))
        return CUDA_ERROR_NOT_INITIALIZED;
    g.tx = (struct rgpu_aead){cipher, {0}, 0};
    g.rx = (struct rgpu_aead){cipher, {0}, 0};
    memcpy(g.tx.key, keys, 32);
    memcpy(g.rx.key, keys + 32, 32);
    g.protect = 1;
    memset(psk, 0, sizeof psk);
    memset(keys, 0, sizeof keys);
    return CUDA_SUCCESS;
}

CUresult rgpu_connect(void)
{
    pthread_mutex_lock(&g.lock);
    if (g.state == 0) {
        const char *server = getenv("RGPU_SERVER");
        const char *batch = getenv("RGPU_BATCH");
        g.batching = !(batch && !strcmp(batch, "0"));
        const char *spin = getenv("RGPU_SPIN_US");
        g.spin_ns = (spin && *spin ? strtoull(spin, NULL, 10) : DEFAULT_SPIN_US) * 1000u;
        errno = 0;
        g.fd = dial(server);
        if (g.fd < 0) {
            rgpu_log(RGPU_LOG_ERROR, "cannot reach rgpu-server at %s: %s", server && *server ? server : "127.0.0.1:9713",
                     errno ? strerror(errno) : "unknown host or not host:port (set RGPU_SERVER or rgpu run --server)");
            g.state = -1;
            g.failure = CUDA_ERROR_NO_DEVICE;
        } else {
            struct timeval tv = {30, 0}, none = {0, 0};
            setsockopt(g.fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv); /* a silent peer must not hang cuInit */
            CUresult r = handshake();
            setsockopt(g.fd, SOL_SOCKET, SO_RCVTIMEO, &none, sizeof none);
            if (r == CUDA_SUCCESS) {
                g.state = 1;
                rgpu_log(RGPU_LOG_INFO, "connected to rgpu-server%s", g.protect ? " (PSK authenticated, encrypted)" : "");
            } else {
                close(g.fd);
                g.fd = -1;
                g.state = -1;
                g.failure = r;
            }
        }
    }
    CUresult r = g.state == 1 ? CUDA_SUCCESS : g.failure;
    pthread_mutex_unlock(&g.lock);
    return r;
}

/* -- the private interface of rgpu's other stand-ins (libcublas, libcublasLt): the same one connection ---- */
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

__attribute__((visibility("default"))) uint64_t rgpu_ext_stream(void *stream) { return rgpu_stream_handle(stream); }
