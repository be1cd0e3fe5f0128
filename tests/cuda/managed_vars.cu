// __managed__ variables, as the CUDA programming guide shows them: globals that host code reads and writes by
// name and kernels use both by name and through pointers, with initializers, host and device taking turns, and
// the runtime's symbol, copy, memset and pointer calls naming them. Output is identical natively and through rgpu.
#include <cstring>

#include "check.cuh"

const int N = 4096;
__managed__ float data[N];
__managed__ int seeds[4] = {1, 2, 3, 4};
__managed__ int tally;
__managed__ double weights[3] = {0.5, 0.25, 0.125};

__global__ void managed_scale(int n, float *v, float by)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        v[i] *= by;
}

// Names the variables itself: the module's own references, which the loader resolves.
__global__ void managed_tally(int by)
{
    if (threadIdx.x == 0 && blockIdx.x == 0) {
        int s = 0;
        for (int i = 0; i < 4; i++) {
            s += seeds[i];
            seeds[i] *= 2;
        }
        tally += by + s;
    }
}

int main()
{
    // Read before any kernel ran: the values the image gives them.
    std::printf("initial: seeds %d %d %d %d, tally %d, weights %g %g %g\n", seeds[0], seeds[1], seeds[2], seeds[3],
                tally, weights[0], weights[1], weights[2]);

    tally = 10;
    managed_tally<<<1, 1>>>(5);
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    std::printf("after one tally: tally %d, seeds %d %d %d %d\n", tally, seeds[0], seeds[1], seeds[2], seeds[3]);
    EXPECT(tally == 25 && seeds[3] == 8);

    // Host and device take turns on the array: the host's writes reach the kernel, the kernel's reach the host.
    for (int turn = 0; turn < 4; turn++) {
        for (int i = 0; i < N; i += 7)
            data[i] = (float)(i + turn);
        managed_scale<<<(N + 255) / 256, 256>>>(N, data, 2.0f);
        CHECK(cudaDeviceSynchronize());
        for (int i = 0; i < N; i += 7)
            EXPECT(data[i] == 2.0f * (float)(i + turn));
        for (int i = 0; i < 4; i++)
            seeds[i] += turn;
        managed_tally<<<1, 1>>>(turn);
        CHECK(cudaDeviceSynchronize());
    }
    double sum = 0;
    for (int i = 0; i < N; i++)
        sum += data[i];
    std::printf("after four turns: sum %.1f, tally %d, seeds %d %d %d %d\n", sum, tally, seeds[0], seeds[1],
                seeds[2], seeds[3]);

    // Two kernels in a row with no host touch between, then the host.
    managed_tally<<<1, 1>>>(1);
    managed_tally<<<1, 1>>>(1);
    CHECK(cudaDeviceSynchronize());
    std::printf("two more: tally %d\n", tally);

    // The runtime's calls on the variables' addresses.
    cudaPointerAttributes a;
    CHECK(cudaPointerGetAttributes(&a, data));
    std::printf("pointer attributes: managed %d, device pointer is the variable %d, host pointer is %d\n",
                a.type == cudaMemoryTypeManaged, a.devicePointer == (void *)data, a.hostPointer == (void *)data);
    float copied[8];
    CHECK(cudaMemcpy(copied, data, sizeof copied, cudaMemcpyDefault));
    EXPECT(std::memcmp(copied, data, sizeof copied) == 0);
    const float ones[4] = {1, 1, 1, 1};
    CHECK(cudaMemcpy(data + 8, ones, sizeof ones, cudaMemcpyHostToDevice));
    CHECK(cudaMemset(data, 0, 4 * sizeof(float)));
    CHECK(cudaDeviceSynchronize());
    std::printf("copies and memsets: %g %g %g\n", data[0], data[3], data[8]);
    EXPECT(data[0] == 0.0f && data[8] == 1.0f);
    managed_scale<<<1, 32>>>(16, data + 8, 3.0f); // a pointer into the middle of a variable
    CHECK(cudaDeviceSynchronize());
    std::printf("scaled from the middle: %g %g\n", data[8], data[11]);

    weights[2] = 8.0;
    double w[3];
    CHECK(cudaMemcpy(w, weights, sizeof w, cudaMemcpyDeviceToHost));
    std::printf("weights through a copy: %g %g %g\n", w[0], w[1], w[2]);
    std::printf("managed_vars OK\n");
    return 0;
}
