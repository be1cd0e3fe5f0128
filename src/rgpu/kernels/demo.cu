// Kernels for `rgpu demo` and the GPU tests. The fake backend implements the same names
// (src/rgpu/backends/fake_kernels.py), so one PTX file runs on both backends.
// Regenerate demo.ptx with: python -m rgpu.kernels.build
extern "C" __global__ void vadd(const float* a, const float* b, float* c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}

extern "C" __global__ void saxpy(float a, const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}

extern "C" __global__ void fill(float* p, float v, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] = v;
}

extern "C" __global__ void mail(const unsigned char* in, unsigned char* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = in[i];
}

// Keeps its stream busy for `ns` nanoseconds: the "long kernel" of the concurrency tests.
extern "C" __global__ void spin_ns(unsigned long long ns) {
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while (now - start < ns);
}

// Writes through its argument; given a bad pointer it faults the context (isolation tests).
extern "C" __global__ void fault(int* p) {
    *(volatile int*)p = 0xFF;
}

// A module global for cuModuleGetGlobal tests.
__device__ int counters[4];
