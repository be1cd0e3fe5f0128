// cudaMemcpyBatchAsync (CUDA 12.8+): host-to-device, device-to-device and device-to-host copies in one batch on a
// stream of their own, with two sets of attributes; a batch the documentation forbids (attributes not starting at
// copy 0, the legacy NULL stream) refused.
#include <cuda_runtime.h>
#include <cstdio>
#include <cstring>
#include <vector>

#include "check.cuh"

enum { N = 3000 };

int main()
{
    std::vector<int> a(N), b(N, -1), back(N, -1), back2(N, -1);
    for (int i = 0; i < N; i++)
        a[i] = i * 11 - 7;
    int *d1, *d2;
    CHECK(cudaMalloc(&d1, sizeof(int) * N));
    CHECK(cudaMalloc(&d2, sizeof(int) * N));
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaMemcpyAttributes attrs[2];
    std::memset(attrs, 0, sizeof attrs);
    attrs[0].srcAccessOrder = cudaMemcpySrcAccessOrderStream;
    attrs[1].srcAccessOrder = cudaMemcpySrcAccessOrderStream;
    size_t idxs[2] = {0, 1};

    // Up, then (a second batch) across and down: a batch's copies have no order among themselves.
    void *up_dst[1] = {d1};
    const void *up_src[1] = {a.data()};
    size_t up_size[1] = {sizeof(int) * N};
#if CUDART_VERSION >= 13000
    CHECK(cudaMemcpyBatchAsync(up_dst, up_src, up_size, 1, attrs, idxs, 1, s));
#else
    size_t failed;
    CHECK(cudaMemcpyBatchAsync((void **)up_dst, (void **)up_src, up_size, 1, attrs, idxs, 1, &failed, s));
#endif
    void *dsts[3] = {d2, back.data(), back2.data()};
    const void *srcs[3] = {d1, d1, d1};
    size_t sizes[3] = {sizeof(int) * N, sizeof(int) * N, sizeof(int) * (N / 2)};
#if CUDART_VERSION >= 13000
    CHECK(cudaMemcpyBatchAsync(dsts, srcs, sizes, 3, attrs, idxs, 2, s));
#else
    CHECK(cudaMemcpyBatchAsync((void **)dsts, (void **)srcs, sizes, 3, attrs, idxs, 2, &failed, s));
#endif
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaMemcpy(b.data(), d2, sizeof(int) * N, cudaMemcpyDeviceToHost));
    bool ok = b == a && back == a;
    for (int i = 0; i < N; i++)
        ok &= i < N / 2 ? back2[i] == a[i] : back2[i] == -1;
    std::printf("batched copies arrived: %s\n", ok ? "yes" : "NO");

    size_t wrong[2] = {1, 2};
#if CUDART_VERSION >= 13000
    cudaError_t e1 = cudaMemcpyBatchAsync(dsts, srcs, sizes, 3, attrs, wrong, 2, s);
    cudaGetLastError();
    cudaError_t e2 = cudaMemcpyBatchAsync(dsts, srcs, sizes, 3, attrs, idxs, 2, cudaStreamLegacy);
    cudaGetLastError();
#else
    cudaError_t e1 = cudaMemcpyBatchAsync((void **)dsts, (void **)srcs, sizes, 3, attrs, wrong, 2, &failed, s);
    cudaGetLastError();
    cudaError_t e2 = cudaMemcpyBatchAsync((void **)dsts, (void **)srcs, sizes, 3, attrs, idxs, 2, &failed,
                                          cudaStreamLegacy);
    cudaGetLastError();
#endif
    std::printf("attributes not from copy 0 refused: %s\n", e1 == cudaErrorInvalidValue ? "yes" : "NO");
    std::printf("the legacy NULL stream refused: %s\n", e2 == cudaErrorInvalidValue ? "yes" : "NO");
    CHECK(cudaStreamDestroy(s));
    CHECK(cudaFree(d1));
    CHECK(cudaFree(d2));
    if (!ok || e1 != cudaErrorInvalidValue || e2 != cudaErrorInvalidValue)
        return 1;
    std::printf("memcpy_batch OK\n");
    return 0;
}
