/* Internal interface of rgpu's cuDNN stand-in (libcudnn.so.9).
 *
 * Backend descriptors are proxies: created and set here, mirrored on the server when finalized (where cuDNN
 * decides whether a graph, engine configuration or plan is supported), read back from the server only once
 * finalized. A variant pack never travels on its own: it goes inside the deferred execute. */
#ifndef RGPU_DNN_H
#define RGPU_DNN_H

#include <stddef.h>
#include <stdint.h>

#include "cudnn_consts.h"
#include "rgpu_ops.h"
#include "rgpu_wire.h"
#include "remote.h"
#include "standin.h"

#define DNN_API __attribute__((visibility("default")))


struct dnn_handle {
    uint64_t server;
    void *stream;
};

int rgpu_dnn_unsupported(int *logged, const char *name);
void rgpu_dnn_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void rgpu_dnn_debug(const char *fmt, ...) __attribute__((format(printf, 1, 2))); /* RGPU_LOG=debug */
int rgpu_dnn_status(int cuda_result); /* CUresult of a call that failed on the way -> cudnnStatus_t */

/* Growable byte buffer for request bulk. */
struct dnn_buffer {
    uint8_t *data;
    size_t len, cap;
    int failed;
};
void dnn_put(struct dnn_buffer *b, const void *p, size_t n);
void dnn_put_le(struct dnn_buffer *b, uint64_t v, int bytes);

/* A legacy activation descriptor: local, it travels by value in the call that uses it. */
struct dnn_activation {
    int mode, nan;
    double coef, swish_beta;
};

#endif
