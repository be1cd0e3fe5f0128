/* The runtime's context-independent loading: the driver's cuLibrary* (a cudaLibrary_t is a CUlibrary, a
 * cudaKernel_t from a library a CUkernel). */
#include "rt.h"

RT_API cudaError_t cudaLibraryLoadData(cudaLibrary_t *lib, const void *code, enum cudaJitOption *jit, void **jit_values,
                                       unsigned int n_jit, enum cudaLibraryOption *options, void **option_values,
                                       unsigned int n_options)
{
    WITH_CONTEXT(cuLibraryLoadData((CUlibrary *)lib, code, (CUjit_option *)jit, jit_values, n_jit,
                                   (CUlibraryOption *)options, option_values, n_options));
}

RT_API cudaError_t cudaLibraryLoadFromFile(cudaLibrary_t *lib, const char *path, enum cudaJitOption *jit,
                                           void **jit_values, unsigned int n_jit, enum cudaLibraryOption *options,
                                           void **option_values, unsigned int n_options)
{
    WITH_CONTEXT(cuLibraryLoadFromFile((CUlibrary *)lib, path, (CUjit_option *)jit, jit_values, n_jit,
                                       (CUlibraryOption *)options, option_values, n_options));
}

RT_API cudaError_t cudaLibraryUnload(cudaLibrary_t lib) { WITH_CONTEXT(cuLibraryUnload((CUlibrary)lib)); }

RT_API cudaError_t cudaLibraryGetKernel(cudaKernel_t *kernel, cudaLibrary_t lib, const char *name)
{
    WITH_CONTEXT(cuLibraryGetKernel((CUkernel *)kernel, (CUlibrary)lib, name));
}

RT_API cudaError_t cudaLibraryGetGlobal(void **dptr, size_t *bytes, cudaLibrary_t lib, const char *name)
{
    WITH_CONTEXT(cuLibraryGetGlobal((CUdeviceptr *)dptr, bytes, (CUlibrary)lib, name));
}

cudaError_t __cudaGetKernel(cudaKernel_t *out, const void *func); /* register.c */

/* A kernel of this program by its host function: the same record the CUDA 13 launch stubs use, so it launches
 * with cudaLaunchKernel and answers cudaFuncGetAttributes. (It is not a CUkernel of the driver.) */
RT_API cudaError_t cudaGetKernel(cudaKernel_t *kernel, const void *func) { return rt_record(__cudaGetKernel(kernel, func)); }
