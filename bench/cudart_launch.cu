// Runtime-level launch benchmark: the same binary natively and through rgpu (bench/run_cudart_bench.sh prints
// the ratio). Empty-kernel launches per second, batched by the shim, and the cost of a synchronous round trip.
#include <chrono>
#include <cstdio>
#include <cstdlib>

__global__ void empty(int) {}

int main(int argc, char **argv)
{
    int n = argc > 1 ? std::atoi(argv[1]) : 20000;
    cudaFree(0);
    empty<<<1, 32>>>(0);
    cudaDeviceSynchronize();
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < n; i++)
        empty<<<1, 32>>>(i);
    cudaError_t e = cudaDeviceSynchronize();
    auto t1 = std::chrono::steady_clock::now();
    int reps = 2000;
    for (int i = 0; i < reps; i++)
        cudaDeviceSynchronize();
    auto t2 = std::chrono::steady_clock::now();
    double launch_s = std::chrono::duration<double>(t1 - t0).count();
    double sync_us = std::chrono::duration<double, std::micro>(t2 - t1).count() / reps;
    std::printf("launches_per_s=%.0f sync_us=%.2f status=%s\n", n / launch_s, sync_us, cudaGetErrorName(e));
    return e != cudaSuccess;
}
