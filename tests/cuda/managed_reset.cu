// __managed__ variables across cudaDeviceReset: what the program reads and what a kernel given them sees after
// the reset, which destroys the context that held them: NVIDIA's runtime keeps their values (the H100 showed so).
// Run natively and through rgpu, outputs compared.
#include "check.cuh"

__managed__ int counter = 5;
__managed__ float values[4] = {1, 2, 3, 4};

__global__ void managed_scale(int n, float *v, float by)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        v[i] *= by;
}

int main()
{
    std::printf("before: counter %d, values %g %g\n", counter, values[0], values[1]);
    counter = 9;
    values[0] = 7;
    managed_scale<<<1, 4>>>(4, values, 2.0f);
    CHECK(cudaDeviceSynchronize());
    std::printf("scaled: values %g %g\n", values[0], values[1]);
    CHECK(cudaDeviceReset());
    std::printf("after the reset: counter %d, values %g %g\n", counter, values[0], values[1]);
    managed_scale<<<1, 4>>>(4, values, 3.0f);
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    std::printf("scaled again: values %g %g\n", values[0], values[1]);
    std::printf("managed_reset OK\n");
    return 0;
}
