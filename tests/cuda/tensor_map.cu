// Tensor maps (TMA descriptors): cuTensorMapEncodeTiled, cuTensorMapEncodeIm2col and cuTensorMapReplaceAddress
// over memory from cudaMalloc, as Triton's and XLA's Hopper kernels need, and the driver's refusals of bad input.
// Only what the driver and rgpu both do (rgpu's refusal of maps beyond the program's memory and of NULL
// arguments, which crash NVIDIA's driver: test_tensormap.py).
// Build with -lcuda.
#include <cuda.h>
#include <cstring>

#include "check.cuh"

static CUresult encode(CUtensorMap *map, cuuint32_t rank, void *address, const cuuint64_t *dims,
                       const cuuint64_t *strides, const cuuint32_t *box)
{
    const cuuint32_t element_strides[5] = {1, 1, 1, 1, 1};
    return cuTensorMapEncodeTiled(map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, rank, address, dims, strides, box,
                                  element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
                                  CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
}

int main()
{
    float *d = nullptr;
    CHECK(cudaMalloc(&d, 64 * 32 * sizeof(float)));
    const cuuint64_t dims[2] = {64, 32}, strides[1] = {64 * sizeof(float)};
    const cuuint32_t box[2] = {16, 16};
    CUtensorMap map, again;
    std::memset(&map, 0, sizeof map);
    EXPECT(encode(&map, 2, d, dims, strides, box) == CUDA_SUCCESS);
    CUtensorMap zero;
    std::memset(&zero, 0, sizeof zero);
    EXPECT(std::memcmp(&map, &zero, sizeof map) != 0);
    EXPECT(encode(&again, 2, d, dims, strides, box) == CUDA_SUCCESS);
    EXPECT(std::memcmp(&map, &again, sizeof map) == 0);

    EXPECT(encode(&map, 0, d, dims, strides, box) == CUDA_ERROR_INVALID_VALUE);
    EXPECT(encode(&map, 6, d, dims, strides, box) == CUDA_ERROR_INVALID_VALUE);

    // Rank 1, as XLA's autotuner encodes a vector (a box wider than the vector too): no stride is read.
    const cuuint64_t length[1] = {128}, short_length[1] = {10}, unused_stride[1] = {0};
    const cuuint32_t box128[1] = {128}, box16[1] = {16};
    CUtensorMap vector;
    EXPECT(encode(&vector, 1, d, length, unused_stride, box128) == CUDA_SUCCESS);
    EXPECT(encode(&vector, 1, d, short_length, unused_stride, box16) == CUDA_SUCCESS);

    // The same map moved to another buffer of the same size.
    float *e = nullptr;
    CHECK(cudaMalloc(&e, 64 * 32 * sizeof(float)));
    CUtensorMap moved = map;
    EXPECT(cuTensorMapReplaceAddress(&moved, e) == CUDA_SUCCESS);
    EXPECT(std::memcmp(&moved, &map, sizeof map) != 0);

    // An im2col map of 2 images of 4x4 pixels with 8 float channels, for a 3x3 convolution padded by 1.
    const cuuint64_t nhwc[4] = {8, 4, 4, 2}, nhwc_strides[3] = {32, 128, 512};
    const cuuint32_t element_strides[4] = {1, 1, 1, 1};
    const int lower[2] = {-1, -1}, upper[2] = {-1, -1};
    CUtensorMap columns;
    auto im2col = [&](cuuint32_t rank, const cuuint64_t *shape) {
        return cuTensorMapEncodeIm2col(&columns, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, rank, d, shape, nhwc_strides,
                                       lower, upper, 8, 16, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                       CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_NONE,
                                       CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    };
    EXPECT(im2col(4, nhwc) == CUDA_SUCCESS);
    EXPECT(std::memcmp(&columns, &map, sizeof map) != 0);
    EXPECT(im2col(2, nhwc) == CUDA_ERROR_INVALID_VALUE);
    CHECK(cudaFree(d));
    CHECK(cudaFree(e));
    std::printf("tensor_map OK\n");
    return 0;
}
