/* The runtime's occupancy calls that are not templates in cuda_runtime.h (cudaOccupancyMaxPotentialBlockSize*
 * are: they call cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags, in register.c). */
#include "rt.h"

RT_API cudaError_t cudaOccupancyAvailableDynamicSMemPerBlock(size_t *bytes, const void *func, int blocks, int block_size)
{
    cudaFunction_t f;
    cudaError_t e = cudaGetFuncBySymbol(&f, func);
    return e != cudaSuccess ? e : rt_fail(cuOccupancyAvailableDynamicSMemPerBlock(bytes, (CUfunction)f, blocks, block_size));
}
