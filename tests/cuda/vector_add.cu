// The plain <<<>>> path: registration, lazy module upload, launch, synchronous copies.
#include <vector>

#include "check.cuh"

__global__ void vadd(const float *a, const float *b, float *c, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        c[i] = a[i] + b[i];
}

int main()
{
    const int n = 1 << 20;
    std::vector<float> a(n), b(n), c(n, -1.0f);
    for (int i = 0; i < n; i++)
        a[i] = float(i), b[i] = 0.5f * float(i % 1000);
    float *da, *db, *dc;
    CHECK(cudaMalloc(&da, n * sizeof(float)));
    CHECK(cudaMalloc(&db, n * sizeof(float)));
    CHECK(cudaMalloc(&dc, n * sizeof(float)));
    CHECK(cudaMemcpy(da, a.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(db, b.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    for (int rep = 0; rep < 3; rep++)
        vadd<<<(n + 255) / 256, 256>>>(da, db, dc, n);
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaMemcpy(c.data(), dc, n * sizeof(float), cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++)
        EXPECT(c[i] == a[i] + b[i]);
    // A launch that cannot run: the error is the launch's and cudaGetLastError's, and is then cleared.
    vadd<<<1, 4096>>>(da, db, dc, n);
    cudaError_t bad = cudaGetLastError();
    EXPECT(bad == cudaErrorInvalidConfiguration || bad == cudaErrorInvalidValue);
    EXPECT(cudaGetLastError() == cudaSuccess);
    CHECK(cudaFree(da));
    CHECK(cudaFree(db));
    CHECK(cudaFree(dc));
    std::printf("vector_add OK n=%d c[12345]=%.1f\n", n, c[12345]);
    return 0;
}
