/* When a program enters and leaves the CUDA runtime calls a step is made of, natively and through rgpu alike: an
 * LD_PRELOAD library that wraps a few cudart entry points (whichever libcudart.so.13 the program loaded: NVIDIA's or
 * rgpu's stand-in) and, at exit, writes one line per call to $CALL_TIMELINE_FILE.<pid> (a process that made no such
 * call, as `rgpu run`'s own, writes nothing):
 *
 *   name t_enter_ns t_leave_ns bytes kind
 *
 * (bytes and kind for copies and memsets, else 0). bench/llama/timeline_summary.py splits the lines into the
 * program's steps at each graph launch and sets, per step, the time inside each call beside the time outside any
 * (the program's own CPU), so that native and rgpu are compared call by call. A benchmark tool, not shipped.
 *
 *   gcc -O2 -shared -fPIC -I/usr/local/cuda/include -o /tmp/call_timeline.so bench/llama/call_timeline.c -ldl */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define MAX_CALLS (1u << 21)

struct call {
    unsigned long long enter, leave, bytes;
    const char *name; /* (a string literal of WRAP's) */
    int kind;
};
static struct call *calls;
static atomic_uint used;

static unsigned long long now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (unsigned long long)t.tv_sec * 1000000000ull + (unsigned long long)t.tv_nsec;
}

static void *next_symbol(const char *name)
{
    void *f = dlsym(RTLD_NEXT, name);
    if (!f) {
        fprintf(stderr, "call_timeline: no %s after this library\n", name);
        abort();
    }
    return f;
}

static void note(const char *name, unsigned long long enter, unsigned long long bytes, int kind)
{
    unsigned i = atomic_fetch_add(&used, 1);
    if (calls && i < MAX_CALLS)
        calls[i] = (struct call){enter, now_ns(), bytes, name, kind};
}

__attribute__((constructor)) static void start(void)
{
    if (getenv("CALL_TIMELINE_FILE"))
        calls = calloc(MAX_CALLS, sizeof *calls);
}

__attribute__((destructor)) static void finish(void)
{
    const char *path = getenv("CALL_TIMELINE_FILE");
    unsigned n = atomic_load(&used);
    char name[4096];
    if (!calls || !path || !n || snprintf(name, sizeof name, "%s.%d", path, (int)getpid()) >= (int)sizeof name)
        return;
    FILE *f = fopen(name, "w");
    if (!f)
        return;
    for (unsigned i = 0; i < n && i < MAX_CALLS; i++)
        fprintf(f, "%s %llu %llu %llu %d\n", calls[i].name, calls[i].enter, calls[i].leave, calls[i].bytes,
                calls[i].kind);
    if (n > MAX_CALLS)
        fprintf(f, "# %u calls not kept\n", n - MAX_CALLS);
    fclose(f);
}

/* One wrapper: the next library's function (of the header's own type) looked up once, the call timed. */
#define WRAP(FN, BYTES, KIND, PARAMS, ARGS)                                                                          \
    cudaError_t FN PARAMS                                                                                            \
    {                                                                                                                \
        static __typeof__(&FN) next;                                                                                 \
        if (!next)                                                                                                   \
            next = next_symbol(#FN);                                                                                 \
        unsigned long long t = now_ns();                                                                             \
        cudaError_t r = next ARGS;                                                                                   \
        note(#FN, t, BYTES, KIND);                                                                                   \
        return r;                                                                                                    \
    }

WRAP(cudaGraphLaunch, 0, 0, (cudaGraphExec_t g, cudaStream_t s), (g, s))
WRAP(cudaStreamSynchronize, 0, 0, (cudaStream_t s), (s))
WRAP(cudaMemcpyAsync, n, k, (void *d, const void *src, size_t n, enum cudaMemcpyKind k, cudaStream_t s),
     (d, src, n, k, s))
WRAP(cudaMemcpy, n, k, (void *d, const void *src, size_t n, enum cudaMemcpyKind k), (d, src, n, k))
WRAP(cudaMemsetAsync, n, 0, (void *d, int v, size_t n, cudaStream_t s), (d, v, n, s))
WRAP(cudaMemcpy2DAsync, w *h, k,
     (void *d, size_t dp, const void *src, size_t sp, size_t w, size_t h, enum cudaMemcpyKind k, cudaStream_t s),
     (d, dp, src, sp, w, h, k, s))
WRAP(cudaDeviceSynchronize, 0, 0, (void), ())
WRAP(cudaEventSynchronize, 0, 0, (cudaEvent_t e), (e))
WRAP(cudaEventRecord, 0, 0, (cudaEvent_t e, cudaStream_t s), (e, s))
WRAP(cudaStreamWaitEvent, 0, 0, (cudaStream_t s, cudaEvent_t e, unsigned f), (s, e, f))
WRAP(cudaLaunchKernel, 0, 0, (const void *fn, dim3 g, dim3 b, void **a, size_t sh, cudaStream_t s),
     (fn, g, b, a, sh, s))
WRAP(cudaLaunchKernelExC, 0, 0, (const cudaLaunchConfig_t *c, const void *fn, void **a), (c, fn, a))
WRAP(cudaGraphExecUpdate, 0, 0, (cudaGraphExec_t e, cudaGraph_t g, cudaGraphExecUpdateResultInfo *i), (e, g, i))
WRAP(cudaGraphInstantiate, 0, 0, (cudaGraphExec_t *e, cudaGraph_t g, unsigned long long f), (e, g, f))
WRAP(cudaStreamBeginCapture, 0, 0, (cudaStream_t s, enum cudaStreamCaptureMode m), (s, m))
WRAP(cudaStreamEndCapture, 0, 0, (cudaStream_t s, cudaGraph_t *g), (s, g))
WRAP(cudaSetDevice, 0, 0, (int d), (d))
WRAP(cudaGetDevice, 0, 0, (int *d), (d))
WRAP(cudaGetLastError, 0, 0, (void), ())
