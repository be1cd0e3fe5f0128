// Virtual memory management as llama.cpp's pool and PyTorch's expandable segments use it: granularity for
// several handle types, one reservation grown by mapping chunks, handles released right after mapping, a second
// mapping of the same memory (aliasing), pointer queries and unified copies on mapped memory, retained handles,
// and the bad input a program can send. Output is identical natively and through rgpu. Build with -lcuda.
#include <cuda.h>
#include <vector>

#include "check.cuh"

#define CU(call)                                                                                                    \
    do {                                                                                                            \
        CUresult r_ = (call);                                                                                       \
        if (r_ != CUDA_SUCCESS) {                                                                                   \
            const char *name_ = nullptr;                                                                            \
            cuGetErrorName(r_, &name_);                                                                             \
            std::fprintf(stderr, "%s:%d: %s -> %d %s\n", __FILE__, __LINE__, #call, (int)r_, name_ ? name_ : "?"); \
            std::exit(1);                                                                                           \
        }                                                                                                           \
    } while (0)

__global__ void vadd(const float *a, const float *b, float *c, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        c[i] = a[i] + b[i];
}

static CUmemAllocationProp device_prop(CUmemAllocationHandleType types)
{
    CUmemAllocationProp prop = {};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    prop.requestedHandleTypes = types;
    return prop;
}

static void read_write(CUdeviceptr ptr, size_t size)
{
    CUmemAccessDesc access = {};
    access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access.location.id = 0;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    CU(cuMemSetAccess(ptr, size, &access, 1));
}

int main()
{
    CHECK(cudaSetDevice(0));
    CHECK(cudaFree(0)); // the runtime's context is current from here on
    CUdevice dev;
    CU(cuDeviceGet(&dev, 0));
    int vmm = 0;
    CU(cuDeviceGetAttribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev));
    EXPECT(vmm == 1);

    // XLA asks for several handle types and needs at least one answer; all answer with the same granularity.
    size_t g = 0, rec = 0, other = 0;
    CUmemAllocationProp prop = device_prop(CU_MEM_HANDLE_TYPE_NONE);
    CU(cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    CU(cuMemGetAllocationGranularity(&rec, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
    EXPECT(g > 0 && rec % g == 0);
    CUmemAllocationProp fd_prop = device_prop(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    CU(cuMemGetAllocationGranularity(&other, &fd_prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    EXPECT(other == g);

    // A pool: reserve much, map chunk by chunk, release each handle once mapped (the mapping keeps it alive).
    const size_t reserve = 32 * g;
    CUdeviceptr base = 0;
    CU(cuMemAddressReserve(&base, reserve, 0, 0, 0));
    CUmemGenericAllocationHandle chunks[2];
    CU(cuMemCreate(&chunks[0], g, &prop, 0));
    CU(cuMemCreate(&chunks[1], g, &fd_prop, 0)); // PyTorch asks for exportable memory by default
    for (int i = 0; i < 2; i++) {
        CU(cuMemMap(base + i * g, g, 0, chunks[i], 0));
        read_write(base + i * g, g);
    }
    CUmemGenericAllocationHandle retained = 0;
    CU(cuMemRetainAllocationHandle(&retained, (void *)(base + g + 64)));
    EXPECT(retained == chunks[1]);
    CUmemAllocationProp got = {};
    CU(cuMemGetAllocationPropertiesFromHandle(&got, retained));
    EXPECT(got.location.type == CU_MEM_LOCATION_TYPE_DEVICE && got.location.id == 0);
    EXPECT(got.requestedHandleTypes == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    CU(cuMemRelease(retained));
    for (int i = 0; i < 2; i++)
        CU(cuMemRelease(chunks[i]));

    // Mapped memory is device memory to everything else: copies, kernels, pointer queries.
    const int n = 1 << 18; // 1 MiB of floats: a and b share the first chunk, c fills the second
    float *a = (float *)base, *b = (float *)(base + g / 2), *c = (float *)(base + g);
    std::vector<float> ha(n), hb(n), hc(n);
    for (int i = 0; i < n; i++)
        ha[i] = float(i % 977), hb[i] = 0.25f * float(i % 31);
    CHECK(cudaMemcpy(a, ha.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(b, hb.data(), n * sizeof(float), cudaMemcpyDefault));
    vadd<<<n / 256, 256>>>(a, b, c, n);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(hc.data(), c, n * sizeof(float), cudaMemcpyDefault));
    double sum = 0;
    for (int i = 0; i < n; i++) {
        EXPECT(hc[i] == ha[i] + hb[i]);
        sum += hc[i];
    }
    unsigned mem_type = 0;
    CU(cuPointerGetAttribute(&mem_type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)c + 4));
    EXPECT(mem_type == CU_MEMORYTYPE_DEVICE);
    unsigned long long flags = 0;
    CUmemLocation here = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
    CU(cuMemGetAccess(&flags, &here, base));
    EXPECT(flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE);

    // The same physical memory at a second address: both see the same bytes.
    CUmemGenericAllocationHandle shared;
    CUdeviceptr alias = 0;
    CU(cuMemCreate(&shared, g, &prop, 0));
    CU(cuMemAddressReserve(&alias, 2 * g, 0, 0, 0));
    CU(cuMemMap(alias, g, 0, shared, 0));
    CU(cuMemMap(alias + g, g, 0, shared, 0));
    read_write(alias, 2 * g);
    CU(cuMemsetD32(alias + 4096, 0x12345678u, 16));
    unsigned seen[16];
    CU(cuMemcpyDtoH(seen, alias + g + 4096, sizeof seen));
    EXPECT(seen[0] == 0x12345678u && seen[15] == 0x12345678u);

    // Bad input: each fails, and the session goes on.
    CUmemGenericAllocationHandle h;
    CU(cuMemUnmap(base + 8 * g, g));                              // never mapped: the driver accepts it
    EXPECT(cuMemMap(alias, g, 0, shared, 0) != CUDA_SUCCESS);      // over an existing mapping
    EXPECT(cuMemSetAccess(base + 8 * g, g, nullptr, 0) != CUDA_SUCCESS);
    // (A handle released twice or never made crashes NVIDIA's driver, which takes it for a pointer: rgpu's
    // refusal of those is tested against the server in tests/test_vmm.py.)
    EXPECT(cuMemCreate(&h, (size_t)1 << 40, &prop, 0) != CUDA_SUCCESS); // more than the device (or quota)
    CUmemAllocationProp fabric = device_prop(CU_MEM_HANDLE_TYPE_FABRIC);
    if (cuMemCreate(&h, g, &fabric, 0) == CUDA_SUCCESS) // hardware with fabric handles; never through rgpu
        CU(cuMemRelease(h));

    // Teardown in CUDA's order: unmap (a whole range of mappings at once, as llama.cpp does), free the addresses.
    CU(cuMemUnmap(base, 2 * g));
    CU(cuMemAddressFree(base, reserve));
    CU(cuMemUnmap(alias, 2 * g));
    CU(cuMemRelease(shared));
    CU(cuMemAddressFree(alias, 2 * g));
    CHECK(cudaDeviceSynchronize());
    std::printf("vmm OK granularity=%zu recommended=%zu sum=%.1f\n", g, rec, sum);
    return 0;
}
