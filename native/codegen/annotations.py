"""Human-edited part of the shim spec: which driver functions forward to which opcode, and how each CUDA
parameter maps onto the opcode's request arguments / reply results (layouts from rgpu.protocol.ops).

Parameter map, one token per CUDA parameter, in order:
  inN   -> request argument N
  outN  -> pointer parameter written from reply result N (must be non-NULL: CUDA_ERROR_INVALID_VALUE)
  -     -> not sent (ignored)
Whether a call is deferred (queued and batched) comes from the opcode's `deferrable` flag.

Functions listed in HAND_WRITTEN are implemented in native/src/ (bulk data, local state, special ABI).
Everything else in cuda.h becomes a stub returning CUDA_ERROR_NOT_SUPPORTED that logs its name once.
"""

FORWARD = {
    "cuMemAlloc_v2": ("MEM_ALLOC", "out0 in0"),
    "cuMemFree_v2": ("MEM_FREE", "in0"),
    "cuMemGetInfo_v2": ("MEM_GET_INFO", "out0 out1"),
    "cuCtxSynchronize": ("CTX_SYNCHRONIZE", ""),
    "cuMemcpyDtoD_v2": ("MEMCPY_DTOD", "in0 in1 in2"),
    "cuMemcpyDtoDAsync_v2": ("MEMCPY_DTOD_ASYNC", "in0 in1 in2 in3"),
    "cuMemsetD8_v2": ("MEMSET_D8", "in0 in1 in2"),
    "cuMemsetD32_v2": ("MEMSET_D32", "in0 in1 in2"),
    "cuMemsetD8Async": ("MEMSET_D8_ASYNC", "in0 in1 in2 in3"),
    "cuMemsetD32Async": ("MEMSET_D32_ASYNC", "in0 in1 in2 in3"),
    "cuModuleUnload": ("MODULE_UNLOAD", "in0"),
    "cuStreamCreate": ("STREAM_CREATE", "out0 in0"),
    "cuStreamDestroy_v2": ("STREAM_DESTROY", "in0"),
    "cuStreamSynchronize": ("STREAM_SYNCHRONIZE", "in0"),
    "cuStreamQuery": ("STREAM_QUERY", "in0"),
    "cuStreamWaitEvent": ("STREAM_WAIT_EVENT", "in0 in1 in2"),
    "cuEventCreate": ("EVENT_CREATE", "out0 in0"),
    "cuEventDestroy_v2": ("EVENT_DESTROY", "in0"),
    "cuEventRecord": ("EVENT_RECORD", "in0 in1"),
    "cuEventSynchronize": ("EVENT_SYNCHRONIZE", "in0"),
    "cuEventQuery": ("EVENT_QUERY", "in0"),
    "cuEventElapsedTime": ("EVENT_ELAPSED_TIME", "out0 in0 in1"),
    "cuEventElapsedTime_v2": ("EVENT_ELAPSED_TIME", "out0 in0 in1"),
}

# Per-thread-default-stream variants (_ptsz / _ptds) of forwarded functions behave the same here: rgpu has
# one NULL stream per context. The generator gives them the same body.

HAND_WRITTEN = {
    # initialisation, versions, errors, entry points (native/src/driver.c)
    "cuInit", "cuDriverGetVersion", "cuGetErrorName", "cuGetErrorString", "cuGetProcAddress",
    "cuGetProcAddress_v2", "cuGetExportTable",
    # devices: answered from the cache filled at cuInit
    "cuDeviceGet", "cuDeviceGetCount", "cuDeviceGetName", "cuDeviceTotalMem_v2", "cuDeviceGetUuid",
    "cuDeviceGetUuid_v2", "cuDeviceGetAttribute", "cuDeviceComputeCapability",
    # contexts: thread-local current-context state
    "cuCtxCreate_v2", "cuCtxCreate_v3", "cuCtxCreate_v4", "cuCtxDestroy_v2", "cuCtxSetCurrent",
    "cuCtxGetCurrent", "cuCtxPushCurrent_v2", "cuCtxPopCurrent_v2", "cuCtxGetDevice",
    "cuDevicePrimaryCtxRetain", "cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxGetState",
    "cuDevicePrimaryCtxSetFlags_v2", "cuDevicePrimaryCtxReset_v2", "cuCtxGetApiVersion",
    # bulk data
    "cuMemcpyHtoD_v2", "cuMemcpyDtoH_v2", "cuMemcpyHtoDAsync_v2", "cuMemcpyDtoHAsync_v2",
    "cuMemcpyHtoD_v2_ptds", "cuMemcpyDtoH_v2_ptds", "cuMemcpyHtoDAsync_v2_ptsz", "cuMemcpyDtoHAsync_v2_ptsz",
    # modules and launches: image sizes, parameter layouts
    "cuModuleLoadData", "cuModuleLoadDataEx", "cuModuleLoad", "cuModuleLoadFatBinary", "cuModuleGetFunction",
    "cuModuleGetGlobal_v2", "cuFuncGetParamInfo", "cuLaunchKernel", "cuLaunchKernel_ptsz",
}
