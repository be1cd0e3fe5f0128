// Kernels the CUDA bridge runs for guest jobs (bridge/PROTOCOL.md, "Operations").
// Compiled to PTX at build time by `python -m rgpu.kernels.build` into src/rgpu/kernels/bridge.ptx, which
// ships in the package: no CUDA toolkit is needed where the bridge runs.

// Copies the guest's message buffer: proves the round trip guest -> GPU -> guest.
extern "C" __global__ void mail_kernel(const unsigned char* in, unsigned char* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = in[i];
}

extern "C" __global__ void vadd(const float* a, const float* b, float* c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}

// vadd plus one: a result equal to a + b + 1 can only come from this kernel having run on the device
// (the mutation test).
extern "C" __global__ void vadd_mutated(const float* a, const float* b, float* c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i] + 1.0f;
}
