/* cuStreamSynchronize, in three ways, cheapest first:
 *
 * - Nothing happened on the stream since it was last seen idle: no request that may put something on it (its
 *   `stream` field, ops.touches_stream_field; for the NULL stream, which waits for every blocking stream, any
 *   request at all) was sent or queued since (conn_work.c). NVIDIA's driver would answer CUDA_SUCCESS at once,
 *   and so does this. llama.cpp synchronizes its compute stream between input copies to the per-thread stream.
 * - No device work unfinished (conn_work.c: no kernel, graph, library call, device copy or memset sent since
 *   the replies that said they were done): the synchronize is sent deferred, without waiting. The server runs
 *   it in order, waiting for the stream before the session's next request, so every later call of any thread
 *   sees the stream's work done, as after a native synchronize. What the stream can still hold (host-to-device
 *   copies, event records) takes no time worth waiting a round trip for, and no stream writes this process's
 *   memory later than its call returns (memory.c). A failure is reported by the next call that waits.
 * - Otherwise, or while a stream is capturing (the driver's refusal must come back here), for a stream the
 *   server did not make (its error must come back here), while page-locked memory is shadowed on the GPU
 *   (shadow.c: it comes back after a synchronization that waited), or with RGPU_SYNC=exact: one round trip.
 *
 * llama.cpp synchronizes ~19 times per generated token, after its small input copies and with nothing queued;
 * the first way left 12 round trips per token, the second leaves the one that carries the logits. The deferred
 * ones are held (conn_held.c), so that the copies between them pass them and few reach the server. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rgpu_shim.h"

#define API __attribute__((visibility("default")))
#define IDLE_SLOTS 16

struct idle_stream {
    uint64_t ctx, stream;
    uint32_t seq; /* the request counter right after the synchronize that found it idle */
    int valid;
};

static pthread_mutex_t idle_lock = PTHREAD_MUTEX_INITIALIZER;
RGPU_FORK_RESET(idle_lock, &idle_lock)
static struct idle_stream idle[IDLE_SLOTS];
static unsigned next_slot;

static int still_idle(uint64_t ctx, uint64_t stream, uint32_t seq)
{
    int hit = 0;
    pthread_mutex_lock(&idle_lock);
    for (int i = 0; i < IDLE_SLOTS && !hit; i++)
        hit = idle[i].valid && idle[i].ctx == ctx && idle[i].stream == stream && idle[i].seq == seq;
    pthread_mutex_unlock(&idle_lock);
    return hit;
}

static void note_idle(uint64_t ctx, uint64_t stream, uint32_t seq)
{
    pthread_mutex_lock(&idle_lock);
    int slot = -1;
    for (int i = 0; i < IDLE_SLOTS && slot < 0; i++)
        if (idle[i].valid && idle[i].ctx == ctx && idle[i].stream == stream)
            slot = i;
    if (slot < 0)
        slot = (int)(next_slot++ % IDLE_SLOTS);
    idle[slot] = (struct idle_stream){ctx, stream, seq, 1};
    pthread_mutex_unlock(&idle_lock);
}

static int exact_only(void)
{
    static int exact = -1;
    if (exact < 0) {
        const char *v = getenv("RGPU_SYNC");
        exact = v && strcmp(v, "exact") == 0;
    }
    return exact;
}

static int may_defer(uint64_t stream)
{
    return rgpu_server_minor() >= 4 && !exact_only() && !rgpu_capture_active() && rgpu_stream_known(stream) &&
           !rgpu_work_unfinished() && !rgpu_shadows_held();
}

static CUresult stream_synchronize(CUstream s)
{
    uint64_t ctx = rgpu_thread_ctx(), stream = rgpu_stream_handle(s);
    /* (not while any stream captures: a synchronize may then be illegal, and the driver's refusal must come back) */
    if (rgpu_ready() == CUDA_SUCCESS && !rgpu_capture_active() && still_idle(ctx, stream, rgpu_stream_seq(stream)))
        return CUDA_SUCCESS;
    uint8_t a[RGPU_STREAM_SYNCHRONIZE_REQ_SIZE];
    rgpu_pack_stream_synchronize(a, &(struct rgpu_stream_synchronize_req){.stream = stream});
    CUresult r;
    if (rgpu_ready() == CUDA_SUCCESS && may_defer(stream)) {
        /* Not flushed: the queue goes with the next request that waits (measured on llama.cpp's token loop, one
         * frame per synchronize cost the server more than starting early saved), or as soon as it is full. */
        r = rgpu_defer_sync(a, sizeof a);
    } else {
        r = rgpu_call(RGPU_OP_STREAM_SYNCHRONIZE, a, sizeof a, NULL, 0, NULL, 0, NULL);
    }
    if (r == CUDA_SUCCESS)
        note_idle(ctx, stream, rgpu_stream_seq(stream));
    return r;
}

API CUresult cuStreamSynchronize(CUstream s) { return stream_synchronize(s); }
API CUresult cuStreamSynchronize_ptsz(CUstream s) { return stream_synchronize(s); }
