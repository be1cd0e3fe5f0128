/* A forked child's calls must fail at once even where a thread of the parent held one of libcuda's own locks
 * (not a connection's) when it forked: here a thread keeps asking cuPointerGetAttribute, which holds memory.c's
 * device range lock while it looks, and the main thread forks again and again; each child's cuMemcpyHtoD takes that
 * lock before it reaches its connection. A child that hangs on the copy the fork made of a held lock is killed by
 * its alarm.
 *
 *   fork_locks_check [forks]   prints "children: N failed with 3, H hung, O other"; exits 0 when H and O are 0 */
#include <pthread.h>

#include "check.h"
#include "fork_children.h"

static CUcontext ctx;
static CUdeviceptr dptr;
static volatile int stop;

static void *asker(void *arg)
{
    (void)arg;
    CHECK(cuCtxSetCurrent(ctx));
    while (!stop) {
        CUcontext c;
        cuPointerGetAttribute(&c, CU_POINTER_ATTRIBUTE_CONTEXT, dptr);
    }
    return NULL;
}

static int copy_in_child(void)
{
    char buf[16] = {0};
    return cuMemcpyHtoD(dptr, buf, sizeof buf) == CUDA_ERROR_NOT_INITIALIZED ? 0 : 1;
}

int main(int argc, char **argv)
{
    int forks = argc > 1 ? atoi(argv[1]) : 200;
    CUdevice dev;
    CHECK(cuInit(0));
    CHECK(cuDeviceGet(&dev, 0));
    CHECK(cuCtxCreate(&ctx, NULL, 0, dev));
    CHECK(cuMemAlloc(&dptr, 4096));
    pthread_t t;
    pthread_create(&t, NULL, asker, NULL);
    usleep(10000);
    int bad = fork_children(forks, copy_in_child, "failed with 3");
    stop = 1;
    pthread_join(t, NULL);
    return bad;
}
