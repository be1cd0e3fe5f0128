// A decode-shaped loop, the pattern llama.cpp runs per generated token with CUDA graphs, without a model: six
// 4 KiB host-to-device input copies, one graph launch (16 tiny kernels captured once), the 4 KiB "logits"
// copied back, a stream synchronize. The same binary natively and through rgpu (bench/token_loop.sh) shows what
// a token's round trip costs beyond the GPU's own work. Prints tokens, microseconds per token and a checksum
// of the last logits (identical natively and through rgpu). `token_loop N marks`: prints "MARK start" and
// "MARK end" around the timed tokens and waits for a line on stdin at each, so that a harness can read the
// server's counters there (bench/token_loop.py). With TOKEN_LOOP_PROMPT_BYTES=B set, each step first copies B
// bytes of fresh input (from pageable memory, as llama.cpp copies a prompt batch's embeddings: 512 KiB for 128
// tokens of a 1024-wide model), which one more captured kernel reads the end of: a prompt-shaped step; noise
// under sparse changes, or with TOKEN_LOOP_PROMPT_KIND=rows rows of int64 indices as llama.cpp's V row indices at
// flash attention off (1 MiB per 128-token step of a 1024-wide model), which rgpu sends coded. With
// TOKEN_LOOP_LOGITS_BYTES=L, the logits copied back are L bytes (a 151936-word vocabulary's: 607744), the
// kernels' output at their end. TOKEN_LOOP_HOST_US=U: U microseconds of the program's own work (a busy wait)
// between the graph launch and the logits' readback, which the GPU's work overlaps natively.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

// saxpy by name and signature, so that rgpu's fake backend runs it too (its kernels are known by name).
extern "C" __global__ void saxpy(float a, const float *x, float *y, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = a * x[i] + y[i];
}

#define CK(call)                                                                                                  \
    do {                                                                                                          \
        cudaError_t e_ = (call);                                                                                  \
        if (e_ != cudaSuccess) {                                                                                  \
            std::printf("%s failed: %s\n", #call, cudaGetErrorName(e_));                                         \
            return 1;                                                                                             \
        }                                                                                                         \
    } while (0)

int main(int argc, char **argv)
{
    enum { n = 1024, layers = 16 };
    int tokens = argc > 1 ? std::atoi(argv[1]) : 500;
    bool marks = argc > 2 && std::strcmp(argv[2], "marks") == 0;
    auto mark = [&](const char *what) {
        if (!marks)
            return;
        char line[16];
        std::printf("MARK %s\n", what);
        std::fflush(stdout);
        if (!std::fgets(line, sizeof line, stdin))
            std::exit(3);
    };
    const char *prompt = std::getenv("TOKEN_LOOP_PROMPT_BYTES");
    size_t big_elems = prompt ? std::strtoull(prompt, nullptr, 10) / sizeof(float) : 0;
    if (big_elems && big_elems < n) {
        std::printf("TOKEN_LOOP_PROMPT_BYTES must be at least %zu\n", n * sizeof(float));
        return 2;
    }
    const char *host_us = std::getenv("TOKEN_LOOP_HOST_US");
    auto host_work = std::chrono::microseconds(host_us ? std::atoi(host_us) : 0);
    const char *kind = std::getenv("TOKEN_LOOP_PROMPT_KIND");
    bool rows = kind && std::strcmp(kind, "rows") == 0;
    float *big_host = big_elems ? (float *)std::calloc(big_elems, sizeof(float)) : nullptr, *big = nullptr;
    // Noise under the per-step changes: bytes that do not code (rgpu sends copies of runs coded, docs/protocol.md
    // "Coded copies"), so that the step measures moving them.
    for (size_t j = 0, x = 12345; j < big_elems; j++, x = x * 6364136223846793005ull + 1442695040888963407ull)
        big_host[j] = (float)(x >> 40) / 65536.0f;
    const char *wide = std::getenv("TOKEN_LOOP_LOGITS_BYTES");
    size_t out_elems = wide ? std::strtoull(wide, nullptr, 10) / sizeof(float) : n;
    if (out_elems < n) {
        std::printf("TOKEN_LOOP_LOGITS_BYTES must be at least %zu\n", n * sizeof(float));
        return 2;
    }
    float *out_host = (float *)std::calloc(out_elems, sizeof(float)), *out = nullptr;
    float *logits = out_host + out_elems - n;
    static float host_in[6][n];
    float *x, *inputs[6];
    cudaStream_t s;
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CK(cudaMalloc(&out, out_elems * sizeof(float)));
    CK(cudaMemsetAsync(out, 0, out_elems * sizeof(float), s));
    x = out + out_elems - n;
    for (int k = 0; k < 6; k++)
        CK(cudaMalloc(&inputs[k], sizeof host_in[k]));
    if (big_elems)
        CK(cudaMalloc(&big, big_elems * sizeof(float)));
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    if (big_elems)
        saxpy<<<(n + 255) / 256, 256, 0, s>>>(0.125f, big + big_elems - n, x, n);
    for (int l = 0; l < layers; l++)
        saxpy<<<(n + 255) / 256, 256, 0, s>>>(l % 2 ? 0.5f : -0.25f, inputs[l % 6], x, n);
    CK(cudaStreamEndCapture(s, &graph));
    CK(cudaGraphInstantiate(&exec, graph, 0));
    // Every call checked: a failed copy or launch would otherwise only show as a later, faster token.
    auto run = [&](int t) -> cudaError_t {
        cudaError_t e = cudaSuccess;
        if (big_elems && rows) { // llama.cpp's V row indices: token i's row j at j * 256 + its cell, new cells each step
            unsigned long long *w = (unsigned long long *)big_host;
            for (size_t k = 0; k < big_elems / 2; k++)
                w[k] = (k % 1024) * 256 + (t * 7 + k / 1024) % 256;
            e = cudaMemcpyAsync(big, big_host, big_elems * sizeof(float), cudaMemcpyHostToDevice, s);
        } else if (big_elems) { // (a sparse change over the whole, the end read by the graph: stale bytes would show)
            for (size_t j = 0; j < big_elems; j += 1021)
                big_host[j] = (float)((t * 17 + j) % 97);
            for (size_t j = big_elems - n; j < big_elems; j++)
                big_host[j] = (float)((t * 13 + j) % 89) / 32.0f;
            e = cudaMemcpyAsync(big, big_host, big_elems * sizeof(float), cudaMemcpyHostToDevice, s);
        }
        for (int k = 0; k < 6; k++) {
            for (int j = 0; j < n; j++)
                host_in[k][j] = (float)((t * 31 + k * 7 + j) % 101) / 64.0f;
            if (e == cudaSuccess)
                e = cudaMemcpyAsync(inputs[k], host_in[k], sizeof host_in[k], cudaMemcpyHostToDevice, s);
        }
        if (e == cudaSuccess)
            e = cudaGraphLaunch(exec, s);
        for (auto until = std::chrono::steady_clock::now() + host_work; std::chrono::steady_clock::now() < until;)
            ; // the program's own work between the launch and the readback (TOKEN_LOOP_HOST_US)
        if (e == cudaSuccess)
            e = cudaMemcpyAsync(out_host, out, out_elems * sizeof(float), cudaMemcpyDeviceToHost, s);
        cudaError_t sync = cudaStreamSynchronize(s);
        return e != cudaSuccess ? e : sync;
    };
    for (int t = 0; t < 20; t++) // warm-up
        CK(run(t));
    mark("start");
    auto t0 = std::chrono::steady_clock::now();
    for (int t = 20; t < 20 + tokens; t++)
        CK(run(t));
    double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    mark("end");
    double sum = 0;
    for (int i = 0; i < n; i++)
        sum += logits[i] * (double)(i % 13 + 1);
    std::printf("tokens=%d us_per_token=%.2f checksum=%.6f\n", tokens, us / tokens, sum);
    return 0;
}
