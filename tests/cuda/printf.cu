// Device printf reaches the program's own stdout, in order with its host output: the driver prints a kernel's
// output when it synchronises, so each kernel's lines come after the host line before its launch and before
// the host line after the synchronisation. One block per launch: lines of one warp come in thread order.
#include "check.cuh"

__global__ void printf_demo(int tag)
{
    printf("printf_demo: block %d thread %d tag %d\n", blockIdx.x, threadIdx.x, tag);
}

int main()
{
    std::printf("host: before the first launch\n");
    printf_demo<<<1, 4>>>(7);
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    std::printf("host: after the first synchronisation\n");
    printf_demo<<<1, 2>>>(8);
    CHECK(cudaGetLastError());
    int *scratch;
    CHECK(cudaMalloc(&scratch, sizeof *scratch));
    int value = 0;
    CHECK(cudaMemcpy(&value, scratch, sizeof value, cudaMemcpyDeviceToHost)); // a blocking copy synchronises too
    CHECK(cudaFree(scratch));
    std::printf("printf OK\n");
    return 0;
}
