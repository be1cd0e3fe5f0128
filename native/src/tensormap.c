/* Tensor maps (TMA descriptors): encoded by the server's driver, which knows the GPU's descriptor format; the
 * 128 bytes come back opaque and are stored exactly as the driver produced them. Triton's and XLA's Hopper
 * kernels take them as parameters. */
#include <string.h>

#include "rgpu_shim.h"

#define API __attribute__((visibility("default")))
#define MAX_RANK 5

API CUresult cuTensorMapEncodeTiled(CUtensorMap *tensorMap, CUtensorMapDataType tensorDataType,
                                    cuuint32_t tensorRank, void *globalAddress, const cuuint64_t *globalDim,
                                    const cuuint64_t *globalStrides, const cuuint32_t *boxDim,
                                    const cuuint32_t *elementStrides, CUtensorMapInterleave interleave,
                                    CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2Promotion,
                                    CUtensorMapFloatOOBfill oobFill)
{
    if (!tensorMap || !globalAddress || !globalDim || !boxDim || !elementStrides || tensorRank < 1 ||
        tensorRank > MAX_RANK || (tensorRank > 1 && !globalStrides))
        return CUDA_ERROR_INVALID_VALUE;
    /* Only the first tensorRank entries of each array are the program's; the rest travel as 0. */
    uint64_t dim[MAX_RANK] = {0}, stride[MAX_RANK] = {0};
    uint32_t box[MAX_RANK] = {0}, estride[MAX_RANK] = {0};
    for (cuuint32_t i = 0; i < tensorRank; i++) {
        dim[i] = globalDim[i], box[i] = boxDim[i], estride[i] = elementStrides[i];
        if (i > 0)
            stride[i] = globalStrides[i - 1];
    }
    uint8_t a[RGPU_TENSOR_MAP_ENCODE_TILED_REQ_SIZE], rep[RGPU_TENSOR_MAP_ENCODE_TILED_REP_SIZE];
    rgpu_pack_tensor_map_encode_tiled(a, &(struct rgpu_tensor_map_encode_tiled_req){
        .data_type = (uint32_t)tensorDataType, .rank = tensorRank, .address = (uint64_t)(uintptr_t)globalAddress,
        .dim0 = dim[0], .dim1 = dim[1], .dim2 = dim[2], .dim3 = dim[3], .dim4 = dim[4],
        .stride1 = stride[1], .stride2 = stride[2], .stride3 = stride[3], .stride4 = stride[4],
        .box0 = box[0], .box1 = box[1], .box2 = box[2], .box3 = box[3], .box4 = box[4],
        .element_stride0 = estride[0], .element_stride1 = estride[1], .element_stride2 = estride[2],
        .element_stride3 = estride[3], .element_stride4 = estride[4],
        .interleave = (uint32_t)interleave, .swizzle = (uint32_t)swizzle, .l2_promotion = (uint32_t)l2Promotion,
        .oob_fill = (uint32_t)oobFill});
    CUresult r = rgpu_call(RGPU_OP_TENSOR_MAP_ENCODE_TILED, a, sizeof a, NULL, 0, rep, sizeof rep, NULL);
    struct rgpu_tensor_map_encode_tiled_rep v;
    if (r == CUDA_SUCCESS && rgpu_unpack_tensor_map_encode_tiled(rep, sizeof rep, &v) != 0)
        r = CUDA_ERROR_UNKNOWN;
    if (r == CUDA_SUCCESS) {
        _Static_assert(sizeof v.tensor_map == sizeof *tensorMap, "CUtensorMap is 128 bytes");
        memcpy(tensorMap, v.tensor_map, sizeof v.tensor_map);
    }
    return r;
}
