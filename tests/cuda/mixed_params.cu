// Parameters of every size and alignment, a struct by value, and device variables through the symbol API.
#include "check.cuh"

struct Params {
    float scale;
    int offset;
    double bias;
};

__device__ int counter;
__constant__ float coefficients[8];

__global__ void mixed_params(char c, short s, int i, double d, Params p, float *out)
{
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        out[0] = float(c);
        out[1] = float(s);
        out[2] = float(i);
        out[3] = float(d);
        out[4] = float(p.scale * p.offset + p.bias);
    }
}

int main()
{
    float *out, host[5];
    CHECK(cudaMalloc(&out, sizeof host));
    Params p{1.5f, 4, 0.25};
    mixed_params<<<1, 32>>>(char(-7), short(-300), 123456, 2.5, p, out);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(host, out, sizeof host, cudaMemcpyDeviceToHost));
    EXPECT(host[0] == -7.0f && host[1] == -300.0f && host[2] == 123456.0f && host[3] == 2.5f && host[4] == 6.25f);

    float coef[8] = {1, 2, 3, 4, 5, 6, 7, 8}, back[8] = {0};
    CHECK(cudaMemcpyToSymbol(coefficients, coef, sizeof coef));
    CHECK(cudaMemcpyFromSymbol(back, coefficients, 4 * sizeof(float), 4 * sizeof(float)));
    EXPECT(back[0] == 5 && back[3] == 8);
    int value = 41, got = 0;
    CHECK(cudaMemcpyToSymbol(counter, &value, sizeof value));
    void *addr = nullptr;
    size_t size = 0;
    CHECK(cudaGetSymbolAddress(&addr, counter));
    CHECK(cudaGetSymbolSize(&size, counter));
    EXPECT(addr != nullptr && size == sizeof(int));
    CHECK(cudaMemcpy(&got, addr, sizeof got, cudaMemcpyDeviceToHost));
    EXPECT(got == 41);
    EXPECT(cudaMemcpyToSymbol(coefficients, coef, sizeof coef, 4) == cudaErrorInvalidValue); // past its end
    cudaGetLastError();

    cudaFuncAttributes attr;
    CHECK(cudaFuncGetAttributes(&attr, mixed_params));
    EXPECT(attr.maxThreadsPerBlock > 0 && attr.ptxVersion > 0);
    size_t offsets[6], sizes[6];
    for (int i = 0; i < 6; i++)
        CHECK(cudaFuncGetParamInfo((const void *)mixed_params, i, &offsets[i], &sizes[i]));
    std::printf("parameters at %zu,%zu,%zu,%zu,%zu,%zu of %zu,%zu,%zu,%zu,%zu,%zu bytes\n", offsets[0], offsets[1],
                offsets[2], offsets[3], offsets[4], offsets[5], sizes[0], sizes[1], sizes[2], sizes[3], sizes[4],
                sizes[5]);
    EXPECT(cudaFuncGetParamInfo((const void *)mixed_params, 6, &offsets[0], &sizes[0]) != cudaSuccess);
    cudaGetLastError();
    int blocks = 0;
    CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, mixed_params, 128, 0));
    EXPECT(blocks > 0);
    CHECK(cudaFree(out));
    std::printf("mixed_params OK out=%g,%g,%g,%g,%g\n", host[0], host[1], host[2], host[3], host[4]);
    return 0;
}
