/* IPC in the runtime, on the driver's (the driver shim's ipc.c): the handles are the same 64 bytes. */
#include <string.h>

#include "rt.h"

_Static_assert(sizeof(cudaIpcMemHandle_t) == sizeof(CUipcMemHandle), "one handle");
_Static_assert(sizeof(cudaIpcEventHandle_t) == sizeof(CUipcEventHandle), "one handle");

RT_API cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t *handle, void *ptr)
{
    WITH_CONTEXT(cuIpcGetMemHandle((CUipcMemHandle *)handle, (CUdeviceptr)(uintptr_t)ptr));
}

RT_API cudaError_t cudaIpcOpenMemHandle(void **ptr, cudaIpcMemHandle_t handle, unsigned int flags)
{
    CUipcMemHandle h;
    CUdeviceptr p;
    if (!ptr)
        return rt_record(cudaErrorInvalidValue);
    memcpy(&h, &handle, sizeof h);
    cudaError_t e = rt_context(NULL);
    if (e != cudaSuccess)
        return rt_record(e);
    CUresult r = cuIpcOpenMemHandle(&p, h, flags);
    if (r == CUDA_SUCCESS)
        *ptr = (void *)(uintptr_t)p;
    return rt_fail(r);
}

RT_API cudaError_t cudaIpcCloseMemHandle(void *ptr) { WITH_CONTEXT(cuIpcCloseMemHandle((CUdeviceptr)(uintptr_t)ptr)); }

RT_API cudaError_t cudaIpcGetEventHandle(cudaIpcEventHandle_t *handle, cudaEvent_t event)
{
    WITH_CONTEXT(cuIpcGetEventHandle((CUipcEventHandle *)handle, (CUevent)event));
}

RT_API cudaError_t cudaIpcOpenEventHandle(cudaEvent_t *event, cudaIpcEventHandle_t handle)
{
    CUipcEventHandle h;
    CUevent ev;
    if (!event)
        return rt_record(cudaErrorInvalidValue);
    memcpy(&h, &handle, sizeof h);
    cudaError_t e = rt_context(NULL);
    if (e != cudaSuccess)
        return rt_record(e);
    CUresult r = cuIpcOpenEventHandle(&ev, h);
    if (r == CUDA_SUCCESS)
        *event = (cudaEvent_t)ev;
    return rt_fail(r);
}
