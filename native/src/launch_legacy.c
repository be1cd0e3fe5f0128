/* The launch API from before CUDA 4 (cuFuncSetBlockShape, cuFuncSetSharedSize, cuParamSetSize, cuParamSeti/f/v,
 * cuLaunch, cuLaunchGrid, cuLaunchGridAsync), still declared by cuda.h and still called by old programs: each
 * function's block shape, shared memory and parameter bytes are kept here, and a launch is cuLaunchKernel with
 * that buffer (CU_LAUNCH_PARAM_BUFFER_POINTER), which the server checks against the kernel's parameter layout.
 * cuParamSetTexRef names a texture reference, which rgpu does not have (NOT_SUPPORTED stub). */
#include <string.h>

#include "keyed.h"
#include "rgpu_shim.h"

#define API __attribute__((visibility("default")))
/* The old API's space was 4 KiB; CUDA 13's driver takes a parameter at offset 4094 (measured on the H200), so the
 * space is what a launch may carry now. */
#define PARAM_SPACE RGPU_MAX_PARAM_BYTES

struct legacy {
    int block[3];
    unsigned shared, size;
    uint8_t params[PARAM_SPACE];
};

static struct rgpu_keyed kept = RGPU_KEYED_INIT;
RGPU_FORK_RESET(legacy_lock, &kept.lock)

static CUresult load(CUfunction f, struct legacy *l)
{
    if (!f)
        return CUDA_ERROR_INVALID_HANDLE;
    if (rgpu_keyed_get(&kept, (uint64_t)(uintptr_t)f, l, sizeof *l) != 0) {
        memset(l, 0, sizeof *l);
        l->block[0] = l->block[1] = l->block[2] = 1;
    }
    return CUDA_SUCCESS;
}

static CUresult store(CUfunction f, const struct legacy *l)
{
    rgpu_keyed_take(&kept, (uint64_t)(uintptr_t)f, NULL, 0);
    return rgpu_keyed_put(&kept, (uint64_t)(uintptr_t)f, l, sizeof *l) ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_SUCCESS;
}

API CUresult cuFuncSetBlockShape(CUfunction f, int x, int y, int z)
{
    struct legacy l;
    CUresult r = load(f, &l);
    if (r != CUDA_SUCCESS || x <= 0 || y <= 0 || z <= 0)
        return r != CUDA_SUCCESS ? r : CUDA_ERROR_INVALID_VALUE;
    l.block[0] = x, l.block[1] = y, l.block[2] = z;
    return store(f, &l);
}

API CUresult cuFuncSetSharedSize(CUfunction f, unsigned int bytes)
{
    struct legacy l;
    CUresult r = load(f, &l);
    if (r != CUDA_SUCCESS)
        return r;
    l.shared = bytes;
    return store(f, &l);
}

API CUresult cuParamSetSize(CUfunction f, unsigned int bytes)
{
    struct legacy l;
    CUresult r = load(f, &l);
    if (r != CUDA_SUCCESS || bytes > PARAM_SPACE)
        return r != CUDA_SUCCESS ? r : CUDA_ERROR_INVALID_VALUE;
    l.size = bytes;
    return store(f, &l);
}

static CUresult set(CUfunction f, int offset, const void *value, unsigned int n)
{
    struct legacy l;
    CUresult r = load(f, &l);
    if (r != CUDA_SUCCESS || !value || offset < 0 || n > PARAM_SPACE || (unsigned)offset > PARAM_SPACE - n)
        return r != CUDA_SUCCESS ? r : CUDA_ERROR_INVALID_VALUE;
    memcpy(l.params + offset, value, n);
    return store(f, &l);
}

API CUresult cuParamSeti(CUfunction f, int offset, unsigned int value) { return set(f, offset, &value, sizeof value); }
API CUresult cuParamSetf(CUfunction f, int offset, float value) { return set(f, offset, &value, sizeof value); }
API CUresult cuParamSetv(CUfunction f, int offset, void *ptr, unsigned int bytes) { return set(f, offset, ptr, bytes); }

static CUresult launch(CUfunction f, int width, int height, CUstream s)
{
    struct legacy l;
    CUresult r = load(f, &l);
    if (r != CUDA_SUCCESS || width <= 0 || height <= 0)
        return r != CUDA_SUCCESS ? r : CUDA_ERROR_INVALID_VALUE;
    size_t size = l.size;
    void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, l.params, CU_LAUNCH_PARAM_BUFFER_SIZE, &size, CU_LAUNCH_PARAM_END};
    return cuLaunchKernel(f, (unsigned)width, (unsigned)height, 1, (unsigned)l.block[0], (unsigned)l.block[1],
                          (unsigned)l.block[2], l.shared, s, NULL, extra);
}

API CUresult cuLaunch(CUfunction f) { return launch(f, 1, 1, NULL); }
API CUresult cuLaunchGrid(CUfunction f, int width, int height) { return launch(f, width, height, NULL); }
API CUresult cuLaunchGridAsync(CUfunction f, int width, int height, CUstream s) { return launch(f, width, height, s); }
