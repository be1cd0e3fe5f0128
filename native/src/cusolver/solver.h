/* Internal interface of rgpu's cuSOLVER stand-in (libcusolver.so.12 for CUDA 13, .so.11 for CUDA 12): the dense
 * (cusolverDn) routines.
 *
 * Handles, cusolverDnParams and gesvdjInfo live here; a buffer-size query is one round trip answered by the
 * server's library, a factorization or solve one deferred SOLVER_RUN (its errors surface at the next
 * synchronizing call, like a kernel's). Every routine fills the one request shape of rgpu_ops.h. */
#ifndef RGPU_SOLVER_H
#define RGPU_SOLVER_H

#include <stddef.h>
#include <stdint.h>

#include "cusolver_consts.h"
#include "rgpu_ops.h"
#include "rgpu_wire.h"
#include "remote.h"
#include "standin.h"

#define SOLVER_API __attribute__((visibility("default")))

/* rgpu.protocol.solver_wire.Function: the routine, with X_API set for the 64-bit API. */
enum solver_function {
    SOLVER_GETRF = 1, SOLVER_GETRS, SOLVER_POTRF, SOLVER_POTRS, SOLVER_GEQRF, SOLVER_ORGQR, SOLVER_ORMQR,
    SOLVER_SYEVD, SOLVER_GESVD, SOLVER_GESVDJ, SOLVER_GESVDJ_BATCHED, SOLVER_SYEVJ, SOLVER_SYEVJ_BATCHED,
    SOLVER_SYEV_BATCHED, SOLVER_POTRF_BATCHED, SOLVER_POTRS_BATCHED, SOLVER_X_API = 0x100
};

/* cudaDataType values the routines take (library_types.h). */
enum { SOLVER_R_32F = 0, SOLVER_R_64F = 1, SOLVER_C_32F = 4, SOLVER_C_64F = 5 };

/* A cusolverDnHandle_t: `server` is the cuSOLVER handle on the server. */
struct solver_handle {
    uint64_t server;
    void *stream;
    int deterministic, math_mode;
};

/* A cusolverDnParams_t: the algorithm cusolverDnSetAdvOptions chose for GETRF. */
struct solver_params {
    int getrf_algo;
};

/* A gesvdjInfo_t or syevjInfo_t: the Jacobi methods' parameters. */
struct jacobi_info {
    double tolerance;
    int max_sweeps, sort;
};

/* One request, to be completed by the routine: function, data type, sizes, operands. */
static inline struct rgpu_solver_run_req rgpu_solver_request(int function, int data_type)
{
    return (struct rgpu_solver_run_req){.function = (uint32_t)function, .data_type = (uint32_t)data_type,
                                        .compute_type = (uint32_t)data_type, .batch = 1};
}

/* The buffer-size query: the library's status, device workspace (elements or bytes) and host bytes. */
int rgpu_solver_query(struct solver_handle *h, struct rgpu_solver_run_req *req, size_t *device, size_t *host);
/* The routine itself, deferred. */
int rgpu_solver_submit(struct solver_handle *h, struct rgpu_solver_run_req *req);
/* 0 if the sizes and leading dimension are acceptable for a rows x cols matrix, else INVALID_VALUE. */
int rgpu_solver_shape(int64_t rows, int64_t cols, int64_t ld);
/* The classic API's int workspace size from a query. */
int rgpu_solver_lwork(struct solver_handle *h, struct rgpu_solver_run_req *req, int *lwork);

int rgpu_solver_unsupported(int *logged, const char *name);
int rgpu_solver_status(int cuda_result); /* CUresult -> cusolverStatus_t */

#endif
