/* Hand-written driver entry points: what needs local state (device cache, thread-local contexts, function
 * layouts), bulk data, or a special ABI. The plain ones are generated (native/gen/forward_cuda*.c). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rgpu_shim.h"

#define API __attribute__((visibility("default")))
#define MAX_ATTRS 256
#define MAX_DEVICES 4096 /* more from a server is a broken reply, not a machine */
#define CTX_STACK 16

/* -- devices: fetched once, answered locally ------------------------------------------------------------- */
struct device {
    int loaded;
    char name[256];
    uint64_t total_mem;
    uint8_t uuid[16];
    int32_t attrs[MAX_ATTRS + 1]; /* by attribute id; INT32_MIN = unsupported */
    int retained;
    uint64_t primary; /* the session's primary context handle while retained */
};

static pthread_mutex_t dev_lock = PTHREAD_MUTEX_INITIALIZER;
RGPU_FORK_RESET(dev_lock, &dev_lock)
static int driver_version = -1, device_count = -1;
static struct device *devices;

/* The driver version and the devices of one server (the oldest driver of all servers is the one reported). */
static CUresult server_basics(int server, int *count_out)
{
    uint8_t v[RGPU_DRIVER_GET_VERSION_REP_SIZE], n[RGPU_DEVICE_GET_COUNT_REP_SIZE];
    struct rgpu_driver_get_version_rep version;
    struct rgpu_device_get_count_rep count;
    int prev = rgpu_route_push(server);
    CUresult r = rgpu_call(RGPU_OP_DRIVER_GET_VERSION, NULL, 0, NULL, 0, v, sizeof v, NULL);
    if (r == CUDA_SUCCESS)
        r = rgpu_call(RGPU_OP_DEVICE_GET_COUNT, NULL, 0, NULL, 0, n, sizeof n, NULL);
    if (r == CUDA_SUCCESS && (rgpu_unpack_driver_get_version(v, sizeof v, &version) ||
                              rgpu_unpack_device_get_count(n, sizeof n, &count) || count.count < 0 ||
                              count.count > MAX_DEVICES))
        r = rgpu_bad_reply(RGPU_OP_DEVICE_GET_COUNT, "device count");
    rgpu_route_pop(prev);
    if (r == CUDA_SUCCESS) {
        if (driver_version < 0 || version.version < driver_version)
            driver_version = version.version;
        *count_out = count.count;
    }
    return r;
}

static CUresult basics(void)
{
    CUresult r = rgpu_ready();
    if (r != CUDA_SUCCESS)
        return r;
    pthread_mutex_lock(&dev_lock);
    if (device_count < 0) {
        int total = 0, servers = rgpu_server_count();
        for (int s = 0; s < servers && r == CUDA_SUCCESS; s++) {
            int count = 0;
            r = server_basics(s, &count);
            if (r == CUDA_SUCCESS && total + count > MAX_DEVICES)
                r = rgpu_bad_reply(RGPU_OP_DEVICE_GET_COUNT, "device count");
            if (r == CUDA_SUCCESS) {
                rgpu_set_server_devices(s, count);
                total += count;
            }
        }
        if (r == CUDA_SUCCESS) {
            device_count = total;
            devices = calloc((size_t)(device_count > 0 ? device_count : 1), sizeof *devices);
            if (!devices)
                r = CUDA_ERROR_OUT_OF_MEMORY;
        }
        if (r != CUDA_SUCCESS) {
            device_count = -1;
            driver_version = -1;
        }
    }
    pthread_mutex_unlock(&dev_lock);
    return r;
}

/* Every attribute in one call; the server may know fewer than asked for (INT32_MIN: unsupported). */
static CUresult load_attributes(CUdevice dev, struct device *d)
{
    uint8_t a[RGPU_DEVICE_GET_ATTRIBUTES_REQ_SIZE], rep[RGPU_DEVICE_GET_ATTRIBUTES_REP_SIZE];
    uint8_t raw[RGPU_DEVICE_GET_ATTRIBUTES_ITEM_SIZE * MAX_ATTRS];
    struct rgpu_sink s = {raw, sizeof raw, 0};
    rgpu_pack_device_get_attributes(a, &(struct rgpu_device_get_attributes_req){.device = dev, .count = MAX_ATTRS});
    CUresult r = rgpu_call(RGPU_OP_DEVICE_GET_ATTRIBUTES, a, sizeof a, NULL, 0, rep, sizeof rep, &s);
    if (r != CUDA_SUCCESS)
        return r;
    struct rgpu_device_get_attributes_rep got;
    struct rgpu_device_get_attributes_item values[MAX_ATTRS];
    if (rgpu_unpack_device_get_attributes(rep, sizeof rep, &got) ||
        rgpu_unpack_device_get_attributes_items(raw, s.len, got.count, values, MAX_ATTRS))
        return rgpu_bad_reply(RGPU_OP_DEVICE_GET_ATTRIBUTES, "attribute count");
    for (uint32_t i = 1; i <= MAX_ATTRS; i++)
        d->attrs[i] = i <= got.count ? values[i - 1].value : INT32_MIN;
    rgpu_memops_offered(d->attrs);
    rgpu_managed_offered(d->attrs);
    return CUDA_SUCCESS;
}

static CUresult device(CUdevice dev, struct device **out)
{
    CUresult r = basics();
    if (r != CUDA_SUCCESS)
        return r;
    if (dev < 0 || dev >= device_count)
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&dev_lock);
    struct device *d = &devices[dev];
    if (!d->loaded) {
        /* DEVICE_GET_NAME, DEVICE_TOTAL_MEM and DEVICE_GET_UUID take the same request: the device alone. */
        uint8_t a[RGPU_DEVICE_GET_NAME_REQ_SIZE], mem[RGPU_DEVICE_TOTAL_MEM_REP_SIZE];
        uint8_t uuid[RGPU_DEVICE_GET_UUID_REP_SIZE];
        _Static_assert(RGPU_DEVICE_TOTAL_MEM_REQ_SIZE == sizeof a && RGPU_DEVICE_GET_UUID_REQ_SIZE == sizeof a,
                       "one request for three operations");
        rgpu_pack_device_get_name(a, &(struct rgpu_device_get_name_req){.device = dev});
        struct rgpu_sink name = {d->name, sizeof d->name - 1, 0};
        r = rgpu_call(RGPU_OP_DEVICE_GET_NAME, a, sizeof a, NULL, 0, NULL, 0, &name);
        if (r == CUDA_SUCCESS) {
            d->name[name.len < sizeof d->name ? name.len : sizeof d->name - 1] = 0; /* a longer name is cut */
            r = rgpu_call(RGPU_OP_DEVICE_TOTAL_MEM, a, sizeof a, NULL, 0, mem, sizeof mem, NULL);
        }
        if (r == CUDA_SUCCESS)
            r = rgpu_call(RGPU_OP_DEVICE_GET_UUID, a, sizeof a, NULL, 0, uuid, sizeof uuid, NULL);
        struct rgpu_device_total_mem_rep total;
        struct rgpu_device_get_uuid_rep id;
        if (r == CUDA_SUCCESS && rgpu_unpack_device_total_mem(mem, sizeof mem, &total) == 0 &&
            rgpu_unpack_device_get_uuid(uuid, sizeof uuid, &id) == 0) {
            d->total_mem = total.bytes;
            memcpy(d->uuid, id.uuid, sizeof d->uuid);
            r = load_attributes(dev, d);
        }
        d->loaded = r == CUDA_SUCCESS;
    }
    pthread_mutex_unlock(&dev_lock);
    *out = d;
    return r;
}

API CUresult cuInit(unsigned int flags)
{
    if (flags)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = rgpu_connect();
    if (r != CUDA_SUCCESS)
        return r;
    uint8_t a[RGPU_INIT_REQ_SIZE];
    rgpu_pack_init(a, &(struct rgpu_init_req){.flags = 0});
    r = rgpu_call(RGPU_OP_INIT, a, sizeof a, NULL, 0, NULL, 0, NULL);
    return r == CUDA_SUCCESS ? basics() : r;
}

API CUresult cuDriverGetVersion(int *version)
{
    if (!version)
        return CUDA_ERROR_INVALID_VALUE;
    /* Allowed before cuInit: connect if needed, but leave cuInit's own result to cuInit. */
    if (rgpu_ready() != CUDA_SUCCESS && rgpu_connect() != CUDA_SUCCESS) {
        *version = CUDA_VERSION;
        return CUDA_SUCCESS;
    }
    CUresult r = basics();
    if (r == CUDA_SUCCESS)
        *version = driver_version;
    return r;
}

API CUresult cuDeviceGetCount(int *count)
{
    if (!count)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = basics();
    if (r == CUDA_SUCCESS)
        *count = device_count;
    return r;
}

API CUresult cuDeviceGet(CUdevice *dev, int ordinal)
{
    if (!dev)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = basics();
    if (r != CUDA_SUCCESS)
        return r;
    if (ordinal < 0 || ordinal >= device_count)
        return CUDA_ERROR_INVALID_DEVICE;
    *dev = ordinal;
    return CUDA_SUCCESS;
}

API CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
{
    struct device *d;
    if (!name || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = device(dev, &d);
    if (r == CUDA_SUCCESS)
        snprintf(name, (size_t)len, "%s", d->name);
    return r;
}

API CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
    struct device *d;
    if (!bytes)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = device(dev, &d);
    if (r == CUDA_SUCCESS)
        *bytes = (size_t)d->total_mem;
    return r;
}

API CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev)
{
    struct device *d;
    if (!uuid)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = device(dev, &d);
    if (r == CUDA_SUCCESS)
        memcpy(uuid->bytes, d->uuid, 16);
    return r;
}

/* The pre-CUDA-13 entry point of the same call: cuda.h 13 turns the name into a macro for the _v2 one. */
#undef cuDeviceGetUuid
API CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev) { return cuDeviceGetUuid_v2(uuid, dev); }

API CUresult cuDeviceGetAttribute(int *value, CUdevice_attribute attrib, CUdevice dev)
{
    struct device *d;
    if (!value)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = device(dev, &d);
    if (r != CUDA_SUCCESS)
        return r;
    if ((int)attrib < 1 || (int)attrib > MAX_ATTRS || d->attrs[attrib] == INT32_MIN)
        return CUDA_ERROR_INVALID_VALUE;
    *value = d->attrs[attrib];
    return CUDA_SUCCESS;
}

API CUresult cuDeviceComputeCapability(int *major, int *minor, CUdevice dev)
{
    if (!major || !minor)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = cuDeviceGetAttribute(major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
    return r == CUDA_SUCCESS ? cuDeviceGetAttribute(minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev) : r;
}

API CUresult cuDeviceGetPCIBusId(char *bus_id, int len, CUdevice dev)
{
    struct device *d;
    if (!bus_id || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = device(dev, &d);
    if (r == CUDA_SUCCESS)
        snprintf(bus_id, (size_t)len, "%04X:%02X:%02X.0", d->attrs[CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID] == INT32_MIN ? 0 :
                 d->attrs[CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID], d->attrs[CU_DEVICE_ATTRIBUTE_PCI_BUS_ID],
                 d->attrs[CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID]);
    return r;
}

/* The forms CUDA takes: [domain]:[bus]:[device].[function], [domain]:[bus]:[device], [bus]:[device].[function], all
 * hexadecimal (0 where left out). */
static int parse_bus_id(const char *s, unsigned v[4])
{
    int n = 0;
    v[0] = v[3] = 0;
    if (sscanf(s, "%x:%x:%x.%x%n", &v[0], &v[1], &v[2], &v[3], &n) == 4 && !s[n])
        return 0;
    if (sscanf(s, "%x:%x:%x%n", &v[0], &v[1], &v[2], &n) == 3 && !s[n])
        return 0;
    v[0] = 0;
    return sscanf(s, "%x:%x.%x%n", &v[1], &v[2], &v[3], &n) == 3 && !s[n] ? 0 : -1;
}

API CUresult cuDeviceGetByPCIBusId(CUdevice *dev, const char *bus_id)
{
    int count;
    unsigned want[4], have[4];
    if (!dev || !bus_id || parse_bus_id(bus_id, want) != 0)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = cuDeviceGetCount(&count);
    for (int d = 0; r == CUDA_SUCCESS && d < count; d++) {
        char id[32];
        if (cuDeviceGetPCIBusId(id, sizeof id, d) == CUDA_SUCCESS && parse_bus_id(id, have) == 0 &&
            !memcmp(want, have, sizeof want)) {
            *dev = d;
            return CUDA_SUCCESS;
        }
    }
    return r == CUDA_SUCCESS ? CUDA_ERROR_INVALID_DEVICE : r;
}

/* Shared memory bank sizes: configurable on Kepler only, which CUDA 12 and 13 do not run; every GPU since has
 * four-byte banks, and the driver takes a configuration and ignores it. So these are answered here (as
 * cuFuncSetSharedMemConfig is, launch.c). */
API CUresult cuCtxGetSharedMemConfig(CUsharedconfig *config)
{
    CUresult r = rgpu_ready();
    if (r == CUDA_SUCCESS && !rgpu_thread_ctx())
        r = CUDA_ERROR_INVALID_CONTEXT;
    if (r == CUDA_SUCCESS && !config)
        r = CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS)
        *config = CU_SHARED_MEM_CONFIG_FOUR_BYTE_BANK_SIZE;
    return r;
}

static CUresult bank_size(CUsharedconfig config)
{
    CUresult r = rgpu_ready();
    if (r == CUDA_SUCCESS && !rgpu_thread_ctx())
        return CUDA_ERROR_INVALID_CONTEXT;
    return r == CUDA_SUCCESS && (unsigned)config > CU_SHARED_MEM_CONFIG_EIGHT_BYTE_BANK_SIZE ? CUDA_ERROR_INVALID_VALUE
                                                                                             : r;
}

API CUresult cuCtxSetSharedMemConfig(CUsharedconfig config) { return bank_size(config); }

/* -- contexts: current context is per thread, told to the server lazily (conn.c) ---------------------------- */
static __thread uint64_t ctx_stack[CTX_STACK];
static __thread int ctx_depth;
static pthread_mutex_t ctx_lock = PTHREAD_MUTEX_INITIALIZER;
RGPU_FORK_RESET(ctx_lock, &ctx_lock)
static struct { uint64_t ctx; int dev; } ctx_devices[256];
static int n_ctx_devices;

static void remember_device(uint64_t ctx, int dev)
{
    pthread_mutex_lock(&ctx_lock);
    if (n_ctx_devices < 256)
        ctx_devices[n_ctx_devices++] = (typeof(ctx_devices[0])){ctx, dev};
    pthread_mutex_unlock(&ctx_lock);
}

int rgpu_ctx_device(uint64_t ctx)
{
    int dev = -1;
    pthread_mutex_lock(&ctx_lock);
    for (int i = 0; i < n_ctx_devices; i++)
        if (ctx_devices[i].ctx == ctx)
            dev = ctx_devices[i].dev;
    pthread_mutex_unlock(&ctx_lock);
    return dev;
}

API CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    uint8_t a[RGPU_PRIMARY_CTX_RETAIN_REQ_SIZE], rep[RGPU_PRIMARY_CTX_RETAIN_REP_SIZE];
    struct rgpu_primary_ctx_retain_rep got;
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    rgpu_pack_primary_ctx_retain(a, &(struct rgpu_primary_ctx_retain_req){.device = dev});
    CUresult r = rgpu_call(RGPU_OP_PRIMARY_CTX_RETAIN, a, sizeof a, NULL, 0, rep, sizeof rep, NULL);
    if (r == CUDA_SUCCESS && rgpu_unpack_primary_ctx_retain(rep, sizeof rep, &got) == 0) {
        uint64_t h = got.ctx;
        *pctx = (CUcontext)(uintptr_t)h;
        remember_device(h, dev);
        pthread_mutex_lock(&dev_lock);
        if (devices && dev >= 0 && dev < device_count) {
            devices[dev].retained++;
            devices[dev].primary = h;
        }
        pthread_mutex_unlock(&dev_lock);
    }
    return r;
}

API CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
    uint8_t a[RGPU_PRIMARY_CTX_RELEASE_REQ_SIZE];
    rgpu_pack_primary_ctx_release(a, &(struct rgpu_primary_ctx_release_req){.device = dev});
    CUresult r = rgpu_call(RGPU_OP_PRIMARY_CTX_RELEASE, a, sizeof a, NULL, 0, NULL, 0, NULL);
    if (r == CUDA_SUCCESS) {
        uint64_t gone = 0;
        pthread_mutex_lock(&dev_lock);
        if (devices && dev >= 0 && dev < device_count && devices[dev].retained > 0 && --devices[dev].retained == 0)
            gone = devices[dev].primary;
        pthread_mutex_unlock(&dev_lock);
        if (gone) { /* the server destroyed the context with everything in it */
            rgpu_ranges_drop_ctx(gone);
            rgpu_forget_server_ctx(gone);
        }
    }
    return r;
}

API CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active)
{
    struct device *d;
    if (!flags || !active)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = device(dev, &d);
    if (r == CUDA_SUCCESS) {
        *flags = 0;
        *active = d->retained > 0;
    }
    return r;
}

API CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags)
{
    struct device *d;
    (void)flags; /* scheduling flags are the server's business; accepted so runtimes can start */
    return device(dev, &d);
}

API CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
    static int logged;
    (void)dev;
    return rgpu_unsupported(&logged, "cuDevicePrimaryCtxReset_v2");
}

static CUresult ctx_create(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    uint8_t a[RGPU_CTX_CREATE_REQ_SIZE], rep[RGPU_CTX_CREATE_REP_SIZE];
    struct rgpu_ctx_create_rep got;
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    rgpu_pack_ctx_create(a, &(struct rgpu_ctx_create_req){.flags = flags, .device = dev});
    CUresult r = rgpu_call(RGPU_OP_CTX_CREATE, a, sizeof a, NULL, 0, rep, sizeof rep, NULL);
    if (r == CUDA_SUCCESS && rgpu_unpack_ctx_create(rep, sizeof rep, &got) == 0) {
        uint64_t h = got.ctx;
        *pctx = (CUcontext)(uintptr_t)h;
        remember_device(h, dev);
        if (ctx_depth < CTX_STACK)
            ctx_stack[ctx_depth++] = rgpu_thread_ctx();
        rgpu_set_thread_ctx(h);
        rgpu_note_server_ctx(h); /* the server made it current already */
    }
    return r;
}

API CUresult cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *params, unsigned int flags, CUdevice dev)
{
    static int logged;
    if (params && (params->execAffinityParams || params->numExecAffinityParams || params->cigParams))
        return rgpu_unsupported(&logged, "cuCtxCreate_v4 with execution affinity or CIG parameters");
    return ctx_create(pctx, flags, dev);
}

API CUresult cuCtxCreate_v3(CUcontext *pctx, void *params, int n, unsigned int flags, CUdevice dev)
{
    static int logged;
    if (params && n > 0)
        return rgpu_unsupported(&logged, "cuCtxCreate_v3 with execution affinity");
    return ctx_create(pctx, flags, dev);
}

API CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev) { return ctx_create(pctx, flags, dev); }

API CUresult cuCtxDestroy_v2(CUcontext ctx)
{
    uint8_t a[RGPU_CTX_DESTROY_REQ_SIZE];
    uint64_t h = (uint64_t)(uintptr_t)ctx;
    rgpu_pack_ctx_destroy(a, &(struct rgpu_ctx_destroy_req){.ctx = h});
    CUresult r = rgpu_call(RGPU_OP_CTX_DESTROY, a, sizeof a, NULL, 0, NULL, 0, NULL);
    if (r == CUDA_SUCCESS) {
        rgpu_forget_server_ctx(h);
        rgpu_ranges_drop_ctx(h);
        if (rgpu_thread_ctx() == h)
            rgpu_set_thread_ctx(ctx_depth > 0 ? ctx_stack[--ctx_depth] : 0);
    }
    return r;
}

API CUresult cuCtxSetCurrent(CUcontext ctx)
{
    rgpu_set_thread_ctx((uint64_t)(uintptr_t)ctx);
    return rgpu_ready();
}

API CUresult cuCtxGetCurrent(CUcontext *pctx)
{
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    *pctx = (CUcontext)(uintptr_t)rgpu_thread_ctx();
    return rgpu_ready();
}

API CUresult cuCtxPushCurrent_v2(CUcontext ctx)
{
    if (ctx_depth >= CTX_STACK)
        return CUDA_ERROR_INVALID_VALUE;
    ctx_stack[ctx_depth++] = rgpu_thread_ctx();
    rgpu_set_thread_ctx((uint64_t)(uintptr_t)ctx);
    return rgpu_ready();
}

API CUresult cuCtxPopCurrent_v2(CUcontext *pctx)
{
    uint64_t cur = rgpu_thread_ctx();
    if (!cur)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (pctx)
        *pctx = (CUcontext)(uintptr_t)cur;
    rgpu_set_thread_ctx(ctx_depth > 0 ? ctx_stack[--ctx_depth] : 0);
    return CUDA_SUCCESS;
}

API CUresult cuCtxGetDevice(CUdevice *dev)
{
    if (!dev)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t cur = rgpu_thread_ctx();
    if (!cur)
        return CUDA_ERROR_INVALID_CONTEXT;
    int d = rgpu_ctx_device(cur);
    *dev = d < 0 ? 0 : d;
    return CUDA_SUCCESS;
}

/* CUDA 13's forms naming the context (NULL: the current one), which cuGetProcAddress gives callers built for 13. */
API CUresult cuCtxGetDevice_v2(CUdevice *dev, CUcontext ctx)
{
    if (!ctx)
        return cuCtxGetDevice(dev);
    if (!dev)
        return CUDA_ERROR_INVALID_VALUE;
    int d = rgpu_ctx_device((uint64_t)(uintptr_t)ctx);
    if (d < 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    *dev = d;
    return CUDA_SUCCESS;
}

API CUresult cuCtxSynchronize_v2(CUcontext ctx)
{
    if (!ctx)
        return cuCtxSynchronize();
    CUresult r = rgpu_ready(); /* (first: a push that a failed synchronize left behind would stay) */
    if (r == CUDA_SUCCESS)
        r = cuCtxPushCurrent_v2(ctx);
    if (r != CUDA_SUCCESS)
        return r;
    r = cuCtxSynchronize();
    cuCtxPopCurrent_v2(NULL);
    return r;
}

/* A stream's device is its context's, as this process numbers devices (several servers' devices make one list). */
API CUresult cuStreamGetDevice(CUstream s, CUdevice *dev)
{
    CUcontext ctx;
    if (!dev)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = cuStreamGetCtx(s, &ctx);
    if (r != CUDA_SUCCESS)
        return r;
    int d = rgpu_ctx_device((uint64_t)(uintptr_t)ctx);
    *dev = d < 0 ? 0 : d;
    return CUDA_SUCCESS;
}

API CUresult cuStreamGetDevice_ptsz(CUstream s, CUdevice *dev) { return cuStreamGetDevice(s, dev); }

/* rgpu makes no green contexts: a stream's context is a plain one. */
API CUresult cuStreamGetCtx_v2(CUstream s, CUcontext *ctx, CUgreenCtx *green)
{
    if (!ctx || !green)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = cuStreamGetCtx(s, ctx);
    if (r == CUDA_SUCCESS)
        *green = NULL;
    return r;
}

API CUresult cuStreamGetCtx_v2_ptsz(CUstream s, CUcontext *ctx, CUgreenCtx *green)
{
    return cuStreamGetCtx_v2(s, ctx, green);
}

/* A context's handle names it alone for the life of the process (the server never reuses one). */
API CUresult cuCtxGetId(CUcontext ctx, unsigned long long *id)
{
    uint64_t h = ctx ? (uint64_t)(uintptr_t)ctx : rgpu_thread_ctx();
    if (!id)
        return CUDA_ERROR_INVALID_VALUE;
    if (!h)
        return CUDA_ERROR_INVALID_CONTEXT;
    *id = h;
    return rgpu_ready();
}

API CUresult cuCtxGetApiVersion(CUcontext ctx, unsigned int *version)
{
    (void)ctx;
    if (!version)
        return CUDA_ERROR_INVALID_VALUE;
    *version = 3020; /* the context API version every current context reports */
    return rgpu_ready();
}

/* -- modules ------------------------------------------------------------------------------------------------ */
#define FATBIN_MAGIC 0xBA55ED50u
#define FATBIN_WRAPPER_MAGIC 0x466243B1u

enum image_kind { IMAGE_PTX, IMAGE_FATBIN, IMAGE_ELF };

/* What an image is, read byte by byte, each test stopping at a difference: PTX text may be shorter than a magic
 * number, and neither magic holds a NUL. */
static enum image_kind image_kind(const void *image)
{
    static const uint8_t fatbin[4] = {FATBIN_MAGIC & 0xFF, FATBIN_MAGIC >> 8 & 0xFF, FATBIN_MAGIC >> 16 & 0xFF,
                                      FATBIN_MAGIC >> 24}, elf[4] = {0x7f, 'E', 'L', 'F'};
    const uint8_t *p = image;
    int is_fatbin = 1, is_elf = 1;
    for (int i = 0; i < 4 && (is_fatbin || is_elf); i++)
        is_fatbin &= p[i] == fatbin[i], is_elf &= p[i] == elf[i];
    return is_fatbin ? IMAGE_FATBIN : is_elf ? IMAGE_ELF : IMAGE_PTX;
}

int rgpu_image_is_binary(const void *image) { return image_kind(image) != IMAGE_PTX; }

/* How many bytes a module image spans: cuModuleLoadData gets only a pointer. */
static size_t image_size(const void *image)
{
    const uint8_t *p = image;
    enum image_kind kind = image_kind(image);
    if (kind == IMAGE_FATBIN)
        return rgpu_get_u16(p + 6) + (size_t)rgpu_get_u64(p + 8);
    if (kind == IMAGE_ELF && p[4] == 2 /* 64-bit */) {
        uint64_t shoff = rgpu_get_u64(p + 0x28), phoff = rgpu_get_u64(p + 0x20);
        uint16_t shentsize = rgpu_get_u16(p + 0x3A), shnum = rgpu_get_u16(p + 0x3C);
        uint16_t phentsize = rgpu_get_u16(p + 0x36), phnum = rgpu_get_u16(p + 0x38);
        size_t end = shoff + (size_t)shentsize * shnum;
        if (phoff + (size_t)phentsize * phnum > end)
            end = phoff + (size_t)phentsize * phnum;
        for (uint16_t i = 0; i < shnum; i++) {
            const uint8_t *sh = p + shoff + (size_t)i * shentsize;
            uint32_t type = rgpu_get_u32(sh + 4);
            uint64_t off = rgpu_get_u64(sh + 0x18), size = rgpu_get_u64(sh + 0x20);
            if (type != 8 /* SHT_NOBITS */ && off + size > end)
                end = off + size;
        }
        return end;
    }
    return strlen((const char *)image) + 1; /* PTX text */
}

__attribute__((visibility("default"))) size_t rgpu_test_image_size(const void *image) { return image_size(image); }

#define CACHED_IMAGE_MIN (16u << 10) /* smaller images cost less to send than a lookup round trip */

/* Large images go by content: the server loads one it has cached (from any session) without the upload. */
static CUresult load_image(CUmodule *mod, const void *image, size_t size)
{
    /* Both operations answer with the module handle alone. */
    _Static_assert(RGPU_MODULE_LOAD_CACHED_REP_SIZE == RGPU_MODULE_LOAD_DATA_REP_SIZE, "one reply for two operations");
    uint8_t rep[RGPU_MODULE_LOAD_DATA_REP_SIZE];
    struct rgpu_module_load_data_rep got;
    if (!mod || !image)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = CUDA_ERROR_NOT_FOUND;
    if (size >= CACHED_IMAGE_MIN && rgpu_server_minor() >= 1) {
        struct rgpu_module_load_cached_req req;
        uint8_t a[RGPU_MODULE_LOAD_CACHED_REQ_SIZE];
        rgpu_sha256(image, size, req.sha256);
        rgpu_pack_module_load_cached(a, &req);
        r = rgpu_call(RGPU_OP_MODULE_LOAD_CACHED, a, sizeof a, NULL, 0, rep, sizeof rep, NULL);
        if (r == CUDA_SUCCESS)
            rgpu_log(RGPU_LOG_DEBUG, "module image of %zu bytes loaded from the server's cache", size);
    }
    if (r == CUDA_ERROR_NOT_FOUND)
        r = rgpu_call(RGPU_OP_MODULE_LOAD_DATA, NULL, 0, image, size, rep, sizeof rep, NULL);
    if (r == CUDA_SUCCESS && rgpu_unpack_module_load_data(rep, sizeof rep, &got) == 0)
        *mod = (CUmodule)(uintptr_t)got.module;
    return r;
}

CUresult rgpu_module_load_image(CUmodule *mod, const void *image, size_t size) { return load_image(mod, image, size); }

API CUresult cuModuleLoadData(CUmodule *mod, const void *image)
{
    return image ? load_image(mod, image, image_size(image)) : CUDA_ERROR_INVALID_VALUE;
}

API CUresult cuModuleLoadFatBinary(CUmodule *mod, const void *fat)
{
    if (!fat)
        return CUDA_ERROR_INVALID_VALUE;
    if (rgpu_get_u32(fat) == FATBIN_WRAPPER_MAGIC) /* __fatBinC_Wrapper_t: { magic, version, data, ... } */
        fat = *(const void *const *)((const uint8_t *)fat + 8);
    return cuModuleLoadData(mod, fat);
}

CUresult rgpu_read_image_file(const char *path, uint8_t **data, size_t *len)
{
    *data = NULL;
    if (!path)
        return CUDA_ERROR_INVALID_VALUE;
    FILE *f = fopen(path, "rb");
    if (!f)
        return CUDA_ERROR_FILE_NOT_FOUND;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = n > 0 ? malloc((size_t)n + 1) : NULL;
    CUresult r = CUDA_ERROR_INVALID_IMAGE;
    if (buf && fread(buf, 1, (size_t)n, f) == (size_t)n) {
        buf[n] = 0; /* PTX files need not end in NUL */
        *data = buf;
        *len = (size_t)n;
        r = CUDA_SUCCESS;
    } else {
        free(buf);
    }
    fclose(f);
    return r;
}

API CUresult cuModuleLoad(CUmodule *mod, const char *path)
{
    uint8_t *buf;
    size_t n;
    CUresult r = rgpu_read_image_file(path, &buf, &n);
    if (r == CUDA_SUCCESS)
        r = load_image(mod, buf, n + (memchr(buf, 0, n) ? 0 : 1));
    free(buf);
    return r;
}

API CUresult cuModuleGetLoadingMode(CUmoduleLoadingMode *mode)
{
    if (!mode)
        return CUDA_ERROR_INVALID_VALUE;
    *mode = CU_MODULE_EAGER_LOADING; /* what the server's driver does is its own business */
    return CUDA_SUCCESS;
}

API CUresult cuModuleGetGlobal_v2(CUdeviceptr *dptr, size_t *bytes, CUmodule mod, const char *name)
{
    uint8_t a[RGPU_MODULE_GET_GLOBAL_REQ_SIZE], rep[RGPU_MODULE_GET_GLOBAL_REP_SIZE];
    struct rgpu_module_get_global_rep got;
    if (!name)
        return CUDA_ERROR_INVALID_VALUE;
    rgpu_pack_module_get_global(a, &(struct rgpu_module_get_global_req){.module = (uint64_t)(uintptr_t)mod});
    CUresult r = rgpu_call(RGPU_OP_MODULE_GET_GLOBAL, a, sizeof a, name, strlen(name), rep, sizeof rep, NULL);
    if (r == CUDA_SUCCESS && rgpu_unpack_module_get_global(rep, sizeof rep, &got) == 0) {
        rgpu_ranges_note_device(got.dptr, got.size, rgpu_thread_ctx());
        if (dptr)
            *dptr = (CUdeviceptr)got.dptr;
        if (bytes)
            *bytes = (size_t)got.size;
    }
    return r;
}

/* -- errors and entry points -------------------------------------------------------------------------------- */
API CUresult cuGetErrorName(CUresult error, const char **str)
{
    if (!str)
        return CUDA_ERROR_INVALID_VALUE;
    for (const struct rgpu_error_name *e = rgpu_error_names; e->name; e++)
        if (e->code == (int)error) {
            *str = e->name;
            return CUDA_SUCCESS;
        }
    *str = NULL;
    return CUDA_ERROR_INVALID_VALUE;
}

API CUresult cuGetErrorString(CUresult error, const char **str)
{
    return cuGetErrorName(error, str); /* the name is the description rgpu has */
}

/* The entry point of `symbol` a caller built for CUDA `version` expects: the newest that appeared at or before it
 * (a CUDA 12 program asking for cuCtxSynchronize gets the one without a context parameter, a CUDA 13 one _v2). */
API CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, cuuint64_t flags,
                                 CUdriverProcAddressQueryResult *status)
{
    if (!symbol || !pfn)
        return CUDA_ERROR_INVALID_VALUE;
    const struct rgpu_proc *found = NULL;
    int named = 0;
    for (const struct rgpu_proc *p = rgpu_proc_table; p->name; p++)
        if (!strcmp(p->name, symbol)) {
            named = 1;
            if (p->version <= version)
                found = p; /* (the table lists a name's entry points oldest first) */
        }
    if (found) {
        *pfn = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) ? found->fn_per_thread : found->fn;
        if (status)
            *status = CU_GET_PROC_ADDRESS_SUCCESS;
        return CUDA_SUCCESS;
    }
    *pfn = NULL;
    if (status)
        *status = named ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    rgpu_log(RGPU_LOG_DEBUG, "cuGetProcAddress: no entry point named %s for CUDA %d", symbol, version);
    return CUDA_ERROR_NOT_FOUND;
}

#undef cuGetProcAddress /* the CUDA 11 entry point, for binaries built against older headers */
API CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, cuuint64_t flags)
{
    return cuGetProcAddress_v2(symbol, pfn, version, flags, NULL);
}

/* NVIDIA's runtime linked into a program (nvcc's default, -cudart static) or into a library (CuPy's wheels, NVIDIA's
 * libraries without a stand-in) reaches the driver through these undocumented tables, and establishes the driver's
 * validity through them: rgpu has no way to answer as NVIDIA's driver does. */
API CUresult cuGetExportTable(const void **table, const CUuuid *id)
{
    static int logged;
    (void)id;
    if (table)
        *table = NULL;
    if (!__atomic_exchange_n(&logged, 1, __ATOMIC_RELAXED))
        rgpu_log(RGPU_LOG_WARN, "cuGetExportTable (the driver's private interfaces) is not supported by rgpu: a copy "
                                "of NVIDIA's CUDA runtime inside the program or one of its libraries asked for them "
                                "(nvcc's default build, -cudart static), and its CUDA calls fail with "
                                "cudaErrorNotSupported; build with `nvcc -cudart shared` so that rgpu's libcudart "
                                "serves the program");
    return CUDA_ERROR_NOT_SUPPORTED;
}
