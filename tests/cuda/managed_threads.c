/* Managed memory touched from several threads (rgpu's native/src/managed.c keeps the program's and the device's
 * bytes the same in chunks): a chunk one thread faults in while another writes into it loses no write; a thread
 * with no current context reads what the device wrote; four threads read one chunk at once. Built with gcc
 * against cuda.h and -lcuda; exits 0 and prints "managed_threads OK" when every check holds. */
#include <cuda.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>

#define CU(call)                                                                                                    \
    do {                                                                                                            \
        CUresult r_ = (call);                                                                                       \
        if (r_ != CUDA_SUCCESS) {                                                                                   \
            fprintf(stderr, "%s:%d: %s -> %d\n", __FILE__, __LINE__, #call, (int)r_);                              \
            return 1;                                                                                               \
        }                                                                                                           \
    } while (0)

static CUcontext ctx;
static volatile int *words; /* one 64 KiB chunk's worth, and more */
static CUdeviceptr plain;
static atomic_int go, written;

/* Writes words[4000] (the chunk of words[0]) when told, after a delay that varies from round to round. */
static void *writer(void *arg)
{
    (void)arg;
    cuCtxSetCurrent(ctx);
    for (int k = 1;; k++) {
        int g;
        while ((g = atomic_load(&go)) != k)
            if (g < 0)
                return NULL;
        for (volatile int d = 0; d < (k * 7919) % 20000; d++)
            ;
        words[4000] = k;
        atomic_store(&written, k);
    }
}

static int reader_saw;
static void *reader_without_context(void *arg) /* (never sets a context) */
{
    reader_saw = ((volatile int *)arg)[10];
    return NULL;
}

static atomic_int readers_ok;
static void *reader(void *arg)
{
    volatile int *w = arg;
    int ok = 1;
    for (int i = 0; i < 16384; i += 97)
        ok &= w[i] == 0x01010101;
    atomic_fetch_add(&readers_ok, ok);
    return NULL;
}

int main(void)
{
    CUdevice dev;
    CUdeviceptr p;
    CU(cuInit(0));
    CU(cuDeviceGet(&dev, 0));
    CU(cuDevicePrimaryCtxRetain(&ctx, dev));
    CU(cuCtxSetCurrent(ctx));
    CU(cuMemAllocManaged(&p, 1 << 17, CU_MEM_ATTACH_GLOBAL));
    CU(cuMemAlloc(&plain, 256));
    words = (volatile int *)(uintptr_t)p;

    /* A chunk faulted in by this thread while another writes into it. */
    pthread_t t;
    pthread_create(&t, NULL, writer, NULL);
    int lost = 0, rounds = 2000;
    for (int k = 1; k <= rounds; k++) {
        words[0] = -k;
        CU(cuMemsetD8(plain, 0, 256)); /* a request: the chunk goes to the device */
        CU(cuCtxSynchronize());
        atomic_store(&go, k);
        (void)words[0]; /* and comes back, while the writer writes */
        while (atomic_load(&written) != k)
            ;
        CU(cuMemsetD8(plain, 0, 256)); /* the writer's word goes up with this request */
        CU(cuCtxSynchronize());
        lost += words[4000] != k;
    }
    atomic_store(&go, -1);
    pthread_join(t, NULL);
    printf("writes lost while a chunk came back: %d of %d\n", lost, rounds);

    /* What the device wrote, read by a thread that never made a context current. */
    CU(cuMemsetD32(p, 7, 64));
    CU(cuCtxSynchronize());
    pthread_create(&t, NULL, reader_without_context, (void *)words);
    pthread_join(t, NULL);
    printf("a thread without a context reads %d (7 written)\n", reader_saw);

    /* Four readers of one chunk at once. */
    CU(cuMemsetD8(p, 1, 1 << 16));
    CU(cuCtxSynchronize());
    pthread_t r[4];
    for (int i = 0; i < 4; i++)
        pthread_create(&r[i], NULL, reader, (void *)words);
    for (int i = 0; i < 4; i++)
        pthread_join(r[i], NULL);
    printf("readers that saw the device's bytes: %d of 4\n", atomic_load(&readers_ok));

    CU(cuMemFree(plain));
    CU(cuMemFree(p));
    if (lost || reader_saw != 7 || atomic_load(&readers_ok) != 4)
        return 1;
    printf("managed_threads OK\n");
    return 0;
}
