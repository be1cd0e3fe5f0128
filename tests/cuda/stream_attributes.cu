// Stream attributes, as inference engines set an L2 access policy window on the stream their weights are read on:
// set through the runtime, read back through the runtime and the driver, copied to another stream; an attribute
// id no driver knows is refused at the call.
#include <cstring>

#include <cuda.h>

#include "check.cuh"

int main()
{
    cudaStream_t a, b;
    CHECK(cudaStreamCreate(&a));
    CHECK(cudaStreamCreate(&b));
    int max_window = 0;
    CHECK(cudaDeviceGetAttribute(&max_window, cudaDevAttrMaxAccessPolicyWindowSize, 0));
    EXPECT(max_window > 0);
    void *weights;
    size_t bytes = 1 << 20;
    CHECK(cudaMalloc(&weights, bytes));

    cudaStreamAttrValue window = {};
    window.accessPolicyWindow.base_ptr = weights;
    window.accessPolicyWindow.num_bytes = bytes < (size_t)max_window ? bytes : (size_t)max_window;
    window.accessPolicyWindow.hitRatio = 0.5f;
    window.accessPolicyWindow.hitProp = cudaAccessPropertyPersisting;
    window.accessPolicyWindow.missProp = cudaAccessPropertyStreaming;
    CHECK(cudaStreamSetAttribute(a, cudaStreamAttributeAccessPolicyWindow, &window));
    cudaStreamAttrValue got = {};
    CHECK(cudaStreamGetAttribute(a, cudaStreamAttributeAccessPolicyWindow, &got));
    EXPECT(got.accessPolicyWindow.base_ptr == weights && got.accessPolicyWindow.num_bytes == window.accessPolicyWindow.num_bytes &&
           got.accessPolicyWindow.hitRatio == 0.5f && got.accessPolicyWindow.hitProp == cudaAccessPropertyPersisting &&
           got.accessPolicyWindow.missProp == cudaAccessPropertyStreaming);

    cudaStreamAttrValue policy = {};
    policy.syncPolicy = cudaSyncPolicyBlockingSync;
    CHECK(cudaStreamSetAttribute(a, cudaStreamAttributeSynchronizationPolicy, &policy));
    CUstreamAttrValue through_driver = {};
    EXPECT(cuStreamGetAttribute((CUstream)a, CU_STREAM_ATTRIBUTE_SYNCHRONIZATION_POLICY, &through_driver) ==
           CUDA_SUCCESS);
    EXPECT(through_driver.syncPolicy == CU_SYNC_POLICY_BLOCKING_SYNC);

    // Another stream takes both.
    CHECK(cudaStreamCopyAttributes(b, a));
    std::memset(&got, 0, sizeof got);
    CHECK(cudaStreamGetAttribute(b, cudaStreamAttributeAccessPolicyWindow, &got));
    EXPECT(got.accessPolicyWindow.base_ptr == weights && got.accessPolicyWindow.hitRatio == 0.5f);
    CHECK(cudaStreamGetAttribute(b, cudaStreamAttributeSynchronizationPolicy, &got));
    EXPECT(got.syncPolicy == cudaSyncPolicyBlockingSync);

    // Work on the stream goes on as before.
    CHECK(cudaMemsetAsync(weights, 0, bytes, a));
    CHECK(cudaStreamSynchronize(a));

    EXPECT(cudaStreamSetAttribute(a, (cudaStreamAttrID)99, &policy) != cudaSuccess);
    cudaGetLastError();

    CHECK(cudaFree(weights));
    CHECK(cudaStreamDestroy(a));
    CHECK(cudaStreamDestroy(b));
    std::printf("stream_attributes OK\n");
    return 0;
}
