// memset/memcpy in 1D and 2D, pitched allocations, cudaMemcpyDefault and pointer attributes. No kernels.
#include <cstring>
#include <vector>

#include "check.cuh"

int main()
{
    const size_t w = 100, h = 37; // bytes per row, rows
    unsigned char *d;
    size_t pitch;
    CHECK(cudaMallocPitch((void **)&d, &pitch, w, h));
    EXPECT(pitch >= w);
    CHECK(cudaMemset2D(d, pitch, 0x5A, w, h));
    std::vector<unsigned char> rows(w * h), back(w * h, 0);
    CHECK(cudaMemcpy2D(back.data(), w, d, pitch, w, h, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < w * h; i++)
        EXPECT(back[i] == 0x5A);
    for (size_t i = 0; i < w * h; i++)
        rows[i] = (unsigned char)(i * 7 + 3);
    // A host pitch wider than the rows: only w bytes of each row travel.
    std::vector<unsigned char> wide(160 * h, 0xEE);
    for (size_t y = 0; y < h; y++)
        std::memcpy(&wide[y * 160], &rows[y * w], w);
    CHECK(cudaMemcpy2D(d, pitch, wide.data(), 160, w, h, cudaMemcpyHostToDevice));
    unsigned char *d2;
    size_t pitch2;
    CHECK(cudaMallocPitch((void **)&d2, &pitch2, w, h));
    CHECK(cudaMemcpy2D(d2, pitch2, d, pitch, w, h, cudaMemcpyDeviceToDevice));
    std::vector<unsigned char> out(200 * h, 0x11);
    CHECK(cudaMemcpy2D(out.data(), 200, d2, pitch2, w, h, cudaMemcpyDefault));
    for (size_t y = 0; y < h; y++) {
        EXPECT(std::memcmp(&out[y * 200], &rows[y * w], w) == 0);
        EXPECT(out[y * 200 + w] == 0x11); // bytes past the row untouched
    }

    int *v;
    CHECK(cudaMalloc(&v, 1024 * sizeof(int)));
    CHECK(cudaMemset(v, 0xFF, 1024 * sizeof(int)));
    CHECK(cudaMemsetAsync(v + 10, 0, 5 * sizeof(int), 0));
    std::vector<int> hv(1024);
    CHECK(cudaMemcpy(hv.data(), v, 1024 * sizeof(int), cudaMemcpyDefault));
    EXPECT(hv[9] == -1 && hv[10] == 0 && hv[14] == 0 && hv[15] == -1);

    cudaPointerAttributes pa;
    CHECK(cudaPointerGetAttributes(&pa, v + 3));
    EXPECT(pa.type == cudaMemoryTypeDevice && pa.devicePointer == (void *)(v + 3));
    CHECK(cudaPointerGetAttributes(&pa, hv.data()));
    EXPECT(pa.type == cudaMemoryTypeUnregistered);
    void *pinned;
    CHECK(cudaMallocHost(&pinned, 4096));
    CHECK(cudaPointerGetAttributes(&pa, pinned));
    EXPECT(pa.type == cudaMemoryTypeHost);
    CHECK(cudaFreeHost(pinned));

    EXPECT(cudaMemcpy(hv.data(), v, 4, (cudaMemcpyKind)42) == cudaErrorInvalidMemcpyDirection);
    EXPECT(cudaGetLastError() == cudaErrorInvalidMemcpyDirection);
    CHECK(cudaFree(v));
    CHECK(cudaFree(d));
    CHECK(cudaFree(d2));
    size_t free_b, total_b;
    CHECK(cudaMemGetInfo(&free_b, &total_b));
    EXPECT(free_b <= total_b && total_b > 0);
    std::printf("memory_2d OK pitch=%s\n", pitch % 256 == 0 ? "aligned" : "odd");
    return 0;
}
