/* The cuDNN backend (graph) API on proxies. Setters and getters of unfinalized descriptors are local; finalize
 * mirrors a descriptor on the server (one round trip, so cuDNN itself says whether it is supported); getters of
 * finalized descriptors ask the server; execute is deferred with its variant pack. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "dnn.h"
#include "rgpu_consts.h"
#include "fork_locks.h"

#define PROXY_MAGIC 0x52475044u /* "RGPD": tells a proxy from garbage */

struct attr {
    uint32_t name, type;
    int64_t count;
    uint8_t *data;
};

struct proxy {
    uint32_t magic, type;
    uint64_t server; /* 0 until mirrored */
    int finalized;
    int n, cap;
    struct attr *attrs;
};

static size_t element_size(uint32_t type)
{
    switch (type) {
    case CUDNN_TYPE_BOOLEAN:
    case CUDNN_TYPE_CHAR:
        return 1;
    case CUDNN_TYPE_HANDLE:
    case CUDNN_TYPE_INT64:
    case CUDNN_TYPE_DOUBLE:
    case CUDNN_TYPE_VOID_PTR:
    case CUDNN_TYPE_BACKEND_DESCRIPTOR:
        return 8;
    case CUDNN_TYPE_FRACTION:
        return 16;
    default: /* enums, INT32, FLOAT */
        return 4;
    }
}

static struct proxy *proxy_of(void *d)
{
    struct proxy *p = d;
    return p && p->magic == PROXY_MAGIC ? p : NULL;
}

DNN_API int cudnnBackendCreateDescriptor(int type, void **out)
{
    if (!out)
        return CUDNN_STATUS_BAD_PARAM;
    struct proxy *p = calloc(1, sizeof *p);
    if (!p)
        return CUDNN_STATUS_ALLOC_FAILED;
    p->magic = PROXY_MAGIC, p->type = (uint32_t)type;
    *out = p;
    return CUDNN_STATUS_SUCCESS;
}

DNN_API int cudnnBackendDestroyDescriptor(void *d)
{
    struct proxy *p = proxy_of(d);
    if (!p)
        return CUDNN_STATUS_BAD_PARAM;
    if (p->server) {
        uint8_t a[RGPU_DNN_DESTROY_DESCRIPTOR_REQ_SIZE];
        rgpu_pack_dnn_destroy_descriptor(a, &(struct rgpu_dnn_destroy_descriptor_req){.descriptor = p->server});
        rgpu_ext_defer(RGPU_OP_DNN_DESTROY_DESCRIPTOR, a, sizeof a, NULL, 0);
    }
    for (int i = 0; i < p->n; i++)
        free(p->attrs[i].data);
    free(p->attrs);
    p->magic = 0;
    free(p);
    return CUDNN_STATUS_SUCCESS;
}

DNN_API int cudnnBackendSetAttribute(void *d, int name, int type, int64_t count, const void *array)
{
    struct proxy *p = proxy_of(d);
    if (!p || count < 0 || (count && !array))
        return CUDNN_STATUS_BAD_PARAM;
    if (p->finalized)
        return CUDNN_STATUS_NOT_SUPPORTED; /* as cuDNN: a finalized descriptor is immutable */
    size_t bytes = (size_t)count * element_size((uint32_t)type);
    uint8_t *copy = malloc(bytes ? bytes : 1);
    if (!copy)
        return CUDNN_STATUS_ALLOC_FAILED;
    memcpy(copy, array, bytes);
    int i = 0;
    while (i < p->n && p->attrs[i].name != (uint32_t)name)
        i++;
    if (i == p->n) {
        if (p->n == p->cap) {
            struct attr *grown = realloc(p->attrs, (size_t)(p->cap = p->cap ? 2 * p->cap : 8) * sizeof *grown);
            if (!grown) {
                free(copy);
                return CUDNN_STATUS_ALLOC_FAILED;
            }
            p->attrs = grown;
        }
        p->n++;
    } else {
        free(p->attrs[i].data);
    }
    p->attrs[i] = (struct attr){(uint32_t)name, (uint32_t)type, count, copy};
    return CUDNN_STATUS_SUCCESS;
}

static int mirror(struct proxy *p);

/* The wire form of a descriptor's attributes: descriptors and handles become server handles. */
static int encode(struct proxy *p, struct dnn_buffer *b)
{
    dnn_put_le(b, (uint64_t)p->n, 2);
    for (int i = 0; i < p->n; i++) {
        struct attr *a = &p->attrs[i];
        dnn_put_le(b, a->name, 4), dnn_put_le(b, a->type, 4), dnn_put_le(b, (uint64_t)a->count, 4);
        if (a->type == CUDNN_TYPE_BACKEND_DESCRIPTOR) {
            for (int64_t k = 0; k < a->count; k++) {
                struct proxy *ref = proxy_of(((void **)a->data)[k]);
                if (!ref)
                    return CUDNN_STATUS_BAD_PARAM;
                if (!ref->server) {
                    int s = mirror(ref); /* cuDNN wants referenced descriptors finalized: do it on the way */
                    if (s)
                        return s;
                }
                dnn_put_le(b, ref->server, 8);
            }
        } else if (a->type == CUDNN_TYPE_HANDLE) {
            for (int64_t k = 0; k < a->count; k++) {
                struct dnn_handle *h = ((struct dnn_handle **)a->data)[k];
                if (!h)
                    return CUDNN_STATUS_BAD_PARAM;
                dnn_put_le(b, h->server, 8);
            }
        } else {
            dnn_put(b, a->data, (size_t)a->count * element_size(a->type));
        }
    }
    return b->failed ? CUDNN_STATUS_ALLOC_FAILED : CUDNN_STATUS_SUCCESS;
}

/* -- pass-by-value tensors ---------------------------------------------------------------------------------
 * A tensor marked CUDNN_ATTR_TENSOR_IS_BY_VALUE (PyTorch's attention passes its scale so) has its value read
 * by cuDNN from host memory at execution: this process's memory, which the server cannot read. The tensors'
 * unique ids and sizes are noted when they are mirrored; an execution whose variant pack gives such an id a
 * pointer outside device memory carries the value's bytes along (RGPU_DNN_BY_VALUE_ATTRIBUTE). */
#define BY_VALUE_SLOTS 64
static struct {
    int64_t uid;
    uint32_t size;
} by_value[BY_VALUE_SLOTS];
static unsigned by_value_used, by_value_next;
static pthread_mutex_t by_value_lock = PTHREAD_MUTEX_INITIALIZER;
RGPU_FORK_RESET(by_value_lock, &by_value_lock)

static const struct attr *find_attr(const struct proxy *p, uint32_t name, uint32_t type, int64_t count)
{
    for (int i = 0; i < p->n; i++)
        if (p->attrs[i].name == name)
            return p->attrs[i].type == type && (count < 0 || p->attrs[i].count == count) ? &p->attrs[i] : NULL;
    return NULL;
}

static uint32_t data_type_size(int32_t t)
{
    switch (t) {
    case CUDNN_DATA_INT8: case CUDNN_DATA_UINT8: case CUDNN_DATA_BOOLEAN: case CUDNN_DATA_FP8_E4M3:
    case CUDNN_DATA_FP8_E5M2:
        return 1;
    case CUDNN_DATA_HALF: case CUDNN_DATA_BFLOAT16:
        return 2;
    case CUDNN_DATA_FLOAT: case CUDNN_DATA_INT32: case CUDNN_DATA_UINT32:
        return 4;
    case CUDNN_DATA_DOUBLE: case CUDNN_DATA_INT64: case CUDNN_DATA_COMPLEX_FP32:
        return 8;
    case CUDNN_DATA_COMPLEX_FP64:
        return 16;
    default:
        return 0; /* not carried: the server refuses the host pointer */
    }
}

static void note_by_value(const struct proxy *p)
{
    const struct attr *flag = find_attr(p, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1);
    const struct attr *uid = find_attr(p, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1);
    const struct attr *type = find_attr(p, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1);
    if (!flag || !flag->data[0] || !uid || !type)
        return;
    int64_t id;
    int32_t t;
    memcpy(&id, uid->data, 8);
    memcpy(&t, type->data, 4);
    uint32_t size = data_type_size(t);
    pthread_mutex_lock(&by_value_lock);
    unsigned slot = 0;
    while (slot < by_value_used && by_value[slot].uid != id)
        slot++;
    if (slot == by_value_used) { /* new: a free slot, else the oldest */
        slot = by_value_used < BY_VALUE_SLOTS ? by_value_used++ : by_value_next++ % BY_VALUE_SLOTS;
    }
    by_value[slot].uid = id, by_value[slot].size = size;
    pthread_mutex_unlock(&by_value_lock);
}

static uint32_t by_value_size(int64_t uid)
{
    uint32_t size = 0;
    pthread_mutex_lock(&by_value_lock);
    for (unsigned i = 0; i < by_value_used && !size; i++)
        if (by_value[i].uid == uid)
            size = by_value[i].size;
    pthread_mutex_unlock(&by_value_lock);
    return size;
}

/* Appends the by-value attribute to an encoded variant pack (and counts it), when the pack has such values. */
static void encode_by_value(const struct proxy *vp, struct dnn_buffer *b)
{
    const struct attr *ids = find_attr(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, -1);
    const struct attr *ptrs = find_attr(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, -1);
    if (!ids || !ptrs || ids->count != ptrs->count || b->failed || b->len < 2)
        return;
    struct dnn_buffer v = {0};
    for (int64_t k = 0; k < ids->count; k++) {
        int64_t uid;
        const uint8_t *value;
        memcpy(&uid, ids->data + 8 * k, 8);
        memcpy(&value, ptrs->data + 8 * k, 8);
        uint32_t size = by_value_size(uid);
        if (!size || !value || rgpu_ext_is_device((uint64_t)(uintptr_t)value))
            continue;
        dnn_put_le(&v, (uint64_t)k, 4), dnn_put_le(&v, size, 4), dnn_put(&v, value, size);
    }
    if (v.len && !v.failed) {
        uint16_t n = (uint16_t)(b->data[0] | b->data[1] << 8);
        n++;
        b->data[0] = (uint8_t)n, b->data[1] = (uint8_t)(n >> 8);
        dnn_put_le(b, RGPU_DNN_BY_VALUE_ATTRIBUTE, 4), dnn_put_le(b, CUDNN_TYPE_CHAR, 4);
        dnn_put_le(b, v.len, 4), dnn_put(b, v.data, v.len);
    } else if (v.failed) {
        b->failed = 1;
    }
    free(v.data);
}

static int mirror(struct proxy *p)
{
    struct dnn_buffer b = {0};
    int s = encode(p, &b);
    if (!s) {
        uint8_t args[RGPU_DNN_FINALIZE_REQ_SIZE], rep[RGPU_DNN_FINALIZE_REP_SIZE];
        struct rgpu_dnn_finalize_rep got = {0};
        rgpu_pack_dnn_finalize(args, &(struct rgpu_dnn_finalize_req){.type = p->type});
        int r = rgpu_ext_call(RGPU_OP_DNN_FINALIZE, args, sizeof args, b.data, b.len, rep, sizeof rep, NULL, 0,
                              NULL);
        if (!r && rgpu_unpack_dnn_finalize(rep, sizeof rep, &got))
            r = rgpu_ext_bad_reply(RGPU_OP_DNN_FINALIZE, "reply size");
        s = r ? rgpu_dnn_status(r) : (int)got.status;
        if (!s) {
            p->server = got.descriptor;
            p->finalized = 1;
            if (p->type == CUDNN_BACKEND_TENSOR_DESCRIPTOR)
                note_by_value(p);
        }
    }
    rgpu_dnn_debug("finalize descriptor type %u (%d attributes) -> status %d", p->type, p->n, s);
    free(b.data);
    return s;
}

DNN_API int cudnnBackendFinalize(void *d)
{
    struct proxy *p = proxy_of(d);
    if (!p)
        return CUDNN_STATUS_BAD_PARAM;
    if (p->finalized)
        return CUDNN_STATUS_SUCCESS;
    if (p->type == CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR) {
        p->finalized = 1; /* travels inside cudnnBackendExecute */
        return CUDNN_STATUS_SUCCESS;
    }
    return mirror(p);
}

static int local_get(struct proxy *p, uint32_t name, uint32_t type, int64_t requested, int64_t *count, void *array)
{
    for (int i = 0; i < p->n; i++) {
        struct attr *a = &p->attrs[i];
        if (a->name != name)
            continue;
        if (a->type != type)
            return CUDNN_STATUS_BAD_PARAM;
        if (count)
            *count = a->count;
        int64_t k = a->count < requested ? a->count : requested;
        if (array && k > 0)
            memcpy(array, a->data, (size_t)k * element_size(type));
        return CUDNN_STATUS_SUCCESS;
    }
    return CUDNN_STATUS_BAD_PARAM;
}

DNN_API int cudnnBackendGetAttribute(void *d, int name, int type, int64_t requested, int64_t *count, void *array)
{
    struct proxy *p = proxy_of(d);
    if (!p || requested < 0)
        return CUDNN_STATUS_BAD_PARAM;
    if (!array)
        requested = 0; /* a count query: cuDNN allows any requested count with no array */
    if (!p->server) { /* not mirrored: what was set here is all there is */
        int s = local_get(p, (uint32_t)name, (uint32_t)type, requested, count, array);
        rgpu_dnn_debug("local get attribute %d of descriptor type %u -> status %d", name, p->type, s);
        return s;
    }
    if (type == CUDNN_TYPE_HANDLE)
        return CUDNN_STATUS_NOT_SUPPORTED;
    struct dnn_buffer types = {0};
    if (type == CUDNN_TYPE_BACKEND_DESCRIPTOR)
        for (int64_t k = 0; k < requested; k++) {
            struct proxy *out = proxy_of(((void **)array)[k]);
            if (!out)
                return CUDNN_STATUS_BAD_PARAM;
            dnn_put_le(&types, out->type, 4);
        }
    size_t elem = element_size((uint32_t)type), got = 0, cap = (size_t)requested * elem;
    uint8_t *out = malloc(requested ? cap : 1);
    uint8_t args[RGPU_DNN_GET_ATTRIBUTE_REQ_SIZE], rep[RGPU_DNN_GET_ATTRIBUTE_REP_SIZE];
    struct rgpu_dnn_get_attribute_rep res = {0};
    rgpu_pack_dnn_get_attribute(args, &(struct rgpu_dnn_get_attribute_req){
                                          .descriptor = p->server, .name = (uint32_t)name, .type = (uint32_t)type,
                                          .requested = requested});
    int r = out ? rgpu_ext_call(RGPU_OP_DNN_GET_ATTRIBUTE, args, sizeof args, types.data, types.len, rep,
                                sizeof rep, out, cap, &got)
                : 2;
    free(types.data);
    /* At most the elements asked for, whole ones: anything else would be copied past the caller's array. */
    if (!r && (rgpu_unpack_dnn_get_attribute(rep, sizeof rep, &res) || got > cap || got % elem))
        r = rgpu_ext_bad_reply(RGPU_OP_DNN_GET_ATTRIBUTE, "more attribute bytes than requested");
    int s = r ? rgpu_dnn_status(r) : (int)res.status;
    if (!s) {
        if (count)
            *count = res.count;
        size_t filled = got / elem;
        if (type == CUDNN_TYPE_BACKEND_DESCRIPTOR) {
            for (size_t k = 0; k < filled; k++) { /* the caller's descriptors now stand for the server's */
                struct proxy *dst = proxy_of(((void **)array)[k]);
                dst->server = rgpu_get_u64(out + k * elem); /* descriptors travel as u64 handles */
                dst->finalized = 1;
            }
        } else if (filled) {
            memcpy(array, out, filled * elem);
        }
    }
    rgpu_dnn_debug("get attribute %d (type %d, %lld requested) of descriptor type %u -> status %d", name, type,
                   (long long)requested, p->type, s);
    free(out);
    return s;
}

DNN_API int cudnnBackendExecute(struct dnn_handle *h, void *plan, void *pack)
{
    struct proxy *pl = proxy_of(plan), *vp = proxy_of(pack);
    if (!h || !pl || !vp || !pl->server || vp->type != CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR)
        return CUDNN_STATUS_BAD_PARAM;
    struct dnn_buffer b = {0};
    int s = encode(vp, &b);
    if (!s) {
        encode_by_value(vp, &b);
        s = b.failed ? CUDNN_STATUS_ALLOC_FAILED : CUDNN_STATUS_SUCCESS;
    }
    if (!s) {
        uint8_t args[RGPU_DNN_EXECUTE_REQ_SIZE];
        rgpu_pack_dnn_execute(args, &(struct rgpu_dnn_execute_req){.handle = h->server, .plan = pl->server,
                                                                    .stream = rgpu_ext_stream(h->stream)});
        s = rgpu_dnn_status(rgpu_ext_defer(RGPU_OP_DNN_EXECUTE, args, sizeof args, b.data, b.len));
    }
    free(b.data);
    return s;
}
