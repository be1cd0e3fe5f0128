// CUDA IPC between two processes, as NVIDIA's simpleIPC sample and PyTorch's shared CUDA tensors use it: the parent
// exports an allocation and an interprocess event, a child process (this program run again) opens both, waits on
// the event, reads the parent's data, writes its own, closes; the parent sees the child's writes. Opening one's own
// handle and exporting an event made without the INTERPROCESS flag are refused.
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

#include "check.cuh"

enum { N = 4096 };

__global__ void iota_affine(int *p, int mul, int add, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        p[i] = i * mul + add;
}

static void to_hex(const void *data, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++)
        std::sprintf(out + 2 * i, "%02x", ((const unsigned char *)data)[i]);
}

static bool from_hex(const char *hex, void *data, size_t n)
{
    if (std::strlen(hex) != 2 * n)
        return false;
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        if (std::sscanf(hex + 2 * i, "%2x", &v) != 1)
            return false;
        ((unsigned char *)data)[i] = (unsigned char)v;
    }
    return true;
}

static int child(const char *mem_hex, const char *event_hex)
{
    cudaIpcMemHandle_t mh;
    cudaIpcEventHandle_t eh;
    EXPECT(from_hex(mem_hex, &mh, sizeof mh) && from_hex(event_hex, &eh, sizeof eh));
    cudaEvent_t ev;
    CHECK(cudaIpcOpenEventHandle(&ev, eh));
    CHECK(cudaStreamWaitEvent(0, ev, 0)); // the parent's fill is done before anything here reads
    int *p;
    CHECK(cudaIpcOpenMemHandle((void **)&p, mh, cudaIpcMemLazyEnablePeerAccess));
    std::vector<int> got(N);
    CHECK(cudaMemcpy(got.data(), p, sizeof(int) * N, cudaMemcpyDeviceToHost));
    for (int i = 0; i < N; i++)
        if (got[i] != i * 3 + 7) {
            std::fprintf(stderr, "child: element %d is %d\n", i, got[i]);
            return 1;
        }
    iota_affine<<<(N + 255) / 256, 256>>>(p, 5, 1, N);
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaIpcCloseMemHandle(p));
    CHECK(cudaEventDestroy(ev));
    std::printf("child: read the parent's data, wrote its own\n");
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 4 && !std::strcmp(argv[1], "child"))
        return child(argv[2], argv[3]);
    int *d;
    CHECK(cudaMalloc(&d, sizeof(int) * N));
    iota_affine<<<(N + 255) / 256, 256>>>(d, 3, 7, N);
    cudaEvent_t ev;
    CHECK(cudaEventCreateWithFlags(&ev, cudaEventInterprocess | cudaEventDisableTiming));
    CHECK(cudaEventRecord(ev, 0));
    cudaIpcMemHandle_t mh;
    cudaIpcEventHandle_t eh;
    CHECK(cudaIpcGetMemHandle(&mh, d));
    CHECK(cudaIpcGetEventHandle(&eh, ev));

    int failures = 0;
    void *self = nullptr;
    bool own_refused = cudaIpcOpenMemHandle(&self, mh, cudaIpcMemLazyEnablePeerAccess) != cudaSuccess;
    cudaGetLastError();
    std::printf("opening its own handle refused: %s\n", own_refused ? "yes" : "NO");
    failures += !own_refused;
    cudaEvent_t plain;
    CHECK(cudaEventCreate(&plain));
    cudaIpcEventHandle_t unused;
    bool plain_refused = cudaIpcGetEventHandle(&unused, plain) != cudaSuccess;
    cudaGetLastError();
    std::printf("exporting a timing event refused: %s\n", plain_refused ? "yes" : "NO");
    failures += !plain_refused;

    char mem_hex[2 * sizeof mh + 1], event_hex[2 * sizeof eh + 1];
    to_hex(&mh, sizeof mh, mem_hex);
    to_hex(&eh, sizeof eh, event_hex);
    std::fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) { // a new process, as CUDA requires: CUDA in a forked child is not to be used
        execl("/proc/self/exe", argv[0], "child", mem_hex, event_hex, (char *)nullptr);
        _exit(127);
    }
    int status = 0;
    EXPECT(pid > 0 && waitpid(pid, &status, 0) == pid);
    std::printf("child exited cleanly: %s\n", WIFEXITED(status) && WEXITSTATUS(status) == 0 ? "yes" : "NO");
    failures += !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    std::vector<int> got(N);
    CHECK(cudaMemcpy(got.data(), d, sizeof(int) * N, cudaMemcpyDeviceToHost));
    bool seen = true;
    for (int i = 0; i < N; i++)
        seen &= got[i] == i * 5 + 1;
    std::printf("the child's writes seen: %s\n", seen ? "yes" : "NO");
    failures += !seen;
    CHECK(cudaEventDestroy(plain));
    CHECK(cudaEventDestroy(ev));
    CHECK(cudaFree(d));
    if (failures)
        return 1;
    std::printf("ipc OK\n");
    return 0;
}
