// Shared by the test programs: fail loudly, with the call and the runtime's own error text.
#pragma once
#include <cstdio>
#include <cstdlib>

#define CHECK(call)                                                                                                 \
    do {                                                                                                            \
        cudaError_t err_ = (call);                                                                                  \
        if (err_ != cudaSuccess) {                                                                                  \
            std::fprintf(stderr, "%s:%d: %s -> %s (%s)\n", __FILE__, __LINE__, #call, cudaGetErrorName(err_),      \
                         cudaGetErrorString(err_));                                                                 \
            std::exit(1);                                                                                           \
        }                                                                                                           \
    } while (0)

#define EXPECT(cond)                                                                                                \
    do {                                                                                                            \
        if (!(cond)) {                                                                                              \
            std::fprintf(stderr, "%s:%d: expected %s\n", __FILE__, __LINE__, #cond);                                \
            std::exit(1);                                                                                           \
        }                                                                                                           \
    } while (0)
