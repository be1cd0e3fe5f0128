/* Stream capture and CUDA graphs in the driver shim.
 *
 * The server captures for real (cuda backend) or emulates it (fake); this side keeps what a program asks about
 * without a round trip: which streams are capturing, in which mode, under which capture id and graph. Graph and
 * executable-graph handles are minted here (rgpu.session.handles.add_client), so beginning a capture,
 * instantiating and launching are all deferred calls: replaying a captured graph is one small GRAPH_LAUNCH
 * record however many nodes it has. Ending a capture is a round trip, so the program gets the driver's own
 * verdict on it (CUDA_ERROR_STREAM_CAPTURE_INVALIDATED after an illegal call, which the server saw).
 *
 * Limits (docs/protocol.md, "Graphs, host nodes"): host<->device copies of the program's memory on a
 * capturing stream fail with CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and invalidate the capture (the server's
 * staging buffer is not the program's memory). cuStreamGetCaptureInfo answers locally unless the caller asks
 * for the dependency set, which is the server's (the captured nodes live there): then it is one round trip.
 * cuLaunchHostFunc on a capturing stream becomes a host node, and graphs with host nodes are instantiated and
 * launched in stages (graph_host.c). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph.h"
#include "rgpu_shim.h"

#define API __attribute__((visibility("default")))
#define MAX_CAPTURING 64
#define MAX_CAPTURED_EVENTS 256
#define MAX_LIVE 4096
#define MAX_CAPTURE_DEPS 256


struct capture {
    uint64_t origin;   /* the stream that began it */
    uint64_t graph;    /* minted at the beginning: cuStreamGetCaptureInfo reports it, EndCapture returns it */
    cuuint64_t id;
    CUstreamCaptureMode mode;
    pthread_t thread;
    int invalidated;
    int refs; /* streams in it */
    int into; /* capturing into a graph the program made (cuStreamBeginCaptureToGraph): it stays the program's */
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
RGPU_FORK_RESET(lock, &lock)
static struct {
    uint64_t stream;
    struct capture *capture;
} capturing[MAX_CAPTURING];
static struct {
    uint64_t event;
    struct capture *capture;
} captured_events[MAX_CAPTURED_EVENTS];
static int active; /* streams capturing: launches and copies skip the tables while it is 0 */
static uint64_t next_handle = 1;
static cuuint64_t next_capture_id = 1;
static uint64_t live[MAX_LIVE]; /* graphs and executable graphs the program holds: bad ones fail here, at once */
static uint64_t live_flags[MAX_LIVE]; /* an executable graph's instantiation flags (cuGraphExecGetFlags) */
/* (the driver does not report USE_NODE_PRIORITY among them: the H100 showed so) */
#define REPORTED_FLAGS(f) ((f) & ~(uint64_t)CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY)
static __thread CUstreamCaptureMode thread_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;

static uint64_t mint(int kind) /* under lock */
{
    return 1ull << 63 | (uint64_t)kind << 56 | next_handle++;
}

uint64_t rgpu_graph_mint(int kind)
{
    pthread_mutex_lock(&lock);
    uint64_t h = mint(kind);
    pthread_mutex_unlock(&lock);
    return h;
}

static int live_find(uint64_t h)
{
    for (int i = 0; i < MAX_LIVE; i++)
        if (live[i] == h)
            return i;
    return -1;
}

static int live_add(uint64_t h)
{
    int i = live_find(0);
    if (i >= 0)
        live[i] = h;
    return i >= 0;
}

static int is_live(uint64_t h, int kind);
static void destroy_live(uint64_t h);

int rgpu_graph_live_add(uint64_t h)
{
    pthread_mutex_lock(&lock);
    int ok = live_add(h);
    pthread_mutex_unlock(&lock);
    return ok;
}

int rgpu_graph_is_live(uint64_t h, int kind) { return is_live(h, kind); }

static int is_live(uint64_t h, int kind)
{
    if (!h || (h >> 56) != (0x80u | (unsigned)kind))
        return 0;
    pthread_mutex_lock(&lock);
    int found = live_find(h) >= 0;
    pthread_mutex_unlock(&lock);
    return found;
}

static int slot_of(uint64_t stream) /* under lock */
{
    for (int i = 0; i < MAX_CAPTURING; i++)
        if (capturing[i].capture && capturing[i].stream == stream)
            return i;
    return -1;
}

static struct capture *capture_of(uint64_t stream) /* under lock */
{
    int i = slot_of(stream);
    return i >= 0 ? capturing[i].capture : NULL;
}

static int join(uint64_t stream, struct capture *c) /* under lock */
{
    for (int i = 0; i < MAX_CAPTURING; i++)
        if (!capturing[i].capture) {
            capturing[i].stream = stream;
            capturing[i].capture = c;
            c->refs++;
            __atomic_add_fetch(&active, 1, __ATOMIC_RELEASE);
            return 1;
        }
    return 0;
}

static void leave_all(struct capture *c) /* under lock: the capture is over for every stream in it */
{
    for (int i = 0; i < MAX_CAPTURING; i++)
        if (capturing[i].capture == c) {
            capturing[i].capture = NULL;
            __atomic_sub_fetch(&active, 1, __ATOMIC_RELEASE);
        }
    for (int i = 0; i < MAX_CAPTURED_EVENTS; i++)
        if (captured_events[i].capture == c)
            captured_events[i].capture = NULL;
    free(c);
}

void rgpu_graph_live_drop(uint64_t h) { destroy_live(h); }

static void destroy_live(uint64_t h) /* a handle minted for nothing (a call that failed), or gone with its node */
{
    pthread_mutex_lock(&lock);
    int i = live_find(h);
    if (i >= 0)
        live[i] = 0;
    pthread_mutex_unlock(&lock);
}

static CUresult need_graphs(void);
CUresult rgpu_graph_need(void) { return need_graphs(); }

static CUresult need_graphs(void)
{
    static int logged;
    CUresult r = rgpu_ready();
    return r == CUDA_SUCCESS ? rgpu_need_protocol(2, &logged, "CUDA graphs and stream capture") : r;
}

int rgpu_capture_active(void) { return __atomic_load_n(&active, __ATOMIC_ACQUIRE) != 0; }

CUresult rgpu_capture_refuse(CUstream s, const char *what)
{
    if (!__atomic_load_n(&active, __ATOMIC_ACQUIRE))
        return CUDA_SUCCESS;
    uint64_t h = rgpu_stream_handle(s);
    pthread_mutex_lock(&lock);
    struct capture *c = h ? capture_of(h) : NULL;
    if (c)
        c->invalidated = 1;
    pthread_mutex_unlock(&lock);
    if (c)
        rgpu_log(RGPU_LOG_INFO, "%s on a capturing stream cannot be captured through rgpu; "
                                "the capture is invalidated (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED)", what);
    return c ? CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED : CUDA_SUCCESS;
}

/* Memory.c asks before moving host memory through a stream: not while it is capturing. */
CUresult rgpu_capture_host_copy(CUstream s) { return rgpu_capture_refuse(s, "a host<->device copy"); }

int rgpu_capture_graph(CUstream s, uint64_t *graph)
{
    if (!__atomic_load_n(&active, __ATOMIC_ACQUIRE))
        return 0;
    uint64_t h = rgpu_stream_handle(s);
    pthread_mutex_lock(&lock);
    struct capture *c = h ? capture_of(h) : NULL;
    int state = !c ? 0 : c->invalidated ? -1 : 1;
    if (c)
        *graph = c->graph;
    pthread_mutex_unlock(&lock);
    return state;
}

/* -- capture ----------------------------------------------------------------------------------------------- */
/* into: 0 for a new graph; otherwise the program's graph the capture adds to, after deps[n] (with data). */
static CUresult begin_capture(CUstream s, CUstreamCaptureMode mode, CUgraph into, const CUgraphNode *deps,
                              const CUgraphEdgeData *data, size_t n)
{
    static int logged;
    CUresult r = need_graphs();
    if (r == CUDA_SUCCESS && into)
        r = rgpu_need_protocol(9, &logged, "capturing into an existing graph (cuStreamBeginCaptureToGraph)");
    if (r != CUDA_SUCCESS)
        return r;
    uint64_t h = rgpu_stream_handle(s);
    if ((unsigned)mode > CU_STREAM_CAPTURE_MODE_RELAXED)
        return CUDA_ERROR_INVALID_VALUE;
    if (!h)
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED; /* the legacy NULL stream is never captured */
    int with_data = !rgpu_default_edges(data, n);
    uint8_t *bulk = NULL;
    if (into && ((r = rgpu_graph_nodes_of(into, deps, n)) != CUDA_SUCCESS ||
                 !(bulk = malloc(16 * n + 1))))
        return r != CUDA_SUCCESS ? r : CUDA_ERROR_OUT_OF_MEMORY;
    for (size_t i = 0; into && i < n; i++) {
        rgpu_put_u64(bulk + 8 * i, (uint64_t)(uintptr_t)deps[i]);
        if (with_data)
            memcpy(bulk + 8 * n + 8 * i, &data[i], 8);
    }
    struct capture *c = calloc(1, sizeof *c);
    if (!c) {
        free(bulk);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    pthread_mutex_lock(&lock);
    if (capture_of(h)) {
        pthread_mutex_unlock(&lock);
        free(c);
        free(bulk);
        return CUDA_ERROR_ILLEGAL_STATE;
    }
    uint64_t graph = into ? (uint64_t)(uintptr_t)into : mint(KIND_GRAPH);
    *c = (struct capture){h, graph, next_capture_id++, mode, pthread_self(), 0, 0, into != NULL};
    if (!join(h, c)) {
        pthread_mutex_unlock(&lock);
        free(c);
        free(bulk);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    pthread_mutex_unlock(&lock);
    if (into) {
        uint8_t a[RGPU_STREAM_BEGIN_CAPTURE_TO_GRAPH_REQ_SIZE];
        rgpu_pack_stream_begin_capture_to_graph(a, &(struct rgpu_stream_begin_capture_to_graph_req){
                                                       h, (uint32_t)mode, graph, (uint32_t)n, (uint32_t)with_data});
        r = rgpu_defer(RGPU_OP_STREAM_BEGIN_CAPTURE_TO_GRAPH, a, sizeof a, bulk, 8 * n * (1 + (size_t)with_data));
        free(bulk);
    } else {
        uint8_t a[RGPU_STREAM_BEGIN_CAPTURE_REQ_SIZE];
        rgpu_pack_stream_begin_capture(a, &(struct rgpu_stream_begin_capture_req){h, (uint32_t)mode, graph});
        r = rgpu_defer(RGPU_OP_STREAM_BEGIN_CAPTURE, a, sizeof a, NULL, 0);
    }
    if (r != CUDA_SUCCESS) {
        pthread_mutex_lock(&lock);
        if (capture_of(h) == c)
            leave_all(c);
        pthread_mutex_unlock(&lock);
    }
    return r;
}

API CUresult cuStreamBeginCapture_v2(CUstream s, CUstreamCaptureMode mode)
{
    return begin_capture(s, mode, NULL, NULL, NULL, 0);
}
API CUresult cuStreamBeginCapture_v2_ptsz(CUstream s, CUstreamCaptureMode mode)
{
    return begin_capture(s, mode, NULL, NULL, NULL, 0);
}
API CUresult cuStreamBeginCaptureToGraph(CUstream s, CUgraph g, const CUgraphNode *deps, const CUgraphEdgeData *data,
                                         size_t n, CUstreamCaptureMode mode)
{
    return g ? begin_capture(s, mode, g, deps, data, n) : CUDA_ERROR_INVALID_VALUE;
}
API CUresult cuStreamBeginCaptureToGraph_ptsz(CUstream s, CUgraph g, const CUgraphNode *deps,
                                              const CUgraphEdgeData *data, size_t n, CUstreamCaptureMode mode)
{
    return cuStreamBeginCaptureToGraph(s, g, deps, data, n, mode);
}

static CUresult end_capture(CUstream s, CUgraph *out)
{
    if (!out)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t h = rgpu_stream_handle(s);
    pthread_mutex_lock(&lock);
    struct capture *c = h ? capture_of(h) : NULL;
    if (!c) {
        pthread_mutex_unlock(&lock);
        return CUDA_ERROR_ILLEGAL_STATE;
    }
    if (c->origin != h) {
        c->invalidated = 1;
        pthread_mutex_unlock(&lock);
        return CUDA_ERROR_STREAM_CAPTURE_UNMATCHED;
    }
    if (c->mode != CU_STREAM_CAPTURE_MODE_RELAXED && !pthread_equal(c->thread, pthread_self())) {
        pthread_mutex_unlock(&lock);
        return CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD;
    }
    uint64_t graph = c->graph;
    int invalidated = c->invalidated, into = c->into;
    leave_all(c);
    pthread_mutex_unlock(&lock);
    /* A round trip: the server (the driver, there) has the last word on whether the capture holds. */
    uint8_t a[RGPU_STREAM_END_CAPTURE_REQ_SIZE];
    rgpu_pack_stream_end_capture(a, &(struct rgpu_stream_end_capture_req){h, graph});
    CUresult r = rgpu_call(RGPU_OP_STREAM_END_CAPTURE, a, sizeof a, NULL, 0, NULL, 0, NULL);
    *out = NULL;
    if (into) { /* the program's graph, whatever came of the capture: nodes it gained are the server's to tell */
        rgpu_graph_grew(graph);
        if (r == CUDA_SUCCESS && invalidated)
            r = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
        if (r == CUDA_SUCCESS)
            *out = (CUgraph)(uintptr_t)graph;
        return r;
    }
    if (r == CUDA_SUCCESS && invalidated) {
        /* Refused here (a capture-unsafe call the server never saw): the server's graph goes too. */
        uint8_t d[RGPU_GRAPH_DESTROY_REQ_SIZE];
        rgpu_pack_graph_destroy(d, &(struct rgpu_graph_destroy_req){graph});
        rgpu_defer(RGPU_OP_GRAPH_DESTROY, d, sizeof d, NULL, 0);
        r = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    }
    if (r != CUDA_SUCCESS)
        return r;
    pthread_mutex_lock(&lock);
    int ok = live_add(graph);
    pthread_mutex_unlock(&lock);
    if (!ok)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *out = (CUgraph)(uintptr_t)graph;
    return CUDA_SUCCESS;
}

API CUresult cuStreamEndCapture(CUstream s, CUgraph *g) { return end_capture(s, g); }
API CUresult cuStreamEndCapture_ptsz(CUstream s, CUgraph *g) { return end_capture(s, g); }

API CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode)
{
    if (!mode || (unsigned)*mode > CU_STREAM_CAPTURE_MODE_RELAXED)
        return CUDA_ERROR_INVALID_VALUE;
    CUstreamCaptureMode old = thread_mode;
    thread_mode = *mode;
    *mode = old;
    return CUDA_SUCCESS;
}

/* What a capture-unsafe call (an allocation, a synchronous copy) may do now: CUDA refuses it while this
 * thread captures in a mode other than relaxed, or another thread captures in global mode, unless this thread
 * has exchanged its own mode for relaxed. */
CUresult rgpu_capture_unsafe_call(void)
{
    if (!__atomic_load_n(&active, __ATOMIC_ACQUIRE) || thread_mode == CU_STREAM_CAPTURE_MODE_RELAXED)
        return CUDA_SUCCESS;
    CUresult r = CUDA_SUCCESS;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < MAX_CAPTURING; i++) {
        struct capture *c = capturing[i].capture;
        if (!c || c->mode == CU_STREAM_CAPTURE_MODE_RELAXED)
            continue;
        if (c->mode == CU_STREAM_CAPTURE_MODE_GLOBAL || pthread_equal(c->thread, pthread_self())) {
            c->invalidated = 1;
            r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
        }
    }
    pthread_mutex_unlock(&lock);
    return r;
}

static CUresult capture_info(CUstream s, CUstreamCaptureStatus *status, cuuint64_t *id, CUgraph *graph,
                             const CUgraphNode **deps, const CUgraphEdgeData **edges, size_t *n)
{
    if (!status)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = rgpu_ready();
    if (r != CUDA_SUCCESS)
        return r;
    uint64_t h = rgpu_stream_handle(s);
    pthread_mutex_lock(&lock);
    struct capture *c = h && __atomic_load_n(&active, __ATOMIC_ACQUIRE) ? capture_of(h) : NULL;
    *status = !c ? CU_STREAM_CAPTURE_STATUS_NONE
                 : c->invalidated ? CU_STREAM_CAPTURE_STATUS_INVALIDATED : CU_STREAM_CAPTURE_STATUS_ACTIVE;
    if (c && id)
        *id = c->id;
    if (c && graph)
        *graph = (CUgraph)(uintptr_t)c->graph;
    uint64_t capture_graph = c ? c->graph : 0;
    pthread_mutex_unlock(&lock);
    if (!c || (!deps && !n))
        return CUDA_SUCCESS;
    /* The dependency set is the server's (the captured nodes live there): one round trip, asked for only. */
    static __thread CUgraphNode dep_nodes[MAX_CAPTURE_DEPS];
    static __thread CUgraphEdgeData dep_edges[MAX_CAPTURE_DEPS];
    uint8_t a[RGPU_STREAM_CAPTURE_DEPENDENCIES_REQ_SIZE], rep[RGPU_STREAM_CAPTURE_DEPENDENCIES_REP_SIZE];
    uint8_t raw[8 * MAX_CAPTURE_DEPS];
    struct rgpu_sink sink = {raw, sizeof raw, 0};
    struct rgpu_stream_capture_dependencies_rep out;
    rgpu_pack_stream_capture_dependencies(a, &(struct rgpu_stream_capture_dependencies_req){h, capture_graph});
    r = rgpu_call(RGPU_OP_STREAM_CAPTURE_DEPENDENCIES, a, sizeof a, NULL, 0, rep, sizeof rep, &sink);
    if (r != CUDA_SUCCESS)
        return r;
    if (rgpu_unpack_stream_capture_dependencies(rep, sizeof rep, &out) < 0 || out.count > MAX_CAPTURE_DEPS ||
        sink.len != 8 * (size_t)out.count)
        return rgpu_bad_reply(RGPU_OP_STREAM_CAPTURE_DEPENDENCIES, "dependency count and bytes disagree");
    for (uint32_t i = 0; i < out.count; i++)
        dep_nodes[i] = (CUgraphNode)(uintptr_t)rgpu_get_u64(raw + 8 * i);
    memset(dep_edges, 0, out.count * sizeof *dep_edges);
    if (deps)
        *deps = out.count ? dep_nodes : NULL;
    if (edges)
        *edges = out.count ? dep_edges : NULL;
    if (n)
        *n = out.count;
    return CUDA_SUCCESS;
}

static CUresult update_dependencies(CUstream s, CUgraphNode *deps, const CUgraphEdgeData *edges, size_t n,
                                    unsigned flags)
{
    static const CUgraphEdgeData zero;
    static int logged;
    uint64_t h = rgpu_stream_handle(s);
    if ((n && !deps) || n > MAX_CAPTURE_DEPS || flags > CU_STREAM_SET_CAPTURE_DEPENDENCIES)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; edges && i < n; i++)
        if (memcmp(&edges[i], &zero, sizeof zero))
            return rgpu_unsupported(&logged, "cuStreamUpdateCaptureDependencies with edge data");
    pthread_mutex_lock(&lock);
    struct capture *c = h && __atomic_load_n(&active, __ATOMIC_ACQUIRE) ? capture_of(h) : NULL;
    pthread_mutex_unlock(&lock);
    if (!c)
        return CUDA_ERROR_ILLEGAL_STATE;
    uint8_t a[RGPU_STREAM_UPDATE_CAPTURE_DEPENDENCIES_REQ_SIZE], bulk[8 * MAX_CAPTURE_DEPS];
    for (size_t i = 0; i < n; i++)
        rgpu_put_u64(bulk + 8 * i, (uint64_t)(uintptr_t)deps[i]);
    rgpu_pack_stream_update_capture_dependencies(
        a, &(struct rgpu_stream_update_capture_dependencies_req){h, flags, (uint32_t)n});
    return rgpu_defer(RGPU_OP_STREAM_UPDATE_CAPTURE_DEPENDENCIES, a, sizeof a, bulk, 8 * n);
}

API CUresult cuStreamUpdateCaptureDependencies_v2(CUstream s, CUgraphNode *deps, const CUgraphEdgeData *edges,
                                                  size_t n, unsigned flags)
{
    return update_dependencies(s, deps, edges, n, flags);
}
API CUresult cuStreamUpdateCaptureDependencies_v2_ptsz(CUstream s, CUgraphNode *deps, const CUgraphEdgeData *edges,
                                                       size_t n, unsigned flags)
{
    return update_dependencies(s, deps, edges, n, flags);
}

API CUresult cuStreamIsCapturing(CUstream s, CUstreamCaptureStatus *status)
{
    return capture_info(s, status, NULL, NULL, NULL, NULL, NULL);
}
API CUresult cuStreamIsCapturing_ptsz(CUstream s, CUstreamCaptureStatus *status)
{
    return cuStreamIsCapturing(s, status);
}

API CUresult cuStreamGetCaptureInfo_v2(CUstream s, CUstreamCaptureStatus *status, cuuint64_t *id, CUgraph *graph,
                                       const CUgraphNode **deps, size_t *n)
{
    return capture_info(s, status, id, graph, deps, NULL, n);
}
API CUresult cuStreamGetCaptureInfo_v2_ptsz(CUstream s, CUstreamCaptureStatus *status, cuuint64_t *id,
                                            CUgraph *graph, const CUgraphNode **deps, size_t *n)
{
    return capture_info(s, status, id, graph, deps, NULL, n);
}
API CUresult cuStreamGetCaptureInfo_v3(CUstream s, CUstreamCaptureStatus *status, cuuint64_t *id, CUgraph *graph,
                                       const CUgraphNode **deps, const CUgraphEdgeData **edges, size_t *n)
{
    return capture_info(s, status, id, graph, deps, edges, n);
}
API CUresult cuStreamGetCaptureInfo_v3_ptsz(CUstream s, CUstreamCaptureStatus *status, cuuint64_t *id,
                                            CUgraph *graph, const CUgraphNode **deps, const CUgraphEdgeData **edges,
                                            size_t *n)
{
    return capture_info(s, status, id, graph, deps, edges, n);
}

/* -- events: a stream that waits on an event recorded during a capture joins that capture ------------------- */
static CUresult event_record(CUevent e, CUstream s)
{
    uint64_t h = rgpu_stream_handle(s), ev = (uint64_t)(uintptr_t)e;
    if (__atomic_load_n(&active, __ATOMIC_ACQUIRE)) {
        pthread_mutex_lock(&lock);
        struct capture *c = h ? capture_of(h) : NULL;
        int free_slot = -1;
        for (int i = 0; i < MAX_CAPTURED_EVENTS; i++) {
            if (captured_events[i].capture && captured_events[i].event == ev)
                captured_events[i].capture = NULL; /* recorded again: only the latest record counts */
            if (!captured_events[i].capture && free_slot < 0)
                free_slot = i;
        }
        if (c && free_slot >= 0)
            captured_events[free_slot].event = ev, captured_events[free_slot].capture = c;
        pthread_mutex_unlock(&lock);
    }
    uint8_t a[RGPU_EVENT_RECORD_REQ_SIZE];
    rgpu_pack_event_record(a, &(struct rgpu_event_record_req){ev, h});
    return rgpu_defer(RGPU_OP_EVENT_RECORD, a, sizeof a, NULL, 0);
}

API CUresult cuEventRecord(CUevent e, CUstream s) { return event_record(e, s); }
API CUresult cuEventRecord_ptsz(CUevent e, CUstream s) { return event_record(e, s); }

/* CU_EVENT_RECORD_EXTERNAL (a capture's event node) is not forwarded; without flags this is cuEventRecord. */
API CUresult cuEventRecordWithFlags(CUevent e, CUstream s, unsigned int flags)
{
    static int logged;
    return flags ? rgpu_unsupported(&logged, "cuEventRecordWithFlags with flags (graph capture)") : event_record(e, s);
}
API CUresult cuEventRecordWithFlags_ptsz(CUevent e, CUstream s, unsigned int flags)
{
    return cuEventRecordWithFlags(e, s, flags);
}

static CUresult stream_wait_event(CUstream s, CUevent e, unsigned flags)
{
    uint64_t h = rgpu_stream_handle(s), ev = (uint64_t)(uintptr_t)e;
    if (rgpu_server_count() > 1) {
        /* A stream cannot wait on the server for another server's event: this host waits for it, then lets the
         * stream go on (everything issued to the stream after this call is ordered after the event). */
        int stream_server = h ? rgpu_server_of_handle(h) : rgpu_server_of_ctx(rgpu_thread_ctx());
        int event_server = rgpu_server_of_handle(ev);
        if (stream_server >= 0 && event_server >= 0 && stream_server != event_server)
            return cuEventSynchronize(e);
    }
    if (__atomic_load_n(&active, __ATOMIC_ACQUIRE) && h) {
        pthread_mutex_lock(&lock);
        for (int i = 0; i < MAX_CAPTURED_EVENTS; i++)
            if (captured_events[i].capture && captured_events[i].event == ev && !capture_of(h))
                join(h, captured_events[i].capture);
        pthread_mutex_unlock(&lock);
    }
    uint8_t a[RGPU_STREAM_WAIT_EVENT_REQ_SIZE];
    rgpu_pack_stream_wait_event(a, &(struct rgpu_stream_wait_event_req){h, ev, flags});
    return rgpu_defer(RGPU_OP_STREAM_WAIT_EVENT, a, sizeof a, NULL, 0);
}

API CUresult cuStreamWaitEvent(CUstream s, CUevent e, unsigned flags) { return stream_wait_event(s, e, flags); }
API CUresult cuStreamWaitEvent_ptsz(CUstream s, CUevent e, unsigned flags) { return stream_wait_event(s, e, flags); }

/* -- executable graphs -------------------------------------------------------------------------------------- */
/* flags: what the server instantiates with; asked: what cuGraphExecGetFlags reports of them */
static CUresult instantiate(CUgraphExec *out, CUgraph graph, unsigned long long flags, unsigned long long asked)
{
    if (!out)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = need_graphs();
    if (r != CUDA_SUCCESS)
        return r;
    uint64_t g = (uint64_t)(uintptr_t)graph;
    if (!is_live(g, KIND_GRAPH) || rgpu_graph_is_body(g)) /* a node's graph is instantiated with its node's */
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    uint64_t exe = mint(KIND_GRAPH_EXEC);
    int ok = live_add(exe);
    if (ok)
        live_flags[live_find(exe)] = REPORTED_FLAGS(asked);
    pthread_mutex_unlock(&lock);
    if (!ok)
        return CUDA_ERROR_OUT_OF_MEMORY;
    r = rgpu_graph_hold_within(g, exe); /* the exec holds what its graph holds */
    if (r == CUDA_SUCCESS && rgpu_graph_has_host_nodes(graph, &r)) {
        r = rgpu_staged_instantiate(graph, flags, exe);
    } else if (r == CUDA_SUCCESS) {
        uint8_t a[RGPU_GRAPH_INSTANTIATE_REQ_SIZE];
        rgpu_pack_graph_instantiate(a, &(struct rgpu_graph_instantiate_req){g, exe, flags});
        r = rgpu_defer(RGPU_OP_GRAPH_INSTANTIATE, a, sizeof a, NULL, 0);
    }
    if (r == CUDA_SUCCESS) {
        *out = (CUgraphExec)(uintptr_t)exe;
    } else {
        rgpu_user_objects_release(exe);
        destroy_live(exe);
    }
    return r;
}

API CUresult cuGraphInstantiateWithFlags(CUgraphExec *out, CUgraph graph, unsigned long long flags)
{
    return instantiate(out, graph, flags, flags);
}

API CUresult cuGraphExecGetFlags(CUgraphExec exe, cuuint64_t *flags)
{
    uint64_t e = (uint64_t)(uintptr_t)exe;
    if (!flags || !is_live(e, KIND_GRAPH_EXEC))
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    int i = live_find(e);
    if (i >= 0)
        *flags = live_flags[i];
    pthread_mutex_unlock(&lock);
    return i >= 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

static CUresult instantiate_with_params(CUgraphExec *out, CUgraph graph, CUDA_GRAPH_INSTANTIATE_PARAMS *p)
{
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    /* Upload-on-instantiate names a stream; the upload itself is a separate deferred call here. */
    p->result_out = CUDA_GRAPH_INSTANTIATE_SUCCESS;
    p->hErrNode_out = NULL;
    CUresult r = instantiate(out, graph, p->flags & ~(cuuint64_t)CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD, p->flags);
    if (r == CUDA_SUCCESS && (p->flags & CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD))
        r = cuGraphUpload(*out, p->hUploadStream);
    if (r != CUDA_SUCCESS)
        p->result_out = CUDA_GRAPH_INSTANTIATE_ERROR;
    return r;
}

API CUresult cuGraphInstantiateWithParams(CUgraphExec *out, CUgraph graph, CUDA_GRAPH_INSTANTIATE_PARAMS *p)
{
    return instantiate_with_params(out, graph, p);
}
API CUresult cuGraphInstantiateWithParams_ptsz(CUgraphExec *out, CUgraph graph, CUDA_GRAPH_INSTANTIATE_PARAMS *p)
{
    return instantiate_with_params(out, graph, p);
}

static CUresult exec_on_stream(uint16_t op, CUgraphExec exe, CUstream s)
{
    uint64_t e = (uint64_t)(uintptr_t)exe;
    if (!is_live(e, KIND_GRAPH_EXEC))
        return CUDA_ERROR_INVALID_VALUE; /* never made, or destroyed: refused here, not at the next sync */
    CUresult r;
    if (rgpu_staged_run(op, e, s, &r))
        return r;
    uint8_t a[RGPU_GRAPH_LAUNCH_REQ_SIZE];
    _Static_assert(RGPU_GRAPH_LAUNCH_REQ_SIZE == RGPU_GRAPH_UPLOAD_REQ_SIZE, "launch and upload share a layout");
    rgpu_pack_graph_launch(a, &(struct rgpu_graph_launch_req){e, rgpu_stream_handle(s)});
    return rgpu_defer(op, a, sizeof a, NULL, 0);
}

API CUresult cuGraphLaunch(CUgraphExec exe, CUstream s) { return exec_on_stream(RGPU_OP_GRAPH_LAUNCH, exe, s); }
API CUresult cuGraphLaunch_ptsz(CUgraphExec exe, CUstream s) { return exec_on_stream(RGPU_OP_GRAPH_LAUNCH, exe, s); }
API CUresult cuGraphUpload(CUgraphExec exe, CUstream s) { return exec_on_stream(RGPU_OP_GRAPH_UPLOAD, exe, s); }
API CUresult cuGraphUpload_ptsz(CUgraphExec exe, CUstream s) { return exec_on_stream(RGPU_OP_GRAPH_UPLOAD, exe, s); }

API CUresult cuGraphExecUpdate_v2(CUgraphExec exe, CUgraph graph, CUgraphExecUpdateResultInfo *info)
{
    uint64_t e = (uint64_t)(uintptr_t)exe, g = (uint64_t)(uintptr_t)graph;
    if (!info)
        return CUDA_ERROR_INVALID_VALUE;
    if (!is_live(e, KIND_GRAPH_EXEC) || !is_live(g, KIND_GRAPH) || rgpu_graph_is_body(g))
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = CUDA_SUCCESS;
    if (rgpu_is_staged(e) || rgpu_graph_has_host_nodes(graph, &r) || r != CUDA_SUCCESS) {
        /* Stages are cut at instantiation: a program that is refused an update instantiates anew (as llama.cpp
         * and PyTorch do), which cuts them again. */
        static int logged;
        if (!__atomic_exchange_n(&logged, 1, __ATOMIC_RELAXED))
            rgpu_log(RGPU_LOG_INFO, "cuGraphExecUpdate of a graph with host nodes: not supported through rgpu "
                                    "(CU_GRAPH_EXEC_UPDATE_ERROR_NOT_SUPPORTED); instantiate it instead");
        info->result = CU_GRAPH_EXEC_UPDATE_ERROR_NOT_SUPPORTED;
        info->errorNode = info->errorFromNode = NULL;
        return r != CUDA_SUCCESS ? r : CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE;
    }
    uint8_t a[RGPU_GRAPH_EXEC_UPDATE_REQ_SIZE], rep[RGPU_GRAPH_EXEC_UPDATE_REP_SIZE];
    rgpu_pack_graph_exec_update(a, &(struct rgpu_graph_exec_update_req){e, g});
    r = rgpu_call(RGPU_OP_GRAPH_EXEC_UPDATE, a, sizeof a, NULL, 0, rep, sizeof rep, NULL);
    struct rgpu_graph_exec_update_rep out;
    if (r != CUDA_SUCCESS)
        return r;
    if (rgpu_unpack_graph_exec_update(rep, sizeof rep, &out) < 0)
        return CUDA_ERROR_UNKNOWN;
    if (!out.result) { /* the exec's references become the new graph's, as CUDA's */
        rgpu_user_objects_release(e);
        rgpu_graph_hold_within(g, e);
    }
    info->result = (CUgraphExecUpdateResult)out.result;
    info->errorNode = (CUgraphNode)(uintptr_t)out.error_node;
    info->errorFromNode = NULL;
    return out.result ? CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE : CUDA_SUCCESS;
}

static CUresult destroy(uint16_t op, uint64_t h, int kind)
{
    pthread_mutex_lock(&lock);
    int i = h && (h >> 56) == (0x80u | (unsigned)kind) ? live_find(h) : -1;
    if (i >= 0)
        live[i] = 0;
    pthread_mutex_unlock(&lock);
    if (i < 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (kind == KIND_GRAPH_EXEC && rgpu_staged_destroy(h))
        return CUDA_SUCCESS; /* its stages went; the server never knew this handle */
    uint8_t a[8];
    _Static_assert(RGPU_GRAPH_DESTROY_REQ_SIZE == 8 && RGPU_GRAPH_EXEC_DESTROY_REQ_SIZE == 8, "one handle each");
    rgpu_pack_graph_destroy(a, &(struct rgpu_graph_destroy_req){h});
    return rgpu_defer(op, a, sizeof a, NULL, 0);
}

int rgpu_graph_captured_into(uint64_t g) /* a stream is capturing into graph g (cuStreamBeginCaptureToGraph) */
{
    int found = 0;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < MAX_CAPTURING && !found; i++)
        found = capturing[i].capture && capturing[i].capture->into && capturing[i].capture->graph == g;
    pthread_mutex_unlock(&lock);
    return found;
}

API CUresult cuGraphDestroy(CUgraph g)
{
    if (rgpu_graph_is_body((uint64_t)(uintptr_t)g))
        return CUDA_ERROR_INVALID_VALUE; /* a conditional node's body goes with its node */
    if (rgpu_graph_captured_into((uint64_t)(uintptr_t)g))
        return CUDA_ERROR_ILLEGAL_STATE; /* as CUDA's (measured on the H100) */
    CUresult r = destroy(RGPU_OP_GRAPH_DESTROY, (uint64_t)(uintptr_t)g, KIND_GRAPH);
    if (r == CUDA_SUCCESS)
        rgpu_graph_forget((uint64_t)(uintptr_t)g);
    return r;
}
API CUresult cuGraphExecDestroy(CUgraphExec e)
{
    uint64_t exe = (uint64_t)(uintptr_t)e;
    /* CUDA lets an exec's user objects go once its last launch has finished: a program may take their destructors
     * for a sign that the exec's buffers are free. Only an exec that holds some waits (the context's work). */
    int held = is_live(exe, KIND_GRAPH_EXEC) && rgpu_user_objects_held(exe);
    CUresult r = destroy(RGPU_OP_GRAPH_EXEC_DESTROY, exe, KIND_GRAPH_EXEC);
    if (r == CUDA_SUCCESS) {
        rgpu_exec_nodes_forget(exe);
        /* (an earlier launch's error comes back here, as CUDA's calls may return one; the exec is gone all the same) */
        r = held ? cuCtxSynchronize() : CUDA_SUCCESS;
        rgpu_user_objects_release(exe);
    }
    return r;
}
