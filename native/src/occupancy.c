/* Occupancy: the best block size for a kernel (cuOccupancyMaxPotentialBlockSize), searched here because the
 * program's dynamic-shared-memory callback can only run here. One OCCUPANCY_TABLE round trip gives the active
 * blocks per multiprocessor for every candidate block size. */
#include <stdlib.h>

#include "rgpu_shim.h"

#define API __attribute__((visibility("default")))
#define MAX_CANDIDATES 1024

static CUresult potential_block_size(int *min_grid, int *block_size, CUfunction func, CUoccupancyB2DSize smem_of,
                                     size_t smem, int limit, unsigned flags)
{
    int max_threads, sms, warp;
    CUdevice dev;
    if (!min_grid || !block_size || !func)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = cuFuncGetAttribute(&max_threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, func);
    if (r == CUDA_SUCCESS)
        r = cuCtxGetDevice(&dev);
    if (r == CUDA_SUCCESS)
        r = cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev);
    if (r == CUDA_SUCCESS)
        r = cuDeviceGetAttribute(&warp, CU_DEVICE_ATTRIBUTE_WARP_SIZE, dev);
    if (r != CUDA_SUCCESS)
        return r;
    if (limit <= 0 || limit > max_threads)
        limit = max_threads;
    if (warp <= 0 || limit <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    /* Candidates from the largest down, in whole warps; the limit itself first when it is not whole warps. */
    int top = (limit + warp - 1) / warp, n = top < MAX_CANDIDATES ? top : MAX_CANDIDATES;
    int *sizes = malloc((size_t)n * sizeof *sizes);
    uint8_t *bulk = malloc((size_t)n * 12), *out = malloc((size_t)n * 4);
    r = sizes && bulk && out ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
    for (int i = 0; r == CUDA_SUCCESS && i < n; i++) {
        int b = (top - i) * warp;
        sizes[i] = b < limit ? b : limit;
        rgpu_put_u32(bulk + 12 * i, (uint32_t)sizes[i]);
        rgpu_put_u64(bulk + 12 * i + 4, smem_of ? smem_of(sizes[i]) : smem);
    }
    if (r == CUDA_SUCCESS) {
        uint8_t a[RGPU_OCCUPANCY_TABLE_REQ_SIZE], rep[RGPU_OCCUPANCY_TABLE_REP_SIZE];
        struct rgpu_sink sink = {out, (size_t)n * 4, 0};
        rgpu_pack_occupancy_table(a, &(struct rgpu_occupancy_table_req){rgpu_function_handle(func), flags, (uint32_t)n});
        r = rgpu_call(RGPU_OP_OCCUPANCY_TABLE, a, sizeof a, bulk, (size_t)n * 12, rep, sizeof rep, &sink);
        struct rgpu_occupancy_table_rep got;
        if (r == CUDA_SUCCESS && (rgpu_unpack_occupancy_table(rep, sizeof rep, &got) < 0 || got.count != (uint32_t)n ||
                                  sink.len != (size_t)n * 4))
            r = rgpu_bad_reply(RGPU_OP_OCCUPANCY_TABLE, "not one entry per block size asked for");
    }
    if (r == CUDA_SUCCESS) {
        /* Most resident threads wins; on a tie the larger block (it comes first). */
        int best = 0, best_blocks = 0;
        long best_threads = 0;
        for (int i = 0; i < n; i++) {
            int blocks = (int)rgpu_get_u32(out + 4 * i);
            if ((long)blocks * sizes[i] > best_threads)
                best = sizes[i], best_blocks = blocks, best_threads = (long)blocks * sizes[i];
        }
        *block_size = best;
        *min_grid = best_blocks * sms;
    }
    free(sizes), free(bulk), free(out);
    return r;
}

API CUresult cuOccupancyMaxPotentialBlockSizeWithFlags(int *min_grid, int *block_size, CUfunction func,
                                                       CUoccupancyB2DSize smem_of, size_t smem, int limit,
                                                       unsigned int flags)
{
    return potential_block_size(min_grid, block_size, func, smem_of, smem, limit, flags);
}

API CUresult cuOccupancyMaxPotentialBlockSize(int *min_grid, int *block_size, CUfunction func,
                                              CUoccupancyB2DSize smem_of, size_t smem, int limit)
{
    return potential_block_size(min_grid, block_size, func, smem_of, smem, limit, 0);
}

API CUresult cuOccupancyAvailableDynamicSMemPerBlock(size_t *bytes, CUfunction func, int blocks, int block_size)
{
    if (!bytes || !func)
        return CUDA_ERROR_INVALID_VALUE;
    uint8_t a[RGPU_OCCUPANCY_AVAILABLE_SMEM_REQ_SIZE], rep[RGPU_OCCUPANCY_AVAILABLE_SMEM_REP_SIZE];
    rgpu_pack_occupancy_available_smem(a, &(struct rgpu_occupancy_available_smem_req){rgpu_function_handle(func), blocks,
                                                                                      block_size});
    CUresult r = rgpu_call(RGPU_OP_OCCUPANCY_AVAILABLE_SMEM, a, sizeof a, NULL, 0, rep, sizeof rep, NULL);
    struct rgpu_occupancy_available_smem_rep v;
    if (r == CUDA_SUCCESS && rgpu_unpack_occupancy_available_smem(rep, sizeof rep, &v) < 0)
        return rgpu_bad_reply(RGPU_OP_OCCUPANCY_AVAILABLE_SMEM, "reply of the wrong size");
    if (r == CUDA_SUCCESS)
        *bytes = (size_t)v.bytes;
    return r;
}

/* Cluster occupancy: the launch configuration's shape and attributes go to the server's driver as they are, as
 * cuLaunchKernelEx's do (protocol 1.7). `which` 0: the most clusters resident at once; 1: the largest cluster
 * size the launch could take. */
static CUresult clusters(uint32_t which, int *out, CUfunction func, const CUlaunchConfig *c)
{
    static int logged;
    if (!out || !func || !c || (c->numAttrs && !c->attrs) || c->numAttrs > RGPU_MAX_LAUNCH_ATTRIBUTES)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult old = rgpu_need_protocol(7, &logged, "cluster occupancy");
    if (old != CUDA_SUCCESS)
        return old;
    uint8_t a[RGPU_OCCUPANCY_CLUSTERS_REQ_SIZE], rep[RGPU_OCCUPANCY_CLUSTERS_REP_SIZE];
    rgpu_pack_occupancy_clusters(a, &(struct rgpu_occupancy_clusters_req){
                                        .function = rgpu_function_handle(func), .which = which,
                                        .grid_x = c->gridDimX, .grid_y = c->gridDimY, .grid_z = c->gridDimZ,
                                        .block_x = c->blockDimX, .block_y = c->blockDimY, .block_z = c->blockDimZ,
                                        .shared_mem = c->sharedMemBytes, .count = c->numAttrs});
    CUresult r = rgpu_call(RGPU_OP_OCCUPANCY_CLUSTERS, a, sizeof a, c->attrs, c->numAttrs * sizeof *c->attrs, rep,
                           sizeof rep, NULL);
    struct rgpu_occupancy_clusters_rep v;
    if (r == CUDA_SUCCESS && rgpu_unpack_occupancy_clusters(rep, sizeof rep, &v) < 0)
        return rgpu_bad_reply(RGPU_OP_OCCUPANCY_CLUSTERS, "reply of the wrong size");
    if (r == CUDA_SUCCESS)
        *out = v.value;
    return r;
}

API CUresult cuOccupancyMaxActiveClusters(int *n, CUfunction func, const CUlaunchConfig *config)
{
    return clusters(0, n, func, config);
}

API CUresult cuOccupancyMaxPotentialClusterSize(int *size, CUfunction func, const CUlaunchConfig *config)
{
    return clusters(1, size, func, config);
}
