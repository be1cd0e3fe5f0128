// Peer copies between devices 0 and 1: cudaMemcpyPeerAsync both ways for several sizes, timed by the host clock
// (what a program waits for: through rgpu, the round trips included) and by events (the copy on the GPU), every
// copy checked byte for byte. bench/peer_bandwidth.py runs it natively and through rgpu and prints the ratio.
// With one device, device 0 stands in for device 1 (a device-to-device copy), as in tests/cuda/multi_device.cu.
//   peer_bandwidth [bytes...]   a line per direction and size:
//                               "peer 0->1 bytes=N reps=R wall_GBps=X event_GBps=Y check=OK|BAD"
//   peer_bandwidth --meminfo    "meminfo device D free=F total=T" for every device
//   peer_bandwidth --hold       allocates on both devices, prints "HOLDING", sleeps until killed (teardown checks)
// Built with nvcc -cudart shared (so rgpu's libcudart stands in). Exit status 1 if a check or a call failed.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "../tests/cuda/check.cuh"  // CHECK: the test programs' own

static int meminfo()
{
    int count = 0;
    CHECK(cudaGetDeviceCount(&count));
    for (int d = 0; d < count; d++) {
        size_t free_b = 0, total_b = 0;
        CHECK(cudaSetDevice(d));
        CHECK(cudaMemGetInfo(&free_b, &total_b));
        std::printf("meminfo device %d free=%zu total=%zu\n", d, free_b, total_b);
    }
    return 0;
}

static void enable_peers(int a, int b)
{
    if (a == b)
        return;
    int can = 0;
    CHECK(cudaDeviceCanAccessPeer(&can, a, b));
    if (!can) {  // the copies still work, staged by the driver (or by rgpu across servers)
        std::fprintf(stderr, "device %d cannot access device %d directly\n", a, b);
        return;
    }
    CHECK(cudaSetDevice(a));
    cudaError_t e = cudaDeviceEnablePeerAccess(b, 0);
    if (e != cudaSuccess && e != cudaErrorPeerAccessAlreadyEnabled)
        CHECK(e);
    cudaGetLastError();
}

static int hold(int dev1)
{
    void *p0 = nullptr, *p1 = nullptr;
    CHECK(cudaSetDevice(0));
    CHECK(cudaMalloc(&p0, 64 << 20));
    CHECK(cudaSetDevice(dev1));
    CHECK(cudaMalloc(&p1, 64 << 20));
    CHECK(cudaMemcpyPeer(p1, dev1, p0, 0, 64 << 20));
    CHECK(cudaDeviceSynchronize());
    std::printf("HOLDING\n");
    std::fflush(stdout);
    for (;;)
        std::this_thread::sleep_for(std::chrono::seconds(1));
}

// One direction and size: R copies from `src_dev` to `dst_dev` on a stream of the source device.
static bool measure(int src_dev, int dst_dev, size_t bytes, const std::vector<unsigned char> &pattern)
{
    int reps = (int)(((size_t)2 << 30) / bytes);  // about 2 GiB moved per measurement
    reps = reps < 5 ? 5 : reps > 200 ? 200 : reps;
    void *src = nullptr, *dst = nullptr;
    CHECK(cudaSetDevice(dst_dev));
    CHECK(cudaMalloc(&dst, bytes));
    CHECK(cudaMemset(dst, 0, bytes));
    CHECK(cudaSetDevice(src_dev));
    CHECK(cudaMalloc(&src, bytes));
    CHECK(cudaMemcpy(src, pattern.data(), bytes, cudaMemcpyHostToDevice));
    cudaStream_t stream;
    cudaEvent_t start, stop;
    CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    CHECK(cudaEventCreate(&start));
    CHECK(cudaEventCreate(&stop));
    CHECK(cudaMemcpyPeerAsync(dst, dst_dev, src, src_dev, bytes, stream));  // warm-up
    CHECK(cudaStreamSynchronize(stream));
    auto t0 = std::chrono::steady_clock::now();
    CHECK(cudaEventRecord(start, stream));
    for (int i = 0; i < reps; i++)
        CHECK(cudaMemcpyPeerAsync(dst, dst_dev, src, src_dev, bytes, stream));
    CHECK(cudaEventRecord(stop, stream));
    CHECK(cudaStreamSynchronize(stream));
    double wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    float event_ms = 0;
    CHECK(cudaEventElapsedTime(&event_ms, start, stop));
    std::vector<unsigned char> back(bytes);
    CHECK(cudaSetDevice(dst_dev));
    CHECK(cudaMemcpy(back.data(), dst, bytes, cudaMemcpyDeviceToHost));
    bool ok = std::memcmp(back.data(), pattern.data(), bytes) == 0;
    double moved = (double)bytes * reps;
    std::printf("peer %d->%d bytes=%zu reps=%d wall_GBps=%.3f event_GBps=%.3f check=%s\n", src_dev, dst_dev, bytes,
                reps, moved / wall_s / 1e9, event_ms > 0 ? moved / (event_ms * 1e-3) / 1e9 : 0.0, ok ? "OK" : "BAD");
    std::fflush(stdout);
    CHECK(cudaEventDestroy(start));
    CHECK(cudaEventDestroy(stop));
    CHECK(cudaSetDevice(src_dev));
    CHECK(cudaStreamDestroy(stream));
    CHECK(cudaFree(src));
    CHECK(cudaFree(dst));
    return ok;
}

int main(int argc, char **argv)
{
    if (argc > 1 && !std::strcmp(argv[1], "--meminfo"))
        return meminfo();
    int count = 0;
    CHECK(cudaGetDeviceCount(&count));
    const int dev1 = count >= 2 ? 1 : 0;
    std::fprintf(stderr, "devices: %d; copying between 0 and %d\n", count, dev1);
    if (argc > 1 && !std::strcmp(argv[1], "--hold"))
        return hold(dev1);
    std::vector<size_t> sizes;
    for (int i = 1; i < argc; i++) {
        char *end = nullptr;
        unsigned long long v = std::strtoull(argv[i], &end, 10);
        if (!end || *end || v == 0 || v > ((size_t)16 << 30)) {
            std::fprintf(stderr, "bad size %s (bytes, 1 to 16 GiB)\n", argv[i]);
            return 2;
        }
        sizes.push_back((size_t)v);
    }
    if (sizes.empty())
        sizes = {(size_t)64 << 10, (size_t)1 << 20, (size_t)16 << 20, (size_t)256 << 20};
    enable_peers(0, dev1);
    enable_peers(dev1, 0);
    size_t largest = 0;
    for (size_t s : sizes)
        largest = s > largest ? s : largest;
    std::vector<unsigned char> pattern(largest);
    unsigned x = 2463534242u;  // xorshift: the same bytes in every run
    for (auto &b : pattern) {
        x ^= x << 13, x ^= x >> 17, x ^= x << 5;
        b = (unsigned char)x;
    }
    bool ok = true;
    for (size_t s : sizes) {
        ok &= measure(0, dev1, s, pattern);
        ok &= measure(dev1, 0, s, pattern);
    }
    std::printf("peer_bandwidth %s\n", ok ? "OK" : "FAILED");
    return ok ? 0 : 1;
}
