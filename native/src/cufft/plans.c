/* The plan table and a plan's settings, all local: cufftHandle n is slot n - 1 (slots are reused, as cuFFT reuses
 * handles); a handle that names no live plan is CUFFT_INVALID_PLAN. cuFFT's thread-safety rule holds here too:
 * one plan is used by one thread at a time, any number of plans by any threads. */
#include <pthread.h>
#include <stdlib.h>

#include "fft.h"
#include "fork_locks.h"

#define MAX_PLANS (1 << 20)

static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;
RGPU_FORK_RESET(table_lock, &table_lock)
static struct fft_plan **slots;
static int nslots;

struct fft_plan *rgpu_fft_plan(int handle)
{
    pthread_mutex_lock(&table_lock);
    struct fft_plan *p = handle >= 1 && handle <= nslots ? slots[handle - 1] : NULL;
    pthread_mutex_unlock(&table_lock);
    return p;
}

static int insert(struct fft_plan *p)
{
    int handle = 0;
    pthread_mutex_lock(&table_lock);
    for (int i = 0; i < nslots && !handle; i++)
        if (!slots[i])
            slots[i] = p, handle = i + 1;
    if (!handle && nslots < MAX_PLANS) {
        int grown = nslots ? 2 * nslots : 16;
        struct fft_plan **more = realloc(slots, sizeof *slots * (size_t)grown);
        if (more) {
            for (int i = nslots; i < grown; i++)
                more[i] = NULL;
            slots = more, more[nslots] = p, handle = nslots + 1, nslots = grown;
        }
    }
    pthread_mutex_unlock(&table_lock);
    return handle;
}

static struct fft_plan *take(int handle)
{
    pthread_mutex_lock(&table_lock);
    struct fft_plan *p = handle >= 1 && handle <= nslots ? slots[handle - 1] : NULL;
    if (p)
        slots[handle - 1] = NULL;
    pthread_mutex_unlock(&table_lock);
    return p;
}

FFT_API int cufftCreate(int *handle)
{
    if (!handle)
        return CUFFT_INVALID_VALUE;
    struct fft_plan *p = calloc(1, sizeof *p);
    if (!p)
        return CUFFT_ALLOC_FAILED;
    p->auto_allocate = 1;
    int h = insert(p);
    if (!h) {
        free(p);
        return CUFFT_ALLOC_FAILED;
    }
    *handle = h;
    return CUFFT_SUCCESS;
}

FFT_API int cufftDestroy(int handle)
{
    if (handle == RGPU_FFT_PLAN_NULL) /* cufft.h: "an uninitialized cufftHandle that is safe to destroy" */
        return CUFFT_SUCCESS;
    struct fft_plan *p = take(handle);
    if (!p)
        return CUFFT_INVALID_PLAN;
    int r = 0;
    if (p->made) {
        uint8_t args[RGPU_FFT_DESTROY_REQ_SIZE];
        rgpu_pack_fft_destroy(args, &(struct rgpu_fft_destroy_req){.plan = p->server});
        r = rgpu_ext_defer(RGPU_OP_FFT_DESTROY, args, sizeof args, NULL, 0);
    }
    if (p->owned_work)
        cudaFree(p->owned_work);
    free(p);
    return rgpu_fft_status(r);
}

FFT_API int cufftSetStream(int handle, void *stream)
{
    struct fft_plan *p = rgpu_fft_plan(handle);
    if (!p)
        return CUFFT_INVALID_PLAN;
    p->stream = stream;
    return CUFFT_SUCCESS;
}

FFT_API int cufftSetWorkArea(int handle, void *work)
{
    struct fft_plan *p = rgpu_fft_plan(handle);
    if (!p)
        return CUFFT_INVALID_PLAN;
    if (p->owned_work && p->owned_work != work) { /* the program's area replaces the one allocated for it */
        cudaFree(p->owned_work);
        p->owned_work = NULL;
    }
    p->work = work;
    return CUFFT_SUCCESS;
}

FFT_API int cufftSetAutoAllocation(int handle, int auto_allocate)
{
    struct fft_plan *p = rgpu_fft_plan(handle);
    if (!p)
        return CUFFT_INVALID_PLAN;
    p->auto_allocate = auto_allocate != 0;
    return CUFFT_SUCCESS;
}

FFT_API int cufftGetSize(int handle, size_t *work_size)
{
    struct fft_plan *p = rgpu_fft_plan(handle);
    if (!p || !p->made)
        return CUFFT_INVALID_PLAN;
    if (!work_size)
        return CUFFT_INVALID_VALUE;
    *work_size = p->work_size;
    return CUFFT_SUCCESS;
}
