/* The worker's fast lane: what lane.h promises. Every number here came off the network: each record is
 * bounds-checked on its own (rgpu_lane_check_batch is the caller's promise, not relied on for memory safety),
 * arguments are read only through the generated unpack helpers, and every device range is checked against
 * the session's regions before the driver sees it. */
#include <stdlib.h>
#include <string.h>

#include "copy_runs.h"
#include "lane.h"
#include "lane_private.h"
#include "rgpu_consts.h"
#include "rgpu_ops.h"
#include "rgpu_wire.h"

#define BINDINGS 1024 /* a power of two; open addressing, never more than half full */
#define MAX_BOUND (BINDINGS / 2)

enum binding_kind { EMPTY = 0, LAUNCH = 1, STREAM = 2, GRAPH = 3 };
#define MAX_ATTRIBUTES RGPU_MAX_LAUNCH_ATTRIBUTES
#define ATTRIBUTE_SIZE RGPU_LAUNCH_ATTRIBUTE_SIZE /* CUlaunchAttribute, as on the wire */

struct binding {
    int kind;
    uint64_t a, b; /* the client's handles: (function, stream) or (stream, context key) */
    uintptr_t ctx, obj, stream;
    long long param_bytes;
    rgpu_lane_ring *ring;
};

enum {
    COUNT_LAUNCH, COUNT_LAUNCH_EX, COUNT_HTOD, COUNT_MEMSET_D8, COUNT_MEMSET_D32, COUNT_SYNC, COUNT_GRAPH, COUNT_NOP,
    COUNT_DTOH, COUNT_INFO, COUNT_HTOD_SYNC, COUNT_DTOH_SYNC, COUNT_CTX_SYNC, COUNT_BN_INFERENCE, COUNT_DNN_EXECUTE,
    COUNT_HTOD_RUNS, COUNTS
};
_Static_assert((int)COUNTS <= (int)RGPU_LANE_COUNTS, "rgpu_lane_take_counts' callers take RGPU_LANE_COUNTS rows");
static const unsigned count_opcode[COUNTS] = {
    RGPU_OP_LAUNCH_KERNEL,    RGPU_OP_LAUNCH_KERNEL_EX,   RGPU_OP_MEMCPY_HTOD_ASYNC, RGPU_OP_MEMSET_D8_ASYNC,
    RGPU_OP_MEMSET_D32_ASYNC, RGPU_OP_STREAM_SYNCHRONIZE, RGPU_OP_GRAPH_LAUNCH,      RGPU_OP_NOP,
    RGPU_OP_MEMCPY_DTOH_ASYNC, RGPU_OP_MEM_GET_INFO, RGPU_OP_MEMCPY_HTOD, RGPU_OP_MEMCPY_DTOH,
    RGPU_OP_CTX_SYNCHRONIZE,  RGPU_OP_DNN_BN_INFERENCE, RGPU_OP_DNN_EXECUTE, RGPU_OP_MEMCPY_HTOD_RUNS};

/* The launch attributes whose value is plain data (ops.PLAIN_LAUNCH_ATTRIBUTES): passed on as they are. Any
 * other (an event to translate, a write-back, an unknown id) is Python's to refuse or translate. */
static int plain_attribute(uint32_t id) { return id < 32 && (RGPU_PLAIN_LAUNCH_ATTRIBUTES >> id & 1u); }

struct rgpu_lane {
    rgpu_lane_driver d;
    size_t max_param_bytes;
    struct binding table[BINDINGS];
    size_t bound;
    struct lane_dnn_bound dnn;
    const uint64_t *starts, *sizes, *fill_ctx;
    size_t regions;
    unsigned long long calls[COUNTS], ns[COUNTS], replies[COUNTS];
    size_t param_size; /* what `extra` hands the driver */
    struct {            /* the copy back through the ring whose reply is being sent (lane_copy_back_wait) */
        rgpu_lane_ring *ring;
        int first;
        size_t pieces;
    } back;
    struct { /* a synchronous copy's synchronize of its stream, owed (lane_owe_sync), and how settling it failed */
        uintptr_t ctx, stream;
        int owed;
        rgpu_lane_stop failed;
    } sync;
    _Alignas(16) uint8_t reply[RGPU_PREFIX_SIZE + RGPU_HEADER_SIZE + LANE_REPLY_BULK]; /* serve.c's replies */
    void *extra[5];
    rgpu_lane_launch_config config;
    _Alignas(16) unsigned char attributes[MAX_ATTRIBUTES * ATTRIBUTE_SIZE];
    _Alignas(16) unsigned char params[]; /* max_param_bytes of them */
};

rgpu_lane *rgpu_lane_new(const rgpu_lane_driver *driver, size_t max_param_bytes)
{
    rgpu_lane *lane = calloc(1, sizeof *lane + max_param_bytes + 1);
    if (!lane)
        return NULL;
    lane->d = *driver;
    lane->max_param_bytes = max_param_bytes;
    /* CU_LAUNCH_PARAM_BUFFER_POINTER, buffer, CU_LAUNCH_PARAM_BUFFER_SIZE, &size, CU_LAUNCH_PARAM_END */
    lane->extra[0] = (void *)(uintptr_t)1;
    lane->extra[1] = lane->params;
    lane->extra[2] = (void *)(uintptr_t)2;
    lane->extra[3] = &lane->param_size;
    lane->extra[4] = NULL;
    return lane;
}

void rgpu_lane_free(rgpu_lane *lane)
{
    if (lane)
        lane_dnn_forget(&lane->dnn);
    free(lane);
}

static size_t slot_of(int kind, uint64_t a, uint64_t b)
{
    uint64_t h = (a * 0x9E3779B97F4A7C15ull) ^ (b * 0xC2B2AE3D27D4EB4Full) ^ (uint64_t)kind;
    return (size_t)(h ^ (h >> 29)) & (BINDINGS - 1);
}

static struct binding *find(rgpu_lane *lane, int kind, uint64_t a, uint64_t b)
{
    for (size_t i = slot_of(kind, a, b);; i = (i + 1) & (BINDINGS - 1)) {
        struct binding *e = &lane->table[i];
        if (e->kind == EMPTY)
            return NULL;
        if (e->kind == kind && e->a == a && e->b == b)
            return e;
    }
}

static struct binding *place(rgpu_lane *lane, int kind, uint64_t a, uint64_t b)
{
    size_t i = slot_of(kind, a, b);
    for (;; i = (i + 1) & (BINDINGS - 1)) {
        struct binding *e = &lane->table[i];
        if (e->kind == kind && e->a == a && e->b == b)
            return e; /* bound again: the newer answer wins */
        if (e->kind == EMPTY)
            break;
    }
    if (lane->bound >= MAX_BOUND)
        return NULL;
    lane->bound++;
    struct binding *e = &lane->table[i];
    e->kind = kind, e->a = a, e->b = b;
    return e;
}

int rgpu_lane_bind_launch(rgpu_lane *lane, uint64_t function, uint64_t stream, uintptr_t ctx_obj,
                          uintptr_t function_obj, uintptr_t stream_obj, long long param_bytes)
{
    struct binding *e = place(lane, LAUNCH, function, stream);
    if (!e)
        return -1;
    e->ctx = ctx_obj, e->obj = function_obj, e->stream = stream_obj, e->param_bytes = param_bytes;
    e->ring = NULL;
    return 0;
}

int rgpu_lane_bind_stream(rgpu_lane *lane, uint64_t stream, uint64_t ctx_key, uintptr_t ctx_obj,
                          uintptr_t stream_obj, rgpu_lane_ring *ring)
{
    struct binding *e = place(lane, STREAM, stream, ctx_key);
    if (!e)
        return -1;
    e->ctx = ctx_obj, e->obj = 0, e->stream = stream_obj, e->param_bytes = 0, e->ring = ring;
    return 0;
}

int rgpu_lane_bind_graph(rgpu_lane *lane, uint64_t exec, uint64_t stream, uintptr_t ctx_obj, uintptr_t exec_obj,
                         uintptr_t stream_obj)
{
    struct binding *e = place(lane, GRAPH, exec, stream);
    if (!e)
        return -1;
    e->ctx = ctx_obj, e->obj = exec_obj, e->stream = stream_obj, e->param_bytes = 0, e->ring = NULL;
    return 0;
}

void rgpu_lane_forget(rgpu_lane *lane)
{
    memset(lane->table, 0, sizeof lane->table);
    lane->bound = 0;
    lane_dnn_forget(&lane->dnn);
}

struct lane_dnn_bound *lane_dnn_bound(rgpu_lane *lane) { return &lane->dnn; }

void rgpu_lane_set_regions(rgpu_lane *lane, const uint64_t *starts, const uint64_t *sizes, const uint64_t *fill_ctx,
                           size_t count)
{
    lane->starts = starts, lane->sizes = sizes, lane->fill_ctx = fill_ctx, lane->regions = count;
}

/* The region [ptr, ptr + n) lies inside (AllocationMap.check), or -1. */
static long region_of(const rgpu_lane *lane, uint64_t ptr, uint64_t n)
{
    size_t lo = 0, hi = lane->regions; /* the first region starting after ptr */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (lane->starts[mid] <= ptr)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == 0)
        return -1;
    uint64_t start = lane->starts[lo - 1], size = lane->sizes[lo - 1], offset = ptr - start;
    return offset <= size && n <= size - offset ? (long)(lo - 1) : -1;
}

int lane_owned(const rgpu_lane *lane, uint64_t ptr, uint64_t n) { return region_of(lane, ptr, n) >= 0; }

/* Whether the lane's own kernel may write [ptr, ptr + n) from context `ctx`: an allocation of that context's. */
static int fill_owned(const rgpu_lane *lane, uint64_t ptr, uint64_t n, uintptr_t ctx)
{
    long i = region_of(lane, ptr, n);
    return i >= 0 && lane->fill_ctx && ctx && lane->fill_ctx[i] == (uint64_t)ctx;
}

int rgpu_lane_check_batch(const uint8_t *batch, size_t len, size_t max_record)
{
    size_t pos = 0;
    while (pos < len) {
        if (len - pos < RGPU_PREFIX_SIZE)
            return -1;
        size_t n = rgpu_get_u32(batch + pos);
        pos += RGPU_PREFIX_SIZE;
        if (n > max_record || len - pos < n)
            return -1;
        pos += n;
    }
    return 0;
}

int lane_set_current(rgpu_lane *lane, uintptr_t ctx, const char **what)
{
    int code = lane->d.ctx_set_current(ctx);
    if (code)
        *what = "cuCtxSetCurrent";
    return code;
}

/* The bound launch of (function, stream) with its parameters staged, or NULL when Python must run it: an
 * unbound pair, or parameters of a size the kernel's layout does not take (Python says which it needs). */
static struct binding *stage_launch(rgpu_lane *lane, uint64_t function, uint64_t stream, const uint8_t *params,
                                    size_t n)
{
    struct binding *e = find(lane, LAUNCH, function, stream);
    if (!e || n > lane->max_param_bytes || (e->param_bytes >= 0 && (long long)n != e->param_bytes))
        return NULL;
    memcpy(lane->params, params, n);
    lane->param_size = n;
    return e;
}

/* One record's work. Returns -1 when the record is Python's (nothing was done), else the CUresult. */
static int launch(rgpu_lane *lane, const struct lane_record *r, const char **what)
{
    struct rgpu_launch_kernel_req m;
    if (rgpu_unpack_launch_kernel_req(r->args, r->args_len, &m))
        return -1;
    struct binding *e = stage_launch(lane, m.function, m.stream, r->bulk, r->bulk_len);
    if (!e)
        return -1;
    int code = lane_set_current(lane, e->ctx, what);
    if (code)
        return code;
    *what = "cuLaunchKernel";
    return lane->d.launch_kernel(e->obj, m.grid_x, m.grid_y, m.grid_z, m.block_x, m.block_y, m.block_z,
                                 m.shared_mem, e->stream, NULL, lane->extra);
}

/* The bulk is the attributes, then the parameters. */
static int launch_ex(rgpu_lane *lane, const struct lane_record *r, const char **what)
{
    const uint8_t *bulk = r->bulk;
    size_t bulk_len = r->bulk_len;
    struct rgpu_launch_kernel_ex_req m;
    if (rgpu_unpack_launch_kernel_ex_req(r->args, r->args_len, &m) || m.count > MAX_ATTRIBUTES)
        return -1;
    size_t attr_bytes = (size_t)m.count * ATTRIBUTE_SIZE;
    if (bulk_len < attr_bytes)
        return -1;
    for (uint32_t i = 0; i < m.count; i++)
        if (!plain_attribute(rgpu_get_u32(bulk + i * ATTRIBUTE_SIZE)))
            return -1;
    struct binding *e = stage_launch(lane, m.function, m.stream, bulk + attr_bytes, bulk_len - attr_bytes);
    if (!e)
        return -1;
    for (uint32_t i = 0; i < m.count; i++) { /* the id as the host reads it, the padding zeroed, the value as sent */
        unsigned char *a = lane->attributes + i * ATTRIBUTE_SIZE;
        uint32_t id = rgpu_get_u32(bulk + i * ATTRIBUTE_SIZE);
        memcpy(a, &id, 4);
        memset(a + 4, 0, 4);
        memcpy(a + 8, bulk + i * ATTRIBUTE_SIZE + 8, ATTRIBUTE_SIZE - 8);
    }
    rgpu_lane_launch_config *c = &lane->config;
    c->gx = m.grid_x, c->gy = m.grid_y, c->gz = m.grid_z, c->bx = m.block_x, c->by = m.block_y, c->bz = m.block_z;
    c->shmem = m.shared_mem, c->stream = e->stream, c->attrs = lane->attributes, c->count = m.count;
    int code = lane_set_current(lane, e->ctx, what);
    if (code)
        return code;
    *what = "cuLaunchKernelEx";
    return lane->d.launch_kernel_ex(c, e->obj, NULL, lane->extra);
}

static struct binding *stream_binding(rgpu_lane *lane, uint64_t stream, uint64_t current_ctx)
{
    if (!stream && !current_ctx)
        return NULL; /* the NULL stream of no context: Python's INVALID_CONTEXT */
    return find(lane, STREAM, stream, stream ? 0 : current_ctx);
}

int lane_stream_of(rgpu_lane *lane, uint64_t stream, uint64_t current_ctx, uintptr_t *ctx, uintptr_t *driver_stream)
{
    struct binding *e = stream_binding(lane, stream, current_ctx);
    if (!e)
        return 0;
    *ctx = e->ctx, *driver_stream = e->stream;
    return 1;
}

rgpu_lane_ring *lane_htod_ring(rgpu_lane *lane, uint64_t dst, uint64_t stream, size_t n, int one_slot,
                               uint64_t current_ctx, int capture_possible, uintptr_t *driver_ctx,
                               uintptr_t *driver_stream, int *code, const char **what)
{
    *code = -1;
    if (capture_possible)
        return NULL;
    struct binding *e = stream_binding(lane, stream, current_ctx);
    if (!e || !e->ring || (one_slot && n > e->ring->slot_bytes) || !lane_owned(lane, dst, n))
        return NULL;
    if ((*code = lane_set_current(lane, e->ctx, what)))
        return NULL;
    *driver_ctx = e->ctx, *driver_stream = e->stream;
    return e->ring;
}

const rgpu_lane_driver *lane_driver(const rgpu_lane *lane) { return &lane->d; }

void lane_owe_sync(rgpu_lane *lane, uintptr_t ctx, uintptr_t stream, unsigned opcode, unsigned request_id)
{
    lane->sync.ctx = ctx, lane->sync.stream = stream, lane->sync.owed = 1;
    lane->sync.failed.opcode = opcode, lane->sync.failed.request_id = request_id;
}

void lane_sync_covered(rgpu_lane *lane) { lane->sync.owed = 0; }

int lane_settle_sync(rgpu_lane *lane, uintptr_t ctx, uintptr_t stream)
{
    const char *what = "";
    if (lane->sync.failed.status)
        return lane->sync.failed.status;
    if (!lane->sync.owed || (lane->sync.ctx == ctx && lane->sync.stream == stream && ctx))
        return 0;
    lane->sync.owed = 0;
    int code = lane_set_current(lane, lane->sync.ctx, &what);
    if (!code && (code = lane->d.stream_synchronize(lane->sync.stream)))
        what = "cuStreamSynchronize";
    if (code) {
        lane->sync.failed.status = code, lane->sync.failed.what = what;
        return code;
    }
    return ctx && ctx != lane->sync.ctx ? lane_set_current(lane, ctx, &what) : 0;
}

void lane_take_sync_failure(rgpu_lane *lane, rgpu_lane_stop *into)
{
    *into = lane->sync.failed;
    if (!into->status)
        into->opcode = into->request_id = 0;
    memset(&lane->sync.failed, 0, sizeof lane->sync.failed);
}

static int htod(rgpu_lane *lane, const struct lane_record *r, const char **what)
{
    struct rgpu_memcpy_htod_async_req m;
    uintptr_t ctx, stream;
    int code;
    if (rgpu_unpack_memcpy_htod_async_req(r->args, r->args_len, &m))
        return -1;
    rgpu_lane_ring *ring = lane_htod_ring(lane, m.dst, m.stream, r->bulk_len, 1, r->current_ctx, r->capture_possible,
                                          &ctx, &stream, &code, what);
    if (!ring)
        return code;
    return rgpu_lane_ring_copy(&lane->d, ring, m.dst, r->bulk, r->bulk_len, stream, what);
}

int rgpu_lane_runs_decode(const uint8_t *coded, size_t len, uint8_t *out, size_t n)
{
    return rgpu_runs_decode(coded, len, out, n);
}

/* Filled on the device from a plan in the ring's slots where the ring has the fill kernel and the copy is of
 * whole, aligned words, of the ring's fill_min bytes or more, to an allocation of the stream's context. (A step of
 * llama.cpp at fa 0 codes 1 MiB of V row indices as 128 runs: decoding them here takes ~20 us, and copying the
 * 1 MiB delays the step's graph.) Else decoded straight into the slots and copied. Anything amiss (a size over the
 * most, a coding that does not stand for exactly `size` bytes) is Python's to refuse with its message: nothing was
 * sent yet. */
static int htod_runs(rgpu_lane *lane, const struct lane_record *r, const char **what)
{
    struct rgpu_memcpy_htod_runs_req m;
    uintptr_t ctx, stream;
    int code, first;
    size_t entries, bytes;
    if (rgpu_unpack_memcpy_htod_runs_req(r->args, r->args_len, &m) || m.size > RGPU_RUNS_MAX_COPY_BYTES || !m.size)
        return -1;
    rgpu_lane_ring *ring = lane_htod_ring(lane, m.dst, m.stream, m.size, 0, r->current_ctx, r->capture_possible,
                                          &ctx, &stream, &code, what);
    if (!ring)
        return code;
    size_t most = ring->slot_bytes * (size_t)(ring->slots / 2); /* (one copy's most: the fake's ring is small) */
    /* (a kernel, unlike a copy, cannot write another context's memory or a module's constants) */
    if (ring->runs_fill && m.size >= ring->fill_min && !(m.dst % 8) && !(m.size % 8) &&
        fill_owned(lane, m.dst, m.size, ctx)) {
        if (rgpu_runs_plan_size(r->bulk, r->bulk_len, m.size, &entries, &bytes))
            return -1;
        if (bytes <= most) {
            char *slots = lane_ring_slots(&lane->d, ring, bytes, &first, what, &code);
            if (!slots)
                return code;
            if (rgpu_runs_plan(r->bulk, r->bulk_len, m.size, (uint8_t *)slots, entries, bytes))
                return -1;
            return lane_ring_fill_slots(&lane->d, ring, first, bytes, entries, m.dst, stream, what);
        }
    }
    if (m.size > most)
        return -1;
    char *slots = lane_ring_slots(&lane->d, ring, m.size, &first, what, &code);
    if (!slots)
        return code;
    if (rgpu_runs_decode(r->bulk, r->bulk_len, (uint8_t *)slots, m.size))
        return -1;
    return lane_ring_send_slots(&lane->d, ring, first, m.dst, m.size, stream, what);
}

static int memset_async(rgpu_lane *lane, int width, const struct lane_record *r, const char **what)
{
    const uint8_t *args = r->args;
    size_t args_len = r->args_len;
    struct rgpu_memset_d8_async_req m8;
    struct rgpu_memset_d32_async_req m32;
    uint64_t dst, count, stream;
    uint32_t value;
    if (width == 1) {
        if (rgpu_unpack_memset_d8_async_req(args, args_len, &m8))
            return -1;
        dst = m8.dst, value = m8.value & 0xFF, count = m8.count, stream = m8.stream;
    } else {
        if (rgpu_unpack_memset_d32_async_req(args, args_len, &m32))
            return -1;
        dst = m32.dst, value = m32.value, count = m32.count, stream = m32.stream;
    }
    if (count > UINT64_MAX / 4 || !lane_owned(lane, dst, count * (uint64_t)width))
        return -1;
    struct binding *e = stream_binding(lane, stream, r->current_ctx);
    if (!e)
        return -1;
    int code = lane_set_current(lane, e->ctx, what);
    if (code)
        return code;
    if (width == 1) {
        *what = "cuMemsetD8Async";
        return lane->d.memset_d8_async(dst, (unsigned char)value, count, e->stream);
    }
    *what = "cuMemsetD32Async";
    return lane->d.memset_d32_async(dst, value, count, e->stream);
}

/* A bound stream's binding, its context made current; NULL when the stream is not bound (*code -1: Python's) or
 * making its context current failed (*code the CUresult). */
static struct binding *on_stream(rgpu_lane *lane, uint64_t stream, uint64_t current_ctx, int *code, const char **what)
{
    struct binding *e = stream_binding(lane, stream, current_ctx);
    *code = e ? lane_set_current(lane, e->ctx, what) : -1;
    return *code ? NULL : e;
}

static int synchronize(rgpu_lane *lane, const struct lane_record *r, const char **what)
{
    struct rgpu_stream_synchronize_req m;
    if (rgpu_unpack_stream_synchronize_req(r->args, r->args_len, &m))
        return -1;
    int code;
    struct binding *e = on_stream(lane, m.stream, r->current_ctx, &code, what);
    if (!e)
        return code;
    *what = "cuStreamSynchronize";
    return lane->d.stream_synchronize(e->stream);
}

static int graph_launch(rgpu_lane *lane, const struct lane_record *r, const char **what)
{
    struct rgpu_graph_launch_req m;
    if (rgpu_unpack_graph_launch_req(r->args, r->args_len, &m))
        return -1;
    struct binding *e = find(lane, GRAPH, m.exec, m.stream);
    if (!e)
        return -1;
    int code = lane_set_current(lane, e->ctx, what);
    if (code)
        return code;
    *what = "cuGraphLaunch";
    return lane->d.graph_launch(e->obj, e->stream);
}

static int memset_d8(rgpu_lane *lane, const struct lane_record *r, const char **what)
{
    return memset_async(lane, 1, r, what);
}

static int memset_d32(rgpu_lane *lane, const struct lane_record *r, const char **what)
{
    return memset_async(lane, 4, r, what);
}

/* The records the lane runs, each with its count: one table for rgpu_lane_serves and rgpu_lane_run. */
static const struct runner {
    unsigned opcode;
    int counter;
    int (*run)(rgpu_lane *lane, const struct lane_record *r, const char **what);
} runners[] = {
    {RGPU_OP_LAUNCH_KERNEL, COUNT_LAUNCH, launch},
    {RGPU_OP_LAUNCH_KERNEL_EX, COUNT_LAUNCH_EX, launch_ex},
    {RGPU_OP_STREAM_SYNCHRONIZE, COUNT_SYNC, synchronize},
    {RGPU_OP_GRAPH_LAUNCH, COUNT_GRAPH, graph_launch},
    {RGPU_OP_MEMCPY_HTOD_ASYNC, COUNT_HTOD, htod},
    {RGPU_OP_MEMCPY_HTOD_RUNS, COUNT_HTOD_RUNS, htod_runs},
    {RGPU_OP_MEMSET_D8_ASYNC, COUNT_MEMSET_D8, memset_d8},
    {RGPU_OP_MEMSET_D32_ASYNC, COUNT_MEMSET_D32, memset_d32},
    {RGPU_OP_DNN_BN_INFERENCE, COUNT_BN_INFERENCE, lane_batch_norm},
    {RGPU_OP_DNN_EXECUTE, COUNT_DNN_EXECUTE, lane_dnn_execute},
};

static const struct runner *runner_of(unsigned opcode)
{
    for (size_t i = 0; i < sizeof runners / sizeof *runners; i++)
        if (runners[i].opcode == opcode)
            return &runners[i];
    return NULL;
}

int rgpu_lane_serves(uint16_t opcode) { return runner_of(opcode) != NULL; }

void rgpu_lane_run(rgpu_lane *lane, const uint8_t *batch, size_t len, size_t pos, uint64_t current_ctx,
                   int capture_possible, rgpu_lane_stop *stop)
{
    stop->status = 0, stop->opcode = 0, stop->request_id = 0, stop->what = "";
    while (pos < len) {
        if (len - pos < RGPU_PREFIX_SIZE)
            break;
        size_t n = rgpu_get_u32(batch + pos);
        if (len - pos - RGPU_PREFIX_SIZE < n)
            break;
        const uint8_t *body = batch + pos + RGPU_PREFIX_SIZE;
        rgpu_header h;
        size_t args_len;
        if (rgpu_parse_header(body, n, &h, &args_len) || h.flags != RGPU_FLAG_NO_REPLY)
            break;
        const struct runner *runner = runner_of(h.opcode);
        if (!runner)
            break;
        const struct lane_record r = {body + RGPU_HEADER_SIZE, args_len, body + RGPU_HEADER_SIZE + args_len,
                                      h.bulk_len, current_ctx, capture_possible};
        const char *what = "";
        unsigned long long started = rgpu_now_ns();
        int code = runner->run(lane, &r, &what);
        if (code < 0)
            break;
        lane->calls[runner->counter]++;
        lane->ns[runner->counter] += rgpu_now_ns() - started;
        pos += RGPU_PREFIX_SIZE + n;
        if (code) {
            stop->status = code, stop->opcode = h.opcode, stop->request_id = h.request_id, stop->what = what;
            break;
        }
    }
    stop->pos = pos;
}

uint8_t *lane_reply(rgpu_lane *lane) { return lane->reply; }

/* A copy back larger than the reply buffer lands in page-locked memory: consecutive slots of the stream's copy
 * ring (from its first slot when they would wrap), each waited for until the GPU has read what a host-to-device
 * copy left there. Python's path copied into pageable memory, which the driver stages and copies again. Only the
 * first slot is waited for here: the reply goes out as the slots land (lane_copy_back_wait), so sending overlaps
 * the device copying the rest. The first slot is a copy and an event of its own, so that its reply starts soon;
 * the rest go BACK_GROUP slots to a copy and an event, which land while the first slot is sent (a driver call
 * costs microseconds: a 1 MiB copy back spent 12-34 us queueing one copy and one event per slot). */
#define BACK_GROUP 4
static int dtoh_through_ring(rgpu_lane *lane, rgpu_lane_ring *r, unsigned long long src, size_t n, uintptr_t stream,
                             const uint8_t **bulk_at, const char **what)
{
    size_t slots = (n + r->slot_bytes - 1) / r->slot_bytes;
    int code;
    if ((size_t)r->next + slots > (size_t)r->slots)
        r->next = 0;
    int first = r->next;
    for (size_t i = 0, off = 0; i < slots;) {
        int at = r->next;
        size_t group = i == 0 ? 1 : slots - i < BACK_GROUP ? slots - i : BACK_GROUP;
        for (size_t g = 0; g < group; g++) { /* each slot free of what was there before */
            if (!lane_ring_slot(&lane->d, r, what, &code))
                return code;
            r->next = (r->next + 1) % r->slots;
        }
        size_t k = n - off < group * r->slot_bytes ? n - off : group * r->slot_bytes;
        *what = "cuMemcpyDtoHAsync";
        if ((code = lane->d.memcpy_dtoh_async(r->base + (size_t)at * r->slot_bytes, src + off, k, stream)) ||
            (code = lane_ring_mark_range(&lane->d, r, at, (int)group, stream, what)))
            return code;
        i += group, off += k;
    }
    /* The first slot landed: so did everything queued on the stream before the copy, and any fault of it shows
     * here, before a reply has begun (after that, only the context failing meanwhile can stop the rest). */
    if ((code = lane_ring_wait(&lane->d, r, first, what)))
        return code;
    lane->back.ring = r, lane->back.first = first, lane->back.pieces = slots;
    *bulk_at = (const uint8_t *)r->base + (size_t)first * r->slot_bytes;
    return 0;
}

size_t lane_copy_back_pieces(const rgpu_lane *lane, size_t *piece_bytes)
{
    if (!lane->back.ring)
        return 0;
    *piece_bytes = lane->back.ring->slot_bytes;
    return lane->back.pieces;
}

int lane_copy_back_wait(rgpu_lane *lane, size_t piece, const char **what)
{
    rgpu_lane_ring *r = lane->back.ring;
    if (!r || piece >= lane->back.pieces)
        return 0;
    return lane_ring_wait(&lane->d, r, lane->back.first + (int)piece, what);
}

int lane_copy_back_landed(const rgpu_lane *lane, size_t piece)
{
    const rgpu_lane_ring *r = lane->back.ring;
    return r && piece < lane->back.pieces && !r->pending[lane->back.first + (int)piece];
}

void lane_copy_back_done(rgpu_lane *lane) { lane->back.ring = NULL, lane->back.pieces = 0; }

/* MEMCPY_DTOH_ASYNC, or MEMCPY_DTOH (`sync`): the same on the NULL stream, which waits as cuMemcpyDtoH does. */
static int dtoh(rgpu_lane *lane, int sync, const uint8_t *args, size_t args_len, uint64_t current_ctx,
                size_t *bulk_len, const uint8_t **bulk_at, const char **what)
{
    struct rgpu_memcpy_dtoh_async_req m;
    struct rgpu_memcpy_dtoh_req plain;
    if (sync) {
        if (rgpu_unpack_memcpy_dtoh_req(args, args_len, &plain))
            return -1;
        m = (struct rgpu_memcpy_dtoh_async_req){.src = plain.src, .size = plain.size, .stream = 0};
    } else if (rgpu_unpack_memcpy_dtoh_async_req(args, args_len, &m)) {
        return -1;
    }
    if (!lane->d.memcpy_dtoh_async || !m.size || !lane_owned(lane, m.src, m.size))
        return -1;
    struct binding *e = stream_binding(lane, m.stream, current_ctx);
    int large = m.size > LANE_REPLY_BULK;
    if (!e || (large && (!e->ring || e->ring->slots <= 0 || e->ring->slots > 64 ||
                         m.size > (uint64_t)e->ring->slots * e->ring->slot_bytes)))
        return -1;
    int code = lane_set_current(lane, e->ctx, what);
    if (code)
        return code;
    if (large) {
        code = dtoh_through_ring(lane, e->ring, m.src, m.size, e->stream, bulk_at, what);
        *bulk_len = code ? 0 : m.size;
        return code;
    }
    *what = "cuMemcpyDtoHAsync";
    if ((code = lane->d.memcpy_dtoh_async(lane->reply + RGPU_PREFIX_SIZE + RGPU_HEADER_SIZE, m.src, m.size,
                                          e->stream)))
        return code;
    *what = "cuStreamSynchronize";
    code = lane->d.stream_synchronize(e->stream);
    *bulk_len = code ? 0 : m.size;
    return code;
}

/* cuMemGetInfo in the current context, which Python has made current for its NULL stream before. */
static int mem_get_info(rgpu_lane *lane, size_t args_len, uint64_t current_ctx, size_t *reply_args_len,
                        const char **what)
{
    int code;
    if (args_len || !lane->d.mem_get_info)
        return -1;
    if (!on_stream(lane, 0, current_ctx, &code, what))
        return code;
    size_t free_bytes, total_bytes;
    *what = "cuMemGetInfo";
    if ((code = lane->d.mem_get_info(&free_bytes, &total_bytes)))
        return code;
    rgpu_pack_mem_get_info_rep(lane->reply + RGPU_PREFIX_SIZE + RGPU_HEADER_SIZE,
                               &(struct rgpu_mem_get_info_rep){.free = free_bytes, .total = total_bytes});
    *reply_args_len = RGPU_MEM_GET_INFO_REP_SIZE;
    return 0;
}

int lane_blocking_call(rgpu_lane *lane, unsigned opcode, const uint8_t *args, size_t args_len, uint64_t current_ctx,
                       int capture_possible, int memory_limited, size_t *reply_args_len, size_t *bulk_len,
                       const uint8_t **bulk_at, const char **what)
{
    *reply_args_len = *bulk_len = 0;
    *bulk_at = NULL;
    lane_copy_back_done(lane);
    if (opcode == RGPU_OP_NOP)
        return args_len ? -1 : 0;
    if (opcode == RGPU_OP_MEM_GET_INFO) /* (a session with a quota answers with what it may still take) */
        return memory_limited ? -1 : mem_get_info(lane, args_len, current_ctx, reply_args_len, what);
    if (capture_possible) /* what a synchronize or copy does to a capture under way is Python's to report */
        return -1;
    if (opcode == RGPU_OP_CTX_SYNCHRONIZE) { /* the current context, made current for its NULL stream */
        int code;
        if (args_len || !lane->d.ctx_synchronize)
            return -1;
        if (!on_stream(lane, 0, current_ctx, &code, what))
            return code;
        *what = "cuCtxSynchronize";
        return lane->d.ctx_synchronize();
    }
    if (opcode == RGPU_OP_STREAM_SYNCHRONIZE)
        return synchronize(lane, &(struct lane_record){args, args_len, NULL, 0, current_ctx, capture_possible}, what);
    if (opcode == RGPU_OP_MEMCPY_DTOH_ASYNC || opcode == RGPU_OP_MEMCPY_DTOH)
        return dtoh(lane, opcode == RGPU_OP_MEMCPY_DTOH, args, args_len, current_ctx, bulk_len, bulk_at, what);
    return -1;
}

static int counter_of(unsigned opcode)
{
    for (int i = 0; i < COUNTS; i++)
        if (count_opcode[i] == opcode)
            return i;
    return -1;
}

void lane_count_call(rgpu_lane *lane, unsigned opcode, unsigned long long ns)
{
    int i = counter_of(opcode);
    if (i >= 0)
        lane->calls[i]++, lane->ns[i] += ns;
}

void lane_count_reply(rgpu_lane *lane, unsigned opcode)
{
    int i = counter_of(opcode);
    if (i >= 0)
        lane->replies[i]++;
}

size_t rgpu_lane_take_counts(rgpu_lane *lane, rgpu_lane_count *out, size_t cap)
{
    size_t k = 0;
    for (int i = 0; i < COUNTS && k < cap; i++) {
        if (!lane->calls[i] && !lane->replies[i])
            continue;
        out[k].opcode = count_opcode[i], out[k].calls = lane->calls[i], out[k].ns = lane->ns[i];
        out[k].replies = lane->replies[i];
        lane->calls[i] = lane->ns[i] = lane->replies[i] = 0;
        k++;
    }
    return k;
}
