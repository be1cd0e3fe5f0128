// Linking PTX at run time, as NVIDIA's ptxjit sample and Numba do: a kernel module and the module defining the
// device function it calls, linked with cuLinkCreate/AddData/AddFile/Complete, the image loaded and run; a link
// missing a definition and an input that is not PTX refused, with the reason in the error log; cuModuleLoadDataEx
// with JIT options and logs. Build with -lcuda.
#include <cuda.h>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "check.cuh"
#include "link_ptx.h"
#include "vadd_ptx.h"

#define CU(call)                                                                                                    \
    do {                                                                                                            \
        CUresult r_ = (call);                                                                                       \
        if (r_ != CUDA_SUCCESS) {                                                                                   \
            std::fprintf(stderr, "%s:%d: %s -> %d\n", __FILE__, __LINE__, #call, (int)r_);                          \
            std::exit(1);                                                                                           \
        }                                                                                                           \
    } while (0)

enum { LOG_SIZE = 8192 };

static int failures;

// One finding, printed (the GPU box compares the output with a native run's) and counted.
static void report(const char *what, bool ok)
{
    std::printf("%s: %s\n", what, ok ? "yes" : "NO");
    failures += !ok;
}

// The options NVIDIA's samples pass: wall time, both logs, verbose.
struct Options {
    CUjit_option keys[6] = {CU_JIT_WALL_TIME, CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES,
                            CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES, CU_JIT_LOG_VERBOSE};
    void *values[6];
    char info[LOG_SIZE], error[LOG_SIZE];

    Options()
    {
        std::memset(info, 'x', sizeof info); // a log that is not written stays visibly unterminated
        std::memset(error, 'x', sizeof error);
        values[0] = nullptr;
        values[1] = info;
        values[2] = (void *)(uintptr_t)LOG_SIZE;
        values[3] = error;
        values[4] = (void *)(uintptr_t)LOG_SIZE;
        values[5] = (void *)(uintptr_t)1;
    }
    size_t error_filled() const { return (size_t)(uintptr_t)values[4]; }
};

// vadd over n elements; whether c == a + b everywhere.
static bool vadd_works(CUmodule mod, int n)
{
    CUfunction f;
    CU(cuModuleGetFunction(&f, mod, "vadd"));
    std::vector<float> a(n), b(n), c(n);
    for (int i = 0; i < n; i++)
        a[i] = float(i % 37) * 0.5f, b[i] = float(i % 11);
    CUdeviceptr da, db, dc;
    CU(cuMemAlloc(&da, n * 4));
    CU(cuMemAlloc(&db, n * 4));
    CU(cuMemAlloc(&dc, n * 4));
    CU(cuMemcpyHtoD(da, a.data(), n * 4));
    CU(cuMemcpyHtoD(db, b.data(), n * 4));
    CU(cuMemsetD32(dc, 0, n));
    void *args[] = {&da, &db, &dc, &n};
    CU(cuLaunchKernel(f, (n + 127) / 128, 1, 1, 128, 1, 1, 0, nullptr, args, nullptr));
    CU(cuMemcpyDtoH(c.data(), dc, n * 4));
    CU(cuMemFree(da));
    CU(cuMemFree(db));
    CU(cuMemFree(dc));
    for (int i = 0; i < n; i++)
        if (c[i] != a[i] + b[i])
            return false;
    return true;
}

static std::string write_temp(const char *text)
{
    char path[] = "/tmp/rgpu-jit-link-XXXXXX";
    int fd = mkstemp(path);
    EXPECT(fd >= 0);
    FILE *f = fdopen(fd, "w");
    std::fputs(text, f);
    std::fclose(f);
    return path;
}

int main()
{
    CU(cuInit(0));
    CUdevice dev;
    CUcontext ctx;
    CU(cuDeviceGet(&dev, 0));
    CU(cuDevicePrimaryCtxRetain(&ctx, dev));
    CU(cuCtxSetCurrent(ctx));

    // Two inputs, one from memory and one from a file, linked into an image that runs.
    {
        Options o;
        CUlinkState link;
        CU(cuLinkCreate(6, o.keys, o.values, &link));
        CU(cuLinkAddData(link, CU_JIT_INPUT_PTX, (void *)kernel_ptx, sizeof kernel_ptx, "kernel.ptx", 0, nullptr,
                         nullptr));
        std::string file = write_temp(device_ptx);
        CU(cuLinkAddFile(link, CU_JIT_INPUT_PTX, file.c_str(), 0, nullptr, nullptr));
        std::remove(file.c_str());
        void *image = nullptr;
        size_t size = 0;
        CU(cuLinkComplete(link, &image, &size));
        EXPECT(image != nullptr && size > 0);
        EXPECT(std::memchr(o.info, 0, sizeof o.info) != nullptr); // a verbose link's info log, a string
        CUmodule mod;
        CU(cuModuleLoadData(&mod, image)); // loaded before the link that owns the image goes
        CU(cuLinkDestroy(link));
        report("linked image runs", vadd_works(mod, 1000));
        CU(cuModuleUnload(mod));
    }

    // A link whose kernel calls a function no input defines is refused when it completes, and says which.
    {
        Options o;
        CUlinkState link;
        CU(cuLinkCreate(6, o.keys, o.values, &link));
        CU(cuLinkAddData(link, CU_JIT_INPUT_PTX, (void *)kernel_ptx, sizeof kernel_ptx, "kernel.ptx", 0, nullptr,
                         nullptr));
        void *image = nullptr;
        size_t size = 0;
        CUresult r = cuLinkComplete(link, &image, &size);
        report("undefined function refused", r != CUDA_SUCCESS);
        report("and named in the error log", std::strstr(o.error, "_Z7add_f32ff") != nullptr);
        EXPECT(o.error_filled() > 0 && o.error_filled() <= LOG_SIZE);
        CU(cuLinkDestroy(link));
    }

    // An input that is not PTX is refused at once, with an error log.
    {
        Options o;
        CUlinkState link;
        CU(cuLinkCreate(6, o.keys, o.values, &link));
        static const char garbage[] = ".version 9.0\n.target sm_75\n.address_size 64\nthis is not PTX;\n";
        CUresult r = cuLinkAddData(link, CU_JIT_INPUT_PTX, (void *)garbage, sizeof garbage, "garbage.ptx", 0,
                                   nullptr, nullptr);
        report("bad PTX refused", r != CUDA_SUCCESS);
        report("with an error log", o.error[0] != 0);
        CU(cuLinkDestroy(link));
    }

    // cuModuleLoadDataEx with compiler options and logs JITs the PTX with them; a bad image gets its error log.
    {
        Options o;
        CUjit_option keys[7];
        void *values[7];
        std::memcpy(keys, o.keys, sizeof o.keys);
        std::memcpy(values, o.values, sizeof o.values);
        keys[6] = CU_JIT_MAX_REGISTERS;
        values[6] = (void *)(uintptr_t)32;
        CUmodule mod;
        CU(cuModuleLoadDataEx(&mod, ptx, 7, keys, values));
        EXPECT(std::memchr(o.info, 0, sizeof o.info) != nullptr);
        report("PTX loaded with options runs", vadd_works(mod, 777));
        CU(cuModuleUnload(mod));
        static const char bad[] = ".version 9.0\n.target sm_75\n.address_size 64\n.visible .entry k( { }\n";
        CUresult r = cuModuleLoadDataEx(&mod, bad, 6, o.keys, o.values);
        report("bad PTX with options refused", r != CUDA_SUCCESS);
        report("with an error log", o.error[0] != 0);
    }

    // Options a link cannot take: a per-input output, and a null state.
    {
        CUlinkState link;
        CU(cuLinkCreate(0, nullptr, nullptr, &link));
        CUjit_option wall = CU_JIT_WALL_TIME;
        void *slot = nullptr;
        CUresult r = cuLinkAddData(link, CU_JIT_INPUT_PTX, (void *)device_ptx, sizeof device_ptx, "device.ptx", 1,
                                   &wall, &slot);
        report("an input's wall-time option refused", r == CUDA_ERROR_INVALID_VALUE);
        CU(cuLinkDestroy(link));
        report("no state refused", cuLinkCreate(0, nullptr, nullptr, nullptr) == CUDA_ERROR_INVALID_VALUE);
    }

    CU(cuDevicePrimaryCtxRelease(dev));
    if (failures)
        return 1;
    std::printf("jit_link OK\n");
    return 0;
}
