/* CUDA 12's forms of the managed-memory hints (managed.c has the rest): a device ordinal, CU_DEVICE_CPU for the
 * host. Built against CUDA 12's cuda.h, which names them without CUDA 13's _v2. */
#include "rgpu_shim.h"

#define API __attribute__((visibility("default")))

API CUresult cuMemPrefetchAsync(CUdeviceptr p, size_t n, CUdevice dst, CUstream s)
{
    return rgpu_managed_prefetch(p, n, dst == CU_DEVICE_CPU ? -1 : dst < 0 ? -2 : dst, s);
}
API CUresult cuMemPrefetchAsync_ptsz(CUdeviceptr p, size_t n, CUdevice dst, CUstream s)
{
    return cuMemPrefetchAsync(p, n, dst, s);
}

API CUresult cuMemAdvise(CUdeviceptr p, size_t n, CUmem_advise advice, CUdevice device)
{
    CUmemLocation where = {device == CU_DEVICE_CPU ? CU_MEM_LOCATION_TYPE_HOST : CU_MEM_LOCATION_TYPE_DEVICE, device};
    return cuMemAdvise_v2(p, n, advice, where);
}
