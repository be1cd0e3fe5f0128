/* Internal interface of rgpu's CUDA runtime (libcudart.so.12 / .so.13): a runtime written on the driver API.
 *
 * It links against libcuda.so.1 -- rgpu's driver shim when run through rgpu, or a real driver, which is how it
 * is checked against real CUDA -- and so shares the shim's one connection. Whatever the runtime can answer from
 * what it already knows, it answers locally; asynchronous work goes down the driver shim's deferred path. */
#ifndef RGPU_RT_H
#define RGPU_RT_H

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

/* Every exported runtime entry point is defined with RT_API: native/codegen/gen.py finds them by it and
 * generates NOT_SUPPORTED stubs for the rest of cuda_runtime_api.h. */
#define RT_API __attribute__((visibility("default")))
#define RT_MAX_DEVICES 16

/* errors.c */
cudaError_t rt_map(CUresult r);           /* driver result -> runtime error */
cudaError_t rt_record(cudaError_t e);     /* remember e as the thread's last error (if it is one); returns e */
cudaError_t rt_fail(CUresult r);          /* rt_record(rt_map(r)) */
cudaError_t rt_unsupported(int *logged, const char *name);
void rt_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));  /* warnings: shown unless RGPU_LOG=error or off */
void rt_info(const char *fmt, ...) __attribute__((format(printf, 1, 2))); /* shown with RGPU_LOG=info|debug */

/* state.c: initialisation, the thread's device and its primary context */
cudaError_t rt_initialised(void);         /* cudaSuccess once started (not in a child forked after that) */
cudaError_t rt_context(int *device);      /* make the thread's context current; device may be NULL */
/* register.c: __managed__ variables across cudaDeviceReset (saved before it, loaded again and restored after) */
struct rt_managed_saved;
struct rt_managed_saved *rt_managed_save(int dev);
void rt_managed_reload(int dev, struct rt_managed_saved *saved);
uint32_t rt_generation(int device);       /* bumped by cudaDeviceReset: cached modules are gone */
cudaError_t rt_primary(int device, CUcontext *ctx); /* the device's primary context (retained on first use) */
struct rt_device_limits {
    unsigned threads, block[3], grid[3];
};
const struct rt_device_limits *rt_device_limits(int device); /* launch-shape limits, read once */

/* register.c */
struct rt_kernel;
struct rt_kernel *rt_kernel_of(const void *func); /* host stub (or a handle from __cudaGetKernel) */
cudaError_t rt_kernel_function(struct rt_kernel *k, int device, CUfunction *out);
const void *rt_host_of_function(CUfunction f); /* the host stub a CUfunction came from (NULL: none) */

/* Body of the many calls that are one driver call in the thread's context. */
#define WITH_CONTEXT(call)                                                                                         \
    do {                                                                                                           \
        cudaError_t e_ = rt_context(NULL);                                                                         \
        return e_ != cudaSuccess ? rt_record(e_) : rt_fail(call);                                                  \
    } while (0)

/* graph_control.c: cudaGraphAddNode of a conditional node (sets p->phGraph_out) */
cudaError_t rt_add_conditional(cudaGraphNode_t *node, cudaGraph_t graph, const cudaGraphNode_t *deps, size_t n,
                               struct cudaConditionalNodeParams *p);

/* memory.c: a copy's checks and context (cudaErrorInvalidMemcpyDirection...), each end's memory type for `kind` */
cudaError_t rt_copy_start(enum cudaMemcpyKind kind);
void rt_memory_types(enum cudaMemcpyKind kind, CUmemorytype *src, CUmemorytype *dst);
/* arrays.c: cudaMemcpy3D with a CUDA array at an end (the extent and the array's position in its elements) */
cudaError_t rt_copy_3d(const struct cudaMemcpy3DParms *p, cudaStream_t s, int async); /* arrays.c: any ends */

/* params.c: a kernel's parameter layout from its fatbin (count, or -1), for drivers without cuFuncGetParamInfo */
int rt_image_param_layout(const void *fatbin, const char *kernel, uint32_t (*layout)[2], int max);

/* The thread's pending <<<>>> configurations (__cudaPushCallConfiguration / Pop). */
struct rt_launch_config {
    dim3 grid, block;
    size_t shmem;
    cudaStream_t stream;
};

#endif
