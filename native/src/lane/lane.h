/* The worker's fast lane (librgpu_lane.so): runs the records of a BATCH frame that are the hottest deferred
 * calls -- kernel launches (with plain launch attributes too), small host-to-device copies, stream-ordered
 * memsets, stream synchronizes, graph launches, cuDNN batch norms (inference) and plan executions -- in C, so the
 * Python worker is off their per-call path.
 *
 * Python stays the authority. It resolves and checks handles on its own path, then *binds* what it resolved
 * here (raw driver objects per handle pair); it pushes the session's device regions after every change and
 * forgets every binding once a handle any of them was resolved from is gone (HandleTable.watch). The lane runs
 * a record only when everything it needs is bound and every check passes; at anything else it stops *before*
 * touching it, and Python runs that record (and gives any error its message). A driver call that fails stops
 * the lane after the record, with the status, for Python to defer as usual.
 *
 * This header is the whole interface: rgpu/backends/lane.py hands it to cffi as it is (lines starting
 * with '#' removed), so it holds declarations only. */
#ifndef RGPU_LANE_H
#define RGPU_LANE_H
#include <stddef.h>
#include <stdint.h>

/* CUlaunchConfig, field for field. */
typedef struct rgpu_lane_launch_config {
    unsigned gx, gy, gz, bx, by, bz, shmem;
    uintptr_t stream;
    void *attrs; /* CUlaunchAttribute[count]: a 4-byte id, 4 bytes of padding, a 64-byte value */
    unsigned count;
} rgpu_lane_launch_config;

/* The driver calls the lane makes: libcuda's own, or a test's stand-ins. Handles travel as uintptr_t. */
typedef struct rgpu_lane_driver {
    int (*ctx_set_current)(uintptr_t ctx);
    int (*launch_kernel)(uintptr_t f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                         unsigned bz, unsigned shmem, uintptr_t stream, void **params, void **extra);
    int (*memcpy_htod_async)(unsigned long long dst, const void *src, size_t n, uintptr_t stream);
    int (*memset_d8_async)(unsigned long long dst, unsigned char value, size_t n, uintptr_t stream);
    int (*memset_d32_async)(unsigned long long dst, unsigned int value, size_t n, uintptr_t stream);
    int (*event_record)(uintptr_t event, uintptr_t stream);
    int (*event_synchronize)(uintptr_t event);
    int (*stream_synchronize)(uintptr_t stream);
    int (*launch_kernel_ex)(const rgpu_lane_launch_config *config, uintptr_t f, void **params, void **extra);
    int (*graph_launch)(uintptr_t exec, uintptr_t stream);
    int (*memcpy_dtoh_async)(void *dst, unsigned long long src, size_t n, uintptr_t stream);
    int (*mem_get_info)(size_t *free, size_t *total);
    int (*ctx_synchronize)(void);
} rgpu_lane_driver;

/* A context's page-locked slots for small host-to-device copies, used in turn; a slot's event says when the
 * GPU has read it (see rgpu/backends/cuda_copyring.py for why); copies back through it set a slot's event too,
 * once the GPU has written it. Filled in by Python; `next` and `pending` change only in the lane (pending[i]: 0, or
 * 1 + the slot whose event a copy over slot i recorded). */
typedef struct rgpu_lane_ring {
    char *base;
    size_t slot_bytes;
    int slots; /* at most 64 */
    int next;
    uintptr_t events[64];
    unsigned char pending[64];
    /* the CUfunction rgpu_runs_fill in the ring's context (rgpu/backends/runs_fill.py), launched in blocks of
     * RGPU_LANE_FILL_THREADS, or 0: coded copies that qualify (lane.c, htod_runs) are then planned into slots and
     * filled by that kernel, which reads the plan from them (no decoding on the CPU, no copy of the decoded bytes);
     * the others are decoded into slots and copied */
    uintptr_t runs_fill;
    size_t fill_min; /* the fill only for coded copies of this many bytes or more (smaller ones decode: the copy it
                        saves costs less than a launch) */
} rgpu_lane_ring;
enum { RGPU_LANE_FILL_THREADS = 256 }; /* (an entry's RGPU_RUNS_FILL_WORDS words are 16 stores a thread) */

/* A coded copy's bytes (MEMCPY_HTOD_RUNS, native/src/copy_runs.h): coded[0, len) into out[0, n); 0, or -1 where
 * the coding does not stand for exactly n bytes. The worker's Python path decodes with it too. */
int rgpu_lane_runs_decode(const uint8_t *coded, size_t len, uint8_t *out, size_t n);

/* cuMemcpyHtoDAsync of n <= slot_bytes bytes through the ring's next slot; the CUresult (0: queued). The
 * failing call's name lands in *what (a static string). */
int rgpu_lane_ring_copy(const rgpu_lane_driver *d, rgpu_lane_ring *r, unsigned long long dst, const void *src,
                        size_t n, uintptr_t stream, const char **what);

typedef struct rgpu_lane rgpu_lane;

/* Where a run stopped: at `pos` of the batch; `status` nonzero when the record just before `pos` ran and its
 * driver call failed (`opcode`, `request_id` and `what` name it); `status` 0 and pos < end: the record at
 * pos is Python's to run. */
typedef struct rgpu_lane_stop {
    size_t pos;
    int status;
    unsigned opcode;
    unsigned request_id;
    const char *what;
} rgpu_lane_stop;

/* Per operation the lane ran: how many, the nanoseconds they took, and the replies the request loop sent for them
 * (taken by rgpu_lane_take_counts). RGPU_LANE_COUNTS rows hold every operation the lane counts. */
enum { RGPU_LANE_COUNTS = 24 };
typedef struct rgpu_lane_count {
    unsigned opcode;
    unsigned long long calls;
    unsigned long long ns;
    unsigned long long replies;
} rgpu_lane_count;

rgpu_lane *rgpu_lane_new(const rgpu_lane_driver *driver, size_t max_param_bytes);
void rgpu_lane_free(rgpu_lane *lane);

/* Bindings, by the client's handles. A launch, with or without attributes: (function, stream); stream 0 is
 * the NULL stream of the function's context. A stream for copies, memsets and synchronizes: (stream, context
 * key), the key being the session's current context for stream 0 and 0 otherwise; `ring` may be NULL (copies
 * then stay Python's). A graph launch: (executable graph, stream).
 * param_bytes < 0: the kernel's layout is unknown (any size up to max_param_bytes goes to the driver).
 * Returns 0, or -1 when the table had no room (the call then stays Python's). */
int rgpu_lane_bind_launch(rgpu_lane *lane, uint64_t function, uint64_t stream, uintptr_t ctx_obj,
                          uintptr_t function_obj, uintptr_t stream_obj, long long param_bytes);
int rgpu_lane_bind_stream(rgpu_lane *lane, uint64_t stream, uint64_t ctx_key, uintptr_t ctx_obj,
                          uintptr_t stream_obj, rgpu_lane_ring *ring);
int rgpu_lane_bind_graph(rgpu_lane *lane, uint64_t exec, uint64_t stream, uintptr_t ctx_obj, uintptr_t exec_obj,
                         uintptr_t stream_obj);
void rgpu_lane_forget(rgpu_lane *lane);

/* The cuDNN calls the lane makes: libcudnn's own (cudnnSetStream, cudnnBatchNormalizationForwardInference), or
 * a test's stand-ins. Pointers travel as the library takes them. */
typedef struct rgpu_lane_dnn {
    int (*set_stream)(void *handle, void *stream);
    int (*bn_inference)(void *handle, int mode, const void *alpha, const void *beta, void *x_desc, const void *x,
                        void *y_desc, void *y, void *bn_desc, const void *scale, const void *bias,
                        const void *mean, const void *var, double epsilon);
    int (*execute)(void *handle, void *plan, void *variant_pack);
} rgpu_lane_dnn;

/* A batch norm's shape (DNN_BN_INFERENCE): the client's cuDNN handle with the record's tensor descriptors, as
 * their `tensors_len` bytes on the wire (x, y, then the statistics'), bound to the real handle of context
 * `ctx_obj`, the descriptors Python made of them, the bytes each tensor spans, and whether cuDNN takes the scaling
 * factors as doubles (float otherwise). The record then runs here on any bound stream of that context, its six
 * ranges checked against the session's regions. `dnn` is copied. Returns 0, or -1 when there was no room. */
int rgpu_lane_bind_batch_norm(rgpu_lane *lane, const rgpu_lane_dnn *dnn, uint64_t handle, const uint8_t *tensors,
                              size_t tensors_len, uintptr_t ctx_obj, uintptr_t handle_obj, uintptr_t x_desc,
                              uintptr_t y_desc, uintptr_t bn_desc, uint64_t x_bytes, uint64_t y_bytes,
                              uint64_t bn_bytes, int doubles);

/* An execution of a cuDNN plan (DNN_EXECUTE): the client's handle and plan with the record's variant pack, as its
 * `pack_len` bytes on the wire, bound to the real handle and plan of context `ctx_obj` and a variant pack of the
 * lane's own made of those bytes; `ranges` device ranges [starts[i], +sizes[i]) the pack names (its data pointers,
 * its workspace), each checked against the session's regions at every run. Returns 0, or -1 when there was no
 * room (or the pack is too long, or names too many ranges). */
int rgpu_lane_bind_dnn_execute(rgpu_lane *lane, const rgpu_lane_dnn *dnn, uint64_t handle, uint64_t plan,
                               const uint8_t *pack, size_t pack_len, uintptr_t ctx_obj, uintptr_t handle_obj,
                               uintptr_t plan_obj, uintptr_t pack_obj, const uint64_t *starts,
                               const uint64_t *sizes, size_t ranges);

/* The session's device regions, sorted by start, not overlapping: [starts[i], starts[i] + sizes[i]); fill_ctx[i]
 * (fill_ctx may be NULL: 0 for every region) the driver context, as bound, whose streams the lane's own kernel may
 * write region i from -- the context of an allocation -- or 0: never (a module's global). The arrays are the
 * caller's and must outlive the next set_regions (or the lane). */
void rgpu_lane_set_regions(rgpu_lane *lane, const uint64_t *starts, const uint64_t *sizes, const uint64_t *fill_ctx,
                           size_t count);

/* 0 when the batch body [0, len) tiles exactly into length-prefixed records of at most max_record bytes. */
int rgpu_lane_check_batch(const uint8_t *batch, size_t len, size_t max_record);

/* Runs records of a checked batch from `pos` until one it may not run, a failed driver call, or the end.
 * `current_ctx`: the session's current context handle; `capture_possible`: a stream capture may be under
 * way in this process (copies through the ring then stay Python's: a captured copy would read the slot at
 * every replay). */
void rgpu_lane_run(rgpu_lane *lane, const uint8_t *batch, size_t len, size_t pos, uint64_t current_ctx,
                   int capture_possible, rgpu_lane_stop *stop);

/* 1 when rgpu_lane_run may run records of this opcode, 0 when it always leaves them to Python (which then need
 * not ask it first). */
int rgpu_lane_serves(uint16_t opcode);

/* Copies out and zeroes the counts (at most `cap`); returns how many. */
size_t rgpu_lane_take_counts(rgpu_lane *lane, rgpu_lane_count *out, size_t cap);

/* A sealed session's record protection for the C request loop (seal.c): the keys of both directions (32 bytes
 * each; cipher as the handshake's, rgpu_consts.h), or NULL where libcrypto cannot be loaded (Python's loop serves
 * the session then). The counters are the next record's each way: Python sets them before each turn of the loop
 * and takes them back after. */
typedef struct rgpu_lane_seal rgpu_lane_seal;
rgpu_lane_seal *rgpu_lane_seal_new(int cipher, const uint8_t *recv_key, const uint8_t *send_key);
void rgpu_lane_seal_free(rgpu_lane_seal *s);
void rgpu_lane_seal_set_counters(rgpu_lane_seal *s, uint64_t recv, uint64_t send);
void rgpu_lane_seal_counters(const rgpu_lane_seal *s, uint64_t *recv, uint64_t *send);

/* The request loop for what the lane serves whole (serve.c): BATCH frames, NOPs, cuMemGetInfo and (while no capture
 * may be under way) cuCtxSynchronize in a context whose NULL stream is bound, host-to-device copies sent as frames
 * of their own (streamed through the copy ring; synchronous ones on the NULL stream, waited for), and, on streams
 * bound for the lane while no capture may be under way, stream synchronizes and device-to-host copies (those over
 * 64 KiB through the stream's copy ring, up to what it holds). A blocking call that fails, or that kernel output
 * must precede, is left to the caller whole (it runs it again: none of them writes); so is the rest of a copy C
 * could not finish, or its last piece. The caller has no deferred error to report, gives it the bytes of the stream
 * it had received but not taken (`have` of them, at buf), and has brought the lane up to date (bindings, regions). */
typedef struct rgpu_lane_serve_io {
    int fd;             /* the client's socket (a blocking one; received from with MSG_DONTWAIT) */
    uint8_t *buf;       /* receive memory, the caller's */
    size_t cap;
    size_t have;        /* bytes of the stream already in buf (the caller had received them) */
    size_t max_record;  /* the session's limit on a record */
    uint64_t current_ctx;
    int capture_possible;
    long long spin_ns;  /* how long to poll for bytes before handing back (RGPU_SERVE_IDLE) */
    int spin_yield;     /* sched_yield between polls */
    int output_fd;      /* the kernel-output pipe (non-blocking), or -1 */
    const int *output_held; /* nonzero while kernel output waits in the caller, or NULL */
    unsigned max_frames;    /* hand back after this many frames (the caller's signals and counters) */
    int memory_limited;     /* the session has a memory quota (cuMemGetInfo's answer is then the caller's) */
    long long inject_ns;    /* hold each reply this long first, as a slower network would (--inject-rtt-us) */
    rgpu_lane_seal *seal;   /* a sealed session's (every record in and out is protected), or NULL */
    uint8_t *plain;         /* cap bytes of the caller's, where a sealed session's records are opened */
} rgpu_lane_serve_io;

/* Why rgpu_lane_serve handed back. In every case buf[rest_at, rest_end) are received bytes nothing was done with,
 * for the caller's decoder (a sealed session's still sealed), after -- in a sealed session -- the frame at
 * plain[opened_at, +opened_len) (prefix, then body), opened and taken with its counter but not served.
 * IDLE: no whole frame within the spin. PYTHON: the next frame is the caller's (or the
 * socket reported the end, an error or a signal, for the caller's own receive to see). BATCH_STOPPED: the BATCH
 * at buf[frame_at, +frame_len) stopped at `stop` (lane.h's rgpu_lane_stop, positions within its bulk).
 * LIMIT: max_frames served. FAILED: a reply could not be sent (`error` is errno; with `failed_status`, the CUresult
 * of `failed_what`: the context failed while a copy back's reply was going out, after its status had been sent as
 * success, so the session cannot go on), or (`tampered`) a sealed record failed authentication: what it opened to
 * is wiped, and the session must end. In a sealed session a stopped BATCH lies in plain (`frame_in_plain`).
 * Whatever the outcome, `deferred.status` nonzero: a request served without a reply failed afterwards (the
 * synchronize a copy up left owed: lane_private.h), for the caller's deferred error (`opcode`, `request_id`,
 * `what` name it; `pos` unused); the loop handed back as soon as that was found. */
enum { RGPU_SERVE_IDLE = 0, RGPU_SERVE_PYTHON = 1, RGPU_SERVE_BATCH_STOPPED = 2, RGPU_SERVE_LIMIT = 3,
       RGPU_SERVE_FAILED = 4 };

typedef struct rgpu_lane_served {
    int outcome;
    size_t rest_at, rest_end;
    size_t frame_at, frame_len;
    int frame_in_plain;
    size_t opened_at, opened_len;
    int tampered;
    rgpu_lane_stop stop;
    rgpu_lane_stop deferred;
    int error;
    int failed_status;
    const char *failed_what;
    /* What was done: frames served (a stopped batch counts; calls and replies by operation are in the lane's
     * counts), bytes each way, time polling for bytes; the loop's time receiving (waiting included), running and
     * replying. */
    unsigned long long frames;
    unsigned long long bytes_in, bytes_out, wait_ns, receive_ns, run_ns, reply_ns;
} rgpu_lane_served;

void rgpu_lane_serve(rgpu_lane *lane, const rgpu_lane_serve_io *io, rgpu_lane_served *out);

/* A session's copy links (links.c; docs/protocol.md, "Copy links"): `count` (1..RGPU_LANE_MAX_LINKS) links, each
 * received by a thread of its own into two buffers of part_max bytes; `keys` (count x 32 bytes, link i's at 32 i),
 * for a sealed session: every part is a record sealed with `cipher` (RGPU_CIPHER_*) and its link's key, its
 * counter from 0; NULL: plain. NULL when it cannot (memory, libcrypto, a bad cipher). attach: link `index` reads from `fd`, which
 * the links own from then on (closed by them, or at once when the index is out of range or taken); 0 or -1.
 * take: the link's next part, which must be part `part` of linked copy `seq`: 1 (*data holds *len bytes for
 * *offset of the copy, until release), 0 (none within timeout_ms; nothing consumed), -1 (the link failed or sent
 * something else; `why` says what, and the session cannot go on). release: the taken part's buffer back.
 * free: close every link, stop its thread, free. */
#define RGPU_LANE_MAX_LINKS 8
typedef struct rgpu_lane_links rgpu_lane_links;
rgpu_lane_links *rgpu_lane_links_new(unsigned count, uint32_t part_max, int cipher, const uint8_t *keys);
int rgpu_lane_links_attach(rgpu_lane_links *l, unsigned index, int fd);
int rgpu_lane_links_take(rgpu_lane_links *l, unsigned index, uint32_t seq, uint32_t part, unsigned timeout_ms,
                         const uint8_t **data, uint64_t *offset, uint32_t *len, char *why, size_t why_len);
void rgpu_lane_links_release(rgpu_lane_links *l, unsigned index);
void rgpu_lane_links_free(rgpu_lane_links *l);

#endif
