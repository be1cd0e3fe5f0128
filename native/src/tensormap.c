/* Tensor maps (TMA descriptors): encoded by the server's driver, which knows the GPU's descriptor format; the
 * 128 bytes come back opaque and are stored exactly as the driver produced them. Triton's and XLA's Hopper
 * kernels take them as parameters. */
#include <string.h>

#include "rgpu_shim.h"

#define API __attribute__((visibility("default")))
#define MAX_RANK 5
#define MIN_IM2COL_RANK 3

/* The arrays every tensor map request carries; only the first `rank` entries are the program's, the rest
 * travel as 0 (stride[0] too: dimension 0 is contiguous). */
struct tensor {
    uint64_t dim[MAX_RANK], stride[MAX_RANK];
    uint32_t element_stride[MAX_RANK];
};

static CUresult tensor_of(struct tensor *t, const CUtensorMap *map, cuuint32_t rank, cuuint32_t min_rank,
                          const void *address, const cuuint64_t *dims, const cuuint64_t *strides,
                          const cuuint32_t *element_strides)
{
    memset(t, 0, sizeof *t);
    if (!map || !address || !dims || !element_strides || rank < min_rank || rank > MAX_RANK ||
        (rank > 1 && !strides))
        return CUDA_ERROR_INVALID_VALUE;
    for (cuuint32_t i = 0; i < rank; i++) {
        t->dim[i] = dims[i], t->element_stride[i] = element_strides[i];
        if (i > 0)
            t->stride[i] = strides[i - 1];
    }
    return CUDA_SUCCESS;
}

/* One round trip whose reply is the driver's map, stored as it came. The three operations share that reply
 * (`tensor_map:b128`), so one generated unpacker serves them all. */
static CUresult map_call(uint16_t op, const uint8_t *args, size_t len, CUtensorMap *tensorMap)
{
    _Static_assert(RGPU_TENSOR_MAP_ENCODE_TILED_REP_SIZE == RGPU_TENSOR_MAP_ENCODE_IM2COL_REP_SIZE &&
                       RGPU_TENSOR_MAP_ENCODE_TILED_REP_SIZE == RGPU_TENSOR_MAP_REPLACE_ADDRESS_REP_SIZE,
                   "one reply layout for the three tensor-map operations");
    uint8_t rep[RGPU_TENSOR_MAP_ENCODE_TILED_REP_SIZE];
    struct rgpu_tensor_map_encode_tiled_rep v;
    CUresult r = rgpu_call(op, args, len, NULL, 0, rep, sizeof rep, NULL);
    if (r == CUDA_SUCCESS && rgpu_unpack_tensor_map_encode_tiled(rep, sizeof rep, &v) != 0)
        r = CUDA_ERROR_UNKNOWN;
    if (r == CUDA_SUCCESS) {
        _Static_assert(sizeof v.tensor_map == sizeof *tensorMap, "CUtensorMap is 128 bytes");
        memcpy(tensorMap, v.tensor_map, sizeof v.tensor_map);
    }
    return r;
}

API CUresult cuTensorMapEncodeTiled(CUtensorMap *tensorMap, CUtensorMapDataType tensorDataType,
                                    cuuint32_t tensorRank, void *globalAddress, const cuuint64_t *globalDim,
                                    const cuuint64_t *globalStrides, const cuuint32_t *boxDim,
                                    const cuuint32_t *elementStrides, CUtensorMapInterleave interleave,
                                    CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2Promotion,
                                    CUtensorMapFloatOOBfill oobFill)
{
    struct tensor t;
    CUresult r = tensor_of(&t, tensorMap, tensorRank, 1, globalAddress, globalDim, globalStrides, elementStrides);
    if (r != CUDA_SUCCESS || !boxDim)
        return CUDA_ERROR_INVALID_VALUE;
    uint32_t box[MAX_RANK] = {0};
    memcpy(box, boxDim, tensorRank * sizeof *boxDim);
    uint8_t a[RGPU_TENSOR_MAP_ENCODE_TILED_REQ_SIZE];
    rgpu_pack_tensor_map_encode_tiled(a, &(struct rgpu_tensor_map_encode_tiled_req){
        .data_type = (uint32_t)tensorDataType, .rank = tensorRank, .address = (uint64_t)(uintptr_t)globalAddress,
        .dim0 = t.dim[0], .dim1 = t.dim[1], .dim2 = t.dim[2], .dim3 = t.dim[3], .dim4 = t.dim[4],
        .stride1 = t.stride[1], .stride2 = t.stride[2], .stride3 = t.stride[3], .stride4 = t.stride[4],
        .box0 = box[0], .box1 = box[1], .box2 = box[2], .box3 = box[3], .box4 = box[4],
        .element_stride0 = t.element_stride[0], .element_stride1 = t.element_stride[1],
        .element_stride2 = t.element_stride[2], .element_stride3 = t.element_stride[3],
        .element_stride4 = t.element_stride[4], .interleave = (uint32_t)interleave, .swizzle = (uint32_t)swizzle,
        .l2_promotion = (uint32_t)l2Promotion, .oob_fill = (uint32_t)oobFill});
    return map_call(RGPU_OP_TENSOR_MAP_ENCODE_TILED, a, sizeof a, tensorMap);
}

API CUresult cuTensorMapEncodeIm2col(CUtensorMap *tensorMap, CUtensorMapDataType tensorDataType,
                                     cuuint32_t tensorRank, void *globalAddress, const cuuint64_t *globalDim,
                                     const cuuint64_t *globalStrides, const int *pixelBoxLowerCorner,
                                     const int *pixelBoxUpperCorner, cuuint32_t channelsPerPixel,
                                     cuuint32_t pixelsPerColumn, const cuuint32_t *elementStrides,
                                     CUtensorMapInterleave interleave, CUtensorMapSwizzle swizzle,
                                     CUtensorMapL2promotion l2Promotion, CUtensorMapFloatOOBfill oobFill)
{
    struct tensor t;
    CUresult r = tensor_of(&t, tensorMap, tensorRank, MIN_IM2COL_RANK, globalAddress, globalDim, globalStrides,
                           elementStrides);
    if (r != CUDA_SUCCESS || !pixelBoxLowerCorner || !pixelBoxUpperCorner)
        return CUDA_ERROR_INVALID_VALUE;
    /* The corners cover the spatial dimensions only: 1 .. rank-2. */
    int32_t lower[MAX_RANK - 2] = {0}, upper[MAX_RANK - 2] = {0};
    memcpy(lower, pixelBoxLowerCorner, (tensorRank - 2) * sizeof *lower);
    memcpy(upper, pixelBoxUpperCorner, (tensorRank - 2) * sizeof *upper);
    uint8_t a[RGPU_TENSOR_MAP_ENCODE_IM2COL_REQ_SIZE];
    rgpu_pack_tensor_map_encode_im2col(a, &(struct rgpu_tensor_map_encode_im2col_req){
        .data_type = (uint32_t)tensorDataType, .rank = tensorRank, .address = (uint64_t)(uintptr_t)globalAddress,
        .dim0 = t.dim[0], .dim1 = t.dim[1], .dim2 = t.dim[2], .dim3 = t.dim[3], .dim4 = t.dim[4],
        .stride1 = t.stride[1], .stride2 = t.stride[2], .stride3 = t.stride[3], .stride4 = t.stride[4],
        .lower0 = lower[0], .lower1 = lower[1], .lower2 = lower[2],
        .upper0 = upper[0], .upper1 = upper[1], .upper2 = upper[2],
        .channels_per_pixel = channelsPerPixel, .pixels_per_column = pixelsPerColumn,
        .element_stride0 = t.element_stride[0], .element_stride1 = t.element_stride[1],
        .element_stride2 = t.element_stride[2], .element_stride3 = t.element_stride[3],
        .element_stride4 = t.element_stride[4], .interleave = (uint32_t)interleave, .swizzle = (uint32_t)swizzle,
        .l2_promotion = (uint32_t)l2Promotion, .oob_fill = (uint32_t)oobFill});
    return map_call(RGPU_OP_TENSOR_MAP_ENCODE_IM2COL, a, sizeof a, tensorMap);
}

API CUresult cuTensorMapReplaceAddress(CUtensorMap *tensorMap, void *globalAddress)
{
    if (!tensorMap || !globalAddress)
        return CUDA_ERROR_INVALID_VALUE;
    uint8_t a[RGPU_TENSOR_MAP_REPLACE_ADDRESS_REQ_SIZE];
    struct rgpu_tensor_map_replace_address_req m = {.address = (uint64_t)(uintptr_t)globalAddress};
    memcpy(m.tensor_map, tensorMap, sizeof m.tensor_map);
    rgpu_pack_tensor_map_replace_address(a, &m);
    return map_call(RGPU_OP_TENSOR_MAP_REPLACE_ADDRESS, a, sizeof a, tensorMap);
}
