/* cuDNN records the lane runs (lane.h's rgpu_lane_bind_batch_norm, rgpu_lane_bind_dnn_execute): a batch norm in
 * inference and a plan's execution, the records a ResNet sends most. Python served a batch norm at ~10 us beside
 * cuDNN's own call (bench/results/gpu-2026-12-04c-psk-dispatch, run 4), and its 20 executions per ResNet-18
 * step took the worker 1.2 ms (gpu-2026-12-04d-sealed-loop, run 3); here each costs a lookup and its range
 * checks. Python binds what it ran and stays the authority: the key is the record's bytes, exactly. */
#include <stdlib.h>
#include <string.h>

#include "lane.h"
#include "lane_private.h"
#include "rgpu_ops.h"

struct lane_execute {
    uint64_t handle, plan, hash;
    uintptr_t ctx, handle_obj, plan_obj, pack_obj;
    size_t ranges, pack_len;
    uint64_t starts[LANE_EXECUTE_RANGES], sizes[LANE_EXECUTE_RANGES];
    uint8_t pack[]; /* pack_len bytes */
};

static uint64_t fnv1a(const uint8_t *p, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

void lane_dnn_forget(struct lane_dnn_bound *t)
{
    for (size_t i = 0; i < t->executes; i++)
        free(t->execute[i]);
    t->executes = 0, t->batch_norms = 0;
}

/* The bound shape of `handle` with these tensor descriptors, or NULL. */
static struct lane_batch_norm *find_batch_norm(struct lane_dnn_bound *t, uint64_t handle, const uint8_t *tensors)
{
    for (size_t i = 0; i < t->batch_norms; i++)
        if (t->shapes[i].handle == handle && !memcmp(t->shapes[i].tensors, tensors, LANE_BN_TENSORS))
            return &t->shapes[i];
    return NULL;
}

int rgpu_lane_bind_batch_norm(rgpu_lane *lane, const rgpu_lane_dnn *dnn, uint64_t handle, const uint8_t *tensors,
                              size_t tensors_len, uintptr_t ctx_obj, uintptr_t handle_obj, uintptr_t x_desc,
                              uintptr_t y_desc, uintptr_t bn_desc, uint64_t x_bytes, uint64_t y_bytes,
                              uint64_t bn_bytes, int doubles)
{
    struct lane_dnn_bound *t = lane_dnn_bound(lane);
    if (tensors_len != LANE_BN_TENSORS || !dnn->set_stream || !dnn->bn_inference)
        return -1;
    struct lane_batch_norm *b = find_batch_norm(t, handle, tensors); /* bound again: the newer answer wins */
    if (!b) {
        if (t->batch_norms == LANE_BATCH_NORMS)
            return -1;
        b = &t->shapes[t->batch_norms++];
    }
    t->dnn = *dnn;
    *b = (struct lane_batch_norm){handle, {0}, ctx_obj, handle_obj, x_desc, y_desc, bn_desc, x_bytes, y_bytes,
                                  bn_bytes, doubles};
    memcpy(b->tensors, tensors, LANE_BN_TENSORS);
    return 0;
}

int rgpu_lane_bind_dnn_execute(rgpu_lane *lane, const rgpu_lane_dnn *dnn, uint64_t handle, uint64_t plan,
                               const uint8_t *pack, size_t pack_len, uintptr_t ctx_obj, uintptr_t handle_obj,
                               uintptr_t plan_obj, uintptr_t pack_obj, const uint64_t *starts,
                               const uint64_t *sizes, size_t ranges)
{
    struct lane_dnn_bound *t = lane_dnn_bound(lane);
    if (pack_len > LANE_EXECUTE_PACK || ranges > LANE_EXECUTE_RANGES || !dnn->set_stream || !dnn->execute ||
        t->executes == LANE_EXECUTES)
        return -1;
    struct lane_execute *e = malloc(sizeof *e + pack_len);
    if (!e)
        return -1;
    *e = (struct lane_execute){handle, plan, fnv1a(pack, pack_len), ctx_obj, handle_obj, plan_obj, pack_obj,
                               ranges, pack_len, {0}, {0}};
    memcpy(e->starts, starts, ranges * sizeof *starts);
    memcpy(e->sizes, sizes, ranges * sizeof *sizes);
    memcpy(e->pack, pack, pack_len);
    t->dnn = *dnn;
    t->execute[t->executes++] = e; /* (a pack bound again is found first where it was bound first: the same) */
    return 0;
}

/* The bound stream of the record, in the context the call was bound in, made current: 0, -1 (Python's), or the
 * CUresult of making it current. */
static int on_bound_stream(rgpu_lane *lane, uint64_t stream, uint64_t current_ctx, uintptr_t ctx,
                           uintptr_t *driver_stream, const char **what)
{
    uintptr_t stream_ctx;
    if (!lane_stream_of(lane, stream, current_ctx, &stream_ctx, driver_stream) || stream_ctx != ctx)
        return -1;
    return lane_set_current(lane, ctx, what);
}

#define PTR(v) ((void *)(uintptr_t)(v))

/* DNN_BN_INFERENCE. -1: Python's (nothing was done) -- an unbound shape or stream, a stream of another context, a
 * range outside the session's memory, and also a call cuDNN refused: Python runs it again and reports cuDNN's
 * error as it always has (a refused call launched nothing, and the output depends on the inputs alone). */
int lane_batch_norm(rgpu_lane *lane, const struct lane_record *r, const char **what)
{
    struct lane_dnn_bound *t = lane_dnn_bound(lane);
    struct rgpu_dnn_bn_inference_req m;
    const uint8_t *bulk = r->bulk;
    if (r->bulk_len != LANE_BN_TENSORS || rgpu_unpack_dnn_bn_inference_req(r->args, r->args_len, &m))
        return -1;
    const struct lane_batch_norm *b = find_batch_norm(t, m.handle, bulk);
    if (!b || !lane_owned(lane, m.x, b->x_bytes) || !lane_owned(lane, m.y, b->y_bytes) ||
        !lane_owned(lane, m.scale, b->bn_bytes) || !lane_owned(lane, m.bias, b->bn_bytes) ||
        !lane_owned(lane, m.mean, b->bn_bytes) || !lane_owned(lane, m.var, b->bn_bytes))
        return -1;
    uintptr_t stream;
    int code = on_bound_stream(lane, m.stream, r->current_ctx, b->ctx, &stream, what);
    if (code)
        return code;
    double alpha = m.alpha, beta = m.beta;
    float alpha_f = (float)m.alpha, beta_f = (float)m.beta;
    const void *a = b->doubles ? (const void *)&alpha : (const void *)&alpha_f;
    const void *z = b->doubles ? (const void *)&beta : (const void *)&beta_f;
    if (t->dnn.set_stream(PTR(b->handle_obj), PTR(stream)) ||
        t->dnn.bn_inference(PTR(b->handle_obj), (int)m.mode, a, z, PTR(b->x_desc), PTR(m.x), PTR(b->y_desc),
                            PTR(m.y), PTR(b->bn_desc), PTR(m.scale), PTR(m.bias), PTR(m.mean), PTR(m.var),
                            m.epsilon))
        return -1;
    return 0;
}

/* DNN_EXECUTE, as lane_batch_norm: Python's when anything is not as bound or cuDNN refuses (a refused execution
 * launched nothing: Python runs it again and reports why). */
int lane_dnn_execute(rgpu_lane *lane, const struct lane_record *r, const char **what)
{
    struct lane_dnn_bound *t = lane_dnn_bound(lane);
    struct rgpu_dnn_execute_req m;
    const uint8_t *bulk = r->bulk;
    size_t bulk_len = r->bulk_len;
    if (!t->executes || bulk_len > LANE_EXECUTE_PACK || rgpu_unpack_dnn_execute_req(r->args, r->args_len, &m))
        return -1;
    uint64_t hash = fnv1a(bulk, bulk_len);
    const struct lane_execute *e = NULL;
    for (size_t i = 0; i < t->executes && !e; i++) {
        const struct lane_execute *c = t->execute[i];
        if (c->hash == hash && c->handle == m.handle && c->plan == m.plan && c->pack_len == bulk_len &&
            !memcmp(c->pack, bulk, bulk_len))
            e = c;
    }
    if (!e)
        return -1;
    for (size_t i = 0; i < e->ranges; i++)
        if (!lane_owned(lane, e->starts[i], e->sizes[i]))
            return -1;
    uintptr_t stream;
    int code = on_bound_stream(lane, m.stream, r->current_ctx, e->ctx, &stream, what);
    if (code)
        return code;
    if (t->dnn.set_stream(PTR(e->handle_obj), PTR(stream)) ||
        t->dnn.execute(PTR(e->handle_obj), PTR(e->plan_obj), PTR(e->pack_obj)))
        return -1;
    return 0;
}
