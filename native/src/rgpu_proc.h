/* Entry-point table for cuGetProcAddress (native/gen/proctable.c). Deliberately free of cuda.h. */
#ifndef RGPU_PROC_H
#define RGPU_PROC_H

#include <stddef.h>

struct rgpu_proc {
    const char *name;    /* base name, e.g. "cuMemAlloc" */
    int version;         /* the CUDA version this entry point appeared at (cudaTypedefs.h's PFN_*_vNNNN), 0: any */
    void *fn;            /* the entry point */
    void *fn_per_thread; /* its per-thread-default-stream variant (or fn) */
};
extern const struct rgpu_proc rgpu_proc_table[];

#endif
