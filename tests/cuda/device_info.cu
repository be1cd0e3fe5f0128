// Device management and properties, versions, entry points. Prints what must match between native and rgpu.
#include <cstring>

#include "check.cuh"

__global__ void noop() {}

int main()
{
    int count = 0, dev = -1, driver = 0, runtime = 0;
    CHECK(cudaGetDeviceCount(&count));
    EXPECT(count >= 1);
    CHECK(cudaSetDevice(0));
    CHECK(cudaGetDevice(&dev));
    EXPECT(dev == 0);
    EXPECT(cudaSetDevice(count) == cudaErrorInvalidDevice);
    EXPECT(cudaGetLastError() == cudaErrorInvalidDevice);
    CHECK(cudaDriverGetVersion(&driver));
    CHECK(cudaRuntimeGetVersion(&runtime));
    EXPECT(driver >= 12000 && runtime >= 12000);

    cudaDeviceProp p;
    CHECK(cudaGetDeviceProperties(&p, 0));
    int sms = 0, major = 0;
    CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0));
    EXPECT(sms == p.multiProcessorCount && major == p.major && p.warpSize == 32);
    char bus[13]; // (the 13 bytes cuda.h says are enough: "0000:41:00.0")
    CHECK(cudaDeviceGetPCIBusId(bus, sizeof bus, 0));
    int again = -1, short_form = -1;
    CHECK(cudaDeviceGetByPCIBusId(&again, bus));
    EXPECT(again == 0 && std::strlen(bus) == 12);
    CHECK(cudaDeviceGetByPCIBusId(&short_form, bus + 5)); // [bus]:[device].[function], no domain
    EXPECT(short_form == 0);
    cudaSharedMemConfig banks;
    CHECK(cudaDeviceSetSharedMemConfig(cudaSharedMemBankSizeEightByte)); // (taken, without effect: fixed banks)
    CHECK(cudaDeviceGetSharedMemConfig(&banks));
    EXPECT(banks == cudaSharedMemBankSizeFourByte);
    EXPECT(again == 0);
    size_t stack = 0;
    CHECK(cudaDeviceGetLimit(&stack, cudaLimitStackSize));
    CHECK(cudaDeviceSetLimit(cudaLimitStackSize, stack * 2));
    size_t stack2 = 0;
    CHECK(cudaDeviceGetLimit(&stack2, cudaLimitStackSize));
    EXPECT(stack2 >= stack * 2);

    void *fn = nullptr;
    cudaDriverEntryPointQueryResult status;
    CHECK(cudaGetDriverEntryPointByVersion("cuMemAlloc", &fn, 12000, cudaEnableDefault, &status));
    EXPECT(fn != nullptr && status == cudaDriverEntryPointSuccess);
    CHECK(cudaGetDriverEntryPointByVersion("cuNoSuchFunction", &fn, 12000, cudaEnableDefault, &status));
    EXPECT(status == cudaDriverEntryPointSymbolNotFound);

    noop<<<1, 1>>>();
    CHECK(cudaDeviceSynchronize());
    EXPECT(std::strcmp(cudaGetErrorString(cudaErrorInvalidValue), "invalid argument") == 0);
    EXPECT(std::strcmp(cudaGetErrorName(cudaErrorMemoryAllocation), "cudaErrorMemoryAllocation") == 0);
    void *huge = nullptr;
    EXPECT(cudaMalloc(&huge, (size_t)1 << 50) == cudaErrorMemoryAllocation);
    EXPECT(cudaGetLastError() == cudaErrorMemoryAllocation);
    CHECK(cudaDeviceReset());
    noop<<<1, 1>>>(); // after a reset the module is loaded again
    CHECK(cudaDeviceSynchronize());
    std::printf("device_info OK name=%s cc=%d.%d sms=%d mem=%zu MiB warp=%d maxThreads=%d smemOptin=%zu\n", p.name,
                p.major, p.minor, p.multiProcessorCount, p.totalGlobalMem >> 20, p.warpSize, p.maxThreadsPerBlock,
                p.sharedMemPerBlockOptin);
    return 0;
}
