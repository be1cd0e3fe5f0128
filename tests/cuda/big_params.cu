// Kernel parameters past 4 KiB, up to the driver's limit: a 32756-byte struct by value as a __grid_constant__
// after an 8-byte pointer (32764 bytes, exactly RGPU_MAX_PARAM_BYTES), and one of 4100 bytes (just above the
// 4 KiB that launchers used to stop at). Every word of each struct comes back out, so a byte lost or moved on
// the way shows up in the output.
#include <vector>

#include "check.cuh"

constexpr int HUGE_WORDS = 8189;   // 32756 bytes
constexpr int OVER4K_WORDS = 1025; // 4100 bytes
struct Huge {
    unsigned int w[HUGE_WORDS];
};
struct Over4K {
    unsigned int w[OVER4K_WORDS];
};
static_assert(sizeof(Huge) + sizeof(void *) == 32764, "the driver's limit exactly");

__global__ void huge_params(unsigned int *out, const __grid_constant__ Huge p)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < HUGE_WORDS)
        out[i] = p.w[i] * 3u + unsigned(i);
}

__global__ void over4k_params(unsigned int *out, const __grid_constant__ Over4K p)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < OVER4K_WORDS)
        out[i] = p.w[i] * 3u + unsigned(i);
}

template <typename Params, typename Kernel>
static unsigned long long run(Kernel kernel, int words, unsigned seed)
{
    static Params p; // too big for some default stacks
    for (int i = 0; i < words; i++)
        p.w[i] = seed * unsigned(i) ^ 0x9E3779B9u;
    unsigned int *out;
    std::vector<unsigned int> host(words);
    CHECK(cudaMalloc(&out, words * sizeof(unsigned int)));
    CHECK(cudaMemset(out, 0, words * sizeof(unsigned int)));
    kernel<<<(words + 255) / 256, 256>>>(out, p);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(host.data(), out, words * sizeof(unsigned int), cudaMemcpyDeviceToHost));
    CHECK(cudaFree(out));
    unsigned long long sum = 0;
    for (int i = 0; i < words; i++) {
        EXPECT(host[i] == p.w[i] * 3u + unsigned(i));
        sum = sum * 31 + host[i];
    }
    return sum;
}

int main()
{
    unsigned long long huge = run<Huge>(huge_params, HUGE_WORDS, 2654435761u);
    unsigned long long over = run<Over4K>(over4k_params, OVER4K_WORDS, 40503u);
    std::printf("big_params OK huge=%llx over4k=%llx\n", huge, over);
    return 0;
}
