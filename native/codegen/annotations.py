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
    "cuMemGetInfo_v2": ("MEM_GET_INFO", "out0 out1"),
    "cuCtxSynchronize": ("CTX_SYNCHRONIZE", ""),
    "cuModuleUnload": ("MODULE_UNLOAD", "in0"),
    "cuStreamCreate": ("STREAM_CREATE", "out0 in0"),
    "cuStreamDestroy_v2": ("STREAM_DESTROY", "in0"),
    "cuStreamQuery": ("STREAM_QUERY", "in0"),
    "cuEventCreate": ("EVENT_CREATE", "out0 in0"),
    "cuEventDestroy_v2": ("EVENT_DESTROY", "in0"),
    "cuEventSynchronize": ("EVENT_SYNCHRONIZE", "in0"),
    "cuEventQuery": ("EVENT_QUERY", "in0"),
    "cuEventElapsedTime": ("EVENT_ELAPSED_TIME", "out0 in0 in1"),
    "cuEventElapsedTime_v2": ("EVENT_ELAPSED_TIME", "out0 in0 in1"),
    "cuCtxGetLimit": ("CTX_GET_LIMIT", "out0 in0"),
    "cuCtxSetLimit": ("CTX_SET_LIMIT", "in0 in1"),
    "cuCtxGetStreamPriorityRange": ("CTX_GET_STREAM_PRIORITY_RANGE", "out0 out1"),
    "cuStreamCreateWithPriority": ("STREAM_CREATE_WITH_PRIORITY", "out0 in0 in1"),
    "cuStreamGetFlags": ("STREAM_GET_INFO", "in0 out0"),
    "cuStreamGetPriority": ("STREAM_GET_INFO", "in0 out1"),
    "cuStreamGetCtx": ("STREAM_GET_INFO", "in0 out2"),
    "cuStreamGetId": ("STREAM_GET_INFO", "in0 out3"),
}

# Per-thread-default-stream variants (_ptsz / _ptds) of forwarded functions behave the same here: rgpu has
# one NULL stream per context. The generator gives them the same body.

HAND_WRITTEN = {
    # batches of pointer-to-pointer copies (copy_batch.c)
    "cuMemcpyBatchAsync_v2", "cuMemcpyBatchAsync_v2_ptsz", "cuMemcpyBatchAsync", "cuMemcpyBatchAsync_ptsz",
    # managed memory: one address on both sides, kept coherent by page protection (managed.c, managed12.c)
    "cuMemAllocManaged", "cuMemPrefetchAsync_v2", "cuMemPrefetchAsync_v2_ptsz", "cuMemAdvise_v2",
    "cuStreamAttachMemAsync", "cuStreamAttachMemAsync_ptsz", "cuMemPrefetchAsync", "cuMemPrefetchAsync_ptsz",
    "cuMemAdvise", "cuMemRangeGetAttribute", "cuMemRangeGetAttributes",
    # a graph as Graphviz DOT, from the mirror (graph_dot.c)
    "cuGraphDebugDotPrint",
    # protocol 1.9: capture into a graph, node enabling, event and child-graph setters, conditional nodes, graph
    # memory figures (graph.c, graph_nodes.c, graph_exec_nodes.c, graph_conditional.c, graph_mem.c)
    "cuStreamBeginCaptureToGraph", "cuStreamBeginCaptureToGraph_ptsz", "cuGraphNodeSetEnabled",
    "cuGraphNodeGetEnabled", "cuGraphEventRecordNodeSetEvent", "cuGraphEventWaitNodeSetEvent",
    "cuGraphExecEventRecordNodeSetEvent", "cuGraphExecEventWaitNodeSetEvent", "cuGraphExecChildGraphNodeSetParams",
    "cuGraphConditionalHandleCreate", "cuDeviceGraphMemTrim", "cuDeviceGetGraphMemAttribute",
    "cuDeviceSetGraphMemAttribute",
    # user objects, the program's own (graph_user_objects.c)
    "cuUserObjectCreate", "cuUserObjectRetain", "cuUserObjectRelease", "cuGraphRetainUserObject",
    "cuGraphReleaseUserObject",
    # a child graph node's own graph (graph_nodes.c)
    "cuGraphChildGraphNodeGetGraph",
    # an executable graph's flags, kept where it is minted (graph.c)
    "cuGraphExecGetFlags",
    # launch attributes from one kernel node's mirror onto another's (graph_params.c)
    "cuGraphKernelNodeCopyAttributes",
    # 3D copies between contexts: the copy itself, or through this host between two (peer.c)
    "cuMemcpy3DPeer", "cuMemcpy3DPeer_ptds", "cuMemcpy3DPeerAsync", "cuMemcpy3DPeerAsync_ptsz",
    # the launch API before CUDA 4 (launch_legacy.c)
    "cuFuncSetBlockShape", "cuFuncSetSharedSize", "cuParamSetSize", "cuParamSeti", "cuParamSetf", "cuParamSetv",
    "cuLaunch", "cuLaunchGrid", "cuLaunchGridAsync",
    # answered here: bus ids, shared memory bank sizes (driver.c)
    "cuDeviceGetByPCIBusId", "cuCtxGetSharedMemConfig", "cuCtxSetSharedMemConfig",
    # CUDA 13's context-naming forms (driver.c)
    "cuCtxGetDevice_v2", "cuCtxSynchronize_v2",
    # JIT linking on the server, logs and outputs filled on the client (jit_link.c)
    "cuLinkCreate_v2", "cuLinkAddData_v2", "cuLinkAddFile_v2", "cuLinkComplete", "cuLinkDestroy",
    # CUDA arrays and the copies with an array at an end (arrays.c), texture and surface objects (textures.c)
    "cuArrayCreate_v2", "cuArray3DCreate_v2", "cuArrayDestroy", "cuArrayGetDescriptor_v2", "cuArray3DGetDescriptor_v2",
    "cuMemcpyHtoA_v2", "cuMemcpyHtoA_v2_ptds", "cuMemcpyHtoAAsync_v2", "cuMemcpyHtoAAsync_v2_ptsz", "cuMemcpyAtoH_v2",
    "cuMemcpyAtoH_v2_ptds", "cuMemcpyAtoHAsync_v2", "cuMemcpyAtoHAsync_v2_ptsz", "cuMemcpyDtoA_v2",
    "cuMemcpyDtoA_v2_ptds", "cuMemcpyAtoD_v2", "cuMemcpyAtoD_v2_ptds", "cuMemcpyAtoA_v2", "cuMemcpyAtoA_v2_ptds",
    "cuTexObjectCreate", "cuTexObjectDestroy", "cuTexObjectGetResourceDesc", "cuTexObjectGetTextureDesc",
    "cuTexObjectGetResourceViewDesc", "cuSurfObjectCreate", "cuSurfObjectDestroy", "cuSurfObjectGetResourceDesc",
    # IPC handles minted by the server (ipc.c)
    "cuIpcGetMemHandle", "cuIpcOpenMemHandle_v2", "cuIpcCloseMemHandle", "cuIpcGetEventHandle", "cuIpcOpenEventHandle",
    # initialisation, versions, errors, entry points (native/src/driver.c)
    # stream synchronization answered locally when nothing was issued since the stream was idle (sync.c)
    "cuStreamSynchronize", "cuStreamSynchronize_ptsz",
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
    "cuDeviceGetPCIBusId",
    # memory (native/src/memory.c): local device/host range tables, bulk data, 2D copies, memsets
    "cuMemAlloc_v2", "cuMemAllocPitch_v2", "cuMemFree_v2", "cuMemGetAddressRange_v2",
    "cuMemHostAlloc", "cuMemAllocHost_v2", "cuMemFreeHost", "cuMemHostRegister_v2", "cuMemHostUnregister",
    "cuMemHostGetFlags", "cuMemHostGetDevicePointer_v2", "cuPointerGetAttribute", "cuPointerGetAttributes",
    "cuMemcpyHtoD_v2", "cuMemcpyDtoH_v2", "cuMemcpyHtoDAsync_v2", "cuMemcpyDtoHAsync_v2",
    "cuMemcpyHtoD_v2_ptds", "cuMemcpyDtoH_v2_ptds", "cuMemcpyHtoDAsync_v2_ptsz", "cuMemcpyDtoHAsync_v2_ptsz",
    "cuMemcpy", "cuMemcpy_ptds", "cuMemcpyAsync", "cuMemcpyAsync_ptsz",
    "cuMemcpyDtoD_v2", "cuMemcpyDtoD_v2_ptds", "cuMemcpyDtoDAsync_v2", "cuMemcpyDtoDAsync_v2_ptsz",
    # several devices (native/src/peer.c): peer access and copies, between servers through this host
    "cuDeviceCanAccessPeer", "cuCtxEnablePeerAccess", "cuCtxDisablePeerAccess", "cuMemcpyPeer", "cuMemcpyPeer_ptds",
    "cuMemcpyPeerAsync", "cuMemcpyPeerAsync_ptsz",
    "cuMemcpy2D_v2", "cuMemcpy2D_v2_ptds", "cuMemcpy2DUnaligned_v2", "cuMemcpy2DUnaligned_v2_ptds",
    "cuMemcpy2DAsync_v2", "cuMemcpy2DAsync_v2_ptsz",
    "cuMemcpy3D_v2", "cuMemcpy3D_v2_ptds", "cuMemcpy3DAsync_v2", "cuMemcpy3DAsync_v2_ptsz",  # (linear memory)
    # 1-D memsets too: a "device" pointer may be the program's own page-locked host memory (unified
    # addressing), which only this side can write
    "cuMemsetD8_v2", "cuMemsetD8_v2_ptds", "cuMemsetD8Async", "cuMemsetD8Async_ptsz",
    "cuMemsetD32_v2", "cuMemsetD32_v2_ptds", "cuMemsetD32Async", "cuMemsetD32Async_ptsz",
    "cuMemsetD16_v2", "cuMemsetD16_v2_ptds", "cuMemsetD16Async", "cuMemsetD16Async_ptsz",
    "cuMemsetD2D8_v2", "cuMemsetD2D8_v2_ptds", "cuMemsetD2D8Async", "cuMemsetD2D8Async_ptsz",
    "cuMemsetD2D16_v2", "cuMemsetD2D16_v2_ptds", "cuMemsetD2D16Async", "cuMemsetD2D16Async_ptsz",
    "cuMemsetD2D32_v2", "cuMemsetD2D32_v2_ptds", "cuMemsetD2D32Async", "cuMemsetD2D32Async_ptsz",
    # virtual memory management (native/src/vmm.c): mapped spans are device ranges for the rest of the shim
    "cuMemGetAllocationGranularity", "cuMemCreate", "cuMemRelease", "cuMemGetAllocationPropertiesFromHandle",
    "cuMemRetainAllocationHandle", "cuMemAddressReserve", "cuMemAddressFree", "cuMemMap", "cuMemUnmap",
    "cuMemSetAccess", "cuMemGetAccess",
    # stream-ordered memory (native/src/pools.c)
    "cuMemAllocAsync", "cuMemAllocAsync_ptsz", "cuMemAllocFromPoolAsync", "cuMemAllocFromPoolAsync_ptsz",
    "cuMemFreeAsync", "cuMemFreeAsync_ptsz", "cuDeviceGetDefaultMemPool", "cuDeviceGetMemPool", "cuDeviceSetMemPool",
    "cuMemGetDefaultMemPool", "cuMemGetMemPool", "cuMemSetMemPool", "cuMemPoolCreate", "cuMemPoolDestroy",
    "cuMemPoolTrimTo", "cuMemPoolSetAttribute", "cuMemPoolGetAttribute", "cuMemPoolSetAccess", "cuMemPoolGetAccess",
    # context-independent loading (native/src/library.c), on modules
    "cuLibraryLoadData", "cuLibraryLoadFromFile", "cuLibraryUnload", "cuLibraryGetModule", "cuLibraryGetKernel",
    "cuKernelGetFunction", "cuKernelGetLibrary", "cuLibraryGetGlobal", "cuKernelGetAttribute", "cuKernelSetAttribute",
    "cuKernelGetName",
    # occupancy searches (native/src/occupancy.c): the shared-memory callback runs here
    "cuOccupancyMaxPotentialBlockSize", "cuOccupancyMaxPotentialBlockSizeWithFlags",
    "cuOccupancyAvailableDynamicSMemPerBlock",
    # tensor maps (native/src/tensormap.c): encoded by the server's driver, opaque bytes back
    "cuTensorMapEncodeTiled", "cuTensorMapEncodeIm2col", "cuTensorMapReplaceAddress",
    # modules and launches: image sizes, parameter layouts
    "cuModuleLoadData", "cuModuleLoadDataEx", "cuModuleLoad", "cuModuleLoadFatBinary", "cuModuleGetFunction",
    "cuModuleGetGlobal_v2", "cuModuleGetLoadingMode",
    # functions and launches (native/src/launch.c): cached layouts and attributes, local stream-capture state
    "cuFuncGetParamInfo", "cuLaunchKernel", "cuLaunchKernel_ptsz", "cuFuncGetAttribute", "cuFuncSetAttribute",
    "cuFuncSetCacheConfig", "cuFuncSetSharedMemConfig", "cuFuncGetName",
    "cuOccupancyMaxActiveBlocksPerMultiprocessor", "cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags",
    "cuOccupancyMaxActiveClusters", "cuOccupancyMaxPotentialClusterSize",
    "cuLaunchKernelEx", "cuLaunchKernelEx_ptsz", "cuLaunchHostFunc", "cuLaunchHostFunc_ptsz",
    "cuLaunchCooperativeKernel", "cuLaunchCooperativeKernel_ptsz", "cuFuncGetModule", "cuFuncIsLoaded", "cuFuncLoad",
    "cuKernelGetParamInfo", "cuCtxGetId", "cuEventRecordWithFlags", "cuEventRecordWithFlags_ptsz",
    # stream attributes, their values as they are (native/src/stream_attrs.c)
    "cuStreamSetAttribute", "cuStreamSetAttribute_ptsz", "cuStreamGetAttribute", "cuStreamGetAttribute_ptsz",
    "cuStreamCopyAttributes", "cuStreamCopyAttributes_ptsz",
    # stream memory operations, deferred where they look well formed; host memory refused (native/src/stream_memops.c)
    "cuStreamWaitValue32_v2", "cuStreamWaitValue32_v2_ptsz", "cuStreamWaitValue64_v2", "cuStreamWaitValue64_v2_ptsz",
    "cuStreamWriteValue32_v2", "cuStreamWriteValue32_v2_ptsz", "cuStreamWriteValue64_v2",
    "cuStreamWriteValue64_v2_ptsz", "cuStreamBatchMemOp_v2", "cuStreamBatchMemOp_v2_ptsz",
    # a stream's device and plain context from cuStreamGetCtx, as this process numbers devices (driver.c)
    "cuStreamGetDevice", "cuStreamGetDevice_ptsz", "cuStreamGetCtx_v2", "cuStreamGetCtx_v2_ptsz",
    "cuStreamAddCallback", "cuStreamAddCallback_ptsz",
    # stream capture and graphs (native/src/graph.c): local capture state, client-minted graph handles
    "cuThreadExchangeStreamCaptureMode", "cuStreamIsCapturing", "cuStreamIsCapturing_ptsz",
    "cuStreamGetCaptureInfo_v2", "cuStreamGetCaptureInfo_v2_ptsz", "cuStreamGetCaptureInfo_v3",
    "cuStreamGetCaptureInfo_v3_ptsz", "cuStreamBeginCapture_v2", "cuStreamBeginCapture_v2_ptsz",
    "cuStreamEndCapture", "cuStreamEndCapture_ptsz", "cuEventRecord", "cuEventRecord_ptsz", "cuStreamWaitEvent",
    "cuStreamWaitEvent_ptsz", "cuGraphInstantiateWithFlags", "cuGraphInstantiateWithParams",
    "cuGraphInstantiateWithParams_ptsz", "cuGraphLaunch", "cuGraphLaunch_ptsz", "cuGraphUpload",
    "cuGraphUpload_ptsz", "cuGraphExecUpdate_v2", "cuGraphDestroy", "cuGraphExecDestroy",
    "cuStreamUpdateCaptureDependencies_v2", "cuStreamUpdateCaptureDependencies_v2_ptsz",
    # the explicit graph API (native/src/graph_nodes.c): a local mirror of each graph, deferred changes
    "cuGraphCreate", "cuGraphAddKernelNode_v2", "cuGraphKernelNodeGetParams_v2", "cuGraphKernelNodeSetParams_v2",
    "cuGraphExecKernelNodeSetParams_v2", "cuGraphKernelNodeGetAttribute", "cuGraphKernelNodeSetAttribute",
    "cuGraphAddMemsetNode", "cuGraphMemsetNodeGetParams", "cuGraphAddMemcpyNode", "cuGraphMemcpyNodeGetParams",
    "cuGraphAddEmptyNode", "cuGraphAddEventRecordNode", "cuGraphAddEventWaitNode", "cuGraphAddChildGraphNode",
    "cuGraphEventRecordNodeGetEvent", "cuGraphEventWaitNodeGetEvent", "cuGraphAddDependencies_v2",
    "cuGraphRemoveDependencies_v2", "cuGraphGetNodes", "cuGraphGetRootNodes", "cuGraphGetEdges_v2",
    "cuGraphNodeGetType", "cuGraphNodeGetDependencies_v2", "cuGraphClone", "cuGraphNodeFindInClone",
    "cuGraphDestroyNode", "cuGraphMemsetNodeSetParams", "cuGraphExecMemsetNodeSetParams",
    "cuGraphMemcpyNodeSetParams", "cuGraphExecMemcpyNodeSetParams", "cuGraphNodeGetDependentNodes_v2",
    # the generic node API, to the functions above by node type (native/src/graph_generic.c)
    "cuGraphAddNode_v2", "cuGraphAddNode", "cuGraphNodeSetParams", "cuGraphExecNodeSetParams",
    # host nodes, run on the client; executable graphs with them run in stages (native/src/graph_host.c, graph_stages.c)
    "cuGraphAddHostNode", "cuGraphHostNodeGetParams", "cuGraphHostNodeSetParams", "cuGraphExecHostNodeSetParams",
    # memory nodes (native/src/graph_nodes.c): the address from the server, the memory in the session's quota
    "cuGraphAddMemAllocNode", "cuGraphMemAllocNodeGetParams", "cuGraphAddMemFreeNode", "cuGraphMemFreeNodeGetParams",
}
