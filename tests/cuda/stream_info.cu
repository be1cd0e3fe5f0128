// What a stream says about itself, through the runtime and the driver: its flags and priority as created, its
// context and device, and an id that names it alone and stays the same; an event recorded on it with flags 0.
#include <cuda.h>

#include "check.cuh"

#define CHECK_CU(call) EXPECT((call) == CUDA_SUCCESS)

int main()
{
    CHECK(cudaSetDevice(0));
    CHECK(cudaFree(0)); // (the primary context, current from here on)
    CUcontext ctx;
    CHECK_CU(cuCtxGetCurrent(&ctx));
    int least, greatest;
    CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));

    cudaStream_t plain, urgent;
    CHECK(cudaStreamCreate(&plain));
    CHECK(cudaStreamCreateWithPriority(&urgent, cudaStreamNonBlocking, greatest));

    unsigned flags = 99;
    int priority = 99;
    CHECK_CU(cuStreamGetFlags((CUstream)plain, &flags));
    EXPECT(flags == CU_STREAM_DEFAULT);
    CHECK_CU(cuStreamGetFlags((CUstream)urgent, &flags));
    EXPECT(flags == CU_STREAM_NON_BLOCKING);
    CHECK_CU(cuStreamGetPriority((CUstream)plain, &priority));
    EXPECT(priority == 0);
    CHECK_CU(cuStreamGetPriority((CUstream)urgent, &priority));
    EXPECT(priority == greatest);

    CUcontext of = NULL;
    CHECK_CU(cuStreamGetCtx((CUstream)urgent, &of));
    EXPECT(of == ctx);
    CHECK_CU(cuStreamGetCtx((CUstream)0, &of)); // the NULL stream: the current context's
    EXPECT(of == ctx);
    CUgreenCtx green = (CUgreenCtx)1;
    of = NULL;
    CHECK_CU(cuStreamGetCtx_v2((CUstream)plain, &of, &green));
    EXPECT(of == ctx && green == NULL);

    int device = -1;
    CHECK(cudaStreamGetDevice(urgent, &device));
    EXPECT(device == 0);
    CUdevice cu_device = -1;
    CHECK_CU(cuStreamGetDevice((CUstream)plain, &cu_device));
    EXPECT(cu_device == 0);

    unsigned long long a = 0, b = 0, again = 0, driver = 0;
    CHECK(cudaStreamGetId(plain, &a));
    CHECK(cudaStreamGetId(urgent, &b));
    CHECK(cudaStreamGetId(plain, &again));
    CHECK_CU(cuStreamGetId((CUstream)plain, &driver));
    EXPECT(a != b && a == again && a == driver);

    cudaEvent_t done;
    CHECK(cudaEventCreate(&done));
    CHECK_CU(cuEventRecordWithFlags((CUevent)done, (CUstream)urgent, CU_EVENT_RECORD_DEFAULT));
    CHECK_CU(cuEventSynchronize((CUevent)done));
    CHECK(cudaEventDestroy(done));

    EXPECT(cudaStreamGetId(plain, NULL) == cudaErrorInvalidValue);
    EXPECT(cuStreamGetFlags((CUstream)plain, NULL) == CUDA_ERROR_INVALID_VALUE);
    cudaGetLastError();

    CHECK(cudaStreamDestroy(plain));
    CHECK(cudaStreamDestroy(urgent));
    std::printf("stream_info OK\n");
    return 0;
}
