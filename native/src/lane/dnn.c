/* cuDNN records the lane runs (lane.h's rgpu_lane_bind_batch_norm): a batch norm in inference, the record a
 * ResNet sends most after its convolutions. Python served it at ~10 us beside cuDNN's own 13-19 us on the H200
 * (bench/results/gpu-2026-12-04c-psk-dispatch, run 4); here it costs a table lookup and six range checks. */
#include <string.h>

#include "lane.h"
#include "lane_private.h"
#include "rgpu_ops.h"

int rgpu_lane_bind_batch_norm(rgpu_lane *lane, const rgpu_lane_dnn *dnn, uint64_t handle, const uint8_t *tensors,
                              size_t tensors_len, uintptr_t ctx_obj, uintptr_t handle_obj, uintptr_t x_desc,
                              uintptr_t y_desc, uintptr_t bn_desc, uint64_t x_bytes, uint64_t y_bytes,
                              uint64_t bn_bytes, int doubles)
{
    struct lane_batch_norms *t = lane_batch_norms(lane);
    if (tensors_len != LANE_BN_TENSORS || !dnn->set_stream || !dnn->bn_inference)
        return -1;
    struct lane_batch_norm *b = NULL;
    for (size_t i = 0; i < t->count && !b; i++)
        if (t->shapes[i].handle == handle && !memcmp(t->shapes[i].tensors, tensors, LANE_BN_TENSORS))
            b = &t->shapes[i]; /* bound again: the newer answer wins */
    if (!b) {
        if (t->count == LANE_BATCH_NORMS)
            return -1;
        b = &t->shapes[t->count++];
    }
    t->dnn = *dnn;
    *b = (struct lane_batch_norm){handle, {0}, ctx_obj, handle_obj, x_desc, y_desc, bn_desc, x_bytes, y_bytes,
                                  bn_bytes, doubles};
    memcpy(b->tensors, tensors, LANE_BN_TENSORS);
    return 0;
}

/* DNN_BN_INFERENCE. -1: Python's (nothing was done) -- an unbound shape or stream, a stream of another context, a
 * range outside the session's memory, and also a call cuDNN refused: Python runs it again and reports cuDNN's
 * error as it always has (a refused call launched nothing, and the output depends on the inputs alone). */
int lane_batch_norm(rgpu_lane *lane, const uint8_t *args, size_t args_len, const uint8_t *bulk, size_t bulk_len,
                    uint64_t current_ctx, const char **what)
{
    struct lane_batch_norms *t = lane_batch_norms(lane);
    struct rgpu_dnn_bn_inference_req m;
    if (bulk_len != LANE_BN_TENSORS || rgpu_unpack_dnn_bn_inference_req(args, args_len, &m))
        return -1;
    const struct lane_batch_norm *b = NULL;
    for (size_t i = 0; i < t->count && !b; i++)
        if (t->shapes[i].handle == m.handle && !memcmp(t->shapes[i].tensors, bulk, LANE_BN_TENSORS))
            b = &t->shapes[i];
    uintptr_t ctx, stream;
    if (!b || !lane_stream_of(lane, m.stream, current_ctx, &ctx, &stream) || ctx != b->ctx ||
        !lane_owned(lane, m.x, b->x_bytes) || !lane_owned(lane, m.y, b->y_bytes) ||
        !lane_owned(lane, m.scale, b->bn_bytes) || !lane_owned(lane, m.bias, b->bn_bytes) ||
        !lane_owned(lane, m.mean, b->bn_bytes) || !lane_owned(lane, m.var, b->bn_bytes))
        return -1;
    int code = lane_set_current(lane, ctx, what);
    if (code)
        return code;
    double alpha = m.alpha, beta = m.beta;
    float alpha_f = (float)m.alpha, beta_f = (float)m.beta;
    const void *a = b->doubles ? (const void *)&alpha : (const void *)&alpha_f;
    const void *z = b->doubles ? (const void *)&beta : (const void *)&beta_f;
#define PTR(v) ((void *)(uintptr_t)(v))
    if (t->dnn.set_stream(PTR(b->handle_obj), PTR(stream)) ||
        t->dnn.bn_inference(PTR(b->handle_obj), (int)m.mode, a, z, PTR(b->x_desc), PTR(m.x), PTR(b->y_desc),
                            PTR(m.y), PTR(b->bn_desc), PTR(m.scale), PTR(m.bias), PTR(m.mean), PTR(m.var),
                            m.epsilon))
        return -1;
#undef PTR
    return 0;
}
