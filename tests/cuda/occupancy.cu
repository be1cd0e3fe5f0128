// Occupancy: the runtime's cudaOccupancyMaxPotentialBlockSize templates, the driver's search with a
// dynamic-shared-memory callback (it runs in this process), and the dynamic shared memory left per block.
// Build with -lcuda.
#include <cuda.h>

#include "check.cuh"

__global__ void vadd(const float *a, const float *b, float *c, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        c[i] = a[i] + b[i];
}

static int callbacks;

static size_t smem_for(int block_size)
{
    callbacks++;
    return (size_t)block_size * 16; // 16 bytes of dynamic shared memory per thread
}

int main()
{
    int min_grid = 0, block = 0, blocks = 0;
    CHECK(cudaOccupancyMaxPotentialBlockSize(&min_grid, &block, vadd, 0, 0));
    EXPECT(block > 0 && block <= 1024 && min_grid > 0);
    CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, vadd, block, 0));
    EXPECT(blocks > 0);
    int limited_grid = 0, limited = 0;
    CHECK(cudaOccupancyMaxPotentialBlockSize(&limited_grid, &limited, vadd, 0, 96));
    EXPECT(limited > 0 && limited <= 96);
    int var_grid = 0, var_block = 0;
    CHECK(cudaOccupancyMaxPotentialBlockSizeVariableSMem(&var_grid, &var_block, vadd, smem_for));

    // The driver's own search gives what the runtime's template gives.
    cudaFunction_t f;
    CHECK(cudaGetFuncBySymbol(&f, (const void *)vadd));
    int d_grid = 0, d_block = 0;
    if (cuOccupancyMaxPotentialBlockSize(&d_grid, &d_block, (CUfunction)f, nullptr, 0, 0) != CUDA_SUCCESS)
        return 1;
    EXPECT(d_grid == min_grid && d_block == block);
    callbacks = 0;
    if (cuOccupancyMaxPotentialBlockSizeWithFlags(&d_grid, &d_block, (CUfunction)f, smem_for, 0, 0, 0) != CUDA_SUCCESS)
        return 1;
    EXPECT(callbacks > 0 && d_grid == var_grid && d_block == var_block);
    EXPECT(cuOccupancyMaxPotentialBlockSize(nullptr, &d_block, (CUfunction)f, nullptr, 0, 0) == CUDA_ERROR_INVALID_VALUE);

    size_t avail = 0;
    CHECK(cudaOccupancyAvailableDynamicSMemPerBlock(&avail, vadd, 2, 256));
    EXPECT(avail > 0);
    std::printf("occupancy OK block=%d grid=%d blocks_per_sm=%d limited=%d/%d callback_block=%d/%d smem=%zu\n", block,
                min_grid, blocks, limited, limited_grid, var_block, var_grid, avail);
    return 0;
}
