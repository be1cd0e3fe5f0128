/* JIT linking (cuLinkCreate, AddData, AddFile, Complete, Destroy; protocol 1.8) and cuModuleLoadDataEx's options.
 *
 * The linker runs on the server, in the session's context, as the driver's own CUlinkState. What the driver would
 * write into the program's memory stays here: its log buffers, and the option values it reports into (the logs'
 * sizes, the wall time). Each reply carries the logs as they stand, and they are copied into the program's buffers
 * before the call returns, so a refused input's error log is there to print, as natively. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "rgpu_shim.h"

#define API __attribute__((visibility("default")))

enum { WALL_TIME = 2, INFO_LOG = 3, INFO_LOG_SIZE = 4, ERROR_LOG = 5, ERROR_LOG_SIZE = 6 };
#define MAX_NAME 4096 /* the server's limit on an input's name; longer ones are cut */

/* Where the program wants to hear what the linker says. */
struct jit_outputs {
    char *info, *error;
    uint32_t info_cap, error_cap;
    void **info_filled, **error_filled, **wall;
};

struct jit_options {
    struct jit_outputs out;
    uint32_t count; /* records in wire: the options the server's driver takes as they are */
    uint8_t wire[RGPU_MAX_JIT_OPTIONS * RGPU_JIT_OPTION_SIZE];
};

/* A CUlinkState is one of these; only ones on the list are accepted back. */
struct jit_link {
    struct jit_link *next;
    uint64_t handle;
    struct jit_outputs out;
    uint8_t *image;
    size_t image_size;
};
static pthread_mutex_t links_lock = PTHREAD_MUTEX_INITIALIZER;
RGPU_FORK_RESET(links_lock, &links_lock)
static struct jit_link *links;

static CUresult need_linking(void)
{
    static int logged;
    CUresult r = rgpu_ready();
    return r == CUDA_SUCCESS ? rgpu_need_protocol(8, &logged, "JIT linking") : r;
}

static struct jit_link *link_of(CUlinkState state)
{
    pthread_mutex_lock(&links_lock);
    struct jit_link *l = links;
    while (l && l != (struct jit_link *)state)
        l = l->next;
    pthread_mutex_unlock(&links_lock);
    return l;
}

/* The options of cuLinkCreate (for_input 0) or of one input (1): outputs noted, plain ones packed for the server. */
static CUresult parse_options(unsigned n, const CUjit_option *options, void **values, int for_input,
                             struct jit_options *o)
{
    static int logged;
    memset(o, 0, sizeof *o);
    if (n && (!options || !values))
        return CUDA_ERROR_INVALID_VALUE;
    for (unsigned i = 0; i < n; i++) {
        unsigned id = (unsigned)options[i];
        uint32_t value = (uint32_t)(uintptr_t)values[i]; /* every forwarded option is an int or an enum */
        if (id >= CU_JIT_NUM_OPTIONS)
            return CUDA_ERROR_INVALID_VALUE;
        if (id >= WALL_TIME && id <= ERROR_LOG_SIZE) {
            if (for_input)
                return CUDA_ERROR_INVALID_VALUE; /* an input takes compiler options only */
            if (id == WALL_TIME)
                o->out.wall = &values[i];
            else if (id == INFO_LOG)
                o->out.info = values[i];
            else if (id == ERROR_LOG)
                o->out.error = values[i];
            else if (id == INFO_LOG_SIZE)
                o->out.info_cap = value, o->out.info_filled = &values[i];
            else
                o->out.error_cap = value, o->out.error_filled = &values[i];
        } else if (RGPU_FORWARDED_JIT_OPTIONS >> id & 1) {
            if (o->count == RGPU_MAX_JIT_OPTIONS)
                return CUDA_ERROR_INVALID_VALUE;
            uint8_t *rec = o->wire + (size_t)o->count++ * RGPU_JIT_OPTION_SIZE;
            rgpu_put_u32(rec, id);
            rgpu_put_u32(rec + 4, 0);
            rgpu_put_u64(rec + 8, value);
        } else {
            return rgpu_unsupported(&logged, "JIT options that pass pointers (symbol names and addresses)");
        }
    }
    if (!o->out.info)
        o->out.info_cap = 0;
    if (!o->out.error)
        o->out.error_cap = 0;
    return CUDA_SUCCESS;
}

static uint32_t asked(uint32_t cap) { return cap < RGPU_MAX_JIT_LOG ? cap : RGPU_MAX_JIT_LOG; }

static void put_log(char *buf, uint32_t cap, void **filled, const uint8_t *log, uint32_t len)
{
    size_t n = len < cap ? len : cap;
    if (cap) {
        if (n)
            memcpy(buf, log, n);
        if (n == 0 || buf[n - 1] != 0) /* always a string, as the driver's logs are */
            buf[n < cap ? n : cap - 1] = 0;
    }
    if (filled)
        *filled = (void *)(uintptr_t)n;
}

static void put_wall_time(const struct jit_outputs *out, float ms)
{
    if (out->wall)
        memcpy(out->wall, &ms, sizeof ms); /* the driver writes the float over the value itself */
}

/* Clear what the program asked to hear, for a load the server's driver answers without a log. */
static void put_nothing(const struct jit_outputs *out)
{
    put_log(out->info, out->info_cap, out->info_filled, NULL, 0);
    put_log(out->error, out->error_cap, out->error_filled, NULL, 0);
    put_wall_time(out, 0.0f);
}

/* A JIT_LINK_ADD or _COMPLETE call, whose reply bulk is the two logs: on any answer of the linker's, the logs and
 * the wall time so far reach the program; its answer is the result. */
static CUresult logged_call(uint16_t op, const struct jit_outputs *out, const void *args, size_t args_len,
                            const void *bulk, size_t bulk_len, uint8_t *rep, size_t rep_len,
                            uint32_t (*unpack)(const uint8_t *rep, size_t len, uint32_t *info, uint32_t *error,
                                               float *wall_ms))
{
    uint32_t info_cap = asked(out->info_cap), error_cap = asked(out->error_cap), info, error;
    float wall_ms;
    uint8_t *logs = malloc((size_t)info_cap + error_cap + 1);
    if (!logs)
        return CUDA_ERROR_OUT_OF_MEMORY;
    struct rgpu_sink sink = {logs, (size_t)info_cap + error_cap, 0};
    CUresult r = rgpu_call(op, args, args_len, bulk, bulk_len, rep, rep_len, &sink);
    if (r == CUDA_SUCCESS) {
        uint32_t status = unpack(rep, rep_len, &info, &error, &wall_ms);
        if (info > info_cap || error > error_cap || (size_t)info + error != sink.len) {
            r = rgpu_bad_reply(op, "logs of other sizes than asked for");
        } else {
            put_log(out->info, out->info_cap, out->info_filled, logs, info);
            put_log(out->error, out->error_cap, out->error_filled, logs + info, error);
            put_wall_time(out, wall_ms);
            r = status >= RGPU_STATUS_BASE ? CUDA_ERROR_UNKNOWN : (CUresult)status;
        }
    }
    free(logs);
    return r;
}

API CUresult cuLinkCreate_v2(unsigned n, CUjit_option *options, void **values, CUlinkState *state)
{
    struct jit_options o;
    CUresult r = need_linking();
    if (r == CUDA_SUCCESS)
        r = state ? parse_options(n, options, values, 0, &o) : CUDA_ERROR_INVALID_VALUE;
    struct jit_link *l = r == CUDA_SUCCESS ? calloc(1, sizeof *l) : NULL;
    if (r != CUDA_SUCCESS || !l)
        return r != CUDA_SUCCESS ? r : CUDA_ERROR_OUT_OF_MEMORY;
    uint8_t a[RGPU_JIT_LINK_CREATE_REQ_SIZE], rep[RGPU_JIT_LINK_CREATE_REP_SIZE];
    struct rgpu_jit_link_create_rep got;
    rgpu_pack_jit_link_create(a, &(struct rgpu_jit_link_create_req){o.count, asked(o.out.info_cap),
                                                                     asked(o.out.error_cap)});
    r = rgpu_call(RGPU_OP_JIT_LINK_CREATE, a, sizeof a, o.wire, (size_t)o.count * RGPU_JIT_OPTION_SIZE, rep,
                  sizeof rep, NULL);
    if (r == CUDA_SUCCESS && rgpu_unpack_jit_link_create(rep, sizeof rep, &got) != 0)
        r = rgpu_bad_reply(RGPU_OP_JIT_LINK_CREATE, "no link handle");
    if (r != CUDA_SUCCESS) {
        free(l);
        return r;
    }
    l->handle = got.link;
    l->out = o.out;
    pthread_mutex_lock(&links_lock);
    l->next = links;
    links = l;
    pthread_mutex_unlock(&links_lock);
    *state = (CUlinkState)l;
    return CUDA_SUCCESS;
}

static uint32_t add_logs(const uint8_t *rep, size_t len, uint32_t *info, uint32_t *error, float *wall_ms)
{
    struct rgpu_jit_link_add_rep got = {0};
    rgpu_unpack_jit_link_add(rep, len, &got);
    *info = got.info_size;
    *error = got.error_size;
    *wall_ms = got.wall_ms;
    return got.status;
}

API CUresult cuLinkAddData_v2(CUlinkState state, CUjitInputType type, void *data, size_t size, const char *name,
                              unsigned n, CUjit_option *options, void **values)
{
    struct jit_options o;
    struct jit_link *l = link_of(state);
    if (!l)
        return CUDA_ERROR_INVALID_HANDLE;
    if (!data || !size)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = parse_options(n, options, values, 1, &o);
    if (r != CUDA_SUCCESS)
        return r;
    size_t name_len = name ? strnlen(name, MAX_NAME) : 0, head = (size_t)o.count * RGPU_JIT_OPTION_SIZE + name_len;
    if (size > rgpu_max_bulk() - head) {
        rgpu_log(RGPU_LOG_ERROR, "cuLinkAddData: an input of %zu bytes is more than one request carries", size);
        return CUDA_ERROR_INVALID_VALUE;
    }
    uint8_t *bulk = malloc(head + size);
    if (!bulk)
        return CUDA_ERROR_OUT_OF_MEMORY;
    memcpy(bulk, o.wire, head - name_len);
    if (name_len)
        memcpy(bulk + head - name_len, name, name_len);
    memcpy(bulk + head, data, size);
    uint8_t a[RGPU_JIT_LINK_ADD_REQ_SIZE], rep[RGPU_JIT_LINK_ADD_REP_SIZE];
    rgpu_pack_jit_link_add(a, &(struct rgpu_jit_link_add_req){l->handle, (uint32_t)type, o.count, (uint32_t)name_len});
    r = logged_call(RGPU_OP_JIT_LINK_ADD, &l->out, a, sizeof a, bulk, head + size, rep, sizeof rep, add_logs);
    free(bulk);
    return r;
}

API CUresult cuLinkAddFile_v2(CUlinkState state, CUjitInputType type, const char *path, unsigned n,
                              CUjit_option *options, void **values)
{
    uint8_t *data;
    size_t len;
    if (!link_of(state))
        return CUDA_ERROR_INVALID_HANDLE;
    CUresult r = rgpu_read_image_file(path, &data, &len);
    if (r == CUDA_SUCCESS) /* (a PTX file gets the NUL rgpu_read_image_file puts after it) */
        r = len ? cuLinkAddData_v2(state, type, data, len + (type == CU_JIT_INPUT_PTX), path, n, options, values)
                : CUDA_ERROR_INVALID_IMAGE;
    free(data);
    return r;
}

static uint32_t complete_logs(const uint8_t *rep, size_t len, uint32_t *info, uint32_t *error, float *wall_ms)
{
    struct rgpu_jit_link_complete_rep got = {0};
    rgpu_unpack_jit_link_complete(rep, len, &got);
    *info = got.info_size;
    *error = got.error_size;
    *wall_ms = got.wall_ms;
    return got.status;
}

/* The completed image's bytes, in parts of what one reply carries, several requested at once. */
static CUresult read_image(const struct jit_link *l, uint8_t *image, size_t size)
{
    size_t part = rgpu_max_chunk(), count = (size + part - 1) / part;
    uint8_t *args = malloc(count * RGPU_JIT_LINK_READ_REQ_SIZE + 1);
    struct rgpu_sink *sinks = malloc(count * sizeof *sinks + 1);
    CUresult r = args && sinks ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
    for (size_t i = 0; r == CUDA_SUCCESS && i < count; i++) {
        size_t off = i * part, n = size - off < part ? size - off : part;
        rgpu_pack_jit_link_read(args + i * RGPU_JIT_LINK_READ_REQ_SIZE,
                                &(struct rgpu_jit_link_read_req){l->handle, off, (uint32_t)n});
        sinks[i] = (struct rgpu_sink){image + off, n, 0};
    }
    if (r == CUDA_SUCCESS && count)
        r = rgpu_call_pipelined(RGPU_OP_JIT_LINK_READ, count, args, RGPU_JIT_LINK_READ_REQ_SIZE, sinks,
                                RGPU_MAX_WINDOW);
    for (size_t i = 0; r == CUDA_SUCCESS && i < count; i++)
        if (sinks[i].len != sinks[i].cap)
            r = rgpu_bad_reply(RGPU_OP_JIT_LINK_READ, "a part of the image of another size");
    free(args);
    free(sinks);
    return r;
}

API CUresult cuLinkComplete(CUlinkState state, void **image, size_t *size)
{
    struct jit_link *l = link_of(state);
    if (!l)
        return CUDA_ERROR_INVALID_HANDLE;
    if (!image)
        return CUDA_ERROR_INVALID_VALUE;
    uint8_t a[RGPU_JIT_LINK_COMPLETE_REQ_SIZE], rep[RGPU_JIT_LINK_COMPLETE_REP_SIZE];
    struct rgpu_jit_link_complete_rep got;
    rgpu_pack_jit_link_complete(a, &(struct rgpu_jit_link_complete_req){l->handle});
    CUresult r = logged_call(RGPU_OP_JIT_LINK_COMPLETE, &l->out, a, sizeof a, NULL, 0, rep, sizeof rep,
                             complete_logs);
    if (r != CUDA_SUCCESS)
        return r;
    if (rgpu_unpack_jit_link_complete(rep, sizeof rep, &got) != 0 || got.image_size > RGPU_MAX_JIT_IMAGE ||
        !got.image_size)
        return rgpu_bad_reply(RGPU_OP_JIT_LINK_COMPLETE, "an image of no size or beyond the limit");
    uint8_t *bytes = malloc(got.image_size);
    if (!bytes)
        return CUDA_ERROR_OUT_OF_MEMORY;
    r = read_image(l, bytes, got.image_size);
    if (r != CUDA_SUCCESS) {
        free(bytes);
        return r;
    }
    free(l->image); /* (a second completion replaces the first's image, which the program was to load before) */
    l->image = bytes;
    l->image_size = got.image_size;
    *image = bytes;
    if (size)
        *size = got.image_size;
    return CUDA_SUCCESS;
}

API CUresult cuLinkDestroy(CUlinkState state)
{
    pthread_mutex_lock(&links_lock);
    struct jit_link **p = &links;
    while (*p && *p != (struct jit_link *)state)
        p = &(*p)->next;
    struct jit_link *l = *p;
    if (l)
        *p = l->next;
    pthread_mutex_unlock(&links_lock);
    if (!l)
        return CUDA_ERROR_INVALID_HANDLE;
    uint8_t a[RGPU_JIT_LINK_DESTROY_REQ_SIZE];
    rgpu_pack_jit_link_destroy(a, &(struct rgpu_jit_link_destroy_req){l->handle});
    CUresult r = rgpu_call(RGPU_OP_JIT_LINK_DESTROY, a, sizeof a, NULL, 0, NULL, 0, NULL);
    free(l->image);
    free(l);
    return r;
}

CUresult rgpu_jit_options_unused(unsigned n, CUjit_option *options, void **values)
{
    struct jit_options o;
    CUresult r = parse_options(n, options, values, 0, &o);
    if (r == CUDA_SUCCESS)
        put_nothing(&o.out);
    return r;
}

/* PTX with options is JIT compiled as a link of that one input, so that its options apply and its logs reach the
 * program; a binary image (or a server before 1.8) loads as it is, the options having nothing to act on there. */
API CUresult cuModuleLoadDataEx(CUmodule *mod, const void *image, unsigned n, CUjit_option *options, void **values)
{
    struct jit_options o;
    if (!mod || !image)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = parse_options(n, options, values, 0, &o);
    if (r != CUDA_SUCCESS)
        return r;
    if (!n || rgpu_image_is_binary(image) || rgpu_server_minor() < 8) {
        r = cuModuleLoadData(mod, image);
        put_nothing(&o.out);
        return r;
    }
    CUlinkState state;
    void *linked;
    size_t size;
    r = cuLinkCreate_v2(n, options, values, &state);
    if (r != CUDA_SUCCESS)
        return r;
    r = cuLinkAddData_v2(state, CU_JIT_INPUT_PTX, (void *)image, strlen(image) + 1, "", 0, NULL, NULL);
    if (r == CUDA_SUCCESS)
        r = cuLinkComplete(state, &linked, &size);
    if (r == CUDA_SUCCESS)
        r = rgpu_module_load_image(mod, linked, size);
    CUresult d = cuLinkDestroy(state);
    return r != CUDA_SUCCESS ? r : d;
}
