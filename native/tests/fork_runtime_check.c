/* fork_locks_check.c's runtime twin: a thread of the parent keeps asking libcudart for a stream's flags (which it
 * looks up in its stream table, under the table's lock) while the main thread forks again and again. Each child looks
 * up one of the parent's streams' flags (the same lock) under an alarm, then asks for its device and for memory: as
 * with NVIDIA's runtime in such a child, all three must answer cudaErrorInitializationError (3) -- the flags and the
 * device too, though the runtime could answer them from what it learnt before the fork -- while cudaGetDeviceCount
 * still answers (1 device: the fake backend's).
 *
 *   fork_runtime_check [forks]   prints "children: N answered 3, H hung, O other"; exits 0 when H and O are 0 */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>

#include "fork_children.h"

static cudaStream_t kept;

static void ask(void)
{
    unsigned flags;
    cudaStreamGetFlags(kept, &flags);
}

static int calls_in_child(void)
{
    unsigned flags;
    int dev = -1;
    void *q = NULL;
    int count = 0;
    return cudaStreamGetFlags(kept, &flags) == cudaErrorInitializationError &&
                   cudaGetDevice(&dev) == cudaErrorInitializationError && cudaMalloc(&q, 16) == cudaErrorInitializationError &&
                   cudaGetDeviceCount(&count) == cudaSuccess && count == 1
               ? 0 : 1;
}

int main(int argc, char **argv)
{
    int forks = argc > 1 ? atoi(argv[1]) : 200;
    void *p = NULL;
    if (cudaMalloc(&p, 4096) != cudaSuccess || cudaStreamCreate(&kept) != cudaSuccess) {
        fprintf(stderr, "fork_runtime_check: the parent's runtime calls failed\n");
        return 2;
    }
    return fork_children(forks, ask, calls_in_child, "answered 3");
}
