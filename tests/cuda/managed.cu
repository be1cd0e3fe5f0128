// Managed memory as the CUDA programming guide and NVIDIA's introductions use it: cudaMallocManaged buffers that
// the host fills and a kernel reads, results read on the host after cudaDeviceSynchronize, host and device taking
// turns on one buffer, a linked list whose pointers both sides follow, prefetches and advice, copies and memsets
// naming managed memory, pointer queries, and a stream attachment. Output is identical natively and through rgpu.
#include <cmath>
#include <cstring>

#include "check.cuh"

__global__ void managed_add(int n, const float *x, float *y)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
        y[i] = x[i] + y[i];
}

__global__ void managed_scale(int n, float *v, float by)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        v[i] *= by;
}

struct node {
    int value;
    node *next;
};

// One thread walks the list the host built, then appends a node of its own for the host to find.
__global__ void managed_walk(node *head, node *spare, long long *sum)
{
    long long s = 0;
    node *last = head;
    for (node *p = head; p; p = p->next) {
        s += p->value;
        last = p;
    }
    *sum = s;
    spare->value = 1000;
    spare->next = nullptr;
    last->next = spare;
}

int main()
{
    int managed = 0;
    CHECK(cudaDeviceGetAttribute(&managed, cudaDevAttrManagedMemory, 0));
    std::printf("managed memory: %s\n", managed ? "yes" : "no");

    // The introduction's example: 1M floats each, filled on the host.
    const int n = 1 << 20;
    float *x, *y;
    CHECK(cudaMallocManaged(&x, n * sizeof(float)));
    CHECK(cudaMallocManaged(&y, n * sizeof(float)));
    for (int i = 0; i < n; i++)
        x[i] = 1.0f, y[i] = 2.0f;
    managed_add<<<256, 256>>>(n, x, y);
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    float max_error = 0.0f;
    for (int i = 0; i < n; i++)
        max_error = std::fmax(max_error, std::fabs(y[i] - 3.0f));
    std::printf("add: max error %g\n", max_error);

    // Turns: the host changes a few elements, the kernel scales all, the host checks, ten times.
    bool turns = true;
    for (int round = 1; round <= 10; round++) {
        y[round] = (float)round;
        y[n - round] = -(float)round;
        managed_scale<<<(n + 255) / 256, 256>>>(n, y, 2.0f);
        CHECK(cudaDeviceSynchronize());
        turns &= y[round] == 2.0f * round && y[n - round] == -2.0f * round && y[n / 2] == 3.0f * (1 << round);
    }
    std::printf("ten turns of host writes and kernel scales: %s\n", turns ? "yes" : "NO");

    // Pointers inside managed memory mean the same on both sides.
    node *nodes;
    long long *sum;
    CHECK(cudaMallocManaged(&nodes, 101 * sizeof(node)));
    CHECK(cudaMallocManaged(&sum, sizeof *sum));
    for (int i = 0; i < 100; i++)
        nodes[i] = {i + 1, i + 1 < 100 ? &nodes[i + 1] : nullptr};
    managed_walk<<<1, 1>>>(nodes, &nodes[100], sum);
    CHECK(cudaDeviceSynchronize());
    long long host_sum = 0;
    int count = 0;
    for (node *p = nodes; p; p = p->next)
        host_sum += p->value, count++;
    std::printf("list: device sum %lld; the host then walks %d nodes, sum %lld\n", *sum, count, host_sum);
    bool listed = *sum == 5050 && count == 101 && host_sum == 5050 + 1000;

    // Prefetches, advice and a stream attachment: hints that change no byte.
    int dev = 0;
    CHECK(cudaGetDevice(&dev));
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    cudaMemLocation on_device = {}, on_host = {};
    on_device.type = cudaMemLocationTypeDevice, on_device.id = dev;
    on_host.type = cudaMemLocationTypeHost;
    CHECK(cudaMemAdvise(x, n * sizeof(float), cudaMemAdviseSetReadMostly, on_device));
    CHECK(cudaMemPrefetchAsync(x, n * sizeof(float), on_device, 0, s));
    CHECK(cudaStreamAttachMemAsync(s, y, 0, cudaMemAttachSingle));
    managed_add<<<256, 256, 0, s>>>(n, x, y);
    CHECK(cudaMemPrefetchAsync(y, n * sizeof(float), on_host, 0, s));
    CHECK(cudaStreamSynchronize(s));
    std::printf("after hints: y[0] %g, y[n/2] %g\n", y[0], y[n / 2]);

    // What the hints say of a range, as cudaMemRangeGetAttribute reports them.
    int mostly = -9, prefetched_x = -9, prefetched_y = -9, preferred = -9, by_half[3], by_all[3];
    CHECK(cudaMemAdvise(y, n / 2 * sizeof(float), cudaMemAdviseSetAccessedBy, on_device));
    CHECK(cudaMemRangeGetAttribute(&mostly, 4, cudaMemRangeAttributeReadMostly, x, n * sizeof(float)));
    CHECK(cudaMemRangeGetAttribute(&prefetched_x, 4, cudaMemRangeAttributeLastPrefetchLocation, x, n * sizeof(float)));
    CHECK(cudaMemRangeGetAttribute(&prefetched_y, 4, cudaMemRangeAttributeLastPrefetchLocation, y, 4096));
    CHECK(cudaMemRangeGetAttribute(&preferred, 4, cudaMemRangeAttributePreferredLocation, y, 4096));
    CHECK(cudaMemRangeGetAttribute(by_half, sizeof by_half, cudaMemRangeAttributeAccessedBy, y, n / 2 * sizeof(float)));
    CHECK(cudaMemRangeGetAttribute(by_all, sizeof by_all, cudaMemRangeAttributeAccessedBy, y, n * sizeof(float)));
    std::printf("range attributes: x read mostly %d, last prefetched to %d; y last prefetched to %d, preferred %d; "
                "y's first half accessed by %d %d %d, all of y by %d %d %d\n", mostly, prefetched_x == dev,
                prefetched_y, preferred, by_half[0], by_half[1], by_half[2], by_all[0], by_all[1], by_all[2]);
    EXPECT(cudaMemRangeGetAttribute(&mostly, 4, cudaMemRangeAttributeReadMostly, &mostly, 4) == cudaErrorInvalidValue);
    EXPECT(cudaMemRangeGetAttribute(&mostly, 3, cudaMemRangeAttributeReadMostly, x, 4) == cudaErrorInvalidValue);

    // Copies and memsets that name managed memory, in every direction the runtime takes.
    float host[4] = {0}, dev_back[4] = {0};
    float *plain;
    CHECK(cudaMalloc(&plain, 4 * sizeof(float)));
    CHECK(cudaMemcpy(host, x + 8, sizeof host, cudaMemcpyDefault));
    CHECK(cudaMemset(x, 0, 16 * sizeof(float)));
    CHECK(cudaDeviceSynchronize());
    bool cleared = x[0] == 0.0f && x[15] == 0.0f && x[16] == 1.0f;
    x[1] = 7.0f;
    CHECK(cudaMemcpy(plain, x, 4 * sizeof(float), cudaMemcpyHostToDevice)); // (managed named as host memory)
    CHECK(cudaMemcpy(dev_back, plain, sizeof dev_back, cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(y, plain, 4 * sizeof(float), cudaMemcpyDeviceToHost)); // (and as the host destination)
    CHECK(cudaDeviceSynchronize());
    std::printf("copies: %g %g; memset cleared 16: %s; %g %g back; into managed %g\n", host[0], host[3],
                cleared ? "yes" : "NO", dev_back[0], dev_back[1], y[1]);

    cudaPointerAttributes attrs;
    CHECK(cudaPointerGetAttributes(&attrs, x + 100));
    std::printf("pointer: %s, host and device pointer the same: %s\n",
                attrs.type == cudaMemoryTypeManaged ? "managed" : "NOT managed",
                attrs.hostPointer == attrs.devicePointer && attrs.devicePointer == (void *)(x + 100) ? "yes" : "NO");
    float *none = x; // (nothing asked for: success and no memory, as the H100's driver answers)
    EXPECT(cudaMallocManaged(&none, 0) == cudaSuccess && none == nullptr);

    CHECK(cudaFree(plain));
    CHECK(cudaStreamDestroy(s));
    CHECK(cudaFree(nodes));
    CHECK(cudaFree(sum));
    CHECK(cudaFree(x));
    CHECK(cudaFree(y));
    if (!managed || max_error != 0.0f || !turns || !listed || !cleared)
        return 1;
    std::printf("managed OK\n");
    return 0;
}
