// CUDA arrays, texture and surface objects, as NVIDIA's simpleTexture, simpleSurfaceWrite and simpleTexture3D
// samples use them: an image uploaded into an array from pitched host memory and sampled through texture objects
// (point and linear filtering; clamp, border and wrap addressing; normalized coordinates; 8-bit texels read as
// normalized floats), a linear-memory texture fetched past its end, a surface written by a kernel and read back,
// array-to-array and 3D copies with offsets in elements, descriptors read back, a copy beyond an array refused,
// and the driver API's 1D array copies. Build with -lcuda.
#include <cuda.h>
#include <cuda_runtime.h>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "check.cuh"

__global__ void tex_read2d(cudaTextureObject_t t, float *out, int w, int h, float shift, float sx, float sy)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < w * h)
        out[i] = tex2D<float>(t, (float(i % w) + shift) * sx, (float(i / w) + 0.5f) * sy);
}

__global__ void tex_fetch1d(cudaTextureObject_t t, float *out, int n, int offset)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        out[i] = tex1Dfetch<float>(t, i + offset);
}

__global__ void surf_write2d(cudaSurfaceObject_t s, int w, int h, float base)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < w * h)
        surf2Dwrite(base + float(i), s, (i % w) * 4, i / w);
}

enum { W = 36, H = 19 };
static int failures;

static void report(const char *what, bool ok)
{
    std::printf("%s: %s\n", what, ok ? "yes" : "NO");
    failures += !ok;
}

static float texel(int x, int y) { return float(y * 1000 + x); }

// tex_read2d over the W x H image through `t`; out[i] compared with expect(x, y).
template <typename F>
static bool sampled(cudaTextureObject_t t, float *d_out, float shift, float sx, float sy, F expect, float tol = 0)
{
    tex_read2d<<<(W * H + 127) / 128, 128>>>(t, d_out, W, H, shift, sx, sy);
    CHECK(cudaGetLastError());
    std::vector<float> out(W * H);
    CHECK(cudaMemcpy(out.data(), d_out, sizeof(float) * W * H, cudaMemcpyDeviceToHost));
    for (int i = 0; i < W * H; i++)
        if (std::fabs(out[i] - expect(i % W, i / W)) > tol) {
            std::fprintf(stderr, "texel %d,%d: %g, expected %g\n", i % W, i / W, out[i], expect(i % W, i / W));
            return false;
        }
    return true;
}

static cudaTextureObject_t texture_of(cudaArray_t a, cudaTextureAddressMode mode, cudaTextureFilterMode filter,
                                      bool normalized, cudaTextureReadMode read = cudaReadModeElementType)
{
    cudaResourceDesc res;
    std::memset(&res, 0, sizeof res);
    res.resType = cudaResourceTypeArray;
    res.res.array.array = a;
    cudaTextureDesc tex;
    std::memset(&tex, 0, sizeof tex);
    tex.addressMode[0] = tex.addressMode[1] = mode;
    tex.filterMode = filter;
    tex.readMode = read;
    tex.normalizedCoords = normalized;
    cudaTextureObject_t t;
    CHECK(cudaCreateTextureObject(&t, &res, &tex, nullptr));
    return t;
}

int main()
{
    // The image, in host rows padded to 48 floats, into a float array.
    const size_t pitch = 48 * sizeof(float);
    std::vector<float> host(48 * H, -1.0f);
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++)
            host[y * 48 + x] = texel(x, y);
    cudaChannelFormatDesc fdesc = cudaCreateChannelDesc<float>();
    cudaArray_t image;
    CHECK(cudaMallocArray(&image, &fdesc, W, H, cudaArraySurfaceLoadStore));
    CHECK(cudaMemcpy2DToArray(image, 0, 0, host.data(), pitch, W * sizeof(float), H, cudaMemcpyHostToDevice));
    float *d_out;
    CHECK(cudaMalloc(&d_out, sizeof(float) * W * H));

    cudaTextureObject_t t = texture_of(image, cudaAddressModeClamp, cudaFilterModePoint, false);
    report("point samples are the texels", sampled(t, d_out, 0.5f, 1, 1, [](int x, int y) { return texel(x, y); }));
    report("clamped left of the image", sampled(t, d_out, -1.5f, 1, 1, [](int x, int y) {
        return texel(x - 2 < 0 ? 0 : x - 2, y);
    }));
    cudaResourceDesc back;
    CHECK(cudaGetTextureObjectResourceDesc(&back, t));
    cudaTextureDesc tback;
    CHECK(cudaGetTextureObjectTextureDesc(&tback, t));
    report("descriptions read back", back.resType == cudaResourceTypeArray && back.res.array.array == image &&
                                          tback.addressMode[0] == cudaAddressModeClamp &&
                                          tback.filterMode == cudaFilterModePoint && !tback.normalizedCoords);
    CHECK(cudaDestroyTextureObject(t));

    t = texture_of(image, cudaAddressModeBorder, cudaFilterModePoint, false);
    report("border left of the image", sampled(t, d_out, -1.5f, 1, 1, [](int x, int y) {
        return x - 2 < 0 ? 0.0f : texel(x - 2, y);
    }));
    CHECK(cudaDestroyTextureObject(t));

    t = texture_of(image, cudaAddressModeWrap, cudaFilterModePoint, true);
    report("wrapped in normalized coordinates", sampled(t, d_out, 0.5f + W / 2, 1.0f / W, 1.0f / H, [](int x, int y) {
        return texel((x + W / 2) % W, y);
    }));
    CHECK(cudaDestroyTextureObject(t));

    t = texture_of(image, cudaAddressModeClamp, cudaFilterModeLinear, false);
    report("linear filtering at texel centers", sampled(t, d_out, 0.5f, 1, 1, [](int x, int y) {
        return texel(x, y);
    }));
    CHECK(cudaDestroyTextureObject(t));

    // 8-bit texels read as normalized floats.
    {
        cudaChannelFormatDesc bdesc = cudaCreateChannelDesc<unsigned char>();
        cudaArray_t bytes;
        CHECK(cudaMallocArray(&bytes, &bdesc, W, H));
        std::vector<unsigned char> b(W * H);
        for (int i = 0; i < W * H; i++)
            b[i] = (unsigned char)(i * 7);
        CHECK(cudaMemcpy2DToArray(bytes, 0, 0, b.data(), W, W, H, cudaMemcpyHostToDevice));
        cudaTextureObject_t bt = texture_of(bytes, cudaAddressModeClamp, cudaFilterModePoint, false,
                                            cudaReadModeNormalizedFloat);
        report("8-bit texels as normalized floats", sampled(bt, d_out, 0.5f, 1, 1, [&](int x, int y) {
            return b[y * W + x] / 255.0f;
        }, 1e-6f));
        CHECK(cudaDestroyTextureObject(bt));
        cudaChannelFormatDesc got;
        cudaExtent extent;
        unsigned flags;
        CHECK(cudaArrayGetInfo(&got, &extent, &flags, bytes));
        report("array described back", got.x == 8 && got.y == 0 && got.f == cudaChannelFormatKindUnsigned &&
                                            extent.width == W && extent.height == H && extent.depth == 0 && !flags);
        CHECK(cudaFreeArray(bytes));
    }

    // A texture over linear memory, fetched past its end.
    {
        const int n = 100, offset = 5;
        std::vector<float> lin(n);
        for (int i = 0; i < n; i++)
            lin[i] = 0.25f * i;
        float *d_lin;
        CHECK(cudaMalloc(&d_lin, sizeof(float) * n));
        CHECK(cudaMemcpy(d_lin, lin.data(), sizeof(float) * n, cudaMemcpyHostToDevice));
        cudaResourceDesc res;
        std::memset(&res, 0, sizeof res);
        res.resType = cudaResourceTypeLinear;
        res.res.linear.devPtr = d_lin;
        res.res.linear.desc = fdesc;
        res.res.linear.sizeInBytes = sizeof(float) * n;
        cudaTextureDesc tex;
        std::memset(&tex, 0, sizeof tex);
        tex.readMode = cudaReadModeElementType;
        cudaTextureObject_t lt;
        CHECK(cudaCreateTextureObject(&lt, &res, &tex, nullptr));
        tex_fetch1d<<<1, 128>>>(lt, d_out, n, offset);
        CHECK(cudaGetLastError());
        std::vector<float> out(n);
        CHECK(cudaMemcpy(out.data(), d_out, sizeof(float) * n, cudaMemcpyDeviceToHost));
        bool ok = true;
        for (int i = 0; i < n; i++)
            ok &= out[i] == (i + offset < n ? lin[i + offset] : 0.0f);
        report("linear-memory fetches, 0 past the end", ok);
        CHECK(cudaDestroyTextureObject(lt));
        CHECK(cudaFree(d_lin));
    }

    // A surface written by a kernel, read back into pitched host rows; then copied to a second array.
    {
        cudaResourceDesc res;
        std::memset(&res, 0, sizeof res);
        res.resType = cudaResourceTypeArray;
        res.res.array.array = image;
        cudaSurfaceObject_t s;
        CHECK(cudaCreateSurfaceObject(&s, &res));
        surf_write2d<<<(W * H + 127) / 128, 128>>>(s, W, H, 0.5f);
        CHECK(cudaGetLastError());
        std::vector<float> rows(48 * H, -1.0f);
        CHECK(cudaMemcpy2DFromArray(rows.data(), pitch, image, 0, 0, W * sizeof(float), H, cudaMemcpyDeviceToHost));
        bool ok = true;
        for (int y = 0; y < H; y++)
            for (int x = 0; x < 48; x++)
                ok &= rows[y * 48 + x] == (x < W ? 0.5f + float(y * W + x) : -1.0f);
        report("surface writes read back, padding untouched", ok);
        CHECK(cudaDestroySurfaceObject(s));

        cudaArray_t second;
        CHECK(cudaMallocArray(&second, &fdesc, W, H));
        CHECK(cudaMemcpy2DArrayToArray(second, 0, 0, image, 0, 0, W * sizeof(float), H, cudaMemcpyDeviceToDevice));
        std::vector<float> again(W * H);
        CHECK(cudaMemcpy2DFromArray(again.data(), W * sizeof(float), second, 0, 0, W * sizeof(float), H,
                                    cudaMemcpyDeviceToHost));
        ok = true;
        for (int i = 0; i < W * H; i++)
            ok &= again[i] == 0.5f + float(i);
        report("array to array", ok);
        // Part of a row, from and into the middle of the arrays.
        CHECK(cudaMemcpy2DToArray(second, 4 * sizeof(float), 2, host.data(), pitch, 3 * sizeof(float), 2,
                                  cudaMemcpyHostToDevice));
        float part[6];
        CHECK(cudaMemcpy2DFromArray(part, 3 * sizeof(float), second, 4 * sizeof(float), 2, 3 * sizeof(float), 2,
                                    cudaMemcpyDeviceToHost));
        report("a box inside an array", part[0] == texel(0, 0) && part[2] == texel(2, 0) && part[3] == texel(0, 1) &&
                                            part[5] == texel(2, 1));
        report("a copy beyond the array refused",
               cudaMemcpy2DToArray(second, 0, H, host.data(), pitch, W * sizeof(float), 1, cudaMemcpyHostToDevice) ==
                   cudaErrorInvalidValue);
        cudaGetLastError();
        CHECK(cudaFreeArray(second));
    }

    // A 3D array through cudaMemcpy3D (extent and positions in elements at the array's end).
    {
        const int w = 8, h = 5, d = 3, hp = 10; // host rows of 10 floats
        cudaArray_t vol;
        CHECK(cudaMalloc3DArray(&vol, &fdesc, make_cudaExtent(w, h, d)));
        std::vector<float> in(hp * h * d), out(hp * h * d, -1.0f);
        for (size_t i = 0; i < in.size(); i++)
            in[i] = float(i);
        cudaMemcpy3DParms up = {};
        up.srcPtr = make_cudaPitchedPtr(in.data(), hp * sizeof(float), w, h);
        up.dstArray = vol;
        up.extent = make_cudaExtent(w, h, d);
        up.kind = cudaMemcpyHostToDevice;
        CHECK(cudaMemcpy3D(&up));
        cudaMemcpy3DParms down = {};
        down.srcArray = vol;
        down.srcPos = make_cudaPos(2, 1, 1); // element 2 of row 1 of slice 1
        down.dstPtr = make_cudaPitchedPtr(out.data(), hp * sizeof(float), w, h);
        down.extent = make_cudaExtent(3, 2, 2);
        down.kind = cudaMemcpyDeviceToHost;
        CHECK(cudaMemcpy3D(&down));
        bool ok = true;
        for (int z = 0; z < 2; z++)
            for (int y = 0; y < 2; y++)
                for (int x = 0; x < 3; x++)
                    ok &= out[(z * h + y) * hp + x] == in[((z + 1) * h + y + 1) * hp + x + 2];
        ok &= out[3] == -1.0f; // (nothing past the box's width)
        report("a box of a 3D array", ok);
        CHECK(cudaFreeArray(vol));
    }

    // The deprecated 1D copies run on from row to row (NVIDIA's older simpleTexture copies a whole image so).
    {
        cudaArray_t a;
        CHECK(cudaMallocArray(&a, &fdesc, W, H));
        std::vector<float> img(W * H), back(W * H);
        for (int i = 0; i < W * H; i++)
            img[i] = 7.0f * i;
        CHECK(cudaMemcpyToArray(a, 0, 0, img.data(), sizeof(float) * W * H, cudaMemcpyHostToDevice));
        CHECK(cudaMemcpy2DFromArray(back.data(), W * sizeof(float), a, 0, 0, W * sizeof(float), H,
                                    cudaMemcpyDeviceToHost));
        const size_t n = 3 * W + 5; // from the third element of row 1: the rest of it, two rows, and more
        std::vector<float> part(n);
        CHECK(cudaMemcpyFromArray(part.data(), a, 2 * sizeof(float), 1, sizeof(float) * n, cudaMemcpyDeviceToHost));
        bool ok = back == img;
        for (size_t i = 0; i < n; i++)
            ok &= part[i] == img[W + 2 + i];
        report("1D copies run on from row to row", ok);
        CHECK(cudaFreeArray(a));
    }

    // A device-to-array copy captured into a graph and replayed.
    {
        cudaStream_t st;
        CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
        float *d_src;
        CHECK(cudaMalloc(&d_src, sizeof(float) * W * H));
        std::vector<float> pattern(W * H);
        for (int i = 0; i < W * H; i++)
            pattern[i] = 3.0f * i;
        CHECK(cudaMemcpy(d_src, pattern.data(), sizeof(float) * W * H, cudaMemcpyHostToDevice));
        cudaArray_t captured;
        CHECK(cudaMallocArray(&captured, &fdesc, W, H));
        std::vector<float> zeros(W * H, 0.0f); // (a new array's contents are undefined: the H100 showed so)
        CHECK(cudaMemcpy2DToArray(captured, 0, 0, zeros.data(), W * sizeof(float), W * sizeof(float), H,
                                  cudaMemcpyHostToDevice));
        cudaGraph_t g;
        cudaGraphExec_t exec;
        CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
        CHECK(cudaMemcpy2DToArrayAsync(captured, 0, 0, d_src, W * sizeof(float), W * sizeof(float), H,
                                       cudaMemcpyDeviceToDevice, st));
        CHECK(cudaStreamEndCapture(st, &g));
        std::vector<float> before(W * H, -1.0f);
        CHECK(cudaMemcpy2DFromArray(before.data(), W * sizeof(float), captured, 0, 0, W * sizeof(float), H,
                                    cudaMemcpyDeviceToHost));
        CHECK(cudaGraphInstantiate(&exec, g, 0));
        CHECK(cudaGraphLaunch(exec, st));
        CHECK(cudaStreamSynchronize(st));
        std::vector<float> after(W * H);
        CHECK(cudaMemcpy2DFromArray(after.data(), W * sizeof(float), captured, 0, 0, W * sizeof(float), H,
                                    cudaMemcpyDeviceToHost));
        report("a copy into an array captured, not run, then replayed",
               before == zeros && after == pattern);
        CHECK(cudaGraphExecDestroy(exec));
        CHECK(cudaGraphDestroy(g));
        CHECK(cudaFreeArray(captured));
        CHECK(cudaFree(d_src));
        CHECK(cudaStreamDestroy(st));
    }

    // The driver API's 1D array and its linear copies.
    {
        CUDA_ARRAY_DESCRIPTOR ad = {100, 0, CU_AD_FORMAT_UNSIGNED_INT32, 1};
        CUarray a;
        CHECK((cudaError_t)cuArrayCreate(&a, &ad));
        unsigned words[10], back_words[10] = {0};
        for (int i = 0; i < 10; i++)
            words[i] = 0xC0DE0000u + i;
        CHECK((cudaError_t)cuMemcpyHtoA(a, 40, words, sizeof words));
        CHECK((cudaError_t)cuMemcpyAtoH(back_words, a, 40, sizeof back_words));
        CUDA_ARRAY_DESCRIPTOR got;
        CHECK((cudaError_t)cuArrayGetDescriptor(&got, a));
        report("a 1D array through the driver", std::memcmp(words, back_words, sizeof words) == 0 &&
                                                     got.Width == 100 && got.Height == 0 &&
                                                     got.Format == CU_AD_FORMAT_UNSIGNED_INT32 && got.NumChannels == 1);
        CHECK((cudaError_t)cuArrayDestroy(a));
    }

    CHECK(cudaFreeArray(image));
    CHECK(cudaFree(d_out));
    if (failures)
        return 1;
    std::printf("textures OK\n");
    return 0;
}
