/* nvcc's registration ABI and everything keyed by a host-side stub: kernels, device variables, launches.
 *
 * Registration (static constructors) only records pointers. A fatbin becomes a module on first use of one of
 * its kernels or variables, per device, so a program (or a library such as PyTorch, with thousands of
 * kernels) pays for the images it uses, and the driver shim sends each image once per content. */
#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rgpu_consts.h"
#include "rt.h"
#include "fork_locks.h"

#define FATBIN_WRAPPER_MAGIC 0x466243B1u
#define FATBIN_MAGIC 0xBA55ED50u

struct fatbin_wrapper { /* __fatBinC_Wrapper_t */
    int magic;
    int version;
    const unsigned long long *data;
    void *filename_or_fatbins;
};

struct rt_var;

struct rt_fatbin {
    const void *image;
    struct rt_var *managed;         /* its __managed__ variables */
    int managed_dev;                /* the device whose copies of them the program sees (-1: none yet) */
    struct rt_fatbin *next_managed; /* images with __managed__ variables */
    CUmodule module[RT_MAX_DEVICES];
    uint32_t module_gen[RT_MAX_DEVICES];
    CUresult load_error[RT_MAX_DEVICES];
};

#define MAX_PARAMS 1024

struct rt_kernel {
    const void *host;
    struct rt_fatbin *fatbin;
    char *name;
    int own_layout;             /* 1: the driver cannot report the layout; launches pack it from the image */
    int n_params;
    size_t param_bytes;
    uint32_t (*layout)[2];
    CUfunction fn[RT_MAX_DEVICES];
    uint32_t fn_gen[RT_MAX_DEVICES];
};

struct rt_var {
    const void *host;
    struct rt_fatbin *fatbin;
    char *name;
    size_t size;
    CUdeviceptr ptr[RT_MAX_DEVICES];
    uint32_t ptr_gen[RT_MAX_DEVICES];
    void **managed_host;         /* a __managed__ variable: where the program's code looks for its address */
    struct rt_var *next_managed; /* of the same image */
};

/* -- pointer-keyed open-addressing maps -------------------------------------------------------------------- */
struct map {
    const void **keys;
    void **values;
    size_t cap, n;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;      /* the maps */
RGPU_FORK_RESET(lock, &lock)
static pthread_mutex_t load_lock = PTHREAD_MUTEX_INITIALIZER; /* module loads: never blocks a lookup */
RGPU_FORK_RESET(load_lock, &load_lock)
static struct map kernels, vars;
static struct rt_fatbin *managed_images; /* (under load_lock) */

static size_t slot(const struct map *m, const void *key)
{
    size_t h = ((uintptr_t)key >> 4) * 0x9E3779B97F4A7C15ull, i = h & (m->cap - 1);
    while (m->keys[i] && m->keys[i] != key)
        i = (i + 1) & (m->cap - 1);
    return i;
}

static int map_put(struct map *m, const void *key, void *value)
{
    if (2 * (m->n + 1) > m->cap) {
        struct map bigger = {NULL, NULL, m->cap ? 2 * m->cap : 256, 0};
        bigger.keys = calloc(bigger.cap, sizeof *bigger.keys);
        bigger.values = calloc(bigger.cap, sizeof *bigger.values);
        if (!bigger.keys || !bigger.values) {
            free(bigger.keys), free(bigger.values);
            return -1;
        }
        for (size_t i = 0; i < m->cap; i++)
            if (m->keys[i]) {
                size_t j = slot(&bigger, m->keys[i]);
                bigger.keys[j] = m->keys[i], bigger.values[j] = m->values[i], bigger.n++;
            }
        free(m->keys), free(m->values);
        *m = bigger;
    }
    size_t i = slot(m, key);
    if (!m->keys[i])
        m->n++;
    m->keys[i] = key, m->values[i] = value;
    return 0;
}

static void *map_get(struct map *m, const void *key)
{
    pthread_mutex_lock(&lock);
    void *v = NULL;
    if (m->cap) {
        size_t i = slot(m, key);
        v = m->keys[i] ? m->values[i] : NULL;
    }
    pthread_mutex_unlock(&lock);
    return v;
}

/* -- registration ------------------------------------------------------------------------------------------- */
RT_API void **__cudaRegisterFatBinary(void *wrapper)
{
    const struct fatbin_wrapper *w = wrapper;
    struct rt_fatbin *fb = calloc(1, sizeof *fb);
    if (!fb)
        return NULL;
    fb->managed_dev = -1;
    if (w && (unsigned)w->magic == FATBIN_WRAPPER_MAGIC && w->data)
        fb->image = w->data;
    else if (w && *(const uint32_t *)w == FATBIN_MAGIC)
        fb->image = w;
    else
        rt_log("__cudaRegisterFatBinary: unrecognised image (magic 0x%x); its kernels will fail to launch",
               w ? (unsigned)w->magic : 0);
    return (void **)fb;
}

RT_API void __cudaRegisterFatBinaryEnd(void **handle) { (void)handle; }

/* Modules go with the session when the program exits; nothing to send at exit (the connection may be closing). */
RT_API void __cudaUnregisterFatBinary(void **handle) { (void)handle; }

static CUresult module_of(struct rt_fatbin *fb, int dev, CUmodule *out);

/* Called by the program's code before it first touches a __managed__ variable of the image: the module loaded,
 * and the variables' addresses where the code looks for them. */
RT_API char __cudaInitModule(void **handle)
{
    int dev;
    CUmodule mod;
    if (!handle || rt_context(&dev) != cudaSuccess)
        return 0;
    return module_of((struct rt_fatbin *)handle, dev, &mod) == CUDA_SUCCESS;
}

RT_API void __cudaRegisterFunction(void **handle, const char *host, char *device_fun, const char *device_name,
                                   int thread_limit, uint3 *tid, uint3 *bid, dim3 *bdim, dim3 *gdim, int *wsize)
{
    (void)device_fun, (void)thread_limit, (void)tid, (void)bid, (void)bdim, (void)gdim, (void)wsize;
    struct rt_kernel *k = calloc(1, sizeof *k);
    if (!k || !(k->name = strdup(device_name))) {
        free(k);
        return;
    }
    k->host = host;
    k->fatbin = (struct rt_fatbin *)handle;
    pthread_mutex_lock(&lock);
    /* The record's own address works as a key too: it is the cudaKernel_t that __cudaGetKernel hands out. */
    if (map_put(&kernels, host, k) || map_put(&kernels, k, k))
        rt_log("out of memory registering kernel %s", device_name);
    pthread_mutex_unlock(&lock);
}

static struct rt_var *register_var(void **handle, const void *host, const char *name, size_t size)
{
    struct rt_var *v = calloc(1, sizeof *v);
    if (!v || !(v->name = strdup(name))) {
        free(v);
        rt_log("out of memory registering variable %s", name);
        return NULL;
    }
    v->host = host;
    v->fatbin = (struct rt_fatbin *)handle;
    v->size = size;
    pthread_mutex_lock(&lock);
    int failed = map_put(&vars, host, v);
    pthread_mutex_unlock(&lock);
    if (failed)
        rt_log("out of memory registering variable %s", name);
    return v;
}

RT_API void __cudaRegisterVar(void **handle, char *host, char *device_address, const char *device_name, int ext,
                              size_t size, int constant, int global)
{
    (void)device_address, (void)ext, (void)constant, (void)global;
    register_var(handle, host, device_name, size);
}

/* `host` is a pointer the program's code reads the variable through; it is set as the image loads. */
RT_API void __cudaRegisterManagedVar(void **handle, void **host, char *device_address, const char *device_name,
                                     int ext, size_t size, int constant, int global)
{
    (void)device_address, (void)ext, (void)constant, (void)global;
    struct rt_fatbin *fb = (struct rt_fatbin *)handle;
    struct rt_var *v = fb && host ? register_var(handle, host, device_name, size) : NULL;
    if (!v)
        return;
    v->managed_host = host;
    pthread_mutex_lock(&load_lock);
    if (!fb->managed)
        fb->next_managed = managed_images, managed_images = fb;
    v->next_managed = fb->managed, fb->managed = v;
    pthread_mutex_unlock(&load_lock);
}

/* cudaDeviceReset and __managed__ variables: NVIDIA's runtime keeps their values across it (the H100 showed so),
 * and nvcc's host code asks for their addresses once. So their bytes are read before the reset (rt_managed_save),
 * and after it the images load again at once, in the device's new primary context, and get them back
 * (rt_managed_reload). */
struct rt_managed_saved {
    struct rt_var *var;
    void *bytes;
    struct rt_managed_saved *next;
};

static struct rt_fatbin *images_with_managed(void) /* (the list only grows, at its head) */
{
    pthread_mutex_lock(&load_lock);
    struct rt_fatbin *first = managed_images;
    pthread_mutex_unlock(&load_lock);
    return first;
}

struct rt_managed_saved *rt_managed_save(int dev)
{
    struct rt_managed_saved *saved = NULL;
    int current = 0; /* (the context going made current once there is a variable to read) */
    for (struct rt_fatbin *fb = images_with_managed(); fb; fb = fb->next_managed)
        for (struct rt_var *v = fb->managed_dev == dev ? fb->managed : NULL; v; v = v->next_managed) {
            if (!current && rt_context(NULL) != cudaSuccess)
                break;
            current = 1;
            struct rt_managed_saved *s = calloc(1, sizeof *s);
            void *at = *v->managed_host;
            if (s && at && (s->bytes = malloc(v->size)) &&
                cuMemcpyDtoH_v2(s->bytes, (CUdeviceptr)(uintptr_t)at, v->size) == CUDA_SUCCESS) {
                s->var = v, s->next = saved, saved = s;
                continue;
            }
            rt_log("__managed__ variable %s: its value could not be kept across the reset", v->name);
            if (s)
                free(s->bytes);
            free(s);
        }
    return saved;
}

void rt_managed_reload(int dev, struct rt_managed_saved *saved)
{
    CUmodule mod;
    int made = 0; /* (made current once there is an image to load) */
    for (struct rt_fatbin *fb = images_with_managed(); fb; fb = fb->next_managed)
        if (fb->managed_dev == dev && (made || (made = rt_context(NULL) == cudaSuccess)) &&
            module_of(fb, dev, &mod) != CUDA_SUCCESS)
            fb->managed_dev = -2; /* (not reloaded: its variables' old addresses are no one's now) */
    while (saved) {
        struct rt_managed_saved *s = saved;
        saved = s->next;
        void *at = *s->var->managed_host;
        if (!made || !at || s->var->fatbin->managed_dev != dev ||
            cuMemcpyHtoD_v2((CUdeviceptr)(uintptr_t)at, s->bytes, s->var->size) != CUDA_SUCCESS)
            rt_log("__managed__ variable %s: its value could not be kept across the reset", s->var->name);
        free(s->bytes);
        free(s);
    }
}

/* The driver stand-in's hand-over of __managed__ variables (managed.c); NVIDIA's driver has none, and needs none:
 * its module's variables are managed memory in this process already. */
static CUresult (*managed_adopt)(uint64_t, const CUdeviceptr *, const size_t *, size_t);
static void find_managed_hooks(void)
{
    void *driver = dlopen("libcuda.so.1", RTLD_NOLOAD | RTLD_LAZY);
    if (driver) /* (the handle is kept: the driver stays loaded as the runtime's own dependency anyway) */
        managed_adopt = (CUresult(*)(uint64_t, const CUdeviceptr *, const size_t *, size_t))dlsym(
            driver, "rgpu_ext_managed_adopt");
}

/* The image's __managed__ variables, in module mod just loaded on dev, made the program's (under load_lock). */
static CUresult adopt_managed(struct rt_fatbin *fb, int dev, CUmodule mod)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, find_managed_hooks);
    size_t n = 0, i = 0;
    for (struct rt_var *v = fb->managed; v; v = v->next_managed)
        n++;
    CUdeviceptr *ptrs = calloc(n, sizeof *ptrs);
    size_t *sizes = calloc(n, sizeof *sizes);
    CUresult r = ptrs && sizes ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
    for (struct rt_var *v = fb->managed; v && r == CUDA_SUCCESS; v = v->next_managed, i++) {
        if ((r = cuModuleGetGlobal(&ptrs[i], &sizes[i], mod, v->name)) != CUDA_SUCCESS)
            rt_log("__managed__ variable %s: not found in its module", v->name);
        else if (sizes[i] != v->size) /* (the program's code reads v->size bytes there, whatever a server says) */
            rt_log("__managed__ variable %s: the driver says %zu bytes, the program %zu", v->name, sizes[i],
                   v->size), r = CUDA_ERROR_INVALID_IMAGE;
    }
    if (r == CUDA_SUCCESS && managed_adopt && (r = managed_adopt((uint64_t)(uintptr_t)fb, ptrs, sizes, n)))
        rt_log("the __managed__ variables of an image (%s first) cannot be kept in this process; kernels of the "
               "image fail to launch", fb->managed->name);
    i = 0;
    for (struct rt_var *v = fb->managed; v && r == CUDA_SUCCESS; v = v->next_managed, i++) {
        *v->managed_host = (void *)(uintptr_t)ptrs[i];
        pthread_mutex_lock(&lock); /* (the program's code names the variable by that address: cudaMemcpyToSymbol) */
        map_put(&vars, (const void *)(uintptr_t)ptrs[i], v);
        pthread_mutex_unlock(&lock);
    }
    if (r == CUDA_SUCCESS)
        fb->managed_dev = dev;
    /* (not kept: nvcc's host code reads the variables through their pointers whatever __cudaInitModule said, so
     * a pointer never set names zeroed bytes of the program's own, and the image's kernels fail to launch) */
    for (struct rt_var *v = fb->managed; v && r != CUDA_SUCCESS; v = v->next_managed)
        if (!*v->managed_host)
            *v->managed_host = calloc(1, v->size ? v->size : 1);
    free(ptrs);
    free(sizes);
    return r;
}

/* -- lazy modules ------------------------------------------------------------------------------------------- */
static CUresult module_of(struct rt_fatbin *fb, int dev, CUmodule *out)
{
    uint32_t gen = rt_generation(dev);
    if (!fb || !fb->image)
        return CUDA_ERROR_INVALID_IMAGE;
    pthread_mutex_lock(&load_lock);
    CUresult r = fb->load_error[dev]; /* (a module whose managed variables could not be kept keeps failing) */
    if (!fb->module[dev] || fb->module_gen[dev] != gen) {
        fb->module[dev] = NULL;
        r = cuModuleLoadData(&fb->module[dev], fb->image);
        fb->module_gen[dev] = gen;
        if (r != CUDA_SUCCESS) {
            fb->module[dev] = NULL;
            const char *name = NULL;
            cuGetErrorName(r, &name);
            rt_log("loading a fatbin on device %d failed: %s", dev, name ? name : "?");
        } else if (fb->managed && (fb->managed_dev < 0 || fb->managed_dev == dev)) {
            r = adopt_managed(fb, dev, fb->module[dev]);
        } else if (fb->managed) {
            static int logged;
            if (!logged++)
                rt_log("__managed__ variables (%s first) live on device %d: kernels on device %d see copies of "
                       "their own", fb->managed->name, fb->managed_dev, dev);
        }
        fb->load_error[dev] = r;
    }
    *out = fb->module[dev];
    pthread_mutex_unlock(&load_lock);
    return r;
}

/* Whether the driver knows the kernel's parameter layout; if not, read it from the image once. */
static cudaError_t check_layout(struct rt_kernel *k, CUfunction f)
{
    static CUresult (*param_info)(CUfunction, size_t, size_t *, size_t *);
    static int looked_up;
    if (k->layout || __atomic_load_n(&k->own_layout, __ATOMIC_ACQUIRE) == -1)
        return cudaSuccess;
    if (!__atomic_exchange_n(&looked_up, 1, __ATOMIC_ACQ_REL))
        cuGetProcAddress("cuFuncGetParamInfo", (void **)&param_info, 12040, CU_GET_PROC_ADDRESS_DEFAULT, NULL);
    size_t offset, size;
    CUresult r = param_info ? param_info(f, 0, &offset, &size) : CUDA_ERROR_NOT_SUPPORTED;
    if (r == CUDA_SUCCESS || r == CUDA_ERROR_INVALID_VALUE) { /* known (INVALID_VALUE: no parameters) */
        __atomic_store_n(&k->own_layout, -1, __ATOMIC_RELEASE);
        return cudaSuccess;
    }
    uint32_t (*layout)[2] = calloc(MAX_PARAMS, sizeof *layout);
    int n = layout ? rt_image_param_layout(k->fatbin ? k->fatbin->image : NULL, k->name, layout, MAX_PARAMS) : -1;
    if (n < 0) {
        free(layout);
        rt_log("kernel %s: the server cannot report its parameter layout and its image has none readable", k->name);
        return cudaErrorNotSupported;
    }
    size_t bytes = 0;
    for (int i = 0; i < n; i++)
        if ((uint64_t)layout[i][0] + layout[i][1] > bytes) /* sizes are whole words in KPARAM_INFO_V2 */
            bytes = (uint64_t)layout[i][0] + layout[i][1];
    rt_info("kernel %s: %d parameters laid out from its image (the server cannot report layouts)", k->name, n);
    pthread_mutex_lock(&load_lock);
    if (!k->layout) {
        k->n_params = n, k->param_bytes = bytes, k->own_layout = 1;
        __atomic_store_n(&k->layout, layout, __ATOMIC_RELEASE);
        layout = NULL;
    }
    pthread_mutex_unlock(&load_lock);
    free(layout);
    return cudaSuccess;
}

struct rt_kernel *rt_kernel_of(const void *func) { return func ? map_get(&kernels, func) : NULL; }

const void *rt_host_of_function(CUfunction f)
{
    const void *host = NULL;
    pthread_mutex_lock(&lock);
    for (size_t i = 0; f && i < kernels.cap && !host; i++) {
        struct rt_kernel *k = kernels.keys[i] ? kernels.values[i] : NULL;
        for (int d = 0; k && d < RT_MAX_DEVICES && !host; d++)
            if (__atomic_load_n(&k->fn[d], __ATOMIC_ACQUIRE) == f)
                host = k->host;
    }
    pthread_mutex_unlock(&lock);
    return host;
}

cudaError_t rt_kernel_function(struct rt_kernel *k, int dev, CUfunction *out)
{
    uint32_t gen = rt_generation(dev);
    CUfunction f = __atomic_load_n(&k->fn[dev], __ATOMIC_ACQUIRE);
    if (f && __atomic_load_n(&k->fn_gen[dev], __ATOMIC_ACQUIRE) == gen) {
        *out = f;
        return cudaSuccess;
    }
    CUmodule mod;
    CUresult r = module_of(k->fatbin, dev, &mod);
    if (r == CUDA_ERROR_NOT_FOUND || r == CUDA_ERROR_INVALID_IMAGE)
        return cudaErrorInvalidDeviceFunction;
    if (r != CUDA_SUCCESS)
        return rt_map(r);
    r = cuModuleGetFunction(&f, mod, k->name);
    if (r != CUDA_SUCCESS)
        return r == CUDA_ERROR_NOT_FOUND ? cudaErrorInvalidDeviceFunction : rt_map(r);
    cudaError_t e = check_layout(k, f);
    if (e != cudaSuccess)
        return e;
    __atomic_store_n(&k->fn_gen[dev], gen, __ATOMIC_RELEASE);
    __atomic_store_n(&k->fn[dev], f, __ATOMIC_RELEASE);
    *out = f;
    return cudaSuccess;
}

static cudaError_t function_of(const void *func, CUfunction *out)
{
    int dev;
    struct rt_kernel *k = rt_kernel_of(func);
    if (!k)
        return cudaErrorInvalidDeviceFunction;
    cudaError_t e = rt_context(&dev);
    return e == cudaSuccess ? rt_kernel_function(k, dev, out) : e;
}

/* -- launches ----------------------------------------------------------------------------------------------- */
#define CONFIG_DEPTH 16
static __thread struct rt_launch_config configs[CONFIG_DEPTH];
static __thread int n_configs;

RT_API unsigned __cudaPushCallConfiguration(dim3 grid, dim3 block, size_t shmem, struct CUstream_st *stream)
{
    if (n_configs >= CONFIG_DEPTH)
        return 1;
    configs[n_configs++] = (struct rt_launch_config){grid, block, shmem, (cudaStream_t)stream};
    return 0;
}

RT_API cudaError_t __cudaPopCallConfiguration(dim3 *grid, dim3 *block, size_t *shmem, void *stream)
{
    if (n_configs <= 0)
        return cudaErrorMissingConfiguration;
    struct rt_launch_config *c = &configs[--n_configs];
    *grid = c->grid, *block = c->block, *shmem = c->shmem;
    *(cudaStream_t *)stream = c->stream;
    return cudaSuccess;
}

/* Launch attributes go to the driver as they are: the runtime's and the driver's attribute records are the
 * same bytes with the same ids, so the driver (NVIDIA's, or rgpu's shim, which refuses what it cannot forward)
 * is the one place that decides what an attribute means. */
_Static_assert(sizeof(cudaLaunchAttribute) == sizeof(CUlaunchAttribute), "launch attribute records differ");
_Static_assert(offsetof(cudaLaunchAttribute, val) == offsetof(CUlaunchAttribute, value), "attribute value offset");
_Static_assert((int)cudaLaunchAttributeIgnore == (int)CU_LAUNCH_ATTRIBUTE_IGNORE &&
                   (int)cudaLaunchAttributeAccessPolicyWindow == (int)CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW &&
                   (int)cudaLaunchAttributeCooperative == (int)CU_LAUNCH_ATTRIBUTE_COOPERATIVE &&
                   (int)cudaLaunchAttributeClusterDimension == (int)CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION &&
                   (int)cudaLaunchAttributePriority == (int)CU_LAUNCH_ATTRIBUTE_PRIORITY,
               "launch attribute ids differ");

static cudaError_t launch(const void *func, dim3 g, dim3 b, void **args, size_t shmem, cudaStream_t s,
                          cudaLaunchAttribute *attrs, unsigned n_attrs)
{
    int dev;
    CUfunction f;
    struct rt_kernel *k = rt_kernel_of(func);
    if (!k)
        return rt_record(cudaErrorInvalidDeviceFunction);
    cudaError_t e = rt_context(&dev);
    if (e == cudaSuccess)
        e = rt_kernel_function(k, dev, &f);
    if (e != cudaSuccess)
        return rt_record(e);
    /* Launches are deferred, so a shape the device cannot run is refused here, where CUDA reports it. */
    const struct rt_device_limits *lim = rt_device_limits(dev);
    if (!g.x || !g.y || !g.z || !b.x || !b.y || !b.z || (uint64_t)b.x * b.y * b.z > lim->threads ||
        b.x > lim->block[0] || b.y > lim->block[1] || b.z > lim->block[2] || g.x > lim->grid[0] ||
        g.y > lim->grid[1] || g.z > lim->grid[2])
        return rt_record(cudaErrorInvalidConfiguration);
    uint8_t small[1024], *buf = small;
    size_t size = 0;
    int packed = __atomic_load_n(&k->own_layout, __ATOMIC_ACQUIRE) == 1;
    if (packed) { /* the layout came from the image: pack the parameter buffer here and hand it over whole */
        size = k->param_bytes;
        if (size > RGPU_MAX_PARAM_BYTES) {
            rt_log("kernel %s: %zu bytes of parameters exceed the driver's limit of %d (cudaErrorInvalidValue)",
                   k->name, size, RGPU_MAX_PARAM_BYTES);
            return rt_record(cudaErrorInvalidValue);
        }
        if (k->n_params && !args)
            return rt_record(cudaErrorInvalidValue);
        if (size > sizeof small && !(buf = malloc(size)))
            return rt_record(cudaErrorMemoryAllocation);
        memset(buf, 0, size);
        for (int i = 0; i < k->n_params; i++)
            memcpy(buf + k->layout[i][0], args[i], k->layout[i][1]);
    }
    void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, buf, CU_LAUNCH_PARAM_BUFFER_SIZE, &size, CU_LAUNCH_PARAM_END};
    CUresult r;
    if (n_attrs) {
        CUlaunchConfig c = {g.x, g.y, g.z, b.x, b.y, b.z, (unsigned)shmem, (CUstream)s, (CUlaunchAttribute *)attrs,
                            n_attrs};
        r = cuLaunchKernelEx(&c, f, packed ? NULL : args, packed ? extra : NULL);
    } else {
        r = cuLaunchKernel(f, g.x, g.y, g.z, b.x, b.y, b.z, (unsigned)shmem, (CUstream)s, packed ? NULL : args,
                           packed ? extra : NULL);
    }
    if (buf != small)
        free(buf);
    if (r == CUDA_ERROR_INVALID_VALUE)
        return rt_record(cudaErrorInvalidConfiguration);
    return rt_fail(r);
}

RT_API cudaError_t cudaLaunchKernel(const void *func, dim3 g, dim3 b, void **args, size_t shmem, cudaStream_t s)
{
    return launch(func, g, b, args, shmem, s, NULL, 0);
}

RT_API cudaError_t cudaLaunchKernel_ptsz(const void *func, dim3 g, dim3 b, void **args, size_t shmem, cudaStream_t s)
{
    return launch(func, g, b, args, shmem, s, NULL, 0);
}

/* CUDA 13's launch stubs: __cudaGetKernel runs once per stub (a static initialiser), then every launch passes
 * the handle. The handle is the kernel's record, and stays valid across cudaDeviceReset. */
RT_API cudaError_t __cudaGetKernel(cudaKernel_t *out, const void *func)
{
    struct rt_kernel *k = rt_kernel_of(func);
    if (!out)
        return cudaErrorInvalidValue;
    *out = (cudaKernel_t)k;
    return k ? cudaSuccess : cudaErrorInvalidDeviceFunction;
}

RT_API cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 g, dim3 b, void **args, size_t shmem, cudaStream_t s)
{
    return launch(kernel, g, b, args, shmem, s, NULL, 0);
}

RT_API cudaError_t __cudaLaunchKernel_ptsz(cudaKernel_t kernel, dim3 g, dim3 b, void **args, size_t shmem,
                                           cudaStream_t s)
{
    return launch(kernel, g, b, args, shmem, s, NULL, 0);
}

/* A cooperative launch is a launch with the cooperative attribute; the driver (rgpu's, before the launch is
 * queued) refuses a grid that cannot be resident at once with cudaErrorCooperativeLaunchTooLarge. */
RT_API cudaError_t cudaLaunchCooperativeKernel(const void *func, dim3 g, dim3 b, void **args, size_t shmem,
                                               cudaStream_t s)
{
    cudaLaunchAttribute cooperative = {.id = cudaLaunchAttributeCooperative, .val.cooperative = 1};
    return launch(func, g, b, args, shmem, s, &cooperative, 1);
}

RT_API cudaError_t cudaLaunchCooperativeKernel_ptsz(const void *func, dim3 g, dim3 b, void **args, size_t shmem,
                                                    cudaStream_t s)
{
    return cudaLaunchCooperativeKernel(func, g, b, args, shmem, s);
}

/* Cluster occupancy: the runtime's launch configuration as the driver's (the same attribute records). */
static cudaError_t clusters(int which, int *out, const void *func, const cudaLaunchConfig_t *c)
{
    CUfunction f;
    if (!out || !c || (c->numAttrs && !c->attrs))
        return rt_record(cudaErrorInvalidValue);
    cudaError_t e = function_of(func, &f);
    if (e != cudaSuccess)
        return rt_record(e);
    CUlaunchConfig d = {c->gridDim.x, c->gridDim.y, c->gridDim.z, c->blockDim.x, c->blockDim.y, c->blockDim.z,
                        (unsigned)c->dynamicSmemBytes, (CUstream)c->stream, (CUlaunchAttribute *)c->attrs,
                        c->numAttrs};
    return rt_fail(which ? cuOccupancyMaxPotentialClusterSize(out, f, &d) : cuOccupancyMaxActiveClusters(out, f, &d));
}

RT_API cudaError_t cudaOccupancyMaxActiveClusters(int *n, const void *func, const cudaLaunchConfig_t *config)
{
    return clusters(0, n, func, config);
}

RT_API cudaError_t cudaOccupancyMaxPotentialClusterSize(int *size, const void *func, const cudaLaunchConfig_t *config)
{
    return clusters(1, size, func, config);
}

static cudaError_t launch_ex(const cudaLaunchConfig_t *c, const void *func, void **args)
{
    if (!c || (c->numAttrs && !c->attrs))
        return rt_record(cudaErrorInvalidValue);
    return launch(func, c->gridDim, c->blockDim, args, c->dynamicSmemBytes, c->stream, c->attrs, c->numAttrs);
}

RT_API cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t *c, const void *func, void **args)
{
    return launch_ex(c, func, args);
}

RT_API cudaError_t cudaLaunchKernelExC_ptsz(const cudaLaunchConfig_t *c, const void *func, void **args)
{
    return launch_ex(c, func, args);
}

/* -- functions: attributes and occupancy, from the driver shim's per-function cache ---------------------------- */
RT_API cudaError_t cudaFuncGetAttributes(struct cudaFuncAttributes *a, const void *func)
{
    CUfunction f;
    if (!a)
        return rt_record(cudaErrorInvalidValue);
    cudaError_t e = function_of(func, &f);
    if (e != cudaSuccess)
        return rt_record(e);
    memset(a, 0, sizeof *a);
    int v;
#define GET(field, attr)                                                                                            \
    if (cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_##attr, f) == CUDA_SUCCESS)                                        \
        a->field = v;
    GET(maxThreadsPerBlock, MAX_THREADS_PER_BLOCK)
    GET(sharedSizeBytes, SHARED_SIZE_BYTES)
    GET(constSizeBytes, CONST_SIZE_BYTES)
    GET(localSizeBytes, LOCAL_SIZE_BYTES)
    GET(numRegs, NUM_REGS)
    GET(ptxVersion, PTX_VERSION)
    GET(binaryVersion, BINARY_VERSION)
    GET(cacheModeCA, CACHE_MODE_CA)
    GET(maxDynamicSharedSizeBytes, MAX_DYNAMIC_SHARED_SIZE_BYTES)
    GET(preferredShmemCarveout, PREFERRED_SHARED_MEMORY_CARVEOUT)
    GET(clusterDimMustBeSet, CLUSTER_SIZE_MUST_BE_SET)
    GET(requiredClusterWidth, REQUIRED_CLUSTER_WIDTH)
    GET(requiredClusterHeight, REQUIRED_CLUSTER_HEIGHT)
    GET(requiredClusterDepth, REQUIRED_CLUSTER_DEPTH)
    GET(clusterSchedulingPolicyPreference, CLUSTER_SCHEDULING_POLICY_PREFERENCE)
    GET(nonPortableClusterSizeAllowed, NON_PORTABLE_CLUSTER_SIZE_ALLOWED)
#undef GET
    return cudaSuccess;
}

RT_API cudaError_t cudaFuncSetAttribute(const void *func, enum cudaFuncAttribute attr, int value)
{
    CUfunction f;
    cudaError_t e = function_of(func, &f);
    /* cudaFuncAttribute took CUfunction_attribute's numbers. */
    return e != cudaSuccess ? rt_record(e) : rt_fail(cuFuncSetAttribute(f, (CUfunction_attribute)attr, value));
}

/* The driver's answer, or where the server's driver cannot report layouts, the one this runtime read from the image. */
RT_API cudaError_t cudaFuncGetParamInfo(const void *func, size_t index, size_t *offset, size_t *size)
{
    CUfunction f;
    cudaError_t e = function_of(func, &f);
    if (e != cudaSuccess)
        return rt_record(e);
    struct rt_kernel *k = rt_kernel_of(func);
    if (__atomic_load_n(&k->own_layout, __ATOMIC_ACQUIRE) != 1)
        return rt_fail(cuFuncGetParamInfo(f, index, offset, size));
    if (!offset || index >= (size_t)k->n_params)
        return rt_record(cudaErrorInvalidValue);
    *offset = k->layout[index][0];
    if (size)
        *size = k->layout[index][1];
    return cudaSuccess;
}

RT_API cudaError_t cudaFuncSetCacheConfig(const void *func, enum cudaFuncCache config)
{
    CUfunction f;
    cudaError_t e = function_of(func, &f);
    return e != cudaSuccess ? rt_record(e) : rt_fail(cuFuncSetCacheConfig(f, (CUfunc_cache)config));
}

RT_API cudaError_t cudaGetFuncBySymbol(cudaFunction_t *out, const void *func)
{
    CUfunction f;
    if (!out)
        return rt_record(cudaErrorInvalidValue);
    cudaError_t e = function_of(func, &f);
    if (e == cudaSuccess)
        *out = (cudaFunction_t)f;
    return rt_record(e);
}

RT_API cudaError_t cudaFuncGetName(const char **name, const void *func)
{
    struct rt_kernel *k = rt_kernel_of(func);
    if (!name)
        return rt_record(cudaErrorInvalidValue);
    if (!k)
        return rt_record(cudaErrorInvalidDeviceFunction);
    *name = k->name;
    return cudaSuccess;
}

RT_API cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int *blocks, const void *func, int block,
                                                                          size_t smem, unsigned int flags)
{
    CUfunction f;
    cudaError_t e = function_of(func, &f);
    return e != cudaSuccess ? rt_record(e)
                            : rt_fail(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(blocks, f, block, smem, flags));
}

RT_API cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int *blocks, const void *func, int block, size_t smem)
{
    return cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(blocks, func, block, smem, 0);
}

/* -- device variables (__device__, __constant__) -------------------------------------------------------------- */
static cudaError_t var_address(const void *symbol, CUdeviceptr *ptr, size_t *size)
{
    int dev;
    struct rt_var *v = symbol ? map_get(&vars, symbol) : NULL;
    if (!v)
        return cudaErrorInvalidSymbol;
    cudaError_t e = rt_context(&dev);
    if (e != cudaSuccess)
        return e;
    uint32_t gen = rt_generation(dev);
    if (!v->ptr[dev] || v->ptr_gen[dev] != gen) {
        CUmodule mod;
        CUresult r = module_of(v->fatbin, dev, &mod);
        size_t bytes = 0;
        if (r == CUDA_SUCCESS)
            r = cuModuleGetGlobal(&v->ptr[dev], &bytes, mod, v->name);
        if (r != CUDA_SUCCESS)
            return r == CUDA_ERROR_NOT_FOUND ? cudaErrorInvalidSymbol : rt_map(r);
        v->ptr_gen[dev] = gen;
    }
    *ptr = v->ptr[dev];
    *size = v->size;
    return cudaSuccess;
}

RT_API cudaError_t cudaGetSymbolAddress(void **dev_ptr, const void *symbol)
{
    CUdeviceptr p;
    size_t n;
    if (!dev_ptr)
        return rt_record(cudaErrorInvalidValue);
    cudaError_t e = var_address(symbol, &p, &n);
    if (e == cudaSuccess)
        *dev_ptr = (void *)(uintptr_t)p;
    return rt_record(e);
}

RT_API cudaError_t cudaGetSymbolSize(size_t *size, const void *symbol)
{
    CUdeviceptr p;
    if (!size)
        return rt_record(cudaErrorInvalidValue);
    return rt_record(var_address(symbol, &p, size));
}

/* Where a copy to (to_symbol) or from a variable lands, with its bounds and direction checked. */
static cudaError_t symbol_copy(const void *symbol, size_t offset, size_t count, enum cudaMemcpyKind kind,
                               int to_symbol, CUdeviceptr *at)
{
    size_t n;
    enum cudaMemcpyKind host_side = to_symbol ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost;
    if (kind != host_side && kind != cudaMemcpyDeviceToDevice && kind != cudaMemcpyDefault)
        return rt_record(cudaErrorInvalidMemcpyDirection);
    cudaError_t e = var_address(symbol, at, &n);
    if (e == cudaSuccess && (offset > n || count > n - offset))
        e = cudaErrorInvalidValue;
    *at += offset;
    return rt_record(e);
}

RT_API cudaError_t cudaMemcpyToSymbol(const void *symbol, const void *src, size_t count, size_t offset,
                                      enum cudaMemcpyKind kind)
{
    CUdeviceptr at;
    cudaError_t e = symbol_copy(symbol, offset, count, kind, 1, &at);
    return e != cudaSuccess ? e : cudaMemcpy((void *)(uintptr_t)at, src, count, kind);
}

RT_API cudaError_t cudaMemcpyFromSymbol(void *dst, const void *symbol, size_t count, size_t offset,
                                        enum cudaMemcpyKind kind)
{
    CUdeviceptr at;
    cudaError_t e = symbol_copy(symbol, offset, count, kind, 0, &at);
    return e != cudaSuccess ? e : cudaMemcpy(dst, (const void *)(uintptr_t)at, count, kind);
}

RT_API cudaError_t cudaMemcpyToSymbolAsync(const void *symbol, const void *src, size_t count, size_t offset,
                                           enum cudaMemcpyKind kind, cudaStream_t s)
{
    CUdeviceptr at;
    cudaError_t e = symbol_copy(symbol, offset, count, kind, 1, &at);
    return e != cudaSuccess ? e : cudaMemcpyAsync((void *)(uintptr_t)at, src, count, kind, s);
}

RT_API cudaError_t cudaMemcpyFromSymbolAsync(void *dst, const void *symbol, size_t count, size_t offset,
                                             enum cudaMemcpyKind kind, cudaStream_t s)
{
    CUdeviceptr at;
    cudaError_t e = symbol_copy(symbol, offset, count, kind, 0, &at);
    return e != cudaSuccess ? e : cudaMemcpyAsync(dst, (const void *)(uintptr_t)at, count, kind, s);
}
