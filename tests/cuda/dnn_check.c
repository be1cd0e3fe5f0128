/* cuDNN through whatever libcudnn the loader gives (NVIDIA's natively, rgpu's stand-in through rgpu): a forward
 * convolution built with the backend (graph) API the way cudnn-frontend builds one -- tensors, operation, graph,
 * heuristics, plans tried until one finalizes, variant pack, execute -- and batch-norm inference with the
 * legacy API, each compared with a CPU reference. Constants come from native/gen/cudnn_consts.h. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cudnn_consts.h"

typedef void *desc_t;
int cudaMalloc(void **p, size_t n);
int cudaMemcpy(void *dst, const void *src, size_t n, int kind);
int cudaMemset(void *p, int value, size_t n);
int cudaDeviceSynchronize(void);
int cudnnCreate(desc_t *h);
int cudnnDestroy(desc_t h);
int cudnnBackendCreateDescriptor(int type, desc_t *d);
int cudnnBackendDestroyDescriptor(desc_t d);
int cudnnBackendSetAttribute(desc_t d, int name, int type, int64_t count, const void *array);
int cudnnBackendGetAttribute(desc_t d, int name, int type, int64_t requested, int64_t *count, void *array);
int cudnnBackendFinalize(desc_t d);
int cudnnBackendExecute(desc_t h, desc_t plan, desc_t pack);
int cudnnCreateTensorDescriptor(desc_t *t);
int cudnnSetTensor4dDescriptor(desc_t t, int format, int type, int n, int c, int h, int w);
int cudnnDeriveBNTensorDescriptor(desc_t bn, desc_t x, int mode);
int cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(desc_t h, int mode, int ops, desc_t x, desc_t z,
                                                             desc_t y, desc_t bn, desc_t act, size_t *size);
int cudnnGetBatchNormalizationTrainingExReserveSpaceSize(desc_t h, int mode, int ops, desc_t act, desc_t x, size_t *size);
int cudnnGetBatchNormalizationBackwardExWorkspaceSize(desc_t h, int mode, int ops, desc_t x, desc_t y, desc_t dy,
                                                      desc_t dz, desc_t dx, desc_t dbn, desc_t act, size_t *size);
int cudnnBatchNormalizationForwardTrainingEx(desc_t h, int mode, int ops, const void *alpha, const void *beta,
                                             desc_t xd, const void *x, desc_t zd, const void *z, desc_t yd, void *y,
                                             desc_t bnd, const void *scale, const void *bias, double factor,
                                             void *rmean, void *rvar, double eps, void *smean, void *sinv,
                                             desc_t act, void *ws, size_t wss, void *reserve, size_t rss);
int cudnnBatchNormalizationBackwardEx(desc_t h, int mode, int ops, const void *ad, const void *bd, const void *ap,
                                      const void *bp, desc_t xd, const void *x, desc_t yd, const void *y, desc_t dyd,
                                      const void *dy, desc_t dzd, void *dz, desc_t dxd, void *dx, desc_t dbnd,
                                      const void *scale, const void *bias, void *dscale, void *dbias, double eps,
                                      const void *smean, const void *sinv, desc_t act, void *ws, size_t wss,
                                      void *reserve, size_t rss);
int cudnnBatchNormalizationForwardInference(desc_t h, int mode, const void *alpha, const void *beta, desc_t xd,
                                            const void *x, desc_t yd, void *y, desc_t bnd, const void *scale,
                                            const void *bias, const void *mean, const void *var, double eps);
int cudnnCreateActivationDescriptor(desc_t *a);
int cudnnSetActivationDescriptor(desc_t a, int mode, int nan, double coef);
int cudnnGetActivationDescriptor(desc_t a, int *mode, int *nan, double *coef);
int cudnnDestroyActivationDescriptor(desc_t a);
int cudnnDestroyTensorDescriptor(desc_t t);
int cudaFree(void *p);

#define CHECK(call)                                                                                                 \
    do {                                                                                                            \
        int s_ = (call);                                                                                            \
        if (s_) {                                                                                                   \
            printf("FAIL %s -> status %d\n", #call, s_);                                                           \
            exit(1);                                                                                                \
        }                                                                                                           \
    } while (0)
#define SET(d, name, type, n, p) CHECK(cudnnBackendSetAttribute(d, name, type, n, p))

enum { N = 2, C = 3, H = 8, W = 8, K = 4, R = 3, S = 3, P = H - R + 1, Q = W - S + 1 };

static desc_t tensor(int64_t uid, const int64_t *dims)
{
    desc_t t;
    int64_t strides[4] = {dims[1] * dims[2] * dims[3], dims[2] * dims[3], dims[3], 1}, align = 16;
    int dtype = CUDNN_DATA_FLOAT;
    CHECK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_TENSOR_DESCRIPTOR, &t));
    SET(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dtype);
    SET(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims);
    SET(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides);
    SET(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
    SET(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align);
    CHECK(cudnnBackendFinalize(t));
    return t;
}

static void *upload(const void *p, size_t n)
{
    void *d;
    CHECK(cudaMalloc(&d, n));
    CHECK(cudaMemcpy(d, p, n, 1));
    return d;
}

/* IEEE half <-> float for the fused batch-norm check; the inputs are exact in half, outputs round to nearest. */
static uint16_t to_half(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t sign = (u >> 16) & 0x8000, mant = u & 0x7fffff;
    int e = (int)((u >> 23) & 0xff) - 127 + 15;
    if (e <= 0)
        return (uint16_t)sign; /* |f| below half's normal range: 0 (the inputs never are) */
    uint32_t h = sign | (uint32_t)e << 10 | mant >> 13, rest = mant & 0x1fff;
    return (uint16_t)(h + (rest > 0x1000 || (rest == 0x1000 && (h & 1))));
}

static float from_half(uint16_t h)
{
    int e = (h >> 10) & 0x1f;
    float m = (float)(h & 0x3ff);
    float v = e ? ldexpf(1.0f + m / 1024.0f, e - 15) : ldexpf(m / 1024.0f, -14);
    return h & 0x8000 ? -v : v;
}

/* Batch norm fused with an addition and ReLU (CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION), forward and backward, in the
 * configuration NVIDIA's cuDNN runs it in: NHWC half tensors, C % 4 == 0, CUDNN_BATCHNORM_SPATIAL_PERSISTENT. */
static int fused_batch_norm(desc_t h)
{
    enum { FN = 2, FC = 8, FH = 4, FW = 4, FM = FN * FH * FW, FE = FM * FC };
    const int mode = CUDNN_BATCHNORM_SPATIAL_PERSISTENT, ops = CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION;
    desc_t td, bnd, act;
    CHECK(cudnnCreateTensorDescriptor(&td));
    CHECK(cudnnCreateTensorDescriptor(&bnd));
    CHECK(cudnnSetTensor4dDescriptor(td, CUDNN_TENSOR_NHWC, CUDNN_DATA_HALF, FN, FC, FH, FW));
    CHECK(cudnnDeriveBNTensorDescriptor(bnd, td, mode));
    CHECK(cudnnCreateActivationDescriptor(&act));
    CHECK(cudnnSetActivationDescriptor(act, CUDNN_ACTIVATION_RELU, CUDNN_NOT_PROPAGATE_NAN, 0.0));
    int amode, anan;
    double coef;
    CHECK(cudnnGetActivationDescriptor(act, &amode, &anan, &coef));
    if (amode != CUDNN_ACTIVATION_RELU || anan != CUDNN_NOT_PROPAGATE_NAN || coef != 0.0)
        printf("FAIL activation descriptor reads back %d %d %g\n", amode, anan, coef), exit(1);

    static uint16_t x[FE], z[FE], y[FE], dy[FE], dx[FE], dz[FE];
    float scale[FC], bias[FC], rmean[FC], rvar[FC], smean[FC], sinv[FC], dscale[FC], dbias[FC];
    for (int i = 0; i < FE; i++) /* NHWC: element i is channel i % FC */
        x[i] = to_half((float)((i * 5) % 17 - 8) / 4.0f), z[i] = to_half((float)((i * 3) % 11 - 5) / 8.0f),
        dy[i] = to_half((float)((i * 7) % 13 - 6) / 8.0f);
    for (int c = 0; c < FC; c++)
        scale[c] = 0.5f + 0.25f * (float)c, bias[c] = 0.125f * (float)c - 0.5f, rmean[c] = 0.0f, rvar[c] = 1.0f;
    size_t fws = 0, rss = 0, bws = 0;
    CHECK(cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(h, mode, ops, td, td, td, bnd, act, &fws));
    CHECK(cudnnGetBatchNormalizationTrainingExReserveSpaceSize(h, mode, ops, act, td, &rss));
    CHECK(cudnnGetBatchNormalizationBackwardExWorkspaceSize(h, mode, ops, td, td, td, td, td, bnd, act, &bws));
    void *fwsp = NULL, *rsp = NULL, *bwsp = NULL;
    if (fws)
        CHECK(cudaMalloc(&fwsp, fws));
    if (rss)
        CHECK(cudaMalloc(&rsp, rss));
    if (bws)
        CHECK(cudaMalloc(&bwsp, bws));
    void *d_x = upload(x, sizeof x), *d_z = upload(z, sizeof z), *d_dy = upload(dy, sizeof dy),
         *d_scale = upload(scale, sizeof scale), *d_bias = upload(bias, sizeof bias),
         *d_rmean = upload(rmean, sizeof rmean), *d_rvar = upload(rvar, sizeof rvar), *d_y, *d_dx, *d_dz, *d_smean,
         *d_sinv, *d_dscale, *d_dbias;
    CHECK(cudaMalloc(&d_y, sizeof y));
    CHECK(cudaMalloc(&d_dx, sizeof dx));
    CHECK(cudaMalloc(&d_dz, sizeof dz));
    CHECK(cudaMalloc(&d_smean, sizeof smean));
    CHECK(cudaMalloc(&d_sinv, sizeof sinv));
    CHECK(cudaMalloc(&d_dscale, sizeof dscale));
    CHECK(cudaMalloc(&d_dbias, sizeof dbias));
    float one = 1.0f, zero = 0.0f; /* half data: float scaling factors */
    double eps = 1e-5, factor = 0.1;
    CHECK(cudnnBatchNormalizationForwardTrainingEx(h, mode, ops, &one, &zero, td, d_x, td, d_z, td, d_y, bnd, d_scale,
                                                   d_bias, factor, d_rmean, d_rvar, eps, d_smean, d_sinv, act, fwsp,
                                                   fws, rsp, rss));
    CHECK(cudnnBatchNormalizationBackwardEx(h, mode, ops, &one, &zero, &one, &zero, td, d_x, td, d_y, td, d_dy, td,
                                            d_dz, td, d_dx, bnd, d_scale, d_bias, d_dscale, d_dbias, eps, d_smean,
                                            d_sinv, act, bwsp, bws, rsp, rss));
    CHECK(cudaMemcpy(y, d_y, sizeof y, 2));
    CHECK(cudaMemcpy(dx, d_dx, sizeof dx, 2));
    CHECK(cudaMemcpy(dz, d_dz, sizeof dz, 2));
    CHECK(cudaMemcpy(smean, d_smean, sizeof smean, 2));
    CHECK(cudaMemcpy(sinv, d_sinv, sizeof sinv, 2));
    CHECK(cudaMemcpy(rmean, d_rmean, sizeof rmean, 2));
    CHECK(cudaMemcpy(rvar, d_rvar, sizeof rvar, 2));
    CHECK(cudaMemcpy(dscale, d_dscale, sizeof dscale, 2));
    CHECK(cudaMemcpy(dbias, d_dbias, sizeof dbias, 2));
    double ferr = 0, berr = 0;
    for (int c = 0; c < FC; c++) {
        double mu = 0, var = 0, db = 0, ds = 0;
        for (int i = c; i < FE; i += FC)
            mu += from_half(x[i]);
        mu /= FM;
        for (int i = c; i < FE; i += FC)
            var += pow(from_half(x[i]) - mu, 2);
        var /= FM;
        double inv = 1 / sqrt(var + eps);
        ferr = fmax(ferr, fabs(smean[c] - mu) + fabs(sinv[c] - inv) / inv + fabs(rmean[c] - factor * mu) +
                              fabs(rvar[c] - (1 - factor + factor * var * FM / (FM - 1))));
        /* ReLU's gradient follows the y the device computed (a value at 0 after rounding goes either way). */
        for (int i = c; i < FE; i += FC) {
            double xhat = (from_half(x[i]) - mu) * inv, got = from_half(y[i]);
            double want = fmax(scale[c] * xhat + bias[c] + from_half(z[i]), 0.0);
            ferr = fmax(ferr, fabs(got - want) / (1 + fabs(want)));
            double g = got > 0 ? from_half(dy[i]) : 0.0;
            berr = fmax(berr, fabs(from_half(dz[i]) - g));
            db += g, ds += g * xhat;
        }
        berr = fmax(berr, fabs(dbias[c] - db) / (1 + fabs(db)) + fabs(dscale[c] - ds) / (1 + fabs(ds)));
        for (int i = c; i < FE; i += FC) {
            double xhat = (from_half(x[i]) - mu) * inv, g = from_half(y[i]) > 0 ? from_half(dy[i]) : 0.0;
            double want = scale[c] * inv / FM * (FM * g - db - xhat * ds);
            berr = fmax(berr, fabs(from_half(dx[i]) - want) / (1 + fabs(want)));
        }
    }
    /* Half outputs: within a few units of half's last place (2^-11 relative). */
    printf("%-34s %s (max error %.2e)\n", "batch norm + add + relu forward", ferr < 1e-2 ? "OK" : "MISMATCH", ferr);
    printf("%-34s %s (max error %.2e)\n", "batch norm + add + relu backward", berr < 1e-2 ? "OK" : "MISMATCH", berr);
    void *buffers[] = {fwsp, rsp, bwsp, d_x, d_z, d_dy, d_scale, d_bias, d_rmean, d_rvar, d_y, d_dx, d_dz, d_smean,
                       d_sinv, d_dscale, d_dbias};
    for (size_t i = 0; i < sizeof buffers / sizeof *buffers; i++)
        if (buffers[i])
            CHECK(cudaFree(buffers[i]));
    CHECK(cudnnDestroyActivationDescriptor(act));
    CHECK(cudnnDestroyTensorDescriptor(td));
    CHECK(cudnnDestroyTensorDescriptor(bnd));
    return (ferr >= 1e-2) + (berr >= 1e-2);
}

int main(void)
{
    static float x[N * C * H * W], w[K * C * R * S], y[N * K * P * Q], ref[N * K * P * Q];
    srand(3);
    for (int i = 0; i < N * C * H * W; i++)
        x[i] = (float)(rand() % 200 - 100) / 50.0f;
    for (int i = 0; i < K * C * R * S; i++)
        w[i] = (float)(rand() % 200 - 100) / 100.0f;
    for (int n = 0; n < N; n++)
        for (int k = 0; k < K; k++)
            for (int p = 0; p < P; p++)
                for (int q = 0; q < Q; q++) {
                    double acc = 0;
                    for (int c = 0; c < C; c++)
                        for (int r = 0; r < R; r++)
                            for (int s = 0; s < S; s++)
                                acc += x[((n * C + c) * H + p + r) * W + q + s] * w[((k * C + c) * R + r) * S + s];
                    ref[((n * K + k) * P + p) * Q + q] = (float)acc;
                }
    desc_t h;
    CHECK(cudnnCreate(&h));
    int64_t xd[4] = {N, C, H, W}, wd[4] = {K, C, R, S}, yd[4] = {N, K, P, Q};
    desc_t tx = tensor('x', xd), tw = tensor('w', wd), ty = tensor('y', yd);

    desc_t conv, op, graph, heur;
    int64_t two = 2, ones[2] = {1, 1}, zeros[2] = {0, 0};
    int comp = CUDNN_DATA_FLOAT, mode = CUDNN_CROSS_CORRELATION;
    CHECK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, &conv));
    SET(conv, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp);
    SET(conv, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode);
    SET(conv, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &two);
    SET(conv, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, ones);
    SET(conv, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, ones);
    SET(conv, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, zeros);
    SET(conv, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, zeros);
    CHECK(cudnnBackendFinalize(conv));
    float alpha = 1.0f, beta = 0.0f;
    CHECK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR, &op));
    SET(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &tx);
    SET(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &tw);
    SET(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &ty);
    SET(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &conv);
    SET(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_FLOAT, 1, &alpha);
    SET(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_FLOAT, 1, &beta);
    CHECK(cudnnBackendFinalize(op));
    CHECK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, &graph));
    SET(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &op);
    SET(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h);
    CHECK(cudnnBackendFinalize(graph));
    int heur_mode = CUDNN_HEUR_MODE_INSTANT;
    CHECK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, &heur));
    SET(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph);
    SET(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &heur_mode);
    CHECK(cudnnBackendFinalize(heur));
    int64_t n_cfg = 0;
    CHECK(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &n_cfg, NULL));
    if (n_cfg < 1 || n_cfg > 64) {
        printf("FAIL heuristics gave %lld configurations\n", (long long)n_cfg);
        return 1;
    }
    desc_t cfgs[64], plan = NULL;
    for (int i = 0; i < n_cfg; i++)
        CHECK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &cfgs[i]));
    CHECK(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, n_cfg, &n_cfg,
                                   cfgs));
    int64_t workspace = 0, tried = 0;
    for (int i = 0; i < n_cfg && !plan; i++) { /* as the frontend does: the first configuration that finalizes */
        desc_t p;
        CHECK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &p));
        SET(p, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfgs[i]);
        SET(p, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h);
        tried++;
        if (cudnnBackendFinalize(p) == 0)
            plan = p;
        else
            cudnnBackendDestroyDescriptor(p);
    }
    if (!plan) {
        printf("FAIL no plan finalized of %lld tried\n", (long long)tried);
        return 1;
    }
    CHECK(cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, NULL, &workspace));
    void *dx = upload(x, sizeof x), *dw = upload(w, sizeof w), *dy, *ws = NULL;
    CHECK(cudaMalloc(&dy, sizeof y));
    if (workspace)
        CHECK(cudaMalloc(&ws, (size_t)workspace));
    desc_t pack;
    int64_t uids[3] = {'x', 'w', 'y'};
    void *ptrs[3] = {dx, dw, dy};
    CHECK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &pack));
    SET(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 3, uids);
    SET(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 3, ptrs);
    SET(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws);
    CHECK(cudnnBackendFinalize(pack));
    CHECK(cudnnBackendExecute(h, plan, pack));
    CHECK(cudaMemcpy(y, dy, sizeof y, 2));
    double err = 0;
    for (int i = 0; i < N * K * P * Q; i++)
        err = fmax(err, fabs(y[i] - ref[i]) / (1 + fabs(ref[i])));
    printf("%-34s %s (max error %.2e)\n", "conv2d fwd (backend graph API)", err < 2e-3 ? "OK" : "MISMATCH", err);
    int failures = err >= 2e-3;
    /* The same pack again (through rgpu the server's fast lane runs it, bound by the first): the same output. */
    float again[N * K * P * Q];
    CHECK(cudaMemset(dy, 0, sizeof y));
    CHECK(cudnnBackendExecute(h, plan, pack));
    CHECK(cudaMemcpy(again, dy, sizeof again, 2));
    int same = !memcmp(again, y, sizeof y);
    printf("%-34s %s\n", "conv2d fwd again, same pack", same ? "OK" : "MISMATCH");
    failures += !same;

    /* Batch-norm inference on the convolution's output, legacy API. */
    desc_t xdesc, bndesc;
    CHECK(cudnnCreateTensorDescriptor(&xdesc));
    CHECK(cudnnCreateTensorDescriptor(&bndesc));
    CHECK(cudnnSetTensor4dDescriptor(xdesc, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, N, K, P, Q));
    CHECK(cudnnDeriveBNTensorDescriptor(bndesc, xdesc, CUDNN_BATCHNORM_SPATIAL));
    float scale[K], bias[K], mean[K], var[K], z[N * K * P * Q];
    for (int k = 0; k < K; k++)
        scale[k] = 0.5f + (float)k, bias[k] = (float)k - 1.0f, mean[k] = 0.25f * (float)k, var[k] = 1.0f + (float)k;
    void *dscale_in = upload(scale, sizeof scale), *dbias_in = upload(bias, sizeof bias), *dmean = upload(mean, sizeof mean),
         *dvar = upload(var, sizeof var), *dz;
    CHECK(cudaMalloc(&dz, sizeof z));
    double eps = 1e-5;
    CHECK(cudnnBatchNormalizationForwardInference(h, CUDNN_BATCHNORM_SPATIAL, &alpha, &beta, xdesc, dy, xdesc, dz,
                                                  bndesc, dscale_in, dbias_in, dmean, dvar, eps));
    CHECK(cudaMemcpy(z, dz, sizeof z, 2));
    err = 0;
    for (int i = 0; i < N * K * P * Q; i++) {
        int k = i / (P * Q) % K;
        double want = scale[k] * (y[i] - mean[k]) / sqrt(var[k] + eps) + bias[k];
        err = fmax(err, fabs(z[i] - want) / (1 + fabs(want)));
    }
    printf("%-34s %s (max error %.2e)\n", "batch norm inference (legacy API)", err < 1e-4 ? "OK" : "MISMATCH", err);
    failures += err >= 1e-4;
    float z2[N * K * P * Q];
    CHECK(cudaMemset(dz, 0, sizeof z));
    CHECK(cudnnBatchNormalizationForwardInference(h, CUDNN_BATCHNORM_SPATIAL, &alpha, &beta, xdesc, dy, xdesc, dz,
                                                  bndesc, dscale_in, dbias_in, dmean, dvar, eps));
    CHECK(cudaMemcpy(z2, dz, sizeof z2, 2));
    same = !memcmp(z2, z, sizeof z);
    printf("%-34s %s\n", "batch norm inference again", same ? "OK" : "MISMATCH");
    failures += !same;
    /* Batch-norm training on the same tensor: forward (batch statistics, running averages), then backward. */
    enum { M = N * P * Q };
    size_t fws = 0, rss = 0, bws = 0;
    CHECK(cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(h, CUDNN_BATCHNORM_SPATIAL, CUDNN_BATCHNORM_OPS_BN,
                                                                   xdesc, NULL, xdesc, bndesc, NULL, &fws));
    CHECK(cudnnGetBatchNormalizationTrainingExReserveSpaceSize(h, CUDNN_BATCHNORM_SPATIAL, CUDNN_BATCHNORM_OPS_BN,
                                                               NULL, xdesc, &rss));
    CHECK(cudnnGetBatchNormalizationBackwardExWorkspaceSize(h, CUDNN_BATCHNORM_SPATIAL, CUDNN_BATCHNORM_OPS_BN, xdesc,
                                                            xdesc, xdesc, NULL, xdesc, bndesc, NULL, &bws));
    void *fwsp = NULL, *rsp = NULL, *bwsp = NULL, *dsmean, *dsinv, *dgrad, *ddx, *ddscale, *ddbias;
    if (fws)
        CHECK(cudaMalloc(&fwsp, fws));
    if (rss)
        CHECK(cudaMalloc(&rsp, rss));
    if (bws)
        CHECK(cudaMalloc(&bwsp, bws));
    float rmean[K], rvar[K], smean[K], sinv[K], grad[N * K * P * Q], gx[N * K * P * Q], gscale[K], gbias[K];
    for (int k = 0; k < K; k++)
        rmean[k] = 0.0f, rvar[k] = 1.0f;
    for (int i = 0; i < N * K * P * Q; i++)
        grad[i] = (float)((i * 7) % 13 - 6) / 6.0f;
    void *drmean = upload(rmean, sizeof rmean), *drvar = upload(rvar, sizeof rvar);
    CHECK(cudaMalloc(&dsmean, sizeof smean));
    CHECK(cudaMalloc(&dsinv, sizeof sinv));
    CHECK(cudaMalloc(&ddx, sizeof gx));
    CHECK(cudaMalloc(&ddscale, sizeof gscale));
    CHECK(cudaMalloc(&ddbias, sizeof gbias));
    dgrad = upload(grad, sizeof grad);
    double factor = 0.1;
    void *dscale_ptr = dscale_in, *dbias_ptr = dbias_in; /* the inference check's scale and bias, on the device */
    CHECK(cudnnBatchNormalizationForwardTrainingEx(h, CUDNN_BATCHNORM_SPATIAL, CUDNN_BATCHNORM_OPS_BN, &alpha, &beta,
                                                   xdesc, dy, NULL, NULL, xdesc, dz, bndesc, dscale_ptr, dbias_ptr,
                                                   factor, drmean, drvar, eps, dsmean, dsinv, NULL, fwsp, fws, rsp,
                                                   rss));
    CHECK(cudnnBatchNormalizationBackwardEx(h, CUDNN_BATCHNORM_SPATIAL, CUDNN_BATCHNORM_OPS_BN, &alpha, &beta, &alpha,
                                            &beta, xdesc, dy, NULL, NULL, xdesc, dgrad, NULL, NULL, xdesc, ddx, bndesc,
                                            dscale_ptr, NULL, ddscale, ddbias, eps, dsmean, dsinv, NULL, bwsp, bws, rsp,
                                            rss));
    CHECK(cudaMemcpy(z, dz, sizeof z, 2));
    CHECK(cudaMemcpy(rmean, drmean, sizeof rmean, 2));
    CHECK(cudaMemcpy(rvar, drvar, sizeof rvar, 2));
    CHECK(cudaMemcpy(gx, ddx, sizeof gx, 2));
    CHECK(cudaMemcpy(gscale, ddscale, sizeof gscale, 2));
    CHECK(cudaMemcpy(gbias, ddbias, sizeof gbias, 2));
    double ferr = 0, berr = 0;
    for (int k = 0; k < K; k++) {
        double mu = 0, var = 0, db = 0, ds = 0;
        for (int n = 0; n < N; n++)
            for (int i = 0; i < P * Q; i++)
                mu += y[(n * K + k) * P * Q + i];
        mu /= M;
        for (int n = 0; n < N; n++)
            for (int i = 0; i < P * Q; i++)
                var += pow(y[(n * K + k) * P * Q + i] - mu, 2);
        var /= M;
        double inv = 1 / sqrt(var + eps);
        ferr = fmax(ferr, fabs(rmean[k] - factor * mu) + fabs(rvar[k] - (0.9 + factor * var * M / (M - 1))));
        for (int n = 0; n < N; n++)
            for (int i = 0; i < P * Q; i++) {
                int at = (n * K + k) * P * Q + i;
                double xhat = (y[at] - mu) * inv;
                ferr = fmax(ferr, fabs(z[at] - (scale[k] * xhat + bias[k])) / (1 + fabs(z[at])));
                db += grad[at], ds += grad[at] * xhat;
            }
        berr = fmax(berr, fabs(gbias[k] - db) / (1 + fabs(db)) + fabs(gscale[k] - ds) / (1 + fabs(ds)));
        for (int n = 0; n < N; n++)
            for (int i = 0; i < P * Q; i++) {
                int at = (n * K + k) * P * Q + i;
                double xhat = (y[at] - mu) * inv;
                double want = scale[k] * inv / M * (M * grad[at] - db - xhat * ds);
                berr = fmax(berr, fabs(gx[at] - want) / (1 + fabs(want)));
            }
    }
    printf("%-34s %s (max error %.2e)\n", "batch norm training forward", ferr < 1e-3 ? "OK" : "MISMATCH", ferr);
    printf("%-34s %s (max error %.2e)\n", "batch norm training backward", berr < 1e-3 ? "OK" : "MISMATCH", berr);
    failures += (ferr >= 1e-3) + (berr >= 1e-3);
    failures += fused_batch_norm(h);

    CHECK(cudnnBackendDestroyDescriptor(pack));
    CHECK(cudnnBackendDestroyDescriptor(plan));
    CHECK(cudnnDestroy(h));
    CHECK(cudaDeviceSynchronize());
    printf("dnn_check %s (plan %lld of %lld configurations)\n", failures ? "FAILED" : "OK", (long long)tried,
           (long long)n_cfg);
    return failures != 0;
}
