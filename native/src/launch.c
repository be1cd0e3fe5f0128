/* Functions and launches: a CUfunction carries its parameter layout and cached attributes, so a launch or an
 * attribute query needs no round trip. Also the launch-adjacent calls answered locally (host functions run on
 * the calling thread once the stream has drained; stream capture is in graph.c). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rgpu_consts.h"
#include "rgpu_layout.h"
#include "rgpu_shim.h"

#define API __attribute__((visibility("default")))
#define FUNC_ATTRS 16
#define MAX_PARAMS 1024
#define LAYOUT_UNKNOWN 0xFFFFFFFFu /* MODULE_GET_FUNCTION's parameter count when the server cannot tell */

/* A CUfunction is a pointer to one of these: the launch needs the parameter layout, not a round trip. */
struct rgpu_function {
    uint64_t handle;
    uint64_t module;
    char *name;
    uint32_t count;
    struct rgpu_module_get_function_item *layout; /* validated: in order, within RGPU_MAX_PARAM_BYTES */
    size_t param_bytes;
    int layout_unknown; /* launches must bring a packed buffer (CU_LAUNCH_PARAM_BUFFER_POINTER) */
    int attrs_loaded;
    int warned_host_pointer;
    uint64_t cooperative_shape; /* the last cooperative launch's shape and its blocks per SM (cooperative_fits) */
    int32_t attrs[FUNC_ATTRS]; /* cuFuncGetAttribute values, fetched once (INT32_MIN: unsupported) */
    struct rgpu_function *next;
};

static struct rgpu_function *functions;
static pthread_mutex_t fn_lock = PTHREAD_MUTEX_INITIALIZER;
RGPU_FORK_RESET(fn_lock, &fn_lock)

API CUresult cuModuleGetFunction(CUfunction *pfunc, CUmodule mod, const char *name)
{
    if (!pfunc || !name)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t m = (uint64_t)(uintptr_t)mod;
    pthread_mutex_lock(&fn_lock);
    for (struct rgpu_function *f = functions; f; f = f->next)
        if (f->module == m && !strcmp(f->name, name)) {
            *pfunc = (CUfunction)f;
            pthread_mutex_unlock(&fn_lock);
            return CUDA_SUCCESS;
        }
    pthread_mutex_unlock(&fn_lock);
    uint8_t a[RGPU_MODULE_GET_FUNCTION_REQ_SIZE], rep[RGPU_MODULE_GET_FUNCTION_REP_SIZE];
    uint8_t raw[RGPU_MODULE_GET_FUNCTION_ITEM_SIZE * MAX_PARAMS];
    struct rgpu_sink s = {raw, sizeof raw, 0};
    rgpu_pack_module_get_function(a, &(struct rgpu_module_get_function_req){.module = m});
    CUresult r = rgpu_call(RGPU_OP_MODULE_GET_FUNCTION, a, sizeof a, name, strlen(name), rep, sizeof rep, &s);
    if (r != CUDA_SUCCESS)
        return r;
    struct rgpu_module_get_function_rep got;
    rgpu_unpack_module_get_function(rep, sizeof rep, &got);
    int unknown = got.count == LAYOUT_UNKNOWN; /* the server's driver predates cuFuncGetParamInfo */
    if (unknown)
        got.count = 0;
    if (got.count > MAX_PARAMS && s.len == (size_t)got.count * RGPU_MODULE_GET_FUNCTION_ITEM_SIZE) {
        static int logged;
        return rgpu_unsupported(&logged, "a kernel with more than 1024 parameters");
    }
    size_t cap = got.count <= MAX_PARAMS ? got.count : 0; /* a larger count is refused below, before any use */
    struct rgpu_module_get_function_item *items = calloc(cap ? cap : 1, sizeof *items);
    if (!items)
        return CUDA_ERROR_OUT_OF_MEMORY;
    long bytes = -1;
    if (rgpu_unpack_module_get_function_items(raw, s.len, got.count, items, cap) ||
        (bytes = rgpu_layout_bytes(items, got.count)) < 0) {
        free(items);
        return rgpu_bad_reply(RGPU_OP_MODULE_GET_FUNCTION, "parameter layout");
    }
    struct rgpu_function *f = calloc(1, sizeof *f);
    if (!f || !(f->name = strdup(name))) {
        free(f);
        free(items);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    f->handle = got.function;
    f->module = m;
    f->count = got.count;
    f->layout = items;
    f->param_bytes = (size_t)bytes;
    f->layout_unknown = unknown;
    pthread_mutex_lock(&fn_lock);
    f->next = functions;
    functions = f;
    pthread_mutex_unlock(&fn_lock);
    *pfunc = (CUfunction)f;
    return CUDA_SUCCESS;
}

API CUresult cuFuncGetParamInfo(CUfunction func, size_t index, size_t *offset, size_t *size)
{
    struct rgpu_function *f = (struct rgpu_function *)func;
    if (!f || !offset)
        return CUDA_ERROR_INVALID_VALUE;
    if (f->layout_unknown)
        return CUDA_ERROR_NOT_SUPPORTED;
    if (index >= f->count)
        return CUDA_ERROR_INVALID_VALUE;
    *offset = f->layout[index].offset;
    if (size)
        *size = f->layout[index].size;
    return CUDA_SUCCESS;
}

static CUresult too_many_param_bytes(size_t n)
{
    rgpu_log(RGPU_LOG_WARN, "cuLaunchKernel: %zu bytes of kernel parameters exceed the driver's limit of %d "
                            "(CUDA_ERROR_INVALID_VALUE)", n, RGPU_MAX_PARAM_BYTES);
    return CUDA_ERROR_INVALID_VALUE;
}

/* The parameter buffer of one launch: from kernelParams per the layout, or the caller's packed buffer. */
static CUresult pack_params(const struct rgpu_function *f, void **params, void **extra, uint8_t *buf,
                            size_t *size)
{
    if (f->layout_unknown && !extra) {
        static int logged;
        return rgpu_unsupported(&logged, "cuLaunchKernel with kernelParams of a function whose parameter layout "
                                         "the server's driver cannot report (before CUDA 12.4); pass "
                                         "CU_LAUNCH_PARAM_BUFFER_POINTER instead");
    }
    *size = f->param_bytes; /* within RGPU_MAX_PARAM_BYTES: checked when the layout arrived */
    if (params && !f->layout_unknown) {
        memset(buf, 0, *size);
        for (uint32_t i = 0; i < f->count; i++) {
            if (!params[i])
                return CUDA_ERROR_INVALID_VALUE;
            memcpy(buf + f->layout[i].offset, params[i], f->layout[i].size);
        }
        return CUDA_SUCCESS;
    }
    if (!extra)
        return f->count ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
    const void *pbuf = NULL;
    size_t psize = 0;
    for (int i = 0; extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
        if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER)
            pbuf = extra[i + 1];
        else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE && extra[i + 1])
            psize = *(size_t *)extra[i + 1];
        else
            return CUDA_ERROR_INVALID_VALUE;
    }
    if (f->layout_unknown)
        *size = psize; /* the buffer's own size is all there is to go by */
    if (*size > RGPU_MAX_PARAM_BYTES)
        return too_many_param_bytes(*size);
    if (!pbuf || psize < *size)
        return CUDA_ERROR_INVALID_VALUE;
    memcpy(buf, pbuf, *size);
    return CUDA_SUCCESS;
}

_Static_assert(sizeof(CUlaunchAttribute) == RGPU_LAUNCH_ATTRIBUTE_SIZE, "CUlaunchAttribute travels as it is");

/* LAUNCH_KERNEL_EX: LAUNCH_KERNEL's fields + the attribute count; bulk = attributes, then parameters. Event
 * handles inside attribute values are already the session's (a CUevent here is its server handle). */
static CUresult launch_with_attributes(const struct rgpu_launch_kernel_req *p, const CUlaunchAttribute *attrs,
                                       unsigned n, const uint8_t *params, size_t param_bytes)
{
    static int logged;
    if (n > RGPU_MAX_LAUNCH_ATTRIBUTES || param_bytes > RGPU_MAX_PARAM_BYTES)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult old = rgpu_need_protocol(2, &logged, "cuLaunchKernelEx with launch attributes");
    if (old != CUDA_SUCCESS)
        return old;
    uint8_t a[RGPU_LAUNCH_KERNEL_EX_REQ_SIZE];
    rgpu_pack_launch_kernel_ex(a, &(struct rgpu_launch_kernel_ex_req){
                                      .function = p->function, .grid_x = p->grid_x, .grid_y = p->grid_y,
                                      .grid_z = p->grid_z, .block_x = p->block_x, .block_y = p->block_y,
                                      .block_z = p->block_z, .shared_mem = p->shared_mem, .stream = p->stream,
                                      .count = n});
    size_t attr_bytes = n * sizeof *attrs;
    uint8_t small[RGPU_MAX_LAUNCH_ATTRIBUTES * RGPU_LAUNCH_ATTRIBUTE_SIZE + 1024], *bulk = small;
    if (attr_bytes + param_bytes > sizeof small && !(bulk = malloc(attr_bytes + param_bytes)))
        return CUDA_ERROR_OUT_OF_MEMORY;
    memcpy(bulk, attrs, attr_bytes);
    if (param_bytes)
        memcpy(bulk + attr_bytes, params, param_bytes);
    CUresult r = rgpu_defer(RGPU_OP_LAUNCH_KERNEL_EX, a, sizeof a, bulk, attr_bytes + param_bytes);
    if (bulk != small)
        free(bulk);
    return r;
}

/* A pointer parameter into this process's page-locked memory (zero-copy, as natively under unified
 * addressing): moved into the allocation's device shadow (shadow.c). Where there can be none, the launch goes
 * as it is and will fault on the server: said once per kernel, so the fault has a cause in the program's log. */
static void host_pointers(struct rgpu_function *f, uint8_t *buf, CUstream stream)
{
    if (f->layout_unknown)
        return;
    for (uint32_t i = 0; i < f->count; i++) {
        uint64_t v;
        if (f->layout[i].size != 8)
            continue;
        memcpy(&v, buf + f->layout[i].offset, 8);
        if (!v || !rgpu_is_program_host(v))
            continue;
        if (rgpu_shadow_param(&v, stream) == 0)
            memcpy(buf + f->layout[i].offset, &v, 8);
        else if (!__atomic_exchange_n(&f->warned_host_pointer, 1, __ATOMIC_RELAXED))
            rgpu_log(RGPU_LOG_WARN, "kernel %s: parameter %u (0x%llx) points into page-locked host memory of this "
                                    "process (zero-copy) too large to shadow on the GPU, which cannot reach it",
                     f->name, i, (unsigned long long)v);
    }
}

/* A cooperative launch must have its whole grid resident at once; the driver refuses one that cannot be at the
 * launch (COOPERATIVE_LAUNCH_TOO_LARGE), where the program checks. Launches here are deferred, so the stand-in
 * asks first: the active blocks per multiprocessor for the block size and dynamic shared memory (a round trip,
 * remembered for the function's last such shape until its attributes change -- a program launches its cooperative
 * kernel the same way again and again) times the multiprocessors. A shape with no block resident is the driver's
 * to refuse as it does (an invalid block, too much shared memory): the launch goes on and its error comes from the
 * server. The server's driver checks every launch itself too. */
static CUresult cooperative_fits(struct rgpu_function *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                 unsigned by, unsigned bz, unsigned shmem)
{
    CUdevice dev;
    int supported = 0, sms = 0, per_sm = 0;
    CUresult r = cuCtxGetDevice(&dev);
    if (r == CUDA_SUCCESS)
        r = cuDeviceGetAttribute(&supported, CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH, dev);
    if (r == CUDA_SUCCESS)
        r = cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev);
    if (r != CUDA_SUCCESS)
        return r;
    if (!supported)
        return CUDA_ERROR_NOT_SUPPORTED;
    uint64_t threads = (uint64_t)bx * by * bz, blocks = (uint64_t)gx * gy * gz;
    /* (shape: threads << 32 | shared memory << 8 | blocks per SM + 1; 0 when nothing is remembered) */
    int fits_key = threads < (1u << 16) && shmem < (1u << 24);
    uint64_t key = threads << 32 | (uint64_t)shmem << 8, seen = __atomic_load_n(&f->cooperative_shape, __ATOMIC_RELAXED);
    if (fits_key && seen && (seen & ~0xFFull) == key) {
        per_sm = (int)(seen & 0xFF) - 1;
    } else {
        if (threads > INT32_MAX)
            return CUDA_ERROR_INVALID_VALUE;
        if ((r = cuOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, (CUfunction)f, (int)threads, shmem)))
            return r;
        if (fits_key && per_sm > 0 && per_sm < 0xFF)
            __atomic_store_n(&f->cooperative_shape, key | (uint64_t)(per_sm + 1), __ATOMIC_RELAXED);
    }
    return per_sm <= 0 || blocks <= (uint64_t)per_sm * (uint64_t)sms ? CUDA_SUCCESS
                                                                      : CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE;
}

static int cooperative(const CUlaunchAttribute *attrs, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        if (attrs[i].id == CU_LAUNCH_ATTRIBUTE_COOPERATIVE && attrs[i].value.cooperative)
            return 1;
    return 0;
}

/* A launch, with launch attributes (cuLaunchKernelEx) or without: the attributes travel as they are, after
 * them the parameter buffer. */
static CUresult launch(CUfunction func, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
                       unsigned int by, unsigned int bz, unsigned int shmem, CUstream stream, void **params,
                       void **extra, const CUlaunchAttribute *attrs, unsigned n_attrs)
{
    struct rgpu_function *f = (struct rgpu_function *)func;
    if (!f)
        return CUDA_ERROR_INVALID_HANDLE;
    if (n_attrs && cooperative(attrs, n_attrs)) {
        CUresult fits = cooperative_fits(f, gx, gy, gz, bx, by, bz, shmem);
        if (fits != CUDA_SUCCESS)
            return fits;
    }
    /* Most kernels take a few words: the stack; up to the driver's limit, the heap. */
    uint8_t small[1024], *buf = small;
    if (f->param_bytes > sizeof small || (f->layout_unknown && extra)) {
        if (!(buf = malloc(RGPU_MAX_PARAM_BYTES)))
            return CUDA_ERROR_OUT_OF_MEMORY;
    }
    size_t size = 0;
    CUresult r = pack_params(f, params, extra, buf, &size);
    if (r == CUDA_SUCCESS)
        host_pointers(f, buf, stream);
    if (r == CUDA_SUCCESS) {
        struct rgpu_launch_kernel_req req = {.function = f->handle, .grid_x = gx, .grid_y = gy, .grid_z = gz,
                                             .block_x = bx, .block_y = by, .block_z = bz, .shared_mem = shmem,
                                             .stream = rgpu_stream_handle(stream)};
        if (n_attrs) {
            r = launch_with_attributes(&req, attrs, n_attrs, buf, size);
        } else {
            uint8_t a[RGPU_LAUNCH_KERNEL_REQ_SIZE];
            rgpu_pack_launch_kernel(a, &req);
            r = rgpu_defer(RGPU_OP_LAUNCH_KERNEL, a, sizeof a, buf, size);
        }
    }
    if (buf != small)
        free(buf);
    return r;
}

API CUresult cuLaunchKernel(CUfunction func, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
                            unsigned int by, unsigned int bz, unsigned int shmem, CUstream stream, void **params,
                            void **extra)
{
    return launch(func, gx, gy, gz, bx, by, bz, shmem, stream, params, extra, NULL, 0);
}

API CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
                                 unsigned int by, unsigned int bz, unsigned int shmem, CUstream s, void **params,
                                 void **extra)
{
    return cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shmem, s, params, extra);
}


static CUresult load_attributes(struct rgpu_function *f)
{
    if (__atomic_load_n(&f->attrs_loaded, __ATOMIC_ACQUIRE))
        return CUDA_SUCCESS;
    uint8_t a[RGPU_FUNC_GET_ATTRIBUTES_REQ_SIZE], rep[RGPU_FUNC_GET_ATTRIBUTES_REP_SIZE];
    uint8_t raw[RGPU_FUNC_GET_ATTRIBUTES_ITEM_SIZE * FUNC_ATTRS];
    struct rgpu_sink s = {raw, sizeof raw, 0};
    rgpu_pack_func_get_attributes(a, &(struct rgpu_func_get_attributes_req){.function = f->handle,
                                                                           .count = FUNC_ATTRS});
    CUresult r = rgpu_call(RGPU_OP_FUNC_GET_ATTRIBUTES, a, sizeof a, NULL, 0, rep, sizeof rep, &s);
    if (r != CUDA_SUCCESS)
        return r;
    struct rgpu_func_get_attributes_rep got;
    struct rgpu_func_get_attributes_item values[FUNC_ATTRS];
    rgpu_unpack_func_get_attributes(rep, sizeof rep, &got);
    if (rgpu_unpack_func_get_attributes_items(raw, s.len, got.count, values, FUNC_ATTRS))
        return rgpu_bad_reply(RGPU_OP_FUNC_GET_ATTRIBUTES, "attribute count");
    for (uint32_t i = 0; i < FUNC_ATTRS; i++) /* an older server may know fewer */
        f->attrs[i] = i < got.count ? values[i].value : INT32_MIN;
    __atomic_store_n(&f->attrs_loaded, 1, __ATOMIC_RELEASE);
    return CUDA_SUCCESS;
}

API CUresult cuFuncGetAttribute(int *value, CUfunction_attribute attrib, CUfunction func)
{
    struct rgpu_function *f = (struct rgpu_function *)func;
    if (!value || !f)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = load_attributes(f);
    if (r != CUDA_SUCCESS)
        return r;
    if ((int)attrib < 0 || (int)attrib >= FUNC_ATTRS || f->attrs[attrib] == INT32_MIN)
        return CUDA_ERROR_INVALID_VALUE;
    *value = f->attrs[attrib];
    return CUDA_SUCCESS;
}

API CUresult cuFuncSetAttribute(CUfunction func, CUfunction_attribute attrib, int value)
{
    struct rgpu_function *f = (struct rgpu_function *)func;
    if (!f)
        return CUDA_ERROR_INVALID_HANDLE;
    CUresult r = load_attributes(f);
    if (r != CUDA_SUCCESS)
        return r;
    if ((int)attrib < 0 || (int)attrib >= FUNC_ATTRS)
        return CUDA_ERROR_INVALID_VALUE;
    /* The cheap, common misuse is caught here; anything else surfaces as a deferred error at the next sync. */
    if (attrib == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES && value < 0)
        return CUDA_ERROR_INVALID_VALUE;
    uint8_t a[RGPU_FUNC_SET_ATTRIBUTE_REQ_SIZE];
    rgpu_pack_func_set_attribute(a, &(struct rgpu_func_set_attribute_req){.function = f->handle,
                                                                         .attrib = (uint32_t)attrib,
                                                                         .value = value});
    r = rgpu_defer(RGPU_OP_FUNC_SET_ATTRIBUTE, a, sizeof a, NULL, 0);
    if (r == CUDA_SUCCESS) {
        f->attrs[attrib] = value;
        __atomic_store_n(&f->cooperative_shape, 0, __ATOMIC_RELAXED); /* (its occupancy may have changed) */
    }
    return r;
}

/* Cache and shared-memory-bank preferences are hints a driver may ignore; rgpu leaves the defaults. */
API CUresult cuFuncSetCacheConfig(CUfunction func, CUfunc_cache config)
{
    (void)config;
    return func ? rgpu_ready() : CUDA_ERROR_INVALID_HANDLE;
}

API CUresult cuFuncSetSharedMemConfig(CUfunction func, CUsharedconfig config)
{
    (void)config;
    return func ? rgpu_ready() : CUDA_ERROR_INVALID_HANDLE;
}

API CUresult cuFuncGetName(const char **name, CUfunction func)
{
    struct rgpu_function *f = (struct rgpu_function *)func;
    if (!name || !f)
        return CUDA_ERROR_INVALID_VALUE;
    *name = f->name;
    return CUDA_SUCCESS;
}

API CUresult cuFuncGetModule(CUmodule *mod, CUfunction func)
{
    struct rgpu_function *f = (struct rgpu_function *)func;
    if (!mod || !f)
        return CUDA_ERROR_INVALID_VALUE;
    if (!f->module)
        return CUDA_ERROR_NOT_FOUND;
    *mod = (CUmodule)(uintptr_t)f->module;
    return CUDA_SUCCESS;
}

/* The server's driver loads a module's functions with the module: a function this side holds is loaded. */
API CUresult cuFuncIsLoaded(CUfunctionLoadingState *state, CUfunction func)
{
    if (!state || !func)
        return CUDA_ERROR_INVALID_VALUE;
    *state = CU_FUNCTION_LOADING_STATE_LOADED;
    return CUDA_SUCCESS;
}

API CUresult cuFuncLoad(CUfunction func) { return func ? rgpu_ready() : CUDA_ERROR_INVALID_HANDLE; }

API CUresult cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int *blocks, CUfunction func, int block_size,
                                                                  size_t smem, unsigned int flags)
{
    struct rgpu_function *f = (struct rgpu_function *)func;
    if (!blocks || !f)
        return CUDA_ERROR_INVALID_VALUE;
    uint8_t a[RGPU_OCCUPANCY_MAX_BLOCKS_REQ_SIZE], rep[RGPU_OCCUPANCY_MAX_BLOCKS_REP_SIZE];
    rgpu_pack_occupancy_max_blocks(a, &(struct rgpu_occupancy_max_blocks_req){
                                          .function = f->handle, .block_size = block_size, .dynamic_smem = smem,
                                          .flags = flags});
    CUresult r = rgpu_call(RGPU_OP_OCCUPANCY_MAX_BLOCKS, a, sizeof a, NULL, 0, rep, sizeof rep, NULL);
    struct rgpu_occupancy_max_blocks_rep got;
    if (r == CUDA_SUCCESS && rgpu_unpack_occupancy_max_blocks(rep, sizeof rep, &got) == 0)
        *blocks = got.blocks;
    return r;
}

API CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int *blocks, CUfunction func, int block_size, size_t smem)
{
    return cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(blocks, func, block_size, smem, 0);
}

/* cuLaunchKernelEx: every attribute goes to the server's driver as it is; the driver decides. */
static CUresult launch_ex(const CUlaunchConfig *c, CUfunction f, void **params, void **extra)
{
    if (!c || (c->numAttrs && !c->attrs))
        return CUDA_ERROR_INVALID_VALUE;
    return launch(f, c->gridDimX, c->gridDimY, c->gridDimZ, c->blockDimX, c->blockDimY, c->blockDimZ,
                  c->sharedMemBytes, c->hStream, params, extra, c->attrs, c->numAttrs);
}

API CUresult cuLaunchKernelEx(const CUlaunchConfig *c, CUfunction f, void **params, void **extra)
{
    return launch_ex(c, f, params, extra);
}
API CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *c, CUfunction f, void **params, void **extra)
{
    return launch_ex(c, f, params, extra);
}

/* cuLaunchCooperativeKernel: a launch with the COOPERATIVE attribute, which is what cuLaunchKernelEx makes of it. */
API CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                       unsigned int bx, unsigned int by, unsigned int bz, unsigned int shmem,
                                       CUstream s, void **params)
{
    const CUlaunchAttribute cooperative = {.id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE, .value.cooperative = 1};
    return launch(f, gx, gy, gz, bx, by, bz, shmem, s, params, NULL, &cooperative, 1);
}

API CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                            unsigned int bx, unsigned int by, unsigned int bz, unsigned int shmem,
                                            CUstream s, void **params)
{
    return cuLaunchCooperativeKernel(f, gx, gy, gz, bx, by, bz, shmem, s, params);
}

/* -- host functions and stream capture ------------------------------------------------------------------- */
static CUresult host_func(CUstream s, CUhostFn fn, void *data)
{
    if (!fn)
        return CUDA_ERROR_INVALID_VALUE;
    int captured = 0;
    CUresult r = rgpu_capture_active() ? rgpu_capture_host_func(s, fn, data, &captured) : CUDA_SUCCESS;
    if (captured) /* a host node of the capture's graph, run when the graph is launched */
        return r;
    /* The host function must run after the stream's earlier work and before its later work; the GPU cannot
     * call back across the wire, so the calling thread waits for the stream and runs it. */
    r = cuStreamSynchronize(s);
    if (r == CUDA_SUCCESS)
        fn(data);
    return r;
}

API CUresult cuLaunchHostFunc(CUstream s, CUhostFn fn, void *data) { return host_func(s, fn, data); }
API CUresult cuLaunchHostFunc_ptsz(CUstream s, CUhostFn fn, void *data) { return host_func(s, fn, data); }

static CUresult stream_callback(CUstream s, CUstreamCallback cb, void *data, unsigned flags)
{
    if (!cb || flags)
        return CUDA_ERROR_INVALID_VALUE;
    /* CUDA does not capture stream callbacks (cuLaunchHostFunc is the capturable kind): refused, and the capture
     * is invalidated, as natively. */
    CUresult r = rgpu_capture_active() ? rgpu_capture_refuse(s, "cuStreamAddCallback") : CUDA_SUCCESS;
    if (r != CUDA_SUCCESS)
        return r;
    r = cuStreamSynchronize(s);
    cb(s, r, data);
    return CUDA_SUCCESS;
}

API CUresult cuStreamAddCallback(CUstream s, CUstreamCallback cb, void *data, unsigned flags)
{
    return stream_callback(s, cb, data, flags);
}
API CUresult cuStreamAddCallback_ptsz(CUstream s, CUstreamCallback cb, void *data, unsigned flags)
{
    return stream_callback(s, cb, data, flags);
}

uint64_t rgpu_function_handle(CUfunction func)
{
    return func ? ((struct rgpu_function *)func)->handle : 0;
}

CUfunction rgpu_function_by_handle(uint64_t handle)
{
    struct rgpu_function *found = NULL;
    pthread_mutex_lock(&fn_lock);
    for (struct rgpu_function *f = functions; f && !found; f = f->next)
        if (f->handle == handle)
            found = f;
    pthread_mutex_unlock(&fn_lock);
    return (CUfunction)found;
}
