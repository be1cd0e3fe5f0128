// Two devices in one program: memory and a kernel on each, peer copies both ways (synchronous and stream
// ordered), events of one device waited for by a stream of the other, and bad input (device ordinals out of
// range, a pointer the program never allocated). With one device (natively on a one-GPU machine) the same
// work runs with device 0 standing in for device 1, and prints the same result line.
#include <vector>

#include "check.cuh"

__global__ void vadd(const float *a, const float *b, float *c, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        c[i] = a[i] + b[i];
}

__global__ void saxpy(float a, const float *x, float *y, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = a * x[i] + y[i];
}

#define EXPECT_ERROR(call, want)                                                                                    \
    do {                                                                                                            \
        EXPECT((call) == (want));                                                                                   \
        EXPECT(cudaGetLastError() == (want));                                                                       \
    } while (0)

int main()
{
    int count = 0;
    CHECK(cudaGetDeviceCount(&count));
    const int two = count >= 2, dev1 = two ? 1 : 0;

    EXPECT_ERROR(cudaSetDevice(count), cudaErrorInvalidDevice);
    EXPECT_ERROR(cudaSetDevice(-1), cudaErrorInvalidDevice);
    int can = -1;
    EXPECT_ERROR(cudaDeviceCanAccessPeer(&can, 0, count), cudaErrorInvalidDevice);
    CHECK(cudaDeviceCanAccessPeer(&can, 0, 0));
    EXPECT(can == 0); // a device is not its own peer
    EXPECT_ERROR(cudaMemcpyPeer(nullptr, count, nullptr, 0, 16), cudaErrorInvalidDevice);

    const int n = 1 << 16;
    const size_t bytes = n * sizeof(float);
    std::vector<float> a(n), b(n), out(n, -1.0f), back(n, -1.0f);
    for (int i = 0; i < n; i++)
        a[i] = float(i % 977), b[i] = 0.25f * float(i % 31);

    // Device 0: c = a + b.
    float *a0, *b0, *c0, *x1, *y1;
    CHECK(cudaSetDevice(0));
    CHECK(cudaMalloc(&a0, bytes));
    CHECK(cudaMalloc(&b0, bytes));
    CHECK(cudaMalloc(&c0, bytes));
    CHECK(cudaMemcpy(a0, a.data(), bytes, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(b0, b.data(), bytes, cudaMemcpyHostToDevice));
    cudaStream_t s0, s1;
    cudaEvent_t done0, done1;
    CHECK(cudaStreamCreate(&s0));
    CHECK(cudaEventCreate(&done0));
    vadd<<<n / 256, 256, 0, s0>>>(a0, b0, c0, n);
    CHECK(cudaGetLastError());
    CHECK(cudaEventRecord(done0, s0));

    // Device 1: y = 2 * c + 1, once device 0's kernel is done and c has come over.
    CHECK(cudaSetDevice(dev1));
    int current = -1;
    CHECK(cudaGetDevice(&current));
    EXPECT(current == dev1);
    if (two) {
        CHECK(cudaDeviceCanAccessPeer(&can, 1, 0));
        if (can) {
            CHECK(cudaDeviceEnablePeerAccess(0, 0));
            EXPECT_ERROR(cudaDeviceEnablePeerAccess(0, 0), cudaErrorPeerAccessAlreadyEnabled);
            CHECK(cudaDeviceDisablePeerAccess(0));
            EXPECT_ERROR(cudaDeviceDisablePeerAccess(0), cudaErrorPeerAccessNotEnabled);
            CHECK(cudaDeviceEnablePeerAccess(0, 0));
        }
        EXPECT_ERROR(cudaDeviceEnablePeerAccess(1, 0), cudaErrorInvalidDevice);
    }
    CHECK(cudaStreamCreate(&s1));
    CHECK(cudaEventCreate(&done1));
    CHECK(cudaMalloc(&x1, bytes));
    CHECK(cudaMalloc(&y1, bytes));
    std::vector<float> ones(n, 1.0f);
    CHECK(cudaMemcpyAsync(y1, ones.data(), bytes, cudaMemcpyHostToDevice, s1));
    CHECK(cudaStreamWaitEvent(s1, done0, 0)); // an event of device 0, a stream of device 1
    CHECK(cudaMemcpyPeerAsync(x1, dev1, c0, 0, bytes, s1));
    saxpy<<<n / 256, 256, 0, s1>>>(2.0f, x1, y1, n);
    CHECK(cudaGetLastError());
    CHECK(cudaEventRecord(done1, s1));

    // Back on device 0: wait for device 1, bring y over, read it.
    CHECK(cudaSetDevice(0));
    CHECK(cudaStreamWaitEvent(s0, done1, 0));
    CHECK(cudaMemcpyPeerAsync(a0, 0, y1, dev1, bytes, s0));
    CHECK(cudaStreamSynchronize(s0));
    CHECK(cudaMemcpy(out.data(), a0, bytes, cudaMemcpyDeviceToHost));
    double sum = 0;
    for (int i = 0; i < n; i++) {
        EXPECT(out[i] == 2.0f * (a[i] + b[i]) + 1.0f);
        sum += out[i];
    }

    // A synchronous peer copy, read back on its own device.
    CHECK(cudaMemcpyPeer(x1, dev1, b0, 0, bytes));
    CHECK(cudaSetDevice(dev1));
    CHECK(cudaMemcpy(back.data(), x1, bytes, cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++)
        EXPECT(back[i] == b[i]);
    CHECK(cudaEventSynchronize(done0));
    CHECK(cudaDeviceSynchronize());

    // A pointer the program never allocated is refused, not copied (a real GPU faults on it or refuses it).
    if (two)
        EXPECT_ERROR(cudaMemcpyPeer(x1, dev1, reinterpret_cast<void *>(0x1000), 0, 64), cudaErrorInvalidValue);

    CHECK(cudaFree(x1));
    CHECK(cudaFree(y1));
    CHECK(cudaSetDevice(0));
    CHECK(cudaFree(a0));
    CHECK(cudaFree(b0));
    CHECK(cudaFree(c0));
    std::printf("multi_device result n=%d sum=%.1f out[777]=%.2f\n", n, sum, out[777]);
    std::printf("multi_device OK devices=%d\n", count);
    return 0;
}
