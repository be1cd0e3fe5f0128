/* The shim's connection to rgpu-server (one per server), shared by the conn_*.c files (one concern each): its state, guarded
 * by rgpu_conn.lock (one call on the wire at a time, from any thread), and their internal interface. Nothing here is
 * exported; the shim's own interface is rgpu_shim.h.
 *
 * Configuration (environment): RGPU_SERVER=host:port (default 127.0.0.1:9713; several: comma-separated, one
 * connection each, see conn_route.c), RGPU_PSK_FILE=path (or one per server, comma-separated),
 * RGPU_BATCH=0 (send asynchronous calls one by one and wait for each), RGPU_SPIN_US=n (how long to poll for a
 * reply before sleeping in recv; default 300, 0 = never poll), RGPU_SPIN_YIELD=0 (no sched_yield between polls),
 * RGPU_COPY_LINKS=n (big copies up over n extra connections, conn_links.c), RGPU_LOG=level. */
#ifndef RGPU_CONN_H
#define RGPU_CONN_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "crypto.h"
#include "rgpu_shim.h"

#define COPY_CHUNK (4u << 20)
#define MIN_MAX_FRAME (64u << 10) /* a copy chunk plus headers; a server announcing less cannot be used */

/* Device work sent and not known finished (conn_work.c): per stream, the id of its latest request. Room for
 * PyTorch's pool of 32 streams per priority and XLA's handful: past it, "work on an unknown stream" makes every
 * later synchronize wait until a context synchronize. A linear scan of 64 entries costs tens of nanoseconds. */
#define CONN_WORK_STREAMS 64
struct conn_work_entry {
    uint64_t stream;
    uint32_t id;
};
#define CONN_TOUCHED_STREAMS 64
struct conn_work {
    struct conn_work_entry streams[CONN_WORK_STREAMS];
    unsigned n;
    uint32_t unknown; /* id of the latest work on a stream no longer tracked; 0: none */
    /* Per stream, the id of the latest request that may have put something on it (ops.touches_stream_field);
     * the oldest entries fold into touched_unknown. */
    struct conn_work_entry touched[CONN_TOUCHED_STREAMS];
    unsigned ntouched;
    uint32_t touched_unknown;
    uint64_t *live;   /* the streams this server made that are not destroyed */
    size_t nlive, live_cap;
};

struct rgpu_connection {
    pthread_mutex_t lock;
    int state;        /* 0 not connected, 1 ready, -1 failed or lost */
    CUresult failure; /* what every call returns once state is -1 */
    int fd;
    uint32_t next_id;
    uint32_t max_frame;
    uint16_t server_minor;
    uint64_t features; /* negotiated with the server (RGPU_FEATURE_*), once the handshake is complete */
    int batching;
    uint8_t *batch;
    size_t batch_len, batch_cap;
    unsigned batch_calls;
    unsigned batch_limit; /* calls queued before the batch goes out on its own (conn_batch.c); 0: the first */
    unsigned batch_first; /* the first such limit after a reply; 0: BATCH_FIRST_CALLS ($RGPU_BATCH_FIRST) */
    int batch_graph;      /* a graph launch sends the queue at once ($RGPU_BATCH_GRAPH=1, conn_batch.c) */
    uint32_t sealed_chunk; /* a sealed copy up's records' bulk; 0: SEALED_HTOD_CHUNK ($RGPU_SEALED_COPY_KIB) */
    int protect;
    struct rgpu_aead tx, rx;
    uint64_t server_ctx; /* the context the server currently runs our calls in */
    uint8_t *scratch;
    size_t scratch_cap;
    uint8_t *sealed; /* with a PSK: records being sealed, on their way out (conn_io.c) */
    size_t sealed_len;
    uint8_t *piped;  /* with a PSK: a big bulk's pieces the AEAD pipe sealed, on their way out (conn_io.c) */
    size_t rec_left; /* bytes of the record being received not yet read (conn_io.c) */
    char message[256]; /* last error message from the server */
    uint64_t spin_ns;
    int spin_yield; /* give the CPU away between polls (conn_io.c); RGPU_SPIN_YIELD=0: do not */
    struct conn_links *links; /* RGPU_COPY_LINKS: the connections that carry big copies' bytes (conn_links.c) */
    size_t links_min_bytes;   /* copies up from this size go over them; 0: no links (read without the lock) */
    struct conn_work work;
    int held_sync;        /* a deferred synchronize of held_stream not yet queued (conn_held.c) */
    uint64_t held_stream;
    /* Received bytes not yet consumed: a small reply arrives in one recv instead of one per field. */
    size_t in_pos, in_len;
    uint8_t in[16384];
};
/* One connection per server (RGPU_SERVER=hostA:port,hostB:port): every call goes to the connection routing
 * chose for it on this thread (conn_route.c), which the conn_*.c files name as rgpu_conn. */
#define RGPU_MAX_SERVERS 8
extern struct rgpu_connection rgpu_conns[RGPU_MAX_SERVERS];
extern int rgpu_nservers; /* how many RGPU_SERVER names (1 until rgpu_connect) */
extern __thread struct rgpu_connection *conn_cur;
#define rgpu_conn (*conn_cur)

/* A frame to send: header, args, bulk (h.bulk_len bytes). */
struct out_frame {
    rgpu_header h;
    const void *args;
    size_t args_len;
    const void *bulk;
};

/* conn_io.c: moving bytes. Each returns 0, or -1 with errno set (the caller decides whether the connection is
 * lost). Plain: one writev, bulk never copied; protected: sealed records. */
int conn_send_frames(struct out_frame *f, int n);
/* Read one reply: its args land in `reply` (exactly reply_len bytes when status is 0), its bulk in `sink`. */
int conn_recv_reply(rgpu_header *h, void *reply, size_t reply_len, struct rgpu_sink *sink);
int conn_read_all(void *p, size_t n); /* exactly n bytes from the server, through the receive buffer */
/* The last n bytes of the record being received, into p, then its end (with a PSK, its tag) checked: 0, or -1
 * and nothing in p may be used. */
int conn_finish_record(void *p, size_t n);
void conn_hang_up(void);          /* close; every later call fails with rgpu_conn.failure */
void conn_lost(const char *what); /* conn_hang_up with a log line naming what failed */

/* conn_links.c: copy links (RGPU_COPY_LINKS). open: after the handshake, ask the server for links and join them
 * (any failure: none, logged). carry: whether deferred request `op` with bulk_len bytes goes over them. copy: send
 * the f[0, n) frames queued before it, then its MEMCPY_HTOD_LINKED frame, then its bytes over the links; 0 (a link
 * that failed closes them all, logged, and the server fails the copy), or -1 with errno when the connection itself
 * is lost. close: stop the links' threads, close them. */
struct conn_links;
void conn_links_open(const char *server);
int conn_links_carry(uint16_t op, size_t bulk_len);
int conn_links_copy(uint16_t op, const void *args, size_t args_len, const void *bulk, size_t bulk_len,
                    struct out_frame *f, int n);
void conn_links_close(void);

/* conn_fork.c: watch (once, from rgpu_connect): a forked child's connections are closed and its calls fail as the
 * driver's do there. conn_handshake.c: connect_forked: rgpu_connect's answer in such a child. */
void conn_fork_watch(void);
void conn_connect_forked(void);

/* conn_output.c: an OUTPUT frame's bulk (the rest of the record being received) to this program's stdout. */
int conn_write_output(const rgpu_header *h, size_t args_len);

/* conn_batch.c: deferred calls queued into one BATCH frame. */
int conn_batch_append(uint16_t op, const void *args, size_t args_len, const void *bulk, size_t bulk_len);
int conn_take_batch(struct out_frame *f); /* the queue as one frame to send first, or 0 frames */
void conn_batch_sent(void);
void conn_batch_restart(void); /* the program waited for a reply: the next batch goes out early again */

/* conn_held.c: a deferred stream synchronize held back until a request that may not pass it. conn_before: before
 * request `op` is queued or sent, queue the held synchronize unless `op` may pass it. conn_hold_sync: hold one for
 * `stream`. conn_release_held: queue it now. Each 0, or -1 when the queue could not grow. */
int conn_before(uint16_t op, const void *args, size_t args_len);
int conn_hold_sync(uint64_t stream);
int conn_release_held(void);

/* conn_work.c: the u64 at `offset` of a request's (or reply's) fields, 0 when they are shorter (a stream, a context) */
uint64_t conn_u64_at(const void *args, size_t args_len, int offset);
/* conn_work.c: every request as it is sent, every successful reply as it arrives (under the lock). */
void conn_note_sent(uint16_t op, const void *args, size_t args_len, uint32_t id);
void conn_note_reply(uint16_t op, const void *args, size_t args_len, const void *reply, size_t reply_len,
                     uint32_t id);

/* conn_context.c: tell the server the calling thread's context before an operation that runs in it. */
void conn_sync_context(uint16_t op);

/* conn_route.c: which connection a call goes to (sets conn_cur); `args` may be replaced by a copy in `buf`
 * (RGPU_ROUTE_BUF bytes) with the device ordinal translated to the server's own. Not 0: the call must fail
 * with that result (an ordinal no server has). */
#define RGPU_ROUTE_BUF 256
CUresult conn_select(uint16_t op, const void **args, size_t args_len, uint8_t *buf);
void conn_select_current(void);                      /* the connection of the thread's current context */
/* Remember the handle a call made (its server holds conn_cur's lock); not CUDA_SUCCESS: the call fails. */
CUresult conn_after(uint16_t op, const void *reply, size_t reply_len);
int conn_index(void);                                /* of conn_cur */
int conn_owns_ctx(uint64_t ctx);                     /* is ctx a context of conn_cur's server */

/* conn_calls.c */
CUresult conn_call_locked(uint16_t op, const void *args, size_t args_len, const void *bulk, size_t bulk_len,
                          void *reply, size_t reply_len, struct rgpu_sink *sink);
CUresult conn_not_ready(void);

/* conn_dial.c: a connected TCP socket to host:port (IPv6 as [addr]:port), or -1 with errno. */
int conn_dial(const char *spec);

/* conn_psk.c: the pre-shared key, and the PSK half of the handshake (proofs over the transcript, record keys). */
/* 0, -1 unreadable, -2 too short, -3 refused: others may read it (logged here) */
int conn_load_psk(const char *path, uint8_t *key, size_t *key_len);
struct conn_hellos {
    const uint8_t *client, *server; /* both HELLOs' args (RGPU_HELLO_REQ_SIZE bytes each) */
    const uint8_t *client_agent, *server_agent;
    size_t client_agent_len, server_agent_len;
    const struct rgpu_hello_req *req;
    const struct rgpu_hello_rep *rep;
};
CUresult conn_authenticate(const uint8_t *psk, size_t psk_len, const struct conn_hellos *hellos);

#endif
