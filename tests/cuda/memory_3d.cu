// Volumes in linear memory: cudaMalloc3D, cudaMemset3D and cudaMemcpy3D (whole volumes and boxes inside them, each
// way, with pitches and heights of their own on either side), synchronous and on a stream; cudaMemcpy3DPeer.
#include <cstring>

#include "check.cuh"

const int W = 10, H = 6, D = 4; // ints across, rows, slices

static int value_at(int x, int y, int z) { return 1000 * z + 100 * y + x; }

// A copy of the box at (x, y, z) of `size` (width in ints) from one pitched volume to another.
static cudaError_t copy_box(cudaPitchedPtr dst, cudaPos dst_at, cudaPitchedPtr src, cudaPos src_at, cudaExtent size,
                            cudaMemcpyKind kind, cudaStream_t s = 0, bool async = false)
{
    cudaMemcpy3DParms p = {};
    p.srcPtr = src, p.srcPos = src_at, p.dstPtr = dst, p.dstPos = dst_at, p.extent = size, p.kind = kind;
    return async ? cudaMemcpy3DAsync(&p, s) : cudaMemcpy3D(&p);
}

int main()
{
    static int host[D][H][W], back[D + 1][H + 2][W + 3];
    for (int z = 0; z < D; z++)
        for (int y = 0; y < H; y++)
            for (int x = 0; x < W; x++)
                host[z][y][x] = value_at(x, y, z);
    cudaExtent whole = make_cudaExtent(W * sizeof(int), H, D);
    cudaPitchedPtr vol, other;
    CHECK(cudaMalloc3D(&vol, whole));
    CHECK(cudaMalloc3D(&other, whole));
    EXPECT(vol.pitch >= W * sizeof(int) && vol.xsize == W * sizeof(int) && vol.ysize == H);
    CHECK(cudaMemset3D(vol, 0, whole));
    CHECK(cudaMemset3D(other, 0xff, whole));

    // The whole volume up, then back into a host volume with a wider pitch and taller slices, one in.
    cudaPitchedPtr h = make_cudaPitchedPtr(host, W * sizeof(int), W, H);
    cudaPitchedPtr b = make_cudaPitchedPtr(back, (W + 3) * sizeof(int), W + 3, H + 2);
    CHECK(copy_box(vol, make_cudaPos(0, 0, 0), h, make_cudaPos(0, 0, 0), whole, cudaMemcpyHostToDevice));
    std::memset(back, 0, sizeof back);
    CHECK(copy_box(b, make_cudaPos(2 * sizeof(int), 1, 1), vol, make_cudaPos(0, 0, 0), whole, cudaMemcpyDeviceToHost));
    for (int z = 0; z < D + 1; z++)
        for (int y = 0; y < H + 2; y++)
            for (int x = 0; x < W + 3; x++) {
                bool inside = z >= 1 && y >= 1 && y < H + 1 && x >= 2 && x < W + 2;
                EXPECT(back[z][y][x] == (inside ? value_at(x - 2, y - 1, z - 1) : 0));
            }

    // A box inside, device to device, on a stream; then the whole of `other` back.
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    cudaExtent box = make_cudaExtent(3 * sizeof(int), 2, 3);
    CHECK(copy_box(other, make_cudaPos(5 * sizeof(int), 3, 0), vol, make_cudaPos(1 * sizeof(int), 2, 1), box,
                   cudaMemcpyDeviceToDevice, s, true));
    CHECK(cudaMemset3DAsync(make_cudaPitchedPtr(other.ptr, other.pitch, other.xsize, other.ysize), 0x01,
                            make_cudaExtent(2 * sizeof(int), 1, 2), s)); // the first two ints of row 0, slices 0-1
    CHECK(cudaStreamSynchronize(s));
    static int got[D][H][W];
    CHECK(copy_box(make_cudaPitchedPtr(got, W * sizeof(int), W, H), make_cudaPos(0, 0, 0), other,
                   make_cudaPos(0, 0, 0), whole, cudaMemcpyDeviceToHost));
    for (int z = 0; z < D; z++)
        for (int y = 0; y < H; y++)
            for (int x = 0; x < W; x++) {
                int want = -1; // (0xff bytes)
                if (x >= 5 && x < 8 && y >= 3 && y < 5 && z < 3)
                    want = value_at(x - 5 + 1, y - 3 + 2, z + 1);
                if (x < 2 && y == 0 && z < 2)
                    want = 0x01010101;
                EXPECT(got[z][y][x] == want);
            }

    // cudaMemcpyDefault: each side's kind from its address.
    std::memset(got, 0, sizeof got);
    CHECK(copy_box(make_cudaPitchedPtr(got, W * sizeof(int), W, H), make_cudaPos(0, 0, 0), vol,
                   make_cudaPos(0, 0, 0), whole, cudaMemcpyDefault));
    EXPECT(std::memcmp(got, host, sizeof host) == 0);

    // A box taller than its source's slices cannot be copied.
    cudaPitchedPtr short_slices = make_cudaPitchedPtr(vol.ptr, vol.pitch, vol.xsize, 2);
    cudaError_t too_tall = copy_box(other, make_cudaPos(0, 0, 0), short_slices, make_cudaPos(0, 0, 0),
                                    make_cudaExtent(4, 3, 2), cudaMemcpyDeviceToDevice);
    EXPECT(too_tall == cudaErrorInvalidValue || too_tall == cudaErrorInvalidPitchValue);
    cudaGetLastError();

    // cudaMemcpy3DPeer within one device: the whole volume into `other`, then back.
    cudaMemcpy3DPeerParms peer = {};
    peer.srcPtr = vol, peer.srcDevice = 0, peer.dstPtr = other, peer.dstDevice = 0, peer.extent = whole;
    CHECK(cudaMemcpy3DPeer(&peer));
    std::memset(got, 0, sizeof got);
    CHECK(copy_box(make_cudaPitchedPtr(got, W * sizeof(int), W, H), make_cudaPos(0, 0, 0), other,
                   make_cudaPos(0, 0, 0), whole, cudaMemcpyDeviceToHost));
    EXPECT(std::memcmp(got, host, sizeof host) == 0);
    peer.dstDevice = 99;
    EXPECT(cudaMemcpy3DPeer(&peer) == cudaErrorInvalidDevice);
    cudaGetLastError();

    CHECK(cudaStreamDestroy(s));
    CHECK(cudaFree(vol.ptr));
    CHECK(cudaFree(other.ptr));
    std::printf("memory_3d OK\n");
    return 0;
}
