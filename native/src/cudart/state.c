/* Initialisation, devices and their primary contexts, device properties, versions and entry points. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "rt.h"
#include "fork_locks.h"

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static CUresult init_result;
static int device_count;

/* A child forked after this process initialised CUDA: the driver fails its calls, and NVIDIA's runtime answers
 * cudaErrorInitializationError, cudaGetDevice included -- so does this one, which would otherwise answer from what
 * it had learnt before the fork. cudaGetDeviceCount still answers the count, as NVIDIA's does there. */
static int forked;

static void forked_child(void)
{
    forked = 1;
}

static void init(void)
{
    init_result = cuInit(0);
    if (init_result == CUDA_SUCCESS)
        init_result = cuDeviceGetCount(&device_count);
    if (init_result == CUDA_SUCCESS && device_count == 0)
        init_result = CUDA_ERROR_NO_DEVICE;
    if (device_count > RT_MAX_DEVICES)
        device_count = RT_MAX_DEVICES;
    if (init_result == CUDA_SUCCESS)
        pthread_atfork(NULL, NULL, forked_child);
}

static cudaError_t initialised(void)
{
    pthread_once(&init_once, init);
    if (forked)
        return cudaErrorInitializationError;
    if (init_result == CUDA_SUCCESS)
        return cudaSuccess;
    return init_result == CUDA_ERROR_NO_DEVICE ? cudaErrorNoDevice : rt_map(init_result);
}

cudaError_t rt_initialised(void) { return initialised(); }

/* -- per-device primary contexts, retained on first use --------------------------------------------------- */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
RGPU_FORK_RESET(lock, &lock)
static CUcontext primary[RT_MAX_DEVICES];
static unsigned device_flags[RT_MAX_DEVICES];
static uint32_t generation[RT_MAX_DEVICES];

uint32_t rt_generation(int device) { return __atomic_load_n(&generation[device], __ATOMIC_ACQUIRE); }

static __thread int thread_device; /* cudaSetDevice's, for when no context is current */

static cudaError_t primary_context(int dev, CUcontext *out)
{
    cudaError_t e = cudaSuccess;
    pthread_mutex_lock(&lock);
    if (!primary[dev]) {
        CUresult r = cuDevicePrimaryCtxRetain(&primary[dev], dev);
        if (r != CUDA_SUCCESS) {
            primary[dev] = NULL;
            e = rt_map(r);
        }
    }
    *out = primary[dev];
    pthread_mutex_unlock(&lock);
    return e;
}

cudaError_t rt_primary(int dev, CUcontext *ctx)
{
    cudaError_t e = initialised();
    if (e != cudaSuccess)
        return e;
    if (dev < 0 || dev >= device_count)
        return cudaErrorInvalidDevice;
    return primary_context(dev, ctx);
}

/* Make the device's primary context current on this thread. */
static cudaError_t use_primary(int dev)
{
    CUcontext want, cur = NULL;
    cudaError_t e = primary_context(dev, &want);
    if (e != cudaSuccess)
        return e;
    cuCtxGetCurrent(&cur);
    return cur == want ? cudaSuccess : rt_map(cuCtxSetCurrent(want));
}

cudaError_t rt_context(int *device)
{
    cudaError_t e = initialised();
    if (e != cudaSuccess)
        return e;
    CUcontext cur = NULL;
    cuCtxGetCurrent(&cur);
    if (cur) {
        /* Whatever context is current is the runtime's, as in CUDA's: the primary context cudaSetDevice made
         * current, or one the program made or pushed with the driver API since (then its streams, memory and
         * launches all live in that context, and mix freely with driver calls). */
        CUdevice d = 0;
        if (cuCtxGetDevice(&d) == CUDA_SUCCESS && d >= 0 && d < device_count) {
            if (device)
                *device = d;
            return cudaSuccess;
        }
    }
    e = use_primary(thread_device);
    if (e == cudaSuccess && device)
        *device = thread_device;
    return e;
}

static struct rt_device_limits limits[RT_MAX_DEVICES];
static int limits_loaded[RT_MAX_DEVICES];

static int attr(CUdevice dev, CUdevice_attribute a);

const struct rt_device_limits *rt_device_limits(int dev)
{
    if (!__atomic_load_n(&limits_loaded[dev], __ATOMIC_ACQUIRE)) {
        struct rt_device_limits l = {
            (unsigned)attr(dev, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK),
            {(unsigned)attr(dev, CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X), (unsigned)attr(dev, CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y),
             (unsigned)attr(dev, CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z)},
            {(unsigned)attr(dev, CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X), (unsigned)attr(dev, CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y),
             (unsigned)attr(dev, CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z)}};
        pthread_mutex_lock(&lock);
        limits[dev] = l;
        __atomic_store_n(&limits_loaded[dev], 1, __ATOMIC_RELEASE);
        pthread_mutex_unlock(&lock);
    }
    return &limits[dev];
}

RT_API cudaError_t cudaGetDeviceCount(int *count)
{
    if (!count)
        return rt_record(cudaErrorInvalidValue);
    cudaError_t e = forked ? cudaSuccess : initialised(); /* (forked: only after a successful start) */
    *count = e == cudaSuccess ? device_count : 0;
    return rt_record(e);
}

RT_API cudaError_t cudaSetDevice(int dev)
{
    cudaError_t e = initialised();
    if (e != cudaSuccess)
        return rt_record(e);
    if (dev < 0 || dev >= device_count)
        return rt_record(cudaErrorInvalidDevice);
    thread_device = dev;
    return rt_record(use_primary(dev)); /* CUDA 12+: setting a device makes its primary context current */
}

RT_API cudaError_t cudaInitDevice(int dev, unsigned int device_flags_, unsigned int flags)
{
    (void)device_flags_, (void)flags;
    cudaError_t e = initialised();
    if (e == cudaSuccess && (dev < 0 || dev >= device_count))
        e = cudaErrorInvalidDevice;
    CUcontext c;
    return rt_record(e == cudaSuccess ? primary_context(dev, &c) : e);
}

RT_API cudaError_t cudaGetDevice(int *dev)
{
    if (!dev)
        return rt_record(cudaErrorInvalidValue);
    cudaError_t e = initialised();
    if (e != cudaSuccess)
        return rt_record(e);
    CUcontext cur = NULL;
    CUdevice d;
    if (cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur && cuCtxGetDevice(&d) == CUDA_SUCCESS) {
        *dev = d;
        return cudaSuccess;
    }
    *dev = thread_device;
    return cudaSuccess;
}

RT_API cudaError_t cudaChooseDevice(int *dev, const struct cudaDeviceProp *prop)
{
    if (!dev || !prop)
        return rt_record(cudaErrorInvalidValue);
    *dev = 0;
    return rt_record(initialised());
}

RT_API cudaError_t cudaSetDeviceFlags(unsigned int flags)
{
    int dev;
    cudaError_t e = cudaGetDevice(&dev);
    if (e != cudaSuccess)
        return e;
    device_flags[dev] = flags & ~cudaDeviceMapHost; /* mapped memory is refused where it is asked for */
    return rt_fail(cuDevicePrimaryCtxSetFlags(dev, flags & 0x7));
}

RT_API cudaError_t cudaGetDeviceFlags(unsigned int *flags)
{
    int dev;
    if (!flags)
        return rt_record(cudaErrorInvalidValue);
    cudaError_t e = cudaGetDevice(&dev);
    if (e == cudaSuccess)
        *flags = device_flags[dev];
    return e;
}

RT_API cudaError_t cudaDeviceReset(void)
{
    int dev;
    cudaError_t e = cudaGetDevice(&dev);
    if (e != cudaSuccess)
        return e;
    struct rt_managed_saved *saved = primary[dev] ? rt_managed_save(dev) : NULL; /* (in the context going) */
    pthread_mutex_lock(&lock);
    CUcontext ctx = primary[dev];
    primary[dev] = NULL;
    __atomic_add_fetch(&generation[dev], 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&lock);
    if (!ctx) { /* (another thread reset it meanwhile) */
        rt_managed_reload(dev, saved);
        return cudaSuccess;
    }
    CUcontext cur = NULL;
    cuCtxGetCurrent(&cur);
    if (cur == ctx)
        cuCtxSetCurrent(NULL);
    /* The last release destroys the context with everything in it, on the server as on a GPU. */
    e = rt_fail(cuDevicePrimaryCtxRelease(dev));
    rt_managed_reload(dev, saved); /* (whatever the release said: the runtime's next context is a new one) */
    return e;
}

RT_API cudaError_t cudaDeviceSynchronize(void)
{
    cudaError_t e = rt_context(NULL);
    return e != cudaSuccess ? rt_record(e) : rt_fail(cuCtxSynchronize());
}

#if CUDART_VERSION < 13000
/* The thread-named forms CUDA 12 still declares (deprecated, gone in 13): the device-named calls under their old
 * names, as NVIDIA's runtime defines them. */
RT_API cudaError_t cudaThreadSynchronize(void) { return cudaDeviceSynchronize(); }
RT_API cudaError_t cudaThreadExit(void) { return cudaDeviceReset(); }
RT_API cudaError_t cudaThreadGetLimit(size_t *value, enum cudaLimit limit) { return cudaDeviceGetLimit(value, limit); }
RT_API cudaError_t cudaThreadSetLimit(enum cudaLimit limit, size_t value) { return cudaDeviceSetLimit(limit, value); }
RT_API cudaError_t cudaThreadGetCacheConfig(enum cudaFuncCache *c) { return cudaDeviceGetCacheConfig(c); }
RT_API cudaError_t cudaThreadSetCacheConfig(enum cudaFuncCache c) { return cudaDeviceSetCacheConfig(c); }
#endif

RT_API cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int dev)
{
    cudaError_t e = initialised();
    if (e != cudaSuccess)
        return rt_record(e);
    /* cudaDeviceAttr took CUdevice_attribute's numbers. */
    return rt_fail(cuDeviceGetAttribute(value, (CUdevice_attribute)attr, dev));
}

static int attr(CUdevice dev, CUdevice_attribute a)
{
    int v = 0;
    return cuDeviceGetAttribute(&v, a, dev) == CUDA_SUCCESS ? v : 0;
}

static cudaError_t device_properties(struct cudaDeviceProp *p, int dev)
{
    cudaError_t e = initialised();
    if (e != cudaSuccess)
        return rt_record(e);
    if (!p)
        return rt_record(cudaErrorInvalidValue);
    if (dev < 0 || dev >= device_count)
        return rt_record(cudaErrorInvalidDevice);
    memset(p, 0, sizeof *p);
    CUresult r = cuDeviceGetName(p->name, sizeof p->name, dev);
    if (r == CUDA_SUCCESS)
        r = cuDeviceGetUuid((CUuuid *)&p->uuid, dev);
    size_t total = 0;
    if (r == CUDA_SUCCESS)
        r = cuDeviceTotalMem(&total, dev);
    if (r != CUDA_SUCCESS)
        return rt_fail(r);
#define A(name) attr(dev, CU_DEVICE_ATTRIBUTE_##name)
    p->totalGlobalMem = total;
    p->sharedMemPerBlock = (size_t)A(MAX_SHARED_MEMORY_PER_BLOCK);
    p->regsPerBlock = A(MAX_REGISTERS_PER_BLOCK);
    p->warpSize = A(WARP_SIZE);
    p->memPitch = (size_t)A(MAX_PITCH);
    p->maxThreadsPerBlock = A(MAX_THREADS_PER_BLOCK);
    p->maxThreadsDim[0] = A(MAX_BLOCK_DIM_X), p->maxThreadsDim[1] = A(MAX_BLOCK_DIM_Y), p->maxThreadsDim[2] = A(MAX_BLOCK_DIM_Z);
    p->maxGridSize[0] = A(MAX_GRID_DIM_X), p->maxGridSize[1] = A(MAX_GRID_DIM_Y), p->maxGridSize[2] = A(MAX_GRID_DIM_Z);
    p->totalConstMem = (size_t)A(TOTAL_CONSTANT_MEMORY);
    p->major = A(COMPUTE_CAPABILITY_MAJOR);
    p->minor = A(COMPUTE_CAPABILITY_MINOR);
    p->textureAlignment = (size_t)A(TEXTURE_ALIGNMENT);
    p->texturePitchAlignment = (size_t)A(TEXTURE_PITCH_ALIGNMENT);
    p->multiProcessorCount = A(MULTIPROCESSOR_COUNT);
    p->integrated = A(INTEGRATED);
    p->canMapHostMemory = 0; /* zero-copy mapping cannot cross the wire */
    p->maxTexture1D = A(MAXIMUM_TEXTURE1D_WIDTH);
    p->maxTexture1DMipmap = A(MAXIMUM_TEXTURE1D_MIPMAPPED_WIDTH);
    p->maxTexture2D[0] = A(MAXIMUM_TEXTURE2D_WIDTH), p->maxTexture2D[1] = A(MAXIMUM_TEXTURE2D_HEIGHT);
    p->maxTexture3D[0] = A(MAXIMUM_TEXTURE3D_WIDTH), p->maxTexture3D[1] = A(MAXIMUM_TEXTURE3D_HEIGHT);
    p->maxTexture3D[2] = A(MAXIMUM_TEXTURE3D_DEPTH);
    p->maxTextureCubemap = A(MAXIMUM_TEXTURECUBEMAP_WIDTH);
    p->maxSurface1D = A(MAXIMUM_SURFACE1D_WIDTH);
    p->maxSurface2D[0] = A(MAXIMUM_SURFACE2D_WIDTH), p->maxSurface2D[1] = A(MAXIMUM_SURFACE2D_HEIGHT);
    p->surfaceAlignment = (size_t)A(SURFACE_ALIGNMENT);
    p->concurrentKernels = A(CONCURRENT_KERNELS);
    p->ECCEnabled = A(ECC_ENABLED);
    p->pciBusID = A(PCI_BUS_ID);
    p->pciDeviceID = A(PCI_DEVICE_ID);
    p->pciDomainID = A(PCI_DOMAIN_ID);
    p->tccDriver = A(TCC_DRIVER);
    p->asyncEngineCount = A(ASYNC_ENGINE_COUNT);
    p->unifiedAddressing = A(UNIFIED_ADDRESSING);
    p->memoryBusWidth = A(GLOBAL_MEMORY_BUS_WIDTH);
    p->l2CacheSize = A(L2_CACHE_SIZE);
    p->persistingL2CacheMaxSize = A(MAX_PERSISTING_L2_CACHE_SIZE);
    p->maxThreadsPerMultiProcessor = A(MAX_THREADS_PER_MULTIPROCESSOR);
    p->streamPrioritiesSupported = A(STREAM_PRIORITIES_SUPPORTED);
    p->globalL1CacheSupported = A(GLOBAL_L1_CACHE_SUPPORTED);
    p->localL1CacheSupported = A(LOCAL_L1_CACHE_SUPPORTED);
    p->sharedMemPerMultiprocessor = (size_t)A(MAX_SHARED_MEMORY_PER_MULTIPROCESSOR);
    p->regsPerMultiprocessor = A(MAX_REGISTERS_PER_MULTIPROCESSOR);
    p->managedMemory = A(MANAGED_MEMORY);
    p->isMultiGpuBoard = A(MULTI_GPU_BOARD);
    p->multiGpuBoardGroupID = A(MULTI_GPU_BOARD_GROUP_ID);
    p->hostNativeAtomicSupported = 0;
    p->pageableMemoryAccess = A(PAGEABLE_MEMORY_ACCESS);
    p->concurrentManagedAccess = A(CONCURRENT_MANAGED_ACCESS);
    p->computePreemptionSupported = A(COMPUTE_PREEMPTION_SUPPORTED);
    p->canUseHostPointerForRegisteredMem = 0;
    p->cooperativeLaunch = A(COOPERATIVE_LAUNCH);
    p->sharedMemPerBlockOptin = (size_t)A(MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
    p->pageableMemoryAccessUsesHostPageTables = A(PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES);
    p->directManagedMemAccessFromHost = A(DIRECT_MANAGED_MEM_ACCESS_FROM_HOST);
    p->maxBlocksPerMultiProcessor = A(MAX_BLOCKS_PER_MULTIPROCESSOR);
    p->accessPolicyMaxWindowSize = A(MAX_ACCESS_POLICY_WINDOW_SIZE);
    p->reservedSharedMemPerBlock = (size_t)A(RESERVED_SHARED_MEMORY_PER_BLOCK);
    p->hostRegisterSupported = A(HOST_REGISTER_SUPPORTED);
    p->sparseCudaArraySupported = A(SPARSE_CUDA_ARRAY_SUPPORTED);
    p->hostRegisterReadOnlySupported = A(READ_ONLY_HOST_REGISTER_SUPPORTED);
    p->timelineSemaphoreInteropSupported = A(TIMELINE_SEMAPHORE_INTEROP_SUPPORTED);
    p->memoryPoolsSupported = 0; /* stream-ordered pools are not forwarded */
    p->gpuDirectRDMASupported = A(GPU_DIRECT_RDMA_SUPPORTED);
    p->gpuDirectRDMAFlushWritesOptions = (unsigned)A(GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS);
    p->gpuDirectRDMAWritesOrdering = A(GPU_DIRECT_RDMA_WRITES_ORDERING);
    p->memoryPoolSupportedHandleTypes = 0;
    p->deferredMappingCudaArraySupported = A(DEFERRED_MAPPING_CUDA_ARRAY_SUPPORTED);
    p->ipcEventSupported = 0;
    p->clusterLaunch = A(CLUSTER_LAUNCH);
    p->unifiedFunctionPointers = A(UNIFIED_FUNCTION_POINTERS);
#if CUDART_VERSION >= 12000
    p->luidDeviceNodeMask = 0;
#endif
#if CUDART_VERSION < 13000
    p->clockRate = A(CLOCK_RATE);
    p->deviceOverlap = A(GPU_OVERLAP);
    p->kernelExecTimeoutEnabled = A(KERNEL_EXEC_TIMEOUT);
    p->computeMode = A(COMPUTE_MODE);
    p->memoryClockRate = A(MEMORY_CLOCK_RATE);
    p->singleToDoublePrecisionPerfRatio = A(SINGLE_TO_DOUBLE_PRECISION_PERF_RATIO);
    p->cooperativeMultiDeviceLaunch = A(COOPERATIVE_MULTI_DEVICE_LAUNCH);
#else
    p->deviceNumaConfig = A(NUMA_CONFIG);
    p->deviceNumaId = A(NUMA_ID);
    p->mpsEnabled = A(MPS_ENABLED);
    p->hostNumaId = A(HOST_NUMA_ID);
    p->gpuPciDeviceID = (unsigned)A(GPU_PCI_DEVICE_ID);
    p->gpuPciSubsystemID = (unsigned)A(GPU_PCI_SUBSYSTEM_ID);
    p->hostNumaMultinodeIpcSupported = A(HOST_NUMA_MULTINODE_IPC_SUPPORTED);
#endif
#undef A
    return cudaSuccess;
}

#if CUDART_VERSION < 13000
/* cuda_runtime_api.h of CUDA 12 makes cudaGetDeviceProperties a macro for its _v2; the library has both. */
#undef cudaGetDeviceProperties
RT_API cudaError_t cudaGetDeviceProperties_v2(struct cudaDeviceProp *p, int dev) { return device_properties(p, dev); }
#endif
RT_API cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int dev) { return device_properties(p, dev); }

RT_API cudaError_t cudaDeviceGetPCIBusId(char *bus_id, int len, int dev)
{
    cudaError_t e = initialised();
    return e != cudaSuccess ? rt_record(e) : rt_fail(cuDeviceGetPCIBusId(bus_id, len, dev));
}

RT_API cudaError_t cudaDeviceGetByPCIBusId(int *dev, const char *bus_id)
{
    cudaError_t e = initialised();
    if (e != cudaSuccess)
        return rt_record(e);
    if (!dev || !bus_id)
        return rt_record(cudaErrorInvalidValue);
    CUdevice d;
    CUresult r = cuDeviceGetByPCIBusId(&d, bus_id);
    if (r == CUDA_SUCCESS)
        *dev = d;
    return rt_fail(r);
}

RT_API cudaError_t cudaDeviceCanAccessPeer(int *can, int dev, int peer)
{
    cudaError_t e = initialised();
    return e != cudaSuccess ? rt_record(e) : rt_fail(cuDeviceCanAccessPeer(can, dev, peer));
}

RT_API cudaError_t cudaDeviceGetLimit(size_t *value, enum cudaLimit limit)
{
    cudaError_t e = rt_context(NULL);
    return e != cudaSuccess ? rt_record(e) : rt_fail(cuCtxGetLimit(value, (CUlimit)limit));
}

RT_API cudaError_t cudaDeviceSetLimit(enum cudaLimit limit, size_t value)
{
    cudaError_t e = rt_context(NULL);
    return e != cudaSuccess ? rt_record(e) : rt_fail(cuCtxSetLimit((CUlimit)limit, value));
}

RT_API cudaError_t cudaDeviceGetStreamPriorityRange(int *least, int *greatest)
{
    int l, g;
    cudaError_t e = rt_context(NULL);
    if (e != cudaSuccess)
        return rt_record(e);
    CUresult r = cuCtxGetStreamPriorityRange(&l, &g);
    if (r == CUDA_SUCCESS) {
        if (least)
            *least = l;
        if (greatest)
            *greatest = g;
    }
    return rt_fail(r);
}

/* Cache and shared-memory preferences are hints; rgpu keeps the driver's defaults and says so truthfully. */
static enum cudaFuncCache cache_config = cudaFuncCachePreferNone;

RT_API cudaError_t cudaDeviceSetCacheConfig(enum cudaFuncCache c)
{
    cache_config = c;
    return rt_record(rt_context(NULL));
}

RT_API cudaError_t cudaDeviceGetCacheConfig(enum cudaFuncCache *c)
{
    if (!c)
        return rt_record(cudaErrorInvalidValue);
    *c = cache_config;
    return rt_record(rt_context(NULL));
}

/* Bank sizes: the driver's answer (four-byte banks on every GPU CUDA 12 and 13 run; a configuration is taken
 * and has no effect, as the deprecated calls document for such devices). */
RT_API cudaError_t cudaDeviceGetSharedMemConfig(enum cudaSharedMemConfig *config)
{
    CUsharedconfig c;
    if (!config)
        return rt_record(cudaErrorInvalidValue);
    cudaError_t e = rt_context(NULL);
    if (e != cudaSuccess)
        return rt_record(e);
    CUresult r = cuCtxGetSharedMemConfig(&c);
    if (r == CUDA_SUCCESS)
        *config = (enum cudaSharedMemConfig)c; /* (the same numbers) */
    return rt_fail(r);
}

RT_API cudaError_t cudaDeviceSetSharedMemConfig(enum cudaSharedMemConfig config)
{
    WITH_CONTEXT(cuCtxSetSharedMemConfig((CUsharedconfig)config));
}

RT_API cudaError_t cudaFuncSetSharedMemConfig(const void *func, enum cudaSharedMemConfig config)
{
    if (!rt_kernel_of(func))
        return rt_record(cudaErrorInvalidDeviceFunction);
    WITH_CONTEXT(cuCtxSetSharedMemConfig((CUsharedconfig)config)); /* (the same check of the value) */
}

RT_API cudaError_t cudaDriverGetVersion(int *version)
{
    if (!version)
        return rt_record(cudaErrorInvalidValue);
    if (initialised() != cudaSuccess) {
        *version = 0; /* no driver: what CUDA's runtime reports too */
        return cudaSuccess;
    }
    return rt_fail(cuDriverGetVersion(version));
}

RT_API cudaError_t cudaRuntimeGetVersion(int *version)
{
    if (!version)
        return rt_record(cudaErrorInvalidValue);
    *version = CUDART_VERSION;
    return cudaSuccess;
}

RT_API cudaError_t cudaGetDriverEntryPointByVersion(const char *symbol, void **fn, unsigned int version,
                                                    unsigned long long flags,
                                                    enum cudaDriverEntryPointQueryResult *status)
{
    cudaError_t e = initialised();
    if (e != cudaSuccess)
        return rt_record(e);
    CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SUCCESS;
    CUresult r = cuGetProcAddress(symbol, fn, (int)version, flags, &st);
    if (status)
        *status = (enum cudaDriverEntryPointQueryResult)st;
    /* A missing symbol is reported through status, not as an error of the call. */
    return r == CUDA_ERROR_NOT_FOUND && status ? cudaSuccess : rt_fail(r);
}

RT_API cudaError_t cudaGetDriverEntryPoint(const char *symbol, void **fn, unsigned long long flags,
                                           enum cudaDriverEntryPointQueryResult *status)
{
    return cudaGetDriverEntryPointByVersion(symbol, fn, CUDART_VERSION, flags, status);
}

RT_API cudaError_t cudaThreadExchangeStreamCaptureMode(enum cudaStreamCaptureMode *mode)
{
    return rt_fail(cuThreadExchangeStreamCaptureMode((CUstreamCaptureMode *)mode));
}

RT_API cudaError_t cudaProfilerStart(void) { return rt_record(rt_context(NULL)); }
RT_API cudaError_t cudaProfilerStop(void) { return rt_record(rt_context(NULL)); }

RT_API struct cudaChannelFormatDesc cudaCreateChannelDesc(int x, int y, int z, int w, enum cudaChannelFormatKind f)
{
    struct cudaChannelFormatDesc d = {x, y, z, w, f};
    return d;
}

RT_API cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total)
{
    cudaError_t e = rt_context(NULL);
    return e != cudaSuccess ? rt_record(e) : rt_fail(cuMemGetInfo(free_bytes, total));
}
