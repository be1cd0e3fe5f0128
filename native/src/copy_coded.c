/* Asynchronous host-to-device copies sent coded as runs (MEMCPY_HTOD_RUNS, copy_runs.h) where that makes them
 * much smaller: llama.cpp's 1 MiB of KV-cache row indices per prompt step becomes 3 KiB, its attention mask a
 * twentieth. Coding a copy costs the caller a fraction of what sending its bytes over loopback does (measured:
 * bench/results/cpu-2026-12-05b-coded against gpu-2026-12-04e-bench-reps); bytes that do not code are given up on
 * after 16 KiB. RGPU_CODED_COPIES=0 sends every copy as it is. */
#include <stdlib.h>

#include "conn.h"
#include "copy_runs.h"
#include "rgpu_shim.h"

/* Smaller copies cost a socket too little to be worth the look. */
#define CODED_MIN (64u << 10)

static int wanted = -1;

int rgpu_coded_copies(size_t n)
{
    int v = __atomic_load_n(&wanted, __ATOMIC_RELAXED);
    if (v < 0) {
        const char *env = getenv("RGPU_CODED_COPIES");
        v = !(env && env[0] == '0' && !env[1]);
        __atomic_store_n(&wanted, v, __ATOMIC_RELAXED);
    }
    return n >= CODED_MIN && v;
}

int rgpu_htod_coded(CUdeviceptr dst, const void *src, size_t n, uint64_t stream, CUresult *r)
{
    uint8_t a[RGPU_MEMCPY_HTOD_RUNS_REQ_SIZE], routed[RGPU_ROUTE_BUF];
    const void *args = a;
    rgpu_pack_memcpy_htod_runs(a, &(struct rgpu_memcpy_htod_runs_req){.dst = dst, .stream = stream, .size = n});
    /* (the server the copy goes to must know the operation: with several, not the one the last call went to) */
    if (conn_select(RGPU_OP_MEMCPY_HTOD_RUNS, &args, sizeof a, routed) != CUDA_SUCCESS || rgpu_server_minor() < 6)
        return 0;
    /* At most a quarter of the copy, and RGPU_RUNS_MAX_CODED_BYTES: it then travels inside a batch, copied there
     * (conn_batch.c's INLINE_BULK_LIMIT), so the buffer is free again when rgpu_defer returns. */
    size_t cap = n / 4 < RGPU_RUNS_MAX_CODED_BYTES ? n / 4 : RGPU_RUNS_MAX_CODED_BYTES, len;
    uint8_t *coded = malloc(cap);
    if (!coded || !(len = rgpu_runs_encode(src, n, coded, cap))) {
        free(coded);
        return 0;
    }
    *r = rgpu_defer(RGPU_OP_MEMCPY_HTOD_RUNS, a, sizeof a, coded, len);
    free(coded);
    return 1;
}
