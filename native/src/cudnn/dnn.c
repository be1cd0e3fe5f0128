/* Handles, versions, statuses and logging of the cuDNN stand-in. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dnn.h"

void rgpu_dnn_log(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    rgpu_standin_vlog("cudnn", RGPU_STANDIN_WARN, fmt, ap);
    va_end(ap);
}

void rgpu_dnn_debug(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    rgpu_standin_vlog("cudnn", RGPU_STANDIN_DEBUG, fmt, ap);
    va_end(ap);
}

int rgpu_dnn_unsupported(int *logged, const char *name)
{
    return rgpu_standin_unsupported(logged, "cudnn", name, CUDNN_STATUS_NOT_SUPPORTED, "CUDNN_STATUS_NOT_SUPPORTED");
}

int rgpu_dnn_status(int r)
{
    switch (r) {
    case 0:
        return CUDNN_STATUS_SUCCESS;
    case 1:
        return CUDNN_STATUS_BAD_PARAM;
    case 2:
        return CUDNN_STATUS_ALLOC_FAILED;
    case 801:
        return CUDNN_STATUS_NOT_SUPPORTED;
    case 3:
    case 100:
        return CUDNN_STATUS_NOT_INITIALIZED;
    default:
        return CUDNN_STATUS_EXECUTION_FAILED;
    }
}

void dnn_put(struct dnn_buffer *b, const void *p, size_t n)
{
    if (b->failed)
        return;
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 1024;
        while (cap < b->len + n)
            cap *= 2;
        uint8_t *data = realloc(b->data, cap);
        if (!data) {
            b->failed = 1;
            return;
        }
        b->data = data, b->cap = cap;
    }
    memcpy(b->data + b->len, p, n);
    b->len += n;
}

void dnn_put_le(struct dnn_buffer *b, uint64_t v, int bytes)
{
    uint8_t t[8];
    rgpu_put_u64(t, v);
    dnn_put(b, t, (size_t)bytes);
}

DNN_API int cudnnCreate(struct dnn_handle **out)
{
    if (!out)
        return CUDNN_STATUS_BAD_PARAM;
    uint64_t server;
    int r = rgpu_standin_open(RGPU_OP_DNN_CREATE, &server);
    if (r)
        return r == RGPU_STANDIN_NO_DEVICE ? CUDNN_STATUS_NOT_INITIALIZED : rgpu_dnn_status(r);
    struct dnn_handle *h = calloc(1, sizeof *h);
    if (!h)
        return CUDNN_STATUS_ALLOC_FAILED;
    h->server = server;
    *out = h;
    return CUDNN_STATUS_SUCCESS;
}

DNN_API int cudnnDestroy(struct dnn_handle *h)
{
    if (!h)
        return CUDNN_STATUS_BAD_PARAM;
    int r = rgpu_standin_close(RGPU_OP_DNN_DESTROY, h->server);
    free(h);
    return rgpu_dnn_status(r);
}

DNN_API int cudnnSetStream(struct dnn_handle *h, void *stream)
{
    if (!h)
        return CUDNN_STATUS_BAD_PARAM;
    h->stream = stream;
    return CUDNN_STATUS_SUCCESS;
}

DNN_API int cudnnGetStream(struct dnn_handle *h, void **stream)
{
    if (!h || !stream)
        return CUDNN_STATUS_BAD_PARAM;
    *stream = h->stream;
    return CUDNN_STATUS_SUCCESS;
}

#define VERSION (RGPU_CUDNN_VERSION_MAJOR * 10000 + RGPU_CUDNN_VERSION_MINOR * 100 + RGPU_CUDNN_VERSION_PATCH)

DNN_API size_t cudnnGetVersion(void) { return VERSION; }
DNN_API size_t cudnnGetCudartVersion(void) { return 13000; }
DNN_API size_t cudnnGetMaxDeviceVersion(void) { return 1200; }

DNN_API int cudnnGetProperty(int type, int *value)
{
    int parts[] = {RGPU_CUDNN_VERSION_MAJOR, RGPU_CUDNN_VERSION_MINOR, RGPU_CUDNN_VERSION_PATCH};
    if (!value || type < 0 || type > 2)
        return CUDNN_STATUS_BAD_PARAM;
    *value = parts[type];
    return CUDNN_STATUS_SUCCESS;
}

DNN_API const char *cudnnGetErrorString(int status)
{
    switch (status) {
    case CUDNN_STATUS_SUCCESS: return "CUDNN_STATUS_SUCCESS";
    case CUDNN_STATUS_NOT_INITIALIZED: return "CUDNN_STATUS_NOT_INITIALIZED";
    case CUDNN_STATUS_BAD_PARAM: return "CUDNN_STATUS_BAD_PARAM";
    case CUDNN_STATUS_NOT_SUPPORTED: return "CUDNN_STATUS_NOT_SUPPORTED";
    case CUDNN_STATUS_ALLOC_FAILED: return "CUDNN_STATUS_ALLOC_FAILED";
    case CUDNN_STATUS_EXECUTION_FAILED: return "CUDNN_STATUS_EXECUTION_FAILED";
    case CUDNN_STATUS_INTERNAL_ERROR: return "CUDNN_STATUS_INTERNAL_ERROR";
    default: return "CUDNN_STATUS (see cudnn_graph.h)";
    }
}

DNN_API void cudnnGetLastErrorString(char *message, size_t max)
{
    if (message && max)
        snprintf(message, max, "rgpu: see the rgpu-server log for the server-side cuDNN message");
}

DNN_API int cudnnQueryRuntimeError(struct dnn_handle *h, int *status, int mode, void *tag)
{
    (void)mode, (void)tag;
    if (!h || !status)
        return CUDNN_STATUS_BAD_PARAM;
    *status = CUDNN_STATUS_SUCCESS;
    return CUDNN_STATUS_SUCCESS;
}

/* cuDNN 9 loads its sub-libraries lazily; every sub-library of the stand-in is already here. */
DNN_API int cudnnGraphVersionCheck(void) { return CUDNN_STATUS_SUCCESS; }
DNN_API int cudnnOpsVersionCheck(void) { return CUDNN_STATUS_SUCCESS; }
DNN_API int cudnnCnnVersionCheck(void) { return CUDNN_STATUS_SUCCESS; }
DNN_API int cudnnAdvVersionCheck(void) { return CUDNN_STATUS_SUCCESS; }
