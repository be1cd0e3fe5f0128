/* Moving bytes: writes, polling reads through a small receive buffer, sealed records with a PSK, and one reply
 * at a time taken apart into its args and the caller's sink. */
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "aead_pipe.h"
#include "conn.h"
#include "send_iov.h"
#include "rgpu_clock.h"

/* Poll before sleeping: a reply usually comes within tens of microseconds (or, for a synchronize, as soon as the
 * GPU is done), and waking a thread that sleeps in recv costs a good part of that again, on both sides: in a VM
 * the sender's send waits on an interrupt through the host. Measured on the H200 box (bench/results
 * gpu-2026-12-03-sealed, runs 9-10): polling 300 us, yielding between polls, left llama.cpp's decode at 86-98% of
 * native where 50 us without yielding left it at 76-93%; 300 us without yielding was no better than 50. */
static ssize_t recv_waiting(void *b, size_t n)
{
    if (rgpu_conn.spin_ns) {
        uint64_t deadline = 0;
        for (;;) {
            ssize_t r = recv(rgpu_conn.fd, b, n, MSG_DONTWAIT);
            if (r >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK))
                return r;
            if (rgpu_conn.spin_yield) /* never keep a thread that shares this CPU from running (RGPU_SPIN_YIELD=0: do) */
                sched_yield();
            uint64_t now = rgpu_now_ns();
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
    conn_links_close();
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

/* Sealed records go out through one buffer of SEAL_PIECE bytes: small records share a write, and a big one is
 * encrypted a piece at a time, each piece on its way while the next is encrypted, instead of being copied whole
 * into a buffer, sealed whole, then sent. */
#define SEAL_PIECE (256u << 10)

static int seal_flush(void)
{
    struct iovec v = {rgpu_conn.sealed, rgpu_conn.sealed_len};
    rgpu_conn.sealed_len = 0;
    return v.iov_len ? rgpu_send_iov(rgpu_conn.fd, &v, 1) : 0;
}

/* Room for n more bytes in the buffer (n <= SEAL_PIECE), flushing it first when it lacks them. */
static uint8_t *seal_room(size_t n)
{
    if (SEAL_PIECE - rgpu_conn.sealed_len < n && seal_flush())
        return NULL;
    return rgpu_conn.sealed + rgpu_conn.sealed_len;
}

static int seal_bytes(const void *p, size_t n)
{
    const uint8_t *b = p;
    while (n) {
        uint8_t *out = seal_room(1);
        size_t k = SEAL_PIECE - rgpu_conn.sealed_len;
        k = n < k ? n : k;
        if (!out || rgpu_aead_update(&rgpu_conn.tx, b, k, out))
            return -1;
        rgpu_conn.sealed_len += k;
        b += k;
        n -= k;
    }
    return 0;
}

/* A big bulk of the record being sealed (its head in `sealed`), sealed by the AEAD pipe a piece at a time into
 * PIPED_SLOTS places of `piped`, each piece sent once sealed (with the head before the first, the tag after the
 * last; those sealed by then in one send) while the pipe seals the next. */
#define PIPED_SLOTS 4
static int seal_bulk_piped(struct rgpu_aead_pipe *pipe, const uint8_t *bulk, size_t n)
{
    const size_t piece = RGPU_AEAD_PIPE_PIECE, steps = (n + piece - 1) / piece;
    uint8_t tag[16];
    int error = 0;
    for (size_t given = 0, sent = 0; !error && sent < steps;) {
        for (; given < steps && given - sent < PIPED_SLOTS; given++) {
            size_t k = n - given * piece < piece ? n - given * piece : piece;
            rgpu_aead_pipe_give(pipe, &rgpu_conn.tx, bulk + given * piece, k,
                                rgpu_conn.piped + given % PIPED_SLOTS * piece);
        }
        if (rgpu_aead_pipe_take(pipe, (unsigned)sent + 1)) {
            error = EIO;
            break;
        }
        size_t upto = rgpu_aead_pipe_done(pipe), wrap = sent - sent % PIPED_SLOTS + PIPED_SLOTS;
        upto = upto < wrap ? upto : wrap; /* (one send takes consecutive places) */
        int last = upto == steps;
        if (last && rgpu_aead_seal_end(&rgpu_conn.tx, tag)) {
            error = EIO;
            break;
        }
        struct iovec v[3] = {{rgpu_conn.sealed, sent ? 0 : rgpu_conn.sealed_len},
                             {rgpu_conn.piped + sent % PIPED_SLOTS * piece, (last ? n : upto * piece) - sent * piece},
                             {tag, last ? sizeof tag : 0}};
        if (rgpu_send_iov(rgpu_conn.fd, v, 3))
            error = errno ? errno : EIO;
        sent = upto;
    }
    rgpu_conn.sealed_len = 0;
    if (rgpu_aead_pipe_release(pipe) && !error)
        error = EIO;
    errno = error;
    return error ? -1 : 0;
}

static int send_sealed(struct out_frame *f, int n)
{
    if (!rgpu_conn.sealed && !(rgpu_conn.sealed = malloc(SEAL_PIECE)))
        return -1;
    rgpu_conn.sealed_len = 0;
    for (int i = 0; i < n; i++) {
        uint8_t head[RGPU_PREFIX_SIZE + RGPU_HEADER_SIZE], *out;
        size_t body = RGPU_HEADER_SIZE + f[i].args_len + f[i].h.bulk_len;
        rgpu_pack_prefix_header(head, &f[i].h, f[i].args_len);
        rgpu_put_u32(head, body + 16);
        if (!(out = seal_room(RGPU_PREFIX_SIZE)))
            return -1;
        memcpy(out, head, RGPU_PREFIX_SIZE); /* the length prefix travels in the clear, as the cipher's aad */
        rgpu_conn.sealed_len += RGPU_PREFIX_SIZE;
        if (rgpu_aead_begin(&rgpu_conn.tx, 1, head) || seal_bytes(head + RGPU_PREFIX_SIZE, RGPU_HEADER_SIZE) ||
            seal_bytes(f[i].args, f[i].args_len))
            return -1;
        struct rgpu_aead_pipe *pipe;
        if (f[i].h.bulk_len > 2 * RGPU_AEAD_PIPE_PIECE &&
            (rgpu_conn.piped || (rgpu_conn.piped = malloc(PIPED_SLOTS * RGPU_AEAD_PIPE_PIECE))) &&
            (pipe = rgpu_aead_pipe_acquire())) {
            if (seal_bulk_piped(pipe, f[i].bulk, f[i].h.bulk_len))
                return -1;
            continue;
        }
        if (seal_bytes(f[i].bulk, f[i].h.bulk_len) || !(out = seal_room(16)) || rgpu_aead_seal_end(&rgpu_conn.tx, out))
            return -1;
        rgpu_conn.sealed_len += 16;
    }
    return seal_flush();
}

int conn_send_frames(struct out_frame *f, int n)
{
    uint8_t heads[4][RGPU_PREFIX_SIZE + RGPU_HEADER_SIZE];
    uint64_t total = 0;
    for (int i = 0; i < n; i++)
        total += RGPU_PREFIX_SIZE + RGPU_HEADER_SIZE + f[i].args_len + f[i].h.bulk_len;
    rgpu_stats_sent((uint64_t)n, total);
    if (rgpu_conn.protect)
        return send_sealed(f, n);
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
    return rgpu_send_iov(rgpu_conn.fd, iov, k);
}

/* One received record at a time, plain or sealed alike: rec_begin reads its length prefix (with a PSK, and starts
 * opening it), rec_read takes its next bytes (with a PSK decrypted where they land, a piece at a time while the
 * piece is in cache), rec_end checks that all of it was taken and, with a PSK, its tag. Until rec_end succeeds,
 * what rec_read wrote is unauthenticated: it may only decide where the record's next bytes go, and what was
 * handed on is wiped when rec_end fails. */
#define OPEN_PIECE (256u << 10)

static int rec_begin(size_t *body_len)
{
    uint8_t prefix[RGPU_PREFIX_SIZE];
    if (conn_read_all(prefix, sizeof prefix))
        return -1;
    size_t len = rgpu_get_u32(prefix), tag = rgpu_conn.protect ? 16 : 0;
    if (len > (size_t)rgpu_conn.max_frame + 4096 + 16 || len < RGPU_HEADER_SIZE + tag) {
        errno = EPROTO;
        return -1;
    }
    if (tag && rgpu_aead_begin(&rgpu_conn.rx, 0, prefix)) {
        errno = EBADMSG;
        return -1;
    }
    rgpu_conn.rec_left = *body_len = len - tag;
    return 0;
}

/* Sealed bytes received a pipe's piece at a time, each handed to the pipe to open while the next is received. */
static int rec_read_piped(struct rgpu_aead_pipe *pipe, uint8_t *b, size_t n)
{
    int error = 0;
    for (size_t off = 0, k; off < n && !error; off += k) {
        k = n - off < RGPU_AEAD_PIPE_PIECE ? n - off : RGPU_AEAD_PIPE_PIECE;
        rgpu_aead_pipe_help(pipe, 2); /* (what arrives meanwhile waits in the socket) */
        if (conn_read_all(b + off, k))
            error = errno ? errno : EPROTO;
        else
            rgpu_aead_pipe_give(pipe, &rgpu_conn.rx, b + off, k, b + off);
    }
    if (rgpu_aead_pipe_release(pipe) && !error)
        error = EBADMSG;
    errno = error;
    return error ? -1 : 0;
}

static int rec_read(void *p, size_t n)
{
    uint8_t *b = p;
    struct rgpu_aead_pipe *pipe;
    if (n > rgpu_conn.rec_left) {
        errno = EPROTO;
        return -1;
    }
    rgpu_conn.rec_left -= n;
    if (rgpu_conn.protect && n > 2 * RGPU_AEAD_PIPE_PIECE && (pipe = rgpu_aead_pipe_acquire()))
        return rec_read_piped(pipe, b, n);
    while (n) {
        size_t k = rgpu_conn.protect && n > OPEN_PIECE ? OPEN_PIECE : n;
        if (conn_read_all(b, k))
            return -1;
        if (rgpu_conn.protect && rgpu_aead_update(&rgpu_conn.rx, b, k, b)) {
            errno = EBADMSG;
            return -1;
        }
        b += k;
        n -= k;
    }
    return 0;
}

static int rec_skip(size_t n)
{
    uint8_t buf[4096];
    while (n) {
        size_t k = n < sizeof buf ? n : sizeof buf;
        if (rec_read(buf, k))
            return -1;
        n -= k;
    }
    return 0;
}

static int rec_end(void)
{
    uint8_t tag[16];
    if (rgpu_conn.rec_left) {
        errno = EPROTO;
        return -1;
    }
    if (rgpu_conn.protect && (conn_read_all(tag, sizeof tag) || rgpu_aead_open_end(&rgpu_conn.rx, tag))) {
        errno = EBADMSG;
        return -1;
    }
    return 0;
}

/* Read one frame's header and args (into scratch); its bulk is next in the record. */
static int recv_head(rgpu_header *h, size_t *args_len, const uint8_t **args)
{
    size_t len;
    uint8_t head[RGPU_HEADER_SIZE];
    if (rec_begin(&len) || rec_read(head, sizeof head))
        return -1;
    if (rgpu_parse_header(head, len, h, args_len)) {
        errno = EPROTO;
        return -1;
    }
    uint8_t *buf = scratch(*args_len + 1);
    if (!buf || rec_read(buf, *args_len))
        return -1;
    *args = buf;
    return 0;
}

int conn_finish_record(void *p, size_t n)
{
    return rec_read(p, n) || rec_end() ? -1 : 0;
}

/* Read one reply. Its args land in `reply` (exactly reply_len bytes when status is 0), its bulk in `sink`.
 * Kernel output ahead of it (OUTPUT frames) is written to stdout on the way. */
int conn_recv_reply(rgpu_header *h, void *reply, size_t reply_len, struct rgpu_sink *sink)
{
    size_t args_len;
    const uint8_t *args;
    do {
        if (recv_head(h, &args_len, &args))
            return -1;
    } while (h->opcode == RGPU_OP_OUTPUT && !conn_write_output(h, args_len));
    if (h->opcode == RGPU_OP_OUTPUT)
        return -1;
    if (h->status == 0 && args_len != reply_len) {
        errno = EPROTO;
        return -1;
    }
    size_t n = h->bulk_len, to_sink = 0, m = 0;
    if (sink && h->status == 0) {
        to_sink = n < sink->cap ? n : sink->cap;
        sink->len = n;
    }
    if (to_sink && rec_read(sink->buf, to_sink)) { /* bulk lands straight in the caller's memory */
        if (rgpu_conn.protect) /* a record cut short never authenticated: what arrived of it must go too */
            memset(sink->buf, 0, to_sink);
        return -1;
    }
    size_t rest = n - to_sink;
    if (h->status && rest) { /* keep the server's message for the log */
        m = rest < sizeof rgpu_conn.message - 1 ? rest : sizeof rgpu_conn.message - 1;
        if (rec_read(rgpu_conn.message, m)) {
            rgpu_conn.message[0] = 0;
            return -1;
        }
        rest -= m;
    }
    if (rec_skip(rest) || rec_end()) {
        if (to_sink) /* what a record that failed authentication held must not reach the program */
            memset(sink->buf, 0, to_sink);
        rgpu_conn.message[0] = 0;
        return -1;
    }
    rgpu_conn.message[m] = 0;
    if (h->status == 0 && reply_len)
        memcpy(reply, args, reply_len);
    return 0;
}
