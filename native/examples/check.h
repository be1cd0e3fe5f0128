/* Shared by the examples: fail loudly with the CUDA error name. */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>

#define CHECK(call)                                                                          \
    do {                                                                                     \
        CUresult _r = (call);                                                                \
        if (_r != CUDA_SUCCESS) {                                                            \
            const char *_n = NULL;                                                           \
            cuGetErrorName(_r, &_n);                                                         \
            fprintf(stderr, "%s:%d: %s failed: %s (%d)\n", __FILE__, __LINE__, #call,        \
                    _n ? _n : "?", (int)_r);                                                 \
            exit(2);                                                                         \
        }                                                                                    \
    } while (0)
