/* Handles, their settings, cusolverDnParams and gesvdjInfo (all local), statuses, and the two ways a routine
 * reaches the server. */
#include <stdlib.h>

#include "solver.h"

_Static_assert(RGPU_SOLVER_BUFFER_SIZE_REQ_SIZE == RGPU_SOLVER_RUN_REQ_SIZE,
               "a buffer-size query carries the routine's own request");

int rgpu_solver_unsupported(int *logged, const char *name)
{
    return rgpu_standin_unsupported(logged, "cusolver", name, CUSOLVER_STATUS_NOT_SUPPORTED,
                                    "CUSOLVER_STATUS_NOT_SUPPORTED");
}

int rgpu_solver_status(int r)
{
    static const struct rgpu_library_statuses codes = {
        CUSOLVER_STATUS_SUCCESS, CUSOLVER_STATUS_INVALID_VALUE, CUSOLVER_STATUS_ALLOC_FAILED,
        CUSOLVER_STATUS_NOT_INITIALIZED, CUSOLVER_STATUS_NOT_SUPPORTED, CUSOLVER_STATUS_EXECUTION_FAILED};
    return rgpu_library_status(r, &codes);
}

int rgpu_solver_shape(int64_t rows, int64_t cols, int64_t ld)
{
    return rows < 0 || cols < 0 || ld < (rows > 1 ? rows : 1) ? CUSOLVER_STATUS_INVALID_VALUE : 0;
}

int rgpu_solver_query(struct solver_handle *h, struct rgpu_solver_run_req *req, size_t *device, size_t *host)
{
    if (!h)
        return CUSOLVER_STATUS_NOT_INITIALIZED;
    req->handle = h->server, req->stream = rgpu_ext_stream(h->stream);
    uint8_t args[RGPU_SOLVER_BUFFER_SIZE_REQ_SIZE], rep[RGPU_SOLVER_BUFFER_SIZE_REP_SIZE];
    rgpu_pack_solver_run(args, req);
    int r = rgpu_ext_call(RGPU_OP_SOLVER_BUFFER_SIZE, args, sizeof args, NULL, 0, rep, sizeof rep, NULL, 0, NULL);
    struct rgpu_solver_buffer_size_rep got;
    if (!r && rgpu_unpack_solver_buffer_size(rep, sizeof rep, &got))
        r = rgpu_ext_bad_reply(RGPU_OP_SOLVER_BUFFER_SIZE, "reply size");
    if (r)
        return rgpu_solver_status(r);
    if (got.status)
        return (int)got.status;
    if (device)
        *device = got.device_size;
    if (host)
        *host = got.host_size;
    return CUSOLVER_STATUS_SUCCESS;
}

int rgpu_solver_lwork(struct solver_handle *h, struct rgpu_solver_run_req *req, int *lwork)
{
    if (!lwork)
        return CUSOLVER_STATUS_INVALID_VALUE;
    size_t size = 0;
    int s = rgpu_solver_query(h, req, &size, NULL);
    if (!s && size > INT32_MAX)
        return CUSOLVER_STATUS_INVALID_VALUE;
    if (!s)
        *lwork = (int)size;
    return s;
}

int rgpu_solver_submit(struct solver_handle *h, struct rgpu_solver_run_req *req)
{
    if (!h)
        return CUSOLVER_STATUS_NOT_INITIALIZED;
    req->handle = h->server, req->stream = rgpu_ext_stream(h->stream);
    uint8_t args[RGPU_SOLVER_RUN_REQ_SIZE];
    rgpu_pack_solver_run(args, req);
    return rgpu_solver_status(rgpu_ext_defer(RGPU_OP_SOLVER_RUN, args, sizeof args, NULL, 0));
}

/* -- handles ---------------------------------------------------------------------------------------------- */
SOLVER_API int cusolverDnCreate(struct solver_handle **out)
{
    if (!out)
        return CUSOLVER_STATUS_INVALID_VALUE;
    uint64_t server;
    int r = rgpu_standin_open(RGPU_OP_SOLVER_CREATE, &server);
    if (r)
        return r == RGPU_STANDIN_NO_DEVICE ? CUSOLVER_STATUS_NOT_INITIALIZED : rgpu_solver_status(r);
    struct solver_handle *h = calloc(1, sizeof *h);
    if (!h) {
        rgpu_standin_close(RGPU_OP_SOLVER_DESTROY, server);
        return CUSOLVER_STATUS_ALLOC_FAILED;
    }
    h->server = server, h->deterministic = CUSOLVER_DETERMINISTIC_RESULTS, h->math_mode = CUSOLVER_DEFAULT_MATH;
    *out = h;
    return CUSOLVER_STATUS_SUCCESS;
}

SOLVER_API int cusolverDnDestroy(struct solver_handle *h)
{
    if (!h)
        return CUSOLVER_STATUS_NOT_INITIALIZED;
    int r = rgpu_standin_close(RGPU_OP_SOLVER_DESTROY, h->server);
    free(h);
    return rgpu_solver_status(r);
}

#define SETTER(name, field, type)                                                                                   \
    SOLVER_API int cusolverDnSet##name(struct solver_handle *h, type v)                                            \
    {                                                                                                               \
        if (!h)                                                                                                     \
            return CUSOLVER_STATUS_NOT_INITIALIZED;                                                                 \
        h->field = v;                                                                                               \
        return CUSOLVER_STATUS_SUCCESS;                                                                             \
    }                                                                                                               \
    SOLVER_API int cusolverDnGet##name(struct solver_handle *h, type *v)                                           \
    {                                                                                                               \
        if (!h)                                                                                                     \
            return CUSOLVER_STATUS_NOT_INITIALIZED;                                                                 \
        if (!v)                                                                                                     \
            return CUSOLVER_STATUS_INVALID_VALUE;                                                                   \
        *v = h->field;                                                                                              \
        return CUSOLVER_STATUS_SUCCESS;                                                                             \
    }
/* defines: cusolverDnSetStream cusolverDnGetStream cusolverDnSetDeterministicMode cusolverDnGetDeterministicMode
 * cusolverDnSetMathMode cusolverDnGetMathMode */
SETTER(Stream, stream, void *)
SETTER(DeterministicMode, deterministic, int)
SETTER(MathMode, math_mode, int)

/* -- cusolverDnParams and gesvdjInfo ------------------------------------------------------------------------ */
SOLVER_API int cusolverDnCreateParams(struct solver_params **out)
{
    if (!out)
        return CUSOLVER_STATUS_INVALID_VALUE;
    return (*out = calloc(1, sizeof **out)) ? CUSOLVER_STATUS_SUCCESS : CUSOLVER_STATUS_ALLOC_FAILED;
}

SOLVER_API int cusolverDnDestroyParams(struct solver_params *p)
{
    free(p);
    return CUSOLVER_STATUS_SUCCESS;
}

SOLVER_API int cusolverDnSetAdvOptions(struct solver_params *p, int function, int algo)
{
    if (!p)
        return CUSOLVER_STATUS_INVALID_VALUE;
    if (function != CUSOLVERDN_GETRF || (algo != CUSOLVER_ALG_0 && algo != CUSOLVER_ALG_1))
        return CUSOLVER_STATUS_INVALID_VALUE;
    p->getrf_algo = algo;
    return CUSOLVER_STATUS_SUCCESS;
}

static int jacobi_create(struct jacobi_info **out)
{
    if (!out)
        return CUSOLVER_STATUS_INVALID_VALUE;
    if (!(*out = calloc(1, sizeof **out)))
        return CUSOLVER_STATUS_ALLOC_FAILED;
    (*out)->sort = 1; /* cuSOLVER sorts unless told not to; tolerance and sweeps 0: its own defaults */
    return CUSOLVER_STATUS_SUCCESS;
}

static int jacobi_set(struct jacobi_info *info, double tolerance, int sweeps, int sort, int which)
{
    if (!info || sweeps < 0)
        return CUSOLVER_STATUS_INVALID_VALUE;
    if (which == 0)
        info->tolerance = tolerance;
    else if (which == 1)
        info->max_sweeps = sweeps;
    else
        info->sort = sort != 0;
    return CUSOLVER_STATUS_SUCCESS;
}

#define JACOBI(kind)                                                                                                \
    SOLVER_API int cusolverDnCreate##kind##Info(struct jacobi_info **out) { return jacobi_create(out); }            \
    SOLVER_API int cusolverDnDestroy##kind##Info(struct jacobi_info *info)                                          \
    {                                                                                                               \
        free(info);                                                                                                 \
        return CUSOLVER_STATUS_SUCCESS;                                                                             \
    }
#define JACOBI_SETTERS(kind)                                                                                        \
    SOLVER_API int cusolverDnX##kind##SetTolerance(struct jacobi_info *info, double tolerance)                      \
    {                                                                                                               \
        return jacobi_set(info, tolerance, 0, 0, 0);                                                                \
    }                                                                                                               \
    SOLVER_API int cusolverDnX##kind##SetMaxSweeps(struct jacobi_info *info, int sweeps)                            \
    {                                                                                                               \
        return jacobi_set(info, 0, sweeps, 0, 1);                                                                   \
    }                                                                                                               \
    SOLVER_API int cusolverDnX##kind##SetSortEig(struct jacobi_info *info, int sort)                                \
    {                                                                                                               \
        return jacobi_set(info, 0, 0, sort, 2);                                                                     \
    }
/* defines: cusolverDnCreateGesvdjInfo cusolverDnDestroyGesvdjInfo cusolverDnCreateSyevjInfo
 * cusolverDnDestroySyevjInfo cusolverDnXgesvdjSetTolerance cusolverDnXgesvdjSetMaxSweeps cusolverDnXgesvdjSetSortEig
 * cusolverDnXsyevjSetTolerance cusolverDnXsyevjSetMaxSweeps cusolverDnXsyevjSetSortEig */
JACOBI(Gesvdj)
JACOBI(Syevj)
JACOBI_SETTERS(gesvdj)
JACOBI_SETTERS(syevj)

/* -- versions ---------------------------------------------------------------------------------------------- */
SOLVER_API int cusolverGetProperty(int type, int *value)
{
    int parts[] = {RGPU_CUSOLVER_VERSION_MAJOR, RGPU_CUSOLVER_VERSION_MINOR, RGPU_CUSOLVER_VERSION_PATCH};
    if (!value || type < 0 || type > 2)
        return CUSOLVER_STATUS_INVALID_VALUE;
    *value = parts[type];
    return CUSOLVER_STATUS_SUCCESS;
}

SOLVER_API int cusolverGetVersion(int *version)
{
    if (!version)
        return CUSOLVER_STATUS_INVALID_VALUE;
    *version = RGPU_CUSOLVER_VERSION_MAJOR * 1000 + RGPU_CUSOLVER_VERSION_MINOR * 100 + RGPU_CUSOLVER_VERSION_PATCH;
    return CUSOLVER_STATUS_SUCCESS;
}
