// GPU only (the fake backend has no such kernels): templates over several types, a functor, a namespaced kernel,
// __constant__ data read by kernels, over-48-KiB dynamic shared memory and a block reduction with atomics.
// Prints only exact values, so native and rgpu output can be compared byte for byte.
#include <cstdint>
#include <vector>

#include "../check.cuh"

__constant__ int table[16];

template <typename T> __global__ void scale(T *x, T a, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        x[i] = x[i] * a + T(table[i % 16]);
}

struct Square {
    __device__ long long operator()(int v) const { return (long long)v * v; }
};

template <typename F> __global__ void reduce(const int *in, unsigned long long *out, int n, F f)
{
    extern __shared__ long long partial[];
    long long sum = 0;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        sum += f(in[i]);
    partial[threadIdx.x] = sum;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s)
            partial[threadIdx.x] += partial[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0)
        atomicAdd(out, (unsigned long long)partial[0]);
}

namespace rgpu_test {
__global__ void big_shared(int *out)
{
    extern __shared__ int buffer[]; // 100 KiB: needs cudaFuncAttributeMaxDynamicSharedMemorySize
    const int n = 100 * 1024 / 4;
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        buffer[i] = i;
    __syncthreads();
    if (threadIdx.x == 0)
        out[0] = buffer[n - 1] + buffer[1];
}
} // namespace rgpu_test

template <typename T> static double run_scale(int n, T a)
{
    std::vector<T> h(n);
    for (int i = 0; i < n; i++)
        h[i] = T(i % 7);
    T *d;
    CHECK(cudaMalloc(&d, n * sizeof(T)));
    CHECK(cudaMemcpy(d, h.data(), n * sizeof(T), cudaMemcpyHostToDevice));
    scale<T><<<(n + 127) / 128, 128>>>(d, a, n);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
    CHECK(cudaFree(d));
    double sum = 0;
    for (int i = 0; i < n; i++)
        sum += double(h[i]);
    return sum;
}

int main()
{
    int t[16];
    for (int i = 0; i < 16; i++)
        t[i] = i * i;
    CHECK(cudaMemcpyToSymbol(table, t, sizeof t));
    std::printf("scale<float>  sum=%.1f\n", run_scale<float>(100000, 2.0f));
    std::printf("scale<double> sum=%.1f\n", run_scale<double>(100000, 3.0));
    std::printf("scale<int>    sum=%.1f\n", run_scale<int>(100000, 5));

    const int n = 1 << 20;
    std::vector<int> h(n);
    for (int i = 0; i < n; i++)
        h[i] = (i * 37) % 1001 - 500;
    int *d;
    unsigned long long *out, result = 0;
    CHECK(cudaMalloc(&d, n * sizeof(int)));
    CHECK(cudaMalloc(&out, sizeof result));
    CHECK(cudaMemcpy(d, h.data(), n * sizeof(int), cudaMemcpyHostToDevice));
    CHECK(cudaMemset(out, 0, sizeof result));
    reduce<<<120, 256, 256 * sizeof(long long)>>>(d, out, n, Square());
    CHECK(cudaMemcpy(&result, out, sizeof result, cudaMemcpyDeviceToHost));
    unsigned long long expect = 0;
    for (int i = 0; i < n; i++)
        expect += (unsigned long long)((long long)h[i] * h[i]);
    EXPECT(result == expect);
    std::printf("reduce<Square> sum=%llu\n", result);

    int *big, got = 0;
    CHECK(cudaMalloc(&big, sizeof(int)));
    EXPECT(cudaFuncSetAttribute(rgpu_test::big_shared, cudaFuncAttributeMaxDynamicSharedMemorySize, 100 * 1024) ==
           cudaSuccess);
    rgpu_test::big_shared<<<1, 256, 100 * 1024>>>(big);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(&got, big, sizeof got, cudaMemcpyDeviceToHost));
    EXPECT(got == 100 * 1024 / 4 - 1 + 1);
    cudaFuncAttributes fa;
    CHECK(cudaFuncGetAttributes(&fa, rgpu_test::big_shared));
    std::printf("big_shared=%d maxDynamicShared=%d\n", got, fa.maxDynamicSharedSizeBytes);
    std::printf("templates OK\n");
    return 0;
}
