/* Functions and launches: a CUfunction carries its parameter layout and cached attributes, so a launch or an
 * attribute query needs no round trip. Also the launch-adjacent calls answered locally (host functions run on
 * the calling thread once the stream has drained; stream capture is in graph.c). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rgpu_consts.h"
#include "rgpu_shim.h"

#define API __attribute__((visibility("default")))
#define FUNC_ATTRS 16
#define LAYOUT_UNKNOWN 0xFFFFFFFFu /* MODULE_GET_FUNCTION's parameter count when the server cannot tell */

/* A CUfunction is a pointer to one of these: the launch needs the parameter layout, not a round trip. */
struct rgpu_function {
    uint64_t handle;
    uint64_t module;
    char *name;
    uint32_t count;
    uint32_t (*layout)[2];
    size_t param_bytes;
    int layout_unknown; /* launches must bring a packed buffer (CU_LAUNCH_PARAM_BUFFER_POINTER) */
    int attrs_loaded;
    int32_t attrs[FUNC_ATTRS]; /* cuFuncGetAttribute values, fetched once (INT32_MIN: unsupported) */
    struct rgpu_function *next;
};

static struct rgpu_function *functions;
static pthread_mutex_t fn_lock = PTHREAD_MUTEX_INITIALIZER;

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
    uint8_t a[8], rep[12], raw[8 * 512];
    struct rgpu_sink s = {raw, sizeof raw, 0};
    rgpu_put_u64(a, m);
    CUresult r = rgpu_call(RGPU_OP_MODULE_GET_FUNCTION, a, 8, name, strlen(name), rep, 12, &s);
    if (r != CUDA_SUCCESS)
        return r;
    uint32_t count = rgpu_get_u32(rep + 8);
    int unknown = count == LAYOUT_UNKNOWN; /* the server's driver predates cuFuncGetParamInfo */
    if (unknown)
        count = 0;
    if (s.len != 8u * count || count > 512)
        return CUDA_ERROR_NOT_SUPPORTED;
    struct rgpu_function *f = calloc(1, sizeof *f);
    if (!f || !(f->name = strdup(name)) || !(f->layout = calloc(count ? count : 1, sizeof *f->layout)))
        return CUDA_ERROR_OUT_OF_MEMORY;
    f->handle = rgpu_get_u64(rep);
    f->module = m;
    f->count = count;
    f->layout_unknown = unknown;
    for (uint32_t i = 0; i < count; i++) {
        f->layout[i][0] = rgpu_get_u32(raw + 8 * i);
        f->layout[i][1] = rgpu_get_u32(raw + 8 * i + 4);
        if (f->layout[i][0] + f->layout[i][1] > f->param_bytes)
            f->param_bytes = f->layout[i][0] + f->layout[i][1];
    }
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
    *offset = f->layout[index][0];
    if (size)
        *size = f->layout[index][1];
    return CUDA_SUCCESS;
}

_Static_assert(sizeof(CUlaunchAttribute) == RGPU_LAUNCH_ATTRIBUTE_SIZE, "CUlaunchAttribute travels as it is");

/* LAUNCH_KERNEL_EX: LAUNCH_KERNEL's fields (`plain`) + the attribute count; bulk = attributes, parameters. Event
 * handles inside attribute values are already the session's (a CUevent here is its server handle). */
static CUresult launch_with_attributes(uint64_t fn, const uint8_t plain[RGPU_LAUNCH_KERNEL_REQ_SIZE],
                                       const CUlaunchAttribute *attrs, unsigned n, const uint8_t *params,
                                       size_t param_bytes)
{
    static int logged;
    if (n > RGPU_MAX_LAUNCH_ATTRIBUTES)
        return CUDA_ERROR_INVALID_VALUE;
    if (rgpu_server_minor() < 2)
        return rgpu_unsupported(&logged, "cuLaunchKernelEx with launch attributes (the server predates protocol 1.2)");
    struct rgpu_launch_kernel_req p;
    struct rgpu_launch_kernel_ex_req req;
    uint8_t a[RGPU_LAUNCH_KERNEL_EX_REQ_SIZE], bulk[RGPU_MAX_LAUNCH_ATTRIBUTES * RGPU_LAUNCH_ATTRIBUTE_SIZE + 4096];
    if (rgpu_unpack_launch_kernel_req(plain, RGPU_LAUNCH_KERNEL_REQ_SIZE, &p) < 0 || param_bytes > 4096)
        return CUDA_ERROR_INVALID_VALUE;
    req = (struct rgpu_launch_kernel_ex_req){fn, p.grid_x, p.grid_y, p.grid_z, p.block_x, p.block_y, p.block_z,
                                             p.shared_mem, p.stream, n};
    rgpu_pack_launch_kernel_ex(a, &req);
    memcpy(bulk, attrs, n * sizeof *attrs);
    memcpy(bulk + n * sizeof *attrs, params, param_bytes);
    return rgpu_defer(RGPU_OP_LAUNCH_KERNEL_EX, a, sizeof a, bulk, n * sizeof *attrs + param_bytes);
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
    uint8_t buf[4096];
    size_t param_bytes = f->param_bytes;
    if (param_bytes > sizeof buf)
        return CUDA_ERROR_INVALID_VALUE;
    memset(buf, 0, param_bytes);
    if (f->layout_unknown && !extra) {
        static int logged;
        return rgpu_unsupported(&logged, "cuLaunchKernel with kernelParams of a function whose parameter layout "
                                         "the server's driver cannot report (before CUDA 12.4); pass "
                                         "CU_LAUNCH_PARAM_BUFFER_POINTER instead");
    }
    if (params && !f->layout_unknown) {
        for (uint32_t i = 0; i < f->count; i++) {
            if (!params[i])
                return CUDA_ERROR_INVALID_VALUE;
            memcpy(buf + f->layout[i][0], params[i], f->layout[i][1]);
        }
    } else if (extra) {
        const void *pbuf = NULL;
        size_t psize = 0;
        for (int i = 0; extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
            if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER)
                pbuf = extra[i + 1];
            else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE)
                psize = *(size_t *)extra[i + 1];
            else
                return CUDA_ERROR_INVALID_VALUE;
        }
        if (f->layout_unknown)
            param_bytes = psize; /* the buffer's own size is all there is to go by */
        if (!pbuf || psize < param_bytes || param_bytes > sizeof buf)
            return CUDA_ERROR_INVALID_VALUE;
        memcpy(buf, pbuf, param_bytes);
    } else if (f->count) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    uint8_t a[44];
    rgpu_put_u64(a, f->handle);
    rgpu_put_u32(a + 8, gx);
    rgpu_put_u32(a + 12, gy);
    rgpu_put_u32(a + 16, gz);
    rgpu_put_u32(a + 20, bx);
    rgpu_put_u32(a + 24, by);
    rgpu_put_u32(a + 28, bz);
    rgpu_put_u32(a + 32, shmem);
    rgpu_put_u64(a + 36, rgpu_stream_handle(stream));
    if (!n_attrs)
        return rgpu_defer(RGPU_OP_LAUNCH_KERNEL, a, sizeof a, buf, param_bytes);
    return launch_with_attributes(f->handle, a, attrs, n_attrs, buf, param_bytes);
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
    uint8_t a[12], rep[4], raw[4 * FUNC_ATTRS];
    struct rgpu_sink s = {raw, sizeof raw, 0};
    rgpu_put_u64(a, f->handle);
    rgpu_put_u32(a + 8, FUNC_ATTRS);
    CUresult r = rgpu_call(RGPU_OP_FUNC_GET_ATTRIBUTES, a, 12, NULL, 0, rep, 4, &s);
    if (r != CUDA_SUCCESS)
        return r;
    for (int i = 0; i < FUNC_ATTRS; i++)
        f->attrs[i] = (size_t)(4 * i + 4) <= s.len ? (int32_t)rgpu_get_u32(raw + 4 * i) : INT32_MIN;
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
    uint8_t a[16];
    rgpu_put_u64(a, f->handle);
    rgpu_put_u32(a + 8, (uint32_t)attrib);
    rgpu_put_u32(a + 12, (uint32_t)value);
    r = rgpu_defer(RGPU_OP_FUNC_SET_ATTRIBUTE, a, 16, NULL, 0);
    if (r == CUDA_SUCCESS)
        f->attrs[attrib] = value;
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

API CUresult cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int *blocks, CUfunction func, int block_size,
                                                                  size_t smem, unsigned int flags)
{
    struct rgpu_function *f = (struct rgpu_function *)func;
    if (!blocks || !f)
        return CUDA_ERROR_INVALID_VALUE;
    uint8_t a[24], rep[4];
    rgpu_put_u64(a, f->handle);
    rgpu_put_u32(a + 8, (uint32_t)block_size);
    rgpu_put_u64(a + 12, smem);
    rgpu_put_u32(a + 20, flags);
    CUresult r = rgpu_call(RGPU_OP_OCCUPANCY_MAX_BLOCKS, a, 24, NULL, 0, rep, 4, NULL);
    if (r == CUDA_SUCCESS)
        *blocks = (int)rgpu_get_u32(rep);
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

/* -- host functions and stream capture ------------------------------------------------------------------- */
static CUresult host_func(CUstream s, CUhostFn fn, void *data)
{
    if (!fn)
        return CUDA_ERROR_INVALID_VALUE;
    /* The host function must run after the stream's earlier work and before its later work; the GPU cannot
     * call back across the wire, so the calling thread waits for the stream and runs it. */
    CUresult r = cuStreamSynchronize(s);
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
    CUresult r = cuStreamSynchronize(s);
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
