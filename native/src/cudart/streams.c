/* Streams and events: thin over the driver API (cudaStream_t is a CUstream, cudaEvent_t a CUevent), plus what
 * the runtime answers itself: a stream's flags and priority, and capture state (capture is never active). */
#include <pthread.h>

#include "rt.h"
#include "fork_locks.h"

/* Flags and priority of the streams this runtime created, for cudaStreamGetFlags/GetPriority. */
#define STREAM_INFO 1024
static struct { cudaStream_t s; unsigned flags; int priority; } info[STREAM_INFO];
static pthread_mutex_t info_lock = PTHREAD_MUTEX_INITIALIZER;
RGPU_FORK_RESET(info_lock, &info_lock)

static void remember(cudaStream_t s, unsigned flags, int priority)
{
    pthread_mutex_lock(&info_lock);
    for (int i = 0; i < STREAM_INFO; i++)
        if (!info[i].s) {
            info[i].s = s, info[i].flags = flags, info[i].priority = priority;
            break;
        }
    pthread_mutex_unlock(&info_lock);
}

static int lookup(cudaStream_t s, unsigned *flags, int *priority)
{
    int found = 0;
    pthread_mutex_lock(&info_lock);
    for (int i = 0; i < STREAM_INFO && !found; i++)
        if (info[i].s == s) {
            *flags = info[i].flags, *priority = info[i].priority;
            found = 1;
        }
    pthread_mutex_unlock(&info_lock);
    return found;
}

static void forget(cudaStream_t s)
{
    pthread_mutex_lock(&info_lock);
    for (int i = 0; i < STREAM_INFO; i++)
        if (info[i].s == s)
            info[i].s = NULL;
    pthread_mutex_unlock(&info_lock);
}

RT_API cudaError_t cudaStreamCreateWithPriority(cudaStream_t *s, unsigned int flags, int priority)
{
    if (!s)
        return rt_record(cudaErrorInvalidValue);
    cudaError_t e = rt_context(NULL);
    if (e != cudaSuccess)
        return rt_record(e);
    CUresult r = priority ? cuStreamCreateWithPriority((CUstream *)s, flags, priority) : cuStreamCreate((CUstream *)s, flags);
    if (r == CUDA_SUCCESS)
        remember(*s, flags, priority);
    return rt_fail(r);
}

RT_API cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int flags)
{
    return cudaStreamCreateWithPriority(s, flags, 0);
}

RT_API cudaError_t cudaStreamCreate(cudaStream_t *s) { return cudaStreamCreateWithPriority(s, cudaStreamDefault, 0); }

RT_API cudaError_t cudaStreamDestroy(cudaStream_t s)
{
    forget(s);
    WITH_CONTEXT(cuStreamDestroy((CUstream)s));
}

RT_API cudaError_t cudaStreamSynchronize(cudaStream_t s) { WITH_CONTEXT(cuStreamSynchronize((CUstream)s)); }
RT_API cudaError_t cudaStreamSynchronize_ptsz(cudaStream_t s) { return cudaStreamSynchronize(s); }
RT_API cudaError_t cudaStreamQuery(cudaStream_t s) { WITH_CONTEXT(cuStreamQuery((CUstream)s)); }
RT_API cudaError_t cudaStreamQuery_ptsz(cudaStream_t s) { return cudaStreamQuery(s); }

RT_API cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int flags)
{
    WITH_CONTEXT(cuStreamWaitEvent((CUstream)s, (CUevent)e, flags));
}
RT_API cudaError_t cudaStreamWaitEvent_ptsz(cudaStream_t s, cudaEvent_t e, unsigned int flags)
{
    return cudaStreamWaitEvent(s, e, flags);
}

/* A stream's flags and priority as this runtime created it (the NULL and special streams: 0, 0). The table is
 * looked up even in a forked child, where the answer is the runtime's error instead: not the parent's table. */
static cudaError_t stream_info(cudaStream_t s, unsigned *flags, int *priority)
{
    *flags = 0, *priority = 0;
    int known = !s || s == cudaStreamLegacy || s == cudaStreamPerThread || lookup(s, flags, priority);
    cudaError_t e = rt_initialised();
    return e != cudaSuccess ? e : known ? cudaSuccess : cudaErrorInvalidResourceHandle;
}

RT_API cudaError_t cudaStreamGetFlags(cudaStream_t s, unsigned int *flags)
{
    unsigned f;
    int p;
    if (!flags)
        return rt_record(cudaErrorInvalidValue);
    cudaError_t e = stream_info(s, &f, &p);
    if (e != cudaSuccess)
        return rt_record(e);
    *flags = f;
    return cudaSuccess;
}

RT_API cudaError_t cudaStreamGetPriority(cudaStream_t s, int *priority)
{
    unsigned f;
    int p;
    if (!priority)
        return rt_record(cudaErrorInvalidValue);
    cudaError_t e = stream_info(s, &f, &p);
    if (e != cudaSuccess)
        return rt_record(e);
    *priority = p;
    return cudaSuccess;
}

/* A stream's id and device: the driver's answers (the runtime keeps neither). */
RT_API cudaError_t cudaStreamGetId(cudaStream_t s, unsigned long long *id)
{
    if (!id)
        return rt_record(cudaErrorInvalidValue);
    WITH_CONTEXT(cuStreamGetId((CUstream)s, id));
}
RT_API cudaError_t cudaStreamGetId_ptsz(cudaStream_t s, unsigned long long *id) { return cudaStreamGetId(s, id); }

RT_API cudaError_t cudaStreamGetDevice(cudaStream_t s, int *device)
{
    if (!device)
        return rt_record(cudaErrorInvalidValue);
    WITH_CONTEXT(cuStreamGetDevice((CUstream)s, (CUdevice *)device));
}
RT_API cudaError_t cudaStreamGetDevice_ptsz(cudaStream_t s, int *device) { return cudaStreamGetDevice(s, device); }

/* Stream attributes: the runtime's ids and values are the driver's (the launch attributes' union). */
_Static_assert(sizeof(cudaStreamAttrValue) == sizeof(CUstreamAttrValue), "stream attribute values differ");
RT_API cudaError_t cudaStreamSetAttribute(cudaStream_t s, cudaStreamAttrID id, const cudaStreamAttrValue *value)
{
    WITH_CONTEXT(cuStreamSetAttribute((CUstream)s, (CUstreamAttrID)id, (const CUstreamAttrValue *)value));
}
RT_API cudaError_t cudaStreamSetAttribute_ptsz(cudaStream_t s, cudaStreamAttrID id, const cudaStreamAttrValue *value)
{
    return cudaStreamSetAttribute(s, id, value);
}
RT_API cudaError_t cudaStreamGetAttribute(cudaStream_t s, cudaStreamAttrID id, cudaStreamAttrValue *value)
{
    WITH_CONTEXT(cuStreamGetAttribute((CUstream)s, (CUstreamAttrID)id, (CUstreamAttrValue *)value));
}
RT_API cudaError_t cudaStreamGetAttribute_ptsz(cudaStream_t s, cudaStreamAttrID id, cudaStreamAttrValue *value)
{
    return cudaStreamGetAttribute(s, id, value);
}
RT_API cudaError_t cudaStreamCopyAttributes(cudaStream_t dst, cudaStream_t src)
{
    WITH_CONTEXT(cuStreamCopyAttributes((CUstream)dst, (CUstream)src));
}
RT_API cudaError_t cudaStreamCopyAttributes_ptsz(cudaStream_t dst, cudaStream_t src)
{
    return cudaStreamCopyAttributes(dst, src);
}

RT_API cudaError_t cudaStreamAddCallback(cudaStream_t s, cudaStreamCallback_t cb, void *data, unsigned int flags)
{
    /* The driver shim runs the callback on this thread once the stream has drained (documented limit). */
    WITH_CONTEXT(cuStreamAddCallback((CUstream)s, (CUstreamCallback)cb, data, flags));
}

RT_API cudaError_t cudaLaunchHostFunc(cudaStream_t s, cudaHostFn_t fn, void *data)
{
    WITH_CONTEXT(cuLaunchHostFunc((CUstream)s, fn, data));
}
RT_API cudaError_t cudaLaunchHostFunc_ptsz(cudaStream_t s, cudaHostFn_t fn, void *data) { return cudaLaunchHostFunc(s, fn, data); }

/* -- events ------------------------------------------------------------------------------------------------- */
RT_API cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned int flags)
{
    if (!e)
        return rt_record(cudaErrorInvalidValue);
    WITH_CONTEXT(cuEventCreate((CUevent *)e, flags)); /* (interprocess events too: the driver's ipc.c exports them) */
}

RT_API cudaError_t cudaEventCreate(cudaEvent_t *e) { return cudaEventCreateWithFlags(e, cudaEventDefault); }
RT_API cudaError_t cudaEventDestroy(cudaEvent_t e) { WITH_CONTEXT(cuEventDestroy((CUevent)e)); }
RT_API cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) { WITH_CONTEXT(cuEventRecord((CUevent)e, (CUstream)s)); }
RT_API cudaError_t cudaEventRecord_ptsz(cudaEvent_t e, cudaStream_t s) { return cudaEventRecord(e, s); }

RT_API cudaError_t cudaEventRecordWithFlags(cudaEvent_t e, cudaStream_t s, unsigned int flags)
{
    static int logged;
    if (flags)
        return rt_unsupported(&logged, "cudaEventRecordWithFlags with flags (graph capture)");
    return cudaEventRecord(e, s);
}
RT_API cudaError_t cudaEventRecordWithFlags_ptsz(cudaEvent_t e, cudaStream_t s, unsigned int flags)
{
    return cudaEventRecordWithFlags(e, s, flags);
}

RT_API cudaError_t cudaEventSynchronize(cudaEvent_t e) { WITH_CONTEXT(cuEventSynchronize((CUevent)e)); }
RT_API cudaError_t cudaEventQuery(cudaEvent_t e) { WITH_CONTEXT(cuEventQuery((CUevent)e)); }

RT_API cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end)
{
    WITH_CONTEXT(cuEventElapsedTime(ms, (CUevent)start, (CUevent)end));
}

/* CUDA 12.8's name for the same call (13 keeps only cudaEventElapsedTime, with this meaning). */
RT_API cudaError_t cudaEventElapsedTime_v2(float *ms, cudaEvent_t start, cudaEvent_t end)
{
    return cudaEventElapsedTime(ms, start, end);
}
