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

enum { GRAPH_LAUNCH, STREAM_SYNC, MEMCPY_ASYNC, MEMCPY, MEMSET_ASYNC, MEMCPY2D_ASYNC, DEVICE_SYNC, EVENT_SYNC,
       EVENT_RECORD, STREAM_WAIT_EVENT, LAUNCH_KERNEL, LAUNCH_KERNEL_EXC, GRAPH_EXEC_UPDATE, GRAPH_INSTANTIATE,
       BEGIN_CAPTURE, END_CAPTURE, SET_DEVICE, GET_DEVICE, GET_LAST_ERROR, NAMES };
static const char *const names[NAMES] = {
    "cudaGraphLaunch", "cudaStreamSynchronize", "cudaMemcpyAsync", "cudaMemcpy", "cudaMemsetAsync",
    "cudaMemcpy2DAsync", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaEventRecord", "cudaStreamWaitEvent",
    "cudaLaunchKernel", "cudaLaunchKernelExC", "cudaGraphExecUpdate", "cudaGraphInstantiate",
    "cudaStreamBeginCapture", "cudaStreamEndCapture", "cudaSetDevice", "cudaGetDevice", "cudaGetLastError"};

struct call {
    unsigned long long enter, leave, bytes;
    unsigned char name, kind;
};
static struct call *calls;
static atomic_uint used;

static unsigned long long now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (unsigned long long)t.tv_sec * 1000000000ull + (unsigned long long)t.tv_nsec;
}

static void *next_symbol(int name)
{
    void *f = dlsym(RTLD_NEXT, names[name]);
    if (!f) {
        fprintf(stderr, "call_timeline: no %s after this library\n", names[name]);
        abort();
    }
    return f;
}

static void note(int name, unsigned long long enter, unsigned long long bytes, int kind)
{
    unsigned i = atomic_fetch_add(&used, 1);
    if (calls && i < MAX_CALLS)
        calls[i] = (struct call){enter, now_ns(), bytes, (unsigned char)name, (unsigned char)kind};
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
        fprintf(f, "%s %llu %llu %llu %d\n", names[calls[i].name], calls[i].enter, calls[i].leave, calls[i].bytes,
                calls[i].kind);
    if (n > MAX_CALLS)
        fprintf(f, "# %u calls not kept\n", n - MAX_CALLS);
    fclose(f);
}

/* One wrapper: the next library's function looked up once, the call timed. */
#define WRAP(ID, BYTES, KIND, PARAMS, ARGS)                                                                          \
    cudaError_t PARAMS                                                                                           \
    {                                                                                                                \
        static cudaError_t(*next) PARAMS_OF_##ID;                                                                    \
        if (!next)                                                                                                   \
            next = next_symbol(ID);                                                                                  \
        unsigned long long t = now_ns();                                                                             \
        cudaError_t r = next ARGS;                                                                                   \
        note(ID, t, BYTES, KIND);                                                                                    \
        return r;                                                                                                    \
    }

#define PARAMS_OF_GRAPH_LAUNCH (cudaGraphExec_t, cudaStream_t)
WRAP(GRAPH_LAUNCH, 0, 0, cudaGraphLaunch(cudaGraphExec_t g, cudaStream_t s), (g, s))
#define PARAMS_OF_STREAM_SYNC (cudaStream_t)
WRAP(STREAM_SYNC, 0, 0, cudaStreamSynchronize(cudaStream_t s), (s))
#define PARAMS_OF_MEMCPY_ASYNC (void *, const void *, size_t, enum cudaMemcpyKind, cudaStream_t)
WRAP(MEMCPY_ASYNC, n, k, cudaMemcpyAsync(void *d, const void *src, size_t n, enum cudaMemcpyKind k, cudaStream_t s),
     (d, src, n, k, s))
#define PARAMS_OF_MEMCPY (void *, const void *, size_t, enum cudaMemcpyKind)
WRAP(MEMCPY, n, k, cudaMemcpy(void *d, const void *src, size_t n, enum cudaMemcpyKind k), (d, src, n, k))
#define PARAMS_OF_MEMSET_ASYNC (void *, int, size_t, cudaStream_t)
WRAP(MEMSET_ASYNC, n, 0, cudaMemsetAsync(void *d, int v, size_t n, cudaStream_t s), (d, v, n, s))
#define PARAMS_OF_MEMCPY2D_ASYNC                                                                                     \
    (void *, size_t, const void *, size_t, size_t, size_t, enum cudaMemcpyKind, cudaStream_t)
WRAP(MEMCPY2D_ASYNC, w *h, k,
     cudaMemcpy2DAsync(void *d, size_t dp, const void *src, size_t sp, size_t w, size_t h, enum cudaMemcpyKind k,
                       cudaStream_t s),
     (d, dp, src, sp, w, h, k, s))
#define PARAMS_OF_DEVICE_SYNC (void)
WRAP(DEVICE_SYNC, 0, 0, cudaDeviceSynchronize(void), ())
#define PARAMS_OF_EVENT_SYNC (cudaEvent_t)
WRAP(EVENT_SYNC, 0, 0, cudaEventSynchronize(cudaEvent_t e), (e))
#define PARAMS_OF_EVENT_RECORD (cudaEvent_t, cudaStream_t)
WRAP(EVENT_RECORD, 0, 0, cudaEventRecord(cudaEvent_t e, cudaStream_t s), (e, s))
#define PARAMS_OF_STREAM_WAIT_EVENT (cudaStream_t, cudaEvent_t, unsigned)
WRAP(STREAM_WAIT_EVENT, 0, 0, cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned f), (s, e, f))
#define PARAMS_OF_LAUNCH_KERNEL (const void *, dim3, dim3, void **, size_t, cudaStream_t)
WRAP(LAUNCH_KERNEL, 0, 0, cudaLaunchKernel(const void *fn, dim3 g, dim3 b, void **a, size_t sh, cudaStream_t s),
     (fn, g, b, a, sh, s))
#define PARAMS_OF_LAUNCH_KERNEL_EXC (const cudaLaunchConfig_t *, const void *, void **)
WRAP(LAUNCH_KERNEL_EXC, 0, 0, cudaLaunchKernelExC(const cudaLaunchConfig_t *c, const void *fn, void **a), (c, fn, a))
#define PARAMS_OF_GRAPH_EXEC_UPDATE (cudaGraphExec_t, cudaGraph_t, cudaGraphExecUpdateResultInfo *)
WRAP(GRAPH_EXEC_UPDATE, 0, 0, cudaGraphExecUpdate(cudaGraphExec_t e, cudaGraph_t g, cudaGraphExecUpdateResultInfo *i),
     (e, g, i))
#define PARAMS_OF_GRAPH_INSTANTIATE (cudaGraphExec_t *, cudaGraph_t, unsigned long long)
WRAP(GRAPH_INSTANTIATE, 0, 0, cudaGraphInstantiate(cudaGraphExec_t *e, cudaGraph_t g, unsigned long long f), (e, g, f))
#define PARAMS_OF_BEGIN_CAPTURE (cudaStream_t, enum cudaStreamCaptureMode)
WRAP(BEGIN_CAPTURE, 0, 0, cudaStreamBeginCapture(cudaStream_t s, enum cudaStreamCaptureMode m), (s, m))
#define PARAMS_OF_END_CAPTURE (cudaStream_t, cudaGraph_t *)
WRAP(END_CAPTURE, 0, 0, cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *g), (s, g))
#define PARAMS_OF_SET_DEVICE (int)
WRAP(SET_DEVICE, 0, 0, cudaSetDevice(int d), (d))
#define PARAMS_OF_GET_DEVICE (int *)
WRAP(GET_DEVICE, 0, 0, cudaGetDevice(int *d), (d))
#define PARAMS_OF_GET_LAST_ERROR (void)
WRAP(GET_LAST_ERROR, 0, 0, cudaGetLastError(void), ())
