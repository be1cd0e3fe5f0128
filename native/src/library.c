/* Context-independent loading (cuLibrary*, cuKernel*), on top of modules.
 *
 * A library keeps its image here and is loaded as a module into each context that asks for one of its kernels,
 * once. A CUkernel is the CUfunction of that kernel in the context current at cuLibraryGetKernel, so it can be
 * launched with cuLaunchKernel as CUDA allows; cuKernelGetFunction gives the kernel's function in whatever
 * context is current. Unlike CUDA, a library's kernels can only be looked up with a context current. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "rgpu_shim.h"

#define API __attribute__((visibility("default")))
#define MAX_CONTEXTS 32

size_t rgpu_test_image_size(const void *image); /* driver.c: how many bytes a module image spans */

struct library {
    uint8_t *image;
    size_t size;
    int n;
    struct { uint64_t ctx; CUmodule mod; } loaded[MAX_CONTEXTS];
};

struct kernel {
    CUfunction fn; /* the CUkernel handed out */
    uint64_t ctx;
    struct library *lib;
    char *name;
    struct kernel *next;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
RGPU_FORK_RESET(lock, &lock)
static struct kernel *kernels;
static int logged_context;

/* The library's module in the current context, loaded on first use. */
static CUresult module_for(struct library *lib, CUmodule *out, uint64_t *ctx_out)
{
    uint64_t ctx = rgpu_thread_ctx();
    if (!lib)
        return CUDA_ERROR_INVALID_HANDLE;
    if (!ctx) {
        rgpu_unsupported(&logged_context, "cuLibrary kernels and globals with no context current");
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    CUresult r = CUDA_SUCCESS;
    pthread_mutex_lock(&lock);
    int i = 0;
    while (i < lib->n && lib->loaded[i].ctx != ctx)
        i++;
    if (i == lib->n) {
        if (lib->n == MAX_CONTEXTS) {
            r = CUDA_ERROR_OUT_OF_MEMORY;
        } else {
            r = cuModuleLoadData(&lib->loaded[i].mod, lib->image);
            if (r == CUDA_SUCCESS)
                lib->loaded[lib->n++].ctx = ctx;
        }
    }
    if (r == CUDA_SUCCESS)
        *out = lib->loaded[i].mod;
    pthread_mutex_unlock(&lock);
    if (ctx_out)
        *ctx_out = ctx;
    return r;
}

static CUresult load(CUlibrary *out, const void *image, size_t size, unsigned n_jit, unsigned n_lib)
{
    static int logged;
    if (!out || !image || !size)
        return CUDA_ERROR_INVALID_VALUE;
    if ((n_jit || n_lib) && !__atomic_exchange_n(&logged, 1, __ATOMIC_RELAXED))
        rgpu_log(RGPU_LOG_INFO, "cuLibraryLoad*: JIT and library options are ignored (the server JITs with defaults)");
    struct library *lib = calloc(1, sizeof *lib);
    if (!lib || !(lib->image = malloc(size))) {
        free(lib);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    memcpy(lib->image, image, size);
    lib->size = size;
    *out = (CUlibrary)lib;
    return CUDA_SUCCESS;
}

API CUresult cuLibraryLoadData(CUlibrary *library, const void *code, CUjit_option *jit, void **jit_values,
                               unsigned int n_jit, CUlibraryOption *options, void **option_values, unsigned int n_lib)
{
    (void)options, (void)option_values;
    CUresult r = rgpu_ready();
    if (r == CUDA_SUCCESS)
        r = rgpu_jit_options_unused(n_jit, jit, jit_values);
    if (r != CUDA_SUCCESS)
        return r;
    return load(library, code, code ? rgpu_test_image_size(code) : 0, n_jit, n_lib);
}

API CUresult cuLibraryLoadFromFile(CUlibrary *library, const char *path, CUjit_option *jit, void **jit_values,
                                   unsigned int n_jit, CUlibraryOption *options, void **option_values,
                                   unsigned int n_lib)
{
    (void)options, (void)option_values;
    CUresult r = rgpu_ready();
    if (r == CUDA_SUCCESS)
        r = rgpu_jit_options_unused(n_jit, jit, jit_values);
    if (r != CUDA_SUCCESS)
        return r;
    uint8_t *buf;
    size_t n;
    r = rgpu_read_image_file(path, &buf, &n);
    if (r == CUDA_SUCCESS)
        r = load(library, buf, n + 1, n_jit, n_lib);
    free(buf);
    return r;
}

API CUresult cuLibraryUnload(CUlibrary library)
{
    struct library *lib = (struct library *)library;
    if (!lib)
        return CUDA_ERROR_INVALID_HANDLE;
    pthread_mutex_lock(&lock);
    for (struct kernel **k = &kernels; *k;) {
        if ((*k)->lib == lib) {
            struct kernel *gone = *k;
            *k = gone->next;
            free(gone->name);
            free(gone);
        } else {
            k = &(*k)->next;
        }
    }
    pthread_mutex_unlock(&lock);
    CUresult r = CUDA_SUCCESS;
    for (int i = 0; i < lib->n; i++) {
        CUresult u = cuModuleUnload(lib->loaded[i].mod);
        if (r == CUDA_SUCCESS && u != CUDA_ERROR_INVALID_HANDLE) /* (gone with a destroyed context: fine) */
            r = u;
    }
    free(lib->image);
    free(lib);
    return r;
}

API CUresult cuLibraryGetModule(CUmodule *mod, CUlibrary library)
{
    return mod ? module_for((struct library *)library, mod, NULL) : CUDA_ERROR_INVALID_VALUE;
}

static CUresult function_in_current(struct library *lib, const char *name, CUfunction *out)
{
    CUmodule mod;
    uint64_t ctx;
    CUresult r = module_for(lib, &mod, &ctx);
    if (r == CUDA_SUCCESS)
        r = cuModuleGetFunction(out, mod, name);
    if (r != CUDA_SUCCESS)
        return r;
    struct kernel *k = calloc(1, sizeof *k);
    if (!k || !(k->name = strdup(name))) {
        free(k);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    k->fn = *out, k->ctx = ctx, k->lib = lib;
    pthread_mutex_lock(&lock);
    k->next = kernels;
    kernels = k;
    pthread_mutex_unlock(&lock);
    return CUDA_SUCCESS;
}

static struct kernel *find(CUkernel kernel)
{
    pthread_mutex_lock(&lock);
    struct kernel *k = kernels;
    while (k && k->fn != (CUfunction)kernel)
        k = k->next;
    pthread_mutex_unlock(&lock);
    return k;
}

API CUresult cuLibraryGetKernel(CUkernel *kernel, CUlibrary library, const char *name)
{
    if (!kernel || !name)
        return CUDA_ERROR_INVALID_VALUE;
    CUfunction f;
    CUresult r = function_in_current((struct library *)library, name, &f);
    if (r == CUDA_SUCCESS)
        *kernel = (CUkernel)f;
    return r;
}

API CUresult cuKernelGetFunction(CUfunction *func, CUkernel kernel)
{
    struct kernel *k = find(kernel);
    if (!func)
        return CUDA_ERROR_INVALID_VALUE;
    if (!k)
        return CUDA_ERROR_INVALID_HANDLE;
    if (k->ctx == rgpu_thread_ctx()) {
        *func = k->fn;
        return CUDA_SUCCESS;
    }
    CUfunction known = NULL;
    pthread_mutex_lock(&lock);
    for (struct kernel *o = kernels; o && !known; o = o->next) /* already looked up in this context */
        if (o->lib == k->lib && o->ctx == rgpu_thread_ctx() && !strcmp(o->name, k->name))
            known = o->fn;
    pthread_mutex_unlock(&lock);
    if (known) {
        *func = known;
        return CUDA_SUCCESS;
    }
    return function_in_current(k->lib, k->name, func);
}

/* The layout is the kernel's in every context: answered from the function it was first found as (no context). */
API CUresult cuKernelGetParamInfo(CUkernel kernel, size_t index, size_t *offset, size_t *size)
{
    struct kernel *k = find(kernel);
    return k ? cuFuncGetParamInfo(k->fn, index, offset, size) : CUDA_ERROR_INVALID_HANDLE;
}

API CUresult cuKernelGetLibrary(CUlibrary *library, CUkernel kernel)
{
    struct kernel *k = find(kernel);
    if (!library)
        return CUDA_ERROR_INVALID_VALUE;
    if (!k)
        return CUDA_ERROR_INVALID_HANDLE;
    *library = (CUlibrary)k->lib;
    return CUDA_SUCCESS;
}

API CUresult cuLibraryGetGlobal(CUdeviceptr *dptr, size_t *bytes, CUlibrary library, const char *name)
{
    CUmodule mod;
    CUresult r = module_for((struct library *)library, &mod, NULL);
    return r == CUDA_SUCCESS ? cuModuleGetGlobal_v2(dptr, bytes, mod, name) : r;
}

/* Attributes: those of the kernel's function in the current context (the device argument is that context's). */
static CUresult function_of(CUkernel kernel, CUfunction *f)
{
    return find(kernel) ? cuKernelGetFunction(f, kernel) : CUDA_ERROR_INVALID_HANDLE;
}

API CUresult cuKernelGetAttribute(int *value, CUfunction_attribute attrib, CUkernel kernel, CUdevice dev)
{
    CUfunction f;
    (void)dev;
    CUresult r = function_of(kernel, &f);
    return r == CUDA_SUCCESS ? cuFuncGetAttribute(value, attrib, f) : r;
}

API CUresult cuKernelSetAttribute(CUfunction_attribute attrib, int value, CUkernel kernel, CUdevice dev)
{
    CUfunction f;
    (void)dev;
    CUresult r = function_of(kernel, &f);
    return r == CUDA_SUCCESS ? cuFuncSetAttribute(f, attrib, value) : r;
}

API CUresult cuKernelGetName(const char **name, CUkernel kernel)
{
    struct kernel *k = find(kernel);
    if (!name)
        return CUDA_ERROR_INVALID_VALUE;
    if (!k)
        return CUDA_ERROR_INVALID_HANDLE;
    *name = k->name;
    return CUDA_SUCCESS;
}
