/* Connecting once per process: dial, HELLO (versions, features, the frame limit), PSK authentication. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include "conn.h"

#define DEFAULT_SPIN_US 300

/* HELLO, then (with a key) AUTH. */
static CUresult hello(const uint8_t *psk, size_t psk_len)
{
    static const char agent[] = "rgpu-libcuda/0.1";
    struct rgpu_hello_req req = {.major = RGPU_PROTO_MAJOR, .minor = RGPU_PROTO_MINOR, .features = RGPU_FEATURES,
                                 .ciphers = psk_len ? RGPU_CIPHER_AES_256_GCM | RGPU_CIPHER_CHACHA20_POLY1305 : 0,
                                 .flags = psk_len ? RGPU_HELLO_FLAG_PSK : 0};
    memcpy(req.magic, RGPU_HELLO_MAGIC, sizeof req.magic);
    if (getrandom(req.nonce, sizeof req.nonce, 0) != sizeof req.nonce)
        return CUDA_ERROR_NOT_INITIALIZED;
    uint8_t hello[RGPU_HELLO_REQ_SIZE];
    rgpu_pack_hello(hello, &req);
    struct out_frame f = {{RGPU_OP_HELLO, 0, rgpu_conn.next_id++, 0, 0, sizeof agent - 1}, hello, sizeof hello, agent};
    uint8_t sh[RGPU_HELLO_REP_SIZE], sagent[256];
    struct rgpu_sink sink = {sagent, sizeof sagent, 0};
    rgpu_header h;
    if (conn_send_frames(&f, 1) || conn_recv_reply(&h, sh, sizeof sh, &sink))
        return CUDA_ERROR_NOT_INITIALIZED;
    if (h.status) {
        rgpu_log(RGPU_LOG_ERROR, "rgpu-server refused the session (status 0x%x): %s", h.status, rgpu_conn.message);
        return CUDA_ERROR_NOT_INITIALIZED;
    }
    struct rgpu_hello_rep rep;
    if (rgpu_unpack_hello(sh, sizeof sh, &rep) || memcmp(rep.magic, RGPU_HELLO_MAGIC, sizeof rep.magic) ||
        rep.major != RGPU_PROTO_MAJOR) {
        rgpu_log(RGPU_LOG_ERROR, "rgpu-server speaks protocol %u.x, this library %d.%d", rep.major, RGPU_PROTO_MAJOR,
                 RGPU_PROTO_MINOR);
        return CUDA_ERROR_NOT_INITIALIZED;
    }
    if (rep.max_frame < MIN_MAX_FRAME) {
        rgpu_log(RGPU_LOG_ERROR, "rgpu-server announces a frame limit of %u bytes, below the %u this library needs",
                 rep.max_frame, MIN_MAX_FRAME);
        return CUDA_ERROR_NOT_INITIALIZED;
    }
    /* The limit sizes what this side reads and allocates before it can check anything: never above its own. */
    rgpu_conn.max_frame = rep.max_frame < RGPU_DEFAULT_MAX_RECORD ? rep.max_frame : RGPU_DEFAULT_MAX_RECORD;
    rgpu_conn.server_minor = rep.minor;
    if (rgpu_conn.server_minor < RGPU_PROTO_MINOR)
        rgpu_log(RGPU_LOG_WARN, "rgpu-server speaks protocol 1.%u, this library 1.%d: newer calls will fail with "
                                "CUDA_ERROR_NOT_SUPPORTED; upgrade the server",
                 rgpu_conn.server_minor, RGPU_PROTO_MINOR);
    int server_auth = (rep.flags & RGPU_HELLO_FLAG_PSK) != 0;
    if (server_auth && !psk_len) {
        rgpu_log(RGPU_LOG_ERROR, "authentication failed: the server requires a pre-shared key (set RGPU_PSK_FILE)");
        return CUDA_ERROR_NOT_INITIALIZED;
    }
    if (psk_len && !server_auth) {
        rgpu_log(RGPU_LOG_ERROR, "authentication failed: the server did not ask for the pre-shared key; refusing "
                                 "to talk to it in clear");
        return CUDA_ERROR_NOT_INITIALIZED;
    }
    CUresult r = CUDA_SUCCESS;
    if (psk_len) {
        struct conn_hellos hellos = {hello, sh, (const uint8_t *)agent, sagent, sizeof agent - 1, sink.len, &req, &rep};
        r = conn_authenticate(psk, psk_len, &hellos);
    }
    if (r == CUDA_SUCCESS) /* only now: no kernel output is taken from a server that has not proved its key */
        rgpu_conn.features = rep.features & RGPU_FEATURES;
    return r;
}

static CUresult handshake(const char *psk_file)
{
    uint8_t psk[1024];
    size_t psk_len = 0;
    int rc = psk_file && *psk_file ? conn_load_psk(psk_file, psk, &psk_len) : 0;
    CUresult r = CUDA_ERROR_NOT_INITIALIZED;
    if (rc == -1 || rc == -2)
        rgpu_log(RGPU_LOG_ERROR, rc == -2 ? "PSK in %s is shorter than 32 bytes" : "cannot read PSK file %s",
                 psk_file);
    else if (!psk_len || !rgpu_crypto_load())
        r = hello(psk, psk_len);
    memset(psk, 0, sizeof psk); /* on every path: the key stays in its file, not in a dead stack frame */
    return r;
}

/* Connect conn_cur to `server` (host:port) with the key in `psk_file` (NULL or empty: none). */
static CUresult connect_one(const char *server, const char *psk_file)
{
    const char *batch = getenv("RGPU_BATCH");
    rgpu_conn.batching = !(batch && !strcmp(batch, "0"));
    const char *first = getenv("RGPU_BATCH_FIRST"); /* benchmarks: how early the first batch goes (conn_batch.c) */
    rgpu_conn.batch_first = first && *first ? (unsigned)strtoul(first, NULL, 10) : 0;
    const char *graph = getenv("RGPU_BATCH_GRAPH"); /* benchmarks: a graph launch sends the queue (conn_batch.c) */
    rgpu_conn.batch_graph = graph && !strcmp(graph, "1");
    /* benchmarks: the bulk of a sealed copy's records in KiB (conn_context.c), at least 64 */
    const char *sealed = getenv("RGPU_SEALED_COPY_KIB");
    unsigned long kib = sealed && *sealed ? strtoul(sealed, NULL, 10) : 0;
    rgpu_conn.sealed_chunk = kib ? (uint32_t)((kib < 64 ? 64 : kib > 4096 ? 4096 : kib) << 10) : 0;
    const char *spin = getenv("RGPU_SPIN_US");
    rgpu_conn.spin_ns = (spin && *spin ? strtoull(spin, NULL, 10) : DEFAULT_SPIN_US) * 1000u;
    const char *yield = getenv("RGPU_SPIN_YIELD");
    rgpu_conn.spin_yield = !(yield && !strcmp(yield, "0"));
    errno = 0;
    rgpu_conn.fd = conn_dial(server);
    if (rgpu_conn.fd < 0) {
        rgpu_log(RGPU_LOG_ERROR, "cannot reach rgpu-server at %s: %s", *server ? server : "127.0.0.1:9713",
                 errno ? strerror(errno) : "unknown host or not host:port (set RGPU_SERVER or rgpu run --server)");
        rgpu_conn.state = -1;
        rgpu_conn.failure = CUDA_ERROR_NO_DEVICE;
        return rgpu_conn.failure;
    }
    struct timeval tv = {30, 0}, none = {0, 0};
    setsockopt(rgpu_conn.fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv); /* a silent peer must not hang cuInit */
    CUresult r = handshake(psk_file);
    if (r == CUDA_SUCCESS) {
        rgpu_conn.state = 1;
        rgpu_log(RGPU_LOG_INFO, "connected to rgpu-server %s%s", *server ? server : "127.0.0.1:9713",
                 rgpu_conn.protect ? " (PSK authenticated, encrypted)" : "");
        conn_links_open(*server ? server : "127.0.0.1:9713"); /* (still under the timeout: it asks the server) */
    }
    setsockopt(rgpu_conn.fd, SOL_SOCKET, SO_RCVTIMEO, &none, sizeof none);
    if (r == CUDA_SUCCESS) {
        r = rgpu_conn.state == 1 ? CUDA_SUCCESS : rgpu_conn.failure; /* (the connection lost while asking) */
    } else {
        close(rgpu_conn.fd);
        rgpu_conn.fd = -1;
        rgpu_conn.state = -1;
        rgpu_conn.failure = r;
    }
    return r;
}

/* The i-th of `n` comma-separated items of `list` into out (empty when list is NULL). -1: too long. */
static int item(const char *list, int i, char *out, size_t cap)
{
    out[0] = 0;
    for (; list && i > 0; i--)
        list = strchr(list, ',') ? strchr(list, ',') + 1 : NULL;
    if (!list)
        return 0;
    size_t len = strchr(list, ',') ? (size_t)(strchr(list, ',') - list) : strlen(list);
    if (len >= cap)
        return -1;
    memcpy(out, list, len);
    out[len] = 0;
    return 0;
}

static int count_items(const char *list)
{
    int n = 1;
    for (; list && (list = strchr(list, ',')); list++)
        n++;
    return n;
}

/* Every server of RGPU_SERVER, once per process: cuInit succeeds only when each answers (the devices are
 * numbered across them in order, so one missing would renumber the rest). RGPU_PSK_FILE is one key for all, or
 * one file per server in the same order. */
static pthread_mutex_t connect_lock = PTHREAD_MUTEX_INITIALIZER;
RGPU_FORK_RESET(connect_lock, &connect_lock)
static int connect_tried;
static CUresult connect_result;

void conn_connect_forked(void)
{
    connect_tried = 1;
    connect_result = CUDA_ERROR_NOT_INITIALIZED;
}

CUresult rgpu_connect(void)
{
    conn_fork_watch();
    pthread_mutex_lock(&connect_lock);
    if (!connect_tried) {
        connect_tried = 1;
        const char *servers = getenv("RGPU_SERVER"), *keys = getenv("RGPU_PSK_FILE");
        int n = count_items(servers), n_keys = keys && *keys ? count_items(keys) : 0;
        connect_result = CUDA_SUCCESS;
        if (n > RGPU_MAX_SERVERS || (n_keys > 1 && n_keys != n)) {
            rgpu_log(RGPU_LOG_ERROR, n > RGPU_MAX_SERVERS ? "RGPU_SERVER names more than %d servers"
                                                          : "RGPU_PSK_FILE names one key file, or one per server "
                                                            "of RGPU_SERVER (at most %d)", RGPU_MAX_SERVERS);
            connect_result = CUDA_ERROR_NO_DEVICE;
            n = 0;
        }
        for (int i = 0; i < n; i++) {
            char server[320], key[4096];
            conn_cur = &rgpu_conns[i];
            pthread_mutex_lock(&rgpu_conn.lock);
            CUresult r = item(servers, i, server, sizeof server) || item(keys, n_keys > 1 ? i : 0, key, sizeof key)
                             ? CUDA_ERROR_INVALID_VALUE
                             : connect_one(server, key);
            if (r != CUDA_SUCCESS) {
                rgpu_conn.state = -1;
                rgpu_conn.failure = r;
                if (connect_result == CUDA_SUCCESS)
                    connect_result = r;
            }
            pthread_mutex_unlock(&rgpu_conn.lock);
        }
        if (n > 0)
            rgpu_nservers = n;
        if (connect_result != CUDA_SUCCESS && n > 1) {
            rgpu_log(RGPU_LOG_ERROR, "not every server of RGPU_SERVER=%s answered; CUDA calls fail", servers);
            for (int i = 0; i < n; i++) {
                conn_cur = &rgpu_conns[i];
                pthread_mutex_lock(&rgpu_conn.lock);
                conn_hang_up();
                rgpu_conn.failure = connect_result;
                pthread_mutex_unlock(&rgpu_conn.lock);
            }
        }
        conn_cur = &rgpu_conns[0];
    }
    CUresult r = connect_result;
    pthread_mutex_unlock(&connect_lock);
    return r;
}
