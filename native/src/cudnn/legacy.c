/* The legacy tensor-descriptor API, local, and the calls PyTorch still makes with it (batch normalisation).
 * Descriptors travel by value inside the deferred call that uses them. */
#include <stdlib.h>
#include <string.h>

#include "dnn.h"

#define MAX_DIMS 8

struct tensor {
    int type, n;
    int dims[MAX_DIMS], strides[MAX_DIMS];
};

DNN_API int cudnnCreateTensorDescriptor(struct tensor **out)
{
    if (!out)
        return CUDNN_STATUS_BAD_PARAM;
    *out = calloc(1, sizeof **out);
    return *out ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_ALLOC_FAILED;
}

DNN_API int cudnnDestroyTensorDescriptor(struct tensor *t)
{
    free(t);
    return CUDNN_STATUS_SUCCESS;
}

DNN_API int cudnnSetTensorNdDescriptor(struct tensor *t, int type, int n, const int *dims, const int *strides)
{
    if (!t || n < 1 || n > MAX_DIMS || !dims || !strides)
        return CUDNN_STATUS_BAD_PARAM;
    for (int i = 0; i < n; i++)
        if (dims[i] <= 0 || strides[i] <= 0)
            return CUDNN_STATUS_BAD_PARAM;
    t->type = type, t->n = n;
    memcpy(t->dims, dims, sizeof *dims * (size_t)n);
    memcpy(t->strides, strides, sizeof *strides * (size_t)n);
    return CUDNN_STATUS_SUCCESS;
}

static void packed_strides(int format, int n, const int *dims, int *strides)
{
    if (format == CUDNN_TENSOR_NHWC && n >= 3) { /* channels last: C is innermost */
        int s = 1;
        strides[1] = s, s *= dims[1];
        for (int i = n - 1; i >= 2; i--)
            strides[i] = s, s *= dims[i];
        strides[0] = s;
    } else {
        int s = 1;
        for (int i = n - 1; i >= 0; i--)
            strides[i] = s, s *= dims[i];
    }
}

DNN_API int cudnnSetTensorNdDescriptorEx(struct tensor *t, int format, int type, int n, const int *dims)
{
    int strides[MAX_DIMS];
    if (!dims || n < 1 || n > MAX_DIMS)
        return CUDNN_STATUS_BAD_PARAM;
    packed_strides(format, n, dims, strides);
    return cudnnSetTensorNdDescriptor(t, type, n, dims, strides);
}

DNN_API int cudnnSetTensor4dDescriptor(struct tensor *t, int format, int type, int n, int c, int h, int w)
{
    int dims[4] = {n, c, h, w};
    return cudnnSetTensorNdDescriptorEx(t, format, type, 4, dims);
}

DNN_API int cudnnSetTensor4dDescriptorEx(struct tensor *t, int type, int n, int c, int h, int w, int ns, int cs,
                                         int hs, int ws)
{
    int dims[4] = {n, c, h, w}, strides[4] = {ns, cs, hs, ws};
    return cudnnSetTensorNdDescriptor(t, type, 4, dims, strides);
}

DNN_API int cudnnGetTensorNdDescriptor(const struct tensor *t, int requested, int *type, int *n, int *dims,
                                       int *strides)
{
    if (!t || !type || !n)
        return CUDNN_STATUS_BAD_PARAM;
    *type = t->type, *n = t->n;
    for (int i = 0; i < requested && i < t->n; i++) {
        if (dims)
            dims[i] = t->dims[i];
        if (strides)
            strides[i] = t->strides[i];
    }
    return CUDNN_STATUS_SUCCESS;
}

DNN_API int cudnnGetTensorSizeInBytes(const struct tensor *t, size_t *size)
{
    static const int bytes[] = {4, 8, 2, 1, 4, 4, 1, 4, 32, 2, 8, 1, 1, 1}; /* by cudnnDataType_t */
    if (!t || !size || t->type < 0 || t->type >= (int)(sizeof bytes / sizeof *bytes))
        return CUDNN_STATUS_BAD_PARAM;
    size_t last = 0;
    for (int i = 0; i < t->n; i++)
        last += (size_t)(t->dims[i] - 1) * (size_t)t->strides[i];
    *size = (last + 1) * (size_t)bytes[t->type];
    return CUDNN_STATUS_SUCCESS;
}

DNN_API int cudnnDeriveBNTensorDescriptor(struct tensor *derived, const struct tensor *x, int mode)
{
    if (!derived || !x || x->n < 3)
        return CUDNN_STATUS_BAD_PARAM;
    int dims[MAX_DIMS], type = (x->type == CUDNN_DATA_HALF || x->type == CUDNN_DATA_BFLOAT16) ? CUDNN_DATA_FLOAT : x->type;
    for (int i = 0; i < x->n; i++)
        dims[i] = i == 1 || (mode == CUDNN_BATCHNORM_PER_ACTIVATION && i > 1) ? x->dims[i] : 1;
    return cudnnSetTensorNdDescriptorEx(derived, CUDNN_TENSOR_NCHW, type, x->n, dims);
}

static void put_tensor(struct dnn_buffer *b, const struct tensor *t)
{
    dnn_put_le(b, (uint64_t)t->type, 4), dnn_put_le(b, (uint64_t)t->n, 4);
    for (int i = 0; i < MAX_DIMS; i++)
        dnn_put_le(b, (uint64_t)(uint32_t)t->dims[i], 4);
    for (int i = 0; i < MAX_DIMS; i++)
        dnn_put_le(b, (uint64_t)(uint32_t)t->strides[i], 4);
}

static double scalar(const void *p, const struct tensor *x)
{
    return x->type == CUDNN_DATA_DOUBLE ? *(const double *)p : (double)*(const float *)p;
}

DNN_API int cudnnBatchNormalizationForwardInference(struct dnn_handle *h, int mode, const void *alpha,
                                                    const void *beta, const struct tensor *xd, const void *x,
                                                    const struct tensor *yd, void *y, const struct tensor *bnd,
                                                    const void *scale, const void *bias, const void *mean,
                                                    const void *var, double epsilon)
{
    if (!h || !alpha || !beta || !xd || !yd || !bnd || !xd->n || !yd->n || !bnd->n)
        return CUDNN_STATUS_BAD_PARAM;
    struct dnn_buffer b = {0};
    put_tensor(&b, xd), put_tensor(&b, yd), put_tensor(&b, bnd);
    uint8_t args[RGPU_DNN_BN_INFERENCE_REQ_SIZE];
    rgpu_pack_dnn_bn_inference(args, &(struct rgpu_dnn_bn_inference_req){
                                         .handle = h->server, .stream = rgpu_ext_stream(h->stream),
                                         .mode = (uint32_t)mode, .alpha = scalar(alpha, xd), .beta = scalar(beta, xd),
                                         .epsilon = epsilon, .x = (uintptr_t)x, .y = (uintptr_t)y,
                                         .scale = (uintptr_t)scale, .bias = (uintptr_t)bias, .mean = (uintptr_t)mean,
                                         .var = (uintptr_t)var});
    int s = b.failed ? CUDNN_STATUS_ALLOC_FAILED
                     : rgpu_dnn_status(rgpu_ext_defer(RGPU_OP_DNN_BN_INFERENCE, args, sizeof args, b.data, b.len));
    free(b.data);
    return s;
}

/* -- batch-norm training ------------------------------------------------------------------------------------ */
/* Plain batch norm (CUDNN_BATCHNORM_OPS_BN) travels in the DNN_BN_* frames; fused with an activation (and an
 * addition) in the DNN_BN_*_EX ones, which add the activation by value and the z / y / dz operands. With OPS_BN
 * the z (addend) and activation arguments are ignored, as cuDNN ignores them -- PyTorch passes x's descriptor.
 * bn_fused: 0 plain, 1 fused, -1 not a cudnnBatchNormOps_t. */
static int bn_fused(int ops)
{
    if (ops == CUDNN_BATCHNORM_OPS_BN)
        return 0;
    return ops == CUDNN_BATCHNORM_OPS_BN_ACTIVATION || ops == CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION ? 1 : -1;
}

/* which: 0 forward workspace, 1 reserve, 2 backward workspace. For the fused size query (`activation` set) the
 * tensors are x, y, z (dz), dy, dx, bn; any the query does not name is x's (bn: derived from x). */
_Static_assert(RGPU_DNN_BN_SIZES_EX_REQ_SIZE >= RGPU_DNN_BN_SIZES_REQ_SIZE, "one buffer holds either request");
_Static_assert(RGPU_DNN_BN_SIZES_EX_REP_SIZE == RGPU_DNN_BN_SIZES_REP_SIZE, "one reply layout for both");
static int bn_size(struct dnn_handle *h, int mode, int ops, int which, const struct tensor *const *tensors,
                   const struct dnn_activation *activation, size_t *size)
{
    const struct tensor *x = tensors[0], *bn = tensors[5];
    if (!h || !x || !x->n || !size || (ops != CUDNN_BATCHNORM_OPS_BN && !activation))
        return CUDNN_STATUS_BAD_PARAM;
    struct tensor derived;
    if (!bn) { /* the reserve-size query names no statistics tensor: derive it as cuDNN would */
        int s = cudnnDeriveBNTensorDescriptor(&derived, x, mode);
        if (s)
            return s;
        bn = &derived;
    }
    struct dnn_buffer b = {0};
    uint8_t args[RGPU_DNN_BN_SIZES_EX_REQ_SIZE], rep[RGPU_DNN_BN_SIZES_REP_SIZE];
    size_t args_len;
    uint16_t op;
    if (ops == CUDNN_BATCHNORM_OPS_BN) {
        put_tensor(&b, x), put_tensor(&b, bn);
        op = RGPU_OP_DNN_BN_SIZES, args_len = RGPU_DNN_BN_SIZES_REQ_SIZE;
        rgpu_pack_dnn_bn_sizes(args, &(struct rgpu_dnn_bn_sizes_req){.handle = h->server, .which = (uint32_t)which,
                                                                      .mode = (uint32_t)mode, .ops = (uint32_t)ops});
    } else {
        for (int i = 0; i < 5; i++)
            put_tensor(&b, tensors[i] && tensors[i]->n ? tensors[i] : x);
        put_tensor(&b, bn);
        op = RGPU_OP_DNN_BN_SIZES_EX, args_len = RGPU_DNN_BN_SIZES_EX_REQ_SIZE;
        rgpu_pack_dnn_bn_sizes_ex(args, &(struct rgpu_dnn_bn_sizes_ex_req){
                                            .handle = h->server, .which = (uint32_t)which, .mode = (uint32_t)mode,
                                            .ops = (uint32_t)ops, .activation_mode = (uint32_t)activation->mode,
                                            .activation_nan = (uint32_t)activation->nan,
                                            .activation_coef = activation->coef});
    }
    struct rgpu_dnn_bn_sizes_rep got;
    int r = b.failed ? 2 : rgpu_ext_call(op, args, args_len, b.data, b.len, rep, sizeof rep, NULL, 0, NULL);
    free(b.data);
    if (!r && rgpu_unpack_dnn_bn_sizes(rep, sizeof rep, &got) == 0)
        *size = (size_t)got.size;
    return rgpu_dnn_status(r);
}

DNN_API int cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(struct dnn_handle *h, int mode, int ops,
                                                                     const struct tensor *x, const struct tensor *z,
                                                                     const struct tensor *y,
                                                                     const struct tensor *bn,
                                                                     const struct dnn_activation *activation,
                                                                     size_t *size)
{
    if (bn_fused(ops) < 0)
        return CUDNN_STATUS_BAD_PARAM;
    const struct tensor *tensors[6] = {x, y, z, NULL, NULL, bn};
    return bn_size(h, mode, ops, 0, tensors, activation, size);
}

DNN_API int cudnnGetBatchNormalizationTrainingExReserveSpaceSize(struct dnn_handle *h, int mode, int ops,
                                                                 const struct dnn_activation *activation,
                                                                 const struct tensor *x, size_t *size)
{
    if (bn_fused(ops) < 0)
        return CUDNN_STATUS_BAD_PARAM;
    const struct tensor *tensors[6] = {x, NULL, NULL, NULL, NULL, NULL};
    return bn_size(h, mode, ops, 1, tensors, activation, size);
}

DNN_API int cudnnGetBatchNormalizationBackwardExWorkspaceSize(struct dnn_handle *h, int mode, int ops,
                                                              const struct tensor *x, const struct tensor *y,
                                                              const struct tensor *dy, const struct tensor *dz,
                                                              const struct tensor *dx, const struct tensor *dbn,
                                                              const struct dnn_activation *activation, size_t *size)
{
    if (bn_fused(ops) < 0)
        return CUDNN_STATUS_BAD_PARAM;
    const struct tensor *tensors[6] = {x, y, dz, dy, dx, dbn};
    return bn_size(h, mode, ops, 2, tensors, activation, size);
}

/* The training calls: packed request, tensors as bulk. */
static int bn_send(uint16_t op, const uint8_t *args, size_t args_len, const struct tensor *const *tensors,
                   int n_tensors)
{
    struct dnn_buffer b = {0};
    for (int i = 0; i < n_tensors; i++)
        put_tensor(&b, tensors[i]);
    int s = b.failed ? CUDNN_STATUS_ALLOC_FAILED
                     : rgpu_dnn_status(rgpu_ext_defer(op, args, args_len, b.data, b.len));
    free(b.data);
    return s;
}

/* The fields DNN_BN_TRAINING and DNN_BN_TRAINING_EX share, for either request struct. */
#define BN_TRAINING_FIELDS                                                                                          \
    .handle = h->server, .stream = rgpu_ext_stream(h->stream), .mode = (uint32_t)mode, .ops = (uint32_t)ops,       \
    .alpha = scalar(alpha, xd), .beta = scalar(beta, xd), .factor = factor, .epsilon = epsilon, .x = (uintptr_t)x, \
    .y = (uintptr_t)y, .scale = (uintptr_t)scale, .bias = (uintptr_t)bias, .running_mean = (uintptr_t)running_mean, \
    .running_var = (uintptr_t)running_var, .saved_mean = (uintptr_t)save_mean,                                     \
    .saved_inv_var = (uintptr_t)save_inv_var, .workspace = (uintptr_t)workspace, .workspace_size = workspace_size, \
    .reserve = (uintptr_t)reserve, .reserve_size = reserve_size

DNN_API int cudnnBatchNormalizationForwardTrainingEx(
    struct dnn_handle *h, int mode, int ops, const void *alpha, const void *beta, const struct tensor *xd,
    const void *x, const struct tensor *zd, const void *z, const struct tensor *yd, void *y, const struct tensor *bnd,
    const void *scale, const void *bias, double factor, void *running_mean, void *running_var, double epsilon,
    void *save_mean, void *save_inv_var, const struct dnn_activation *activation, void *workspace,
    size_t workspace_size, void *reserve, size_t reserve_size)
{
    int fused = bn_fused(ops), adds = ops == CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION;
    if (fused < 0 || (fused && !activation) || (adds && (!zd || !zd->n)))
        return CUDNN_STATUS_BAD_PARAM;
    if (!h || !alpha || !beta || !xd || !yd || !bnd || !xd->n || !yd->n || !bnd->n)
        return CUDNN_STATUS_BAD_PARAM;
    if (!fused) {
        uint8_t args[RGPU_DNN_BN_TRAINING_REQ_SIZE];
        rgpu_pack_dnn_bn_training(args, &(struct rgpu_dnn_bn_training_req){BN_TRAINING_FIELDS});
        const struct tensor *tensors[3] = {xd, yd, bnd};
        return bn_send(RGPU_OP_DNN_BN_TRAINING, args, sizeof args, tensors, 3);
    }
    uint8_t args[RGPU_DNN_BN_TRAINING_EX_REQ_SIZE];
    rgpu_pack_dnn_bn_training_ex(args, &(struct rgpu_dnn_bn_training_ex_req){
                                           BN_TRAINING_FIELDS, .z = adds ? (uintptr_t)z : 0,
                                           .activation_mode = (uint32_t)activation->mode,
                                           .activation_nan = (uint32_t)activation->nan,
                                           .activation_coef = activation->coef});
    const struct tensor *tensors[4] = {xd, yd, bnd, adds ? zd : yd};
    return bn_send(RGPU_OP_DNN_BN_TRAINING_EX, args, sizeof args, tensors, 4);
}

DNN_API int cudnnBatchNormalizationForwardTraining(struct dnn_handle *h, int mode, const void *alpha,
                                                   const void *beta, const struct tensor *xd, const void *x,
                                                   const struct tensor *yd, void *y, const struct tensor *bnd,
                                                   const void *scale, const void *bias, double factor,
                                                   void *running_mean, void *running_var, double epsilon,
                                                   void *save_mean, void *save_inv_var)
{
    return cudnnBatchNormalizationForwardTrainingEx(h, mode, CUDNN_BATCHNORM_OPS_BN, alpha, beta, xd, x, NULL, NULL,
                                                    yd, y, bnd, scale, bias, factor, running_mean, running_var,
                                                    epsilon, save_mean, save_inv_var, NULL, NULL, 0, NULL, 0);
}

#define BN_BACKWARD_FIELDS                                                                                          \
    .handle = h->server, .stream = rgpu_ext_stream(h->stream), .mode = (uint32_t)mode, .ops = (uint32_t)ops,       \
    .alpha_data = scalar(alpha_data, xd), .beta_data = scalar(beta_data, xd),                                      \
    .alpha_params = scalar(alpha_param, xd), .beta_params = scalar(beta_param, xd), .epsilon = epsilon,            \
    .x = (uintptr_t)x, .dy = (uintptr_t)dy, .dx = (uintptr_t)dx, .scale = (uintptr_t)scale,                        \
    .dscale = (uintptr_t)dscale, .dbias = (uintptr_t)dbias, .saved_mean = (uintptr_t)save_mean,                    \
    .saved_inv_var = (uintptr_t)save_inv_var, .workspace = (uintptr_t)workspace, .workspace_size = workspace_size, \
    .reserve = (uintptr_t)reserve, .reserve_size = reserve_size

DNN_API int cudnnBatchNormalizationBackwardEx(
    struct dnn_handle *h, int mode, int ops, const void *alpha_data, const void *beta_data, const void *alpha_param,
    const void *beta_param, const struct tensor *xd, const void *x, const struct tensor *yd, const void *y,
    const struct tensor *dyd, const void *dy, const struct tensor *dzd, void *dz, const struct tensor *dxd, void *dx,
    const struct tensor *dbnd, const void *scale, const void *bias, void *dscale, void *dbias, double epsilon,
    const void *save_mean, const void *save_inv_var, const struct dnn_activation *activation, void *workspace,
    size_t workspace_size, void *reserve, size_t reserve_size)
{
    int fused = bn_fused(ops), adds = ops == CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION;
    if (fused < 0 || (fused && (!activation || !yd || !yd->n)) || (adds && (!dzd || !dzd->n)))
        return CUDNN_STATUS_BAD_PARAM;
    if (!h || !alpha_data || !beta_data || !alpha_param || !beta_param || !xd || !dyd || !dxd || !dbnd || !xd->n ||
        !dyd->n || !dxd->n || !dbnd->n)
        return CUDNN_STATUS_BAD_PARAM;
    if (!fused) {
        uint8_t args[RGPU_DNN_BN_BACKWARD_REQ_SIZE];
        rgpu_pack_dnn_bn_backward(args, &(struct rgpu_dnn_bn_backward_req){BN_BACKWARD_FIELDS});
        const struct tensor *tensors[4] = {xd, dyd, dxd, dbnd};
        return bn_send(RGPU_OP_DNN_BN_BACKWARD, args, sizeof args, tensors, 4);
    }
    uint8_t args[RGPU_DNN_BN_BACKWARD_EX_REQ_SIZE];
    rgpu_pack_dnn_bn_backward_ex(args, &(struct rgpu_dnn_bn_backward_ex_req){
                                           BN_BACKWARD_FIELDS, .y = (uintptr_t)y, .dz = adds ? (uintptr_t)dz : 0,
                                           .bias = (uintptr_t)bias, .activation_mode = (uint32_t)activation->mode,
                                           .activation_nan = (uint32_t)activation->nan,
                                           .activation_coef = activation->coef});
    const struct tensor *tensors[6] = {xd, dyd, dxd, dbnd, yd, adds ? dzd : dxd};
    return bn_send(RGPU_OP_DNN_BN_BACKWARD_EX, args, sizeof args, tensors, 6);
}

DNN_API int cudnnBatchNormalizationBackward(struct dnn_handle *h, int mode, const void *alpha_data,
                                            const void *beta_data, const void *alpha_param, const void *beta_param,
                                            const struct tensor *xd, const void *x, const struct tensor *dyd,
                                            const void *dy, const struct tensor *dxd, void *dx,
                                            const struct tensor *dbnd, const void *scale, void *dscale, void *dbias,
                                            double epsilon, const void *save_mean, const void *save_inv_var)
{
    return cudnnBatchNormalizationBackwardEx(h, mode, CUDNN_BATCHNORM_OPS_BN, alpha_data, beta_data, alpha_param,
                                             beta_param, xd, x, NULL, NULL, dyd, dy, NULL, NULL, dxd, dx, dbnd, scale,
                                             NULL, dscale, dbias, epsilon, save_mean, save_inv_var, NULL, NULL, 0,
                                             NULL, 0);
}
