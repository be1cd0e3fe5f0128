/* Internal interface of rgpu's cuFFT stand-in (libcufft.so.12 for CUDA 13, libcufft.so.11 for CUDA 12).
 *
 * A plan (a cufftHandle, an int) is a description kept here until it is made: making it is one round trip
 * (FFT_PLAN: the server makes cuFFT's plan and answers its work size, or cuFFT's refusal), an execution is one
 * deferred FFT_EXEC, whose errors surface at the next synchronising call as a kernel's do. The server never
 * allocates hidden memory for a plan: the work area is the program's (cufftSetWorkArea) or, with
 * auto-allocation, allocated here through the runtime, so it counts as the session's memory. Callbacks and
 * multi-GPU plans are not supported (generated stubs). Needs NVIDIA's headers only to regenerate native/gen. */
#ifndef RGPU_FFT_H
#define RGPU_FFT_H

#include <cuda.h> /* CUDA_VERSION: which of the two sonames this build is */
#include <stddef.h>
#include <stdint.h>

#include "cufft_consts.h"
#include "remote.h"
#include "rgpu_ops.h"
#include "rgpu_wire.h"
#include "standin.h"

#define FFT_API __attribute__((visibility("default")))

#if CUDA_VERSION >= 13000
#define RGPU_FFT_MAJOR RGPU_CUFFT_VERSION_MAJOR
#define RGPU_FFT_MINOR RGPU_CUFFT_VERSION_MINOR
#define RGPU_FFT_PATCH RGPU_CUFFT_VERSION_PATCH
#else
#define RGPU_FFT_MAJOR RGPU_CUFFT12_VERSION_MAJOR
#define RGPU_FFT_MINOR RGPU_CUFFT12_VERSION_MINOR
#define RGPU_FFT_PATCH RGPU_CUFFT12_VERSION_PATCH
#endif

/* cufft.h's #defines (the generated constants are its enums) */
#define RGPU_FFT_FORWARD (-1)
#define RGPU_FFT_INVERSE 1
#define RGPU_FFT_PLAN_NULL (-1)
#define RGPU_FFT_MAX_RANK 3

/* What FFT_PLAN and FFT_ESTIMATE carry: a plan's shape, layout and data types. */
struct fft_desc {
    int plan_type;                       /* the legacy cufftType; 0 for a cufftXt plan */
    int input_type, output_type, exec_type; /* cudaDataType */
    int rank;
    long long n[RGPU_FFT_MAX_RANK];
    int in_embed, out_embed;             /* 0: NULL embedding */
    long long inembed[RGPU_FFT_MAX_RANK], onembed[RGPU_FFT_MAX_RANK];
    long long istride, idist, ostride, odist, batch;
};

struct fft_plan {
    struct fft_desc desc;
    int made;
    uint64_t server;
    size_t work_size;
    void *stream;
    void *work;       /* cufftSetWorkArea's */
    void *owned_work; /* allocated here (auto-allocation) */
    int auto_allocate;
};

/* The plan table (plans.c). */
struct fft_plan *rgpu_fft_plan(int handle); /* NULL unless a live plan of this process */
int cufftCreate(int *handle);
int cufftDestroy(int handle);

/* Descriptions (make.c): the checks cuFFT makes before anything travels; a cufftResult. */
int rgpu_fft_describe(struct fft_desc *d, int rank, const long long *n, const long long *inembed, long long istride,
                      long long idist, const long long *onembed, long long ostride, long long odist,
                      long long batch);
int rgpu_fft_legacy_types(struct fft_desc *d, int type); /* CUFFT_INVALID_TYPE unless a cufftType */

int rgpu_fft_unsupported(int *logged, const char *name);
void rgpu_fft_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
int rgpu_fft_status(int cuda_result); /* CUresult of a call that failed on the way -> cufftResult */
int cudaMalloc(void **p, size_t size);

#endif
