// Two devices of two servers (RGPU_SERVER=A,B); server B is killed mid-run (the test harness does it when the
// program says READY and answers on stdin). Device 1's calls then fail with a clean error, at once, and device 0
// keeps working.
#include <string>
#include <vector>

#include "check.cuh"

__global__ void vadd(const float *a, const float *b, float *c, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        c[i] = a[i] + b[i];
}

static void round_trip(int dev, float *a, float *c, const std::vector<float> &host, int n)
{
    std::vector<float> out(n, 0.0f);
    CHECK(cudaSetDevice(dev));
    CHECK(cudaMemcpy(a, host.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    vadd<<<n / 256, 256>>>(a, a, c, n);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(out.data(), c, n * sizeof(float), cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++)
        EXPECT(out[i] == 2.0f * host[i]);
}

int main()
{
    int count = 0;
    CHECK(cudaGetDeviceCount(&count));
    EXPECT(count == 2);
    const int n = 1 << 12;
    std::vector<float> host(n);
    for (int i = 0; i < n; i++)
        host[i] = float(i);
    float *a[2], *c[2];
    for (int dev = 0; dev < 2; dev++) {
        CHECK(cudaSetDevice(dev));
        CHECK(cudaMalloc(&a[dev], n * sizeof(float)));
        CHECK(cudaMalloc(&c[dev], n * sizeof(float)));
        round_trip(dev, a[dev], c[dev], host, n);
    }
    CHECK(cudaMemcpy(c[1], a[0], n * sizeof(float), cudaMemcpyDeviceToDevice)); // across the servers

    std::printf("READY\n");
    std::fflush(stdout);
    std::string line;
    for (int ch; (ch = std::getchar()) != EOF && ch != '\n';)
        line += char(ch);
    EXPECT(line == "killed");

    // Device 1's server is gone: whatever the call, an error, not a hang and not success.
    cudaError_t e = cudaSetDevice(1);
    if (e == cudaSuccess) {
        std::vector<float> out(n);
        vadd<<<n / 256, 256>>>(a[1], a[1], c[1], n);
        e = cudaMemcpy(out.data(), c[1], n * sizeof(float), cudaMemcpyDeviceToHost);
    }
    EXPECT(e != cudaSuccess);
    std::printf("device 1: %s\n", cudaGetErrorName(e));
    cudaGetLastError();
    EXPECT(cudaMemcpy(c[1], a[0], n * sizeof(float), cudaMemcpyDeviceToDevice) != cudaSuccess);
    cudaGetLastError();

    // Device 0 keeps working.
    for (int i = 0; i < n; i++)
        host[i] = float(3 * i);
    round_trip(0, a[0], c[0], host, n);
    CHECK(cudaFree(a[0]));
    CHECK(cudaFree(c[0]));
    std::printf("server_lost OK\n");
    return 0;
}
