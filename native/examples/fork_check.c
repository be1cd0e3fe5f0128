/* fork() while another thread copies: the child's CUDA calls must fail as the driver fails a child of a process
 * that had initialised CUDA, and they must not disturb the parent, whose copies (big ones, over copy links under
 * RGPU_COPY_LINKS) go on during and after the child's life and keep their bytes. The child exits through exit(),
 * so its destructors run too.
 *
 *   fork_check   prints the child's three statuses, then "parent: ... 0 wrong"; exits 0, or 2 on a parent's failure */
#include <pthread.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"

#define BYTES (4u << 20)

static CUcontext ctx;
static CUdeviceptr dev_a, dev_b;
static volatile int stop;
static int copies, thread_wrong, wrong;

static void fill(unsigned char *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)(i * 13u + seed * 101u + (i >> 12));
}

static void *copier(void *arg)
{
    (void)arg;
    unsigned char *in = malloc(BYTES), *out = malloc(BYTES);
    CHECK(cuCtxSetCurrent(ctx));
    for (unsigned r = 0; !stop; r++) {
        fill(in, BYTES, r);
        CHECK(cuMemcpyHtoD(dev_b, in, BYTES));
        CHECK(cuMemcpyDtoH(out, dev_b, BYTES));
        thread_wrong += memcmp(in, out, BYTES) != 0;
        __atomic_add_fetch(&copies, 1, __ATOMIC_RELAXED);
    }
    free(in), free(out);
    return NULL;
}

int main(void)
{
    CUdevice dev;
    CHECK(cuInit(0));
    CHECK(cuDeviceGet(&dev, 0));
    CHECK(cuCtxCreate(&ctx, NULL, 0, dev));
    CHECK(cuMemAlloc(&dev_a, BYTES));
    CHECK(cuMemAlloc(&dev_b, BYTES));
    unsigned char *in = malloc(BYTES), *out = malloc(BYTES);
    fill(in, BYTES, 1000);
    CHECK(cuMemcpyHtoD(dev_a, in, BYTES));
    pthread_t t;
    pthread_create(&t, NULL, copier, NULL);
    while (!__atomic_load_n(&copies, __ATOMIC_RELAXED))
        usleep(1000);
    fflush(stdout);
    pid_t child = fork();
    if (child == 0) {
        CUdeviceptr mine = 0;
        int copy = cuMemcpyHtoD(dev_a, out, BYTES), alloc = cuMemAlloc(&mine, 4096), sync = cuCtxSynchronize();
        printf("child: copy %d, alloc %d, synchronize %d\n", copy, alloc, sync);
        exit(0);
    }
    int status = 0;
    for (unsigned r = 0; r < 3; r++) { /* (while the child lives, and after) */
        fill(in, BYTES, r);
        CHECK(cuMemcpyHtoD(dev_a, in, BYTES));
        memset(out, 0, BYTES);
        CHECK(cuMemcpyDtoH(out, dev_a, BYTES));
        wrong += memcmp(in, out, BYTES) != 0;
        if (r == 0 && waitpid(child, &status, 0) != child)
            return 2;
    }
    stop = 1;
    pthread_join(t, NULL);
    wrong += thread_wrong;
    printf("parent: child exited with %d; its copies and the thread's went on, %d wrong\n",
           WIFEXITED(status) ? WEXITSTATUS(status) : -1, wrong);
    return wrong ? 2 : 0;
}
