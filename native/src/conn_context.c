/* Contexts: the calling thread's current one (thread-local), the one the server runs our calls in, and
 * the small answers read off the connection's state. */
#include <pthread.h>

#include "conn.h"

static __thread uint64_t t_ctx;

uint64_t rgpu_thread_ctx(void) { return t_ctx; }
void rgpu_set_thread_ctx(uint64_t ctx) { t_ctx = ctx; }

void rgpu_note_server_ctx(uint64_t ctx)
{
    pthread_mutex_lock(&rgpu_conn.lock);
    rgpu_conn.server_ctx = ctx;
    pthread_mutex_unlock(&rgpu_conn.lock);
}

void rgpu_forget_server_ctx(uint64_t ctx)
{
    for (int i = 0; i < rgpu_nservers; i++) {
        pthread_mutex_lock(&rgpu_conns[i].lock);
        if (rgpu_conns[i].server_ctx == ctx)
            rgpu_conns[i].server_ctx = 0;
        pthread_mutex_unlock(&rgpu_conns[i].lock);
    }
}

uint16_t rgpu_server_minor(void) { return rgpu_conn.server_minor; }

uint64_t rgpu_stream_handle(CUstream s)
{
    uintptr_t v = (uintptr_t)s;
    return (v == (uintptr_t)CU_STREAM_LEGACY || v == (uintptr_t)CU_STREAM_PER_THREAD) ? 0 : (uint64_t)v;
}

uint32_t rgpu_max_bulk(void) { return rgpu_conn.max_frame > 8192 ? rgpu_conn.max_frame - 4096 : 4096; }

uint32_t rgpu_max_chunk(void)
{
    uint32_t limit = rgpu_max_bulk();
    return limit < COPY_CHUNK ? limit : COPY_CHUNK;
}

/* With a PSK, a host-to-device copy goes in records the server's C request loop can open whole -- it uses no byte
 * of a record before its tag is checked, and holds the record in a buffer of four copy-ring slots (1 MiB) and a
 * frame head -- so that it streams them to the GPU; bigger ones its Python loop serves, several times slower
 * (bench/results/gpu-2026-12-04c-psk-dispatch). Records of one slot (256 KiB) cost a turn each on both ends --
 * the client waiting for the first sealed piece, the worker for the last opened one and the copy queued -- that
 * held a 1 MiB copy up to ~2.8 GB/s (bench/results/gpu-2026-12-04g-groups, run 6). */
#define SEALED_HTOD_CHUNK (1u << 20)

uint32_t rgpu_htod_chunk(size_t n)
{
    uint32_t chunk = rgpu_max_chunk(), sealed = rgpu_conn.sealed_chunk ? rgpu_conn.sealed_chunk : SEALED_HTOD_CHUNK;
    /* (a copy big enough for copy links is sealed a part at a time on them: no smaller records) */
    size_t linked = __atomic_load_n(&rgpu_conn.links_min_bytes, __ATOMIC_RELAXED);
    return rgpu_conn.protect && chunk > sealed && !(linked && n >= linked) ? sealed : chunk;
}

void conn_sync_context(uint16_t op)
{
    /* (a context of another server is not this one's to be told: a call routed here by a handle it names runs
     * in that handle's context) */
    if (rgpu_op_in_context(op) && t_ctx != rgpu_conn.server_ctx && conn_owns_ctx(t_ctx)) {
        uint8_t a[RGPU_CTX_SET_CURRENT_REQ_SIZE];
        rgpu_pack_ctx_set_current(a, &(struct rgpu_ctx_set_current_req){.ctx = t_ctx});
        if (conn_batch_append(RGPU_OP_CTX_SET_CURRENT, a, sizeof a, NULL, 0) == 0)
            rgpu_conn.server_ctx = t_ctx;
    }
}
