/* Moving bytes: writes, polling reads through a small receive buffer, sealed records with a PSK, and one reply
 * at a time taken apart into its args and the caller's sink. */
#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "conn.h"

static int write_iov(struct iovec *iov, int n)
{
    while (n > 0) {
        /* MSG_NOSIGNAL: a server gone away is a lost connection (EPIPE), not a SIGPIPE that kills the program. */
        struct msghdr m = {.msg_iov = iov, .msg_iovlen = (size_t)(n > 64 ? 64 : n)};
        ssize_t w = sendmsg(rgpu_conn.fd, &m, MSG_NOSIGNAL);
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
    if (rgpu_conn.spin_ns) {
        uint64_t deadline = 0;
        for (;;) {
            ssize_t r = recv(rgpu_conn.fd, b, n, MSG_DONTWAIT);
            if (r >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK))
                return r;
            uint64_t now = now_ns();
            if (!deadline)
                deadline = now + rgpu_conn.spin_ns;
            else if (now >= deadline)
                break;
        }
    }
    return recv(rgpu_conn.fd, b, n, 0);
}

int conn_read_all(void *p, size_t n)
{
    uint8_t *b = p;
    while (n) {
        if (rgpu_conn.in_pos < rgpu_conn.in_len) {
            size_t k = n < rgpu_conn.in_len - rgpu_conn.in_pos ? n : rgpu_conn.in_len - rgpu_conn.in_pos;
            memcpy(b, rgpu_conn.in + rgpu_conn.in_pos, k);
            rgpu_conn.in_pos += k;
            b += k;
            n -= k;
            continue;
        }
        int direct = n >= sizeof rgpu_conn.in; /* bulk goes straight to the caller's memory */
        ssize_t r = direct ? recv_waiting(b, n) : recv_waiting(rgpu_conn.in, sizeof rgpu_conn.in);
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
            rgpu_conn.in_pos = 0;
            rgpu_conn.in_len = (size_t)r;
        }
    }
    return 0;
}

static uint8_t *scratch(size_t n)
{
    if (n > rgpu_conn.scratch_cap) {
        uint8_t *p = realloc(rgpu_conn.scratch, n);
        if (!p)
            return NULL;
        rgpu_conn.scratch = p;
        rgpu_conn.scratch_cap = n;
    }
    return rgpu_conn.scratch;
}

void conn_hang_up(void)
{
    rgpu_conn.state = -1;
    rgpu_conn.failure = CUDA_ERROR_DEVICE_UNAVAILABLE;
    if (rgpu_conn.fd >= 0)
        close(rgpu_conn.fd);
    rgpu_conn.fd = -1;
    rgpu_conn.in_pos = rgpu_conn.in_len = 0;
}

void conn_lost(const char *what)
{
    if (rgpu_conn.state == 1)
        rgpu_log(RGPU_LOG_ERROR, "connection to rgpu-server lost (%s: %s); further CUDA calls fail", what,
                 strerror(errno));
    conn_hang_up();
}

int conn_send_frames(struct out_frame *f, int n)
{
    uint8_t heads[4][RGPU_PREFIX_SIZE + RGPU_HEADER_SIZE];
    uint64_t total = 0;
    for (int i = 0; i < n; i++)
        total += RGPU_PREFIX_SIZE + RGPU_HEADER_SIZE + f[i].args_len + f[i].h.bulk_len;
    rgpu_stats_sent((uint64_t)n, total);
    if (!rgpu_conn.protect) {
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
        if (f[i].args_len) /* args may be NULL when empty, and memcpy's pointers may not */
            memcpy(plain + RGPU_HEADER_SIZE, f[i].args, f[i].args_len);
        if (f[i].h.bulk_len)
            memcpy(plain + RGPU_HEADER_SIZE + f[i].args_len, f[i].bulk, f[i].h.bulk_len);
        rgpu_put_u32(rec, body + 16);
        if (rgpu_aead_seal(&rgpu_conn.tx, rec, plain, body, rec + RGPU_PREFIX_SIZE))
            return -1;
        struct iovec iov = {rec, RGPU_PREFIX_SIZE + body + 16};
        if (write_iov(&iov, 1))
            return -1;
    }
    return 0;
}

/* Read one frame's header and args; protected, the whole record is opened and *bulk points at its bulk, plain
 * the bulk is still on the socket (*bulk is NULL). */
static int recv_head(rgpu_header *h, size_t *args_len, const uint8_t **args, const uint8_t **bulk)
{
    uint8_t prefix[RGPU_PREFIX_SIZE];
    if (conn_read_all(prefix, sizeof prefix))
        return -1;
    size_t len = rgpu_get_u32(prefix);
    if (len > (size_t)rgpu_conn.max_frame + 4096 + 16 || len < RGPU_HEADER_SIZE) {
        errno = EPROTO;
        return -1;
    }
    *bulk = NULL;
    if (rgpu_conn.protect) {
        uint8_t *buf = scratch(2 * len);
        if (!buf || conn_read_all(buf, len) || rgpu_aead_open(&rgpu_conn.rx, prefix, buf, len, buf + len)) {
            errno = EBADMSG;
            return -1;
        }
        if (rgpu_parse_header(buf + len, len - 16, h, args_len)) {
            errno = EPROTO;
            return -1;
        }
        *args = buf + len + RGPU_HEADER_SIZE;
        *bulk = *args + *args_len;
        return 0;
    }
    uint8_t head[RGPU_HEADER_SIZE];
    if (conn_read_all(head, sizeof head) || rgpu_parse_header(head, len, h, args_len)) {
        errno = EPROTO;
        return -1;
    }
    uint8_t *buf = scratch(*args_len + 1);
    if (!buf || conn_read_all(buf, *args_len))
        return -1;
    *args = buf;
    return 0;
}

/* Read one reply. Its args land in `reply` (exactly reply_len bytes when status is 0), its bulk in `sink`.
 * Kernel output ahead of it (OUTPUT frames) is written to stdout on the way. */
int conn_recv_reply(rgpu_header *h, void *reply, size_t reply_len, struct rgpu_sink *sink)
{
    size_t args_len;
    const uint8_t *args, *bulk;
    do {
        if (recv_head(h, &args_len, &args, &bulk))
            return -1;
    } while (h->opcode == RGPU_OP_OUTPUT && !conn_write_output(h, args_len, bulk));
    if (h->opcode == RGPU_OP_OUTPUT)
        return -1;
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
    if (rgpu_conn.protect) {
        if (to_sink)
            memcpy(sink->buf, bulk, to_sink);
        bulk += to_sink;
    } else if (to_sink && conn_read_all(sink->buf, to_sink)) { /* plain: bulk lands straight in the caller's memory */
        return -1;
    }
    size_t rest = n - to_sink;
    if (h->status && rest) { /* keep the server's message for the log */
        size_t m = rest < sizeof rgpu_conn.message - 1 ? rest : sizeof rgpu_conn.message - 1;
        if (rgpu_conn.protect)
            memcpy(rgpu_conn.message, bulk, m);
        else if (conn_read_all(rgpu_conn.message, m))
            return -1;
        rgpu_conn.message[m] = 0;
        rest -= m;
        bulk += m;
    }
    if (!rgpu_conn.protect) {
        uint8_t sink_buf[4096];
        while (rest) {
            size_t k = rest < sizeof sink_buf ? rest : sizeof sink_buf;
            if (conn_read_all(sink_buf, k))
                return -1;
            rest -= k;
        }
    }
    return 0;
}
