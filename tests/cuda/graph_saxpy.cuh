// What the graph programs (graph_api, graph_generic, graph_memory) share: the kernel their nodes run, their
// buffers' length, and the check of a device buffer. Include after check.cuh.
// y += a * x (the fake backend knows this kernel by name).
__global__ void saxpy(float a, const float *x, float *y, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = a * x[i] + y[i];
}

static const int n = 4096;

static void expect_all(const float *d, float want)
{
    static float h[n];
    CHECK(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++)
        EXPECT(h[i] == want);
}
