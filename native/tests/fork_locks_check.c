/* A forked child's calls must fail at once even where a thread of the parent held a lock of libcuda when it forked:
 * here a thread keeps asking, and the main thread forks again and again; each child's cuMemcpyHtoD takes the same
 * lock before it fails. A child that hangs on the copy the fork made of a held lock is killed by its alarm. What the
 * thread asks:
 *   memory       cuPointerGetAttribute, which holds memory.c's device range lock while it looks (one of libcuda's
 *                own locks, not a connection's);
 *   connection   cuMemGetInfo, a round trip to the server under the connection's lock.
 *
 *   fork_locks_check [forks [memory|connection]]   prints "children: N failed with 3, H hung, O other"; exits 0
 *                                                   when H and O are 0 */
#include <string.h>

#include "check.h"
#include "fork_children.h"

static CUcontext ctx;
static CUdeviceptr dptr;

static void ask(void) /* (on fork_children's thread: the context made current there first) */
{
    static __thread int current;
    if (!current) {
        CHECK(cuCtxSetCurrent(ctx));
        current = 1;
    }
    CUcontext c;
    cuPointerGetAttribute(&c, CU_POINTER_ATTRIBUTE_CONTEXT, dptr);
}

static void ask_server(void) /* (a context current on fork_children's thread, as ask's) */
{
    size_t free_bytes, total;
    ask();
    cuMemGetInfo(&free_bytes, &total);
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
    int connection = argc > 2 && !strcmp(argv[2], "connection");
    return fork_children(forks, connection ? ask_server : ask, copy_in_child, "failed with 3");
}
