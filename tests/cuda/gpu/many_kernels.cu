// GPU only: 64 kernels in one fatbin (template instantiations), each launched in turn on one buffer.
#include <vector>

#include "../check.cuh"

template <int K> __global__ void add_k(int *x, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        x[i] += K * (i % 3 + 1);
}

template <int K> static void launch_all(int *d, int n)
{
    if constexpr (K > 0)
        launch_all<K - 1>(d, n);
    add_k<K><<<(n + 255) / 256, 256>>>(d, n);
}

int main()
{
    const int n = 100000;
    int *d;
    CHECK(cudaMalloc(&d, n * sizeof(int)));
    CHECK(cudaMemset(d, 0, n * sizeof(int)));
    for (int rep = 0; rep < 10; rep++)
        launch_all<63>(d, n);
    CHECK(cudaGetLastError());
    std::vector<int> h(n);
    CHECK(cudaMemcpy(h.data(), d, n * sizeof(int), cudaMemcpyDeviceToHost));
    const int triangle = 63 * 64 / 2;
    for (int i = 0; i < n; i++)
        EXPECT(h[i] == 10 * triangle * (i % 3 + 1));
    std::printf("many_kernels OK 640 launches of 64 kernels, x[2]=%d\n", h[2]);
    return 0;
}
