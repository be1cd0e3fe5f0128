/* Plans: every cufftPlan* / cufftMakePlan* / cufftXtMakePlanMany becomes one description and one FFT_PLAN round
 * trip; every cufftEstimate* / cufftGetSize* / cufftXtGetSizeMany one FFT_ESTIMATE. What cuFFT checks before it
 * plans (rank, sizes, batch, types) is checked here too, so obvious mistakes cost no round trip; the server
 * checks everything again and answers cuFFT's own status for the rest. */
#include <string.h>

#include "fft.h"

_Static_assert(RGPU_FFT_PLAN_REQ_SIZE == RGPU_FFT_ESTIMATE_REQ_SIZE, "FFT_PLAN and FFT_ESTIMATE share a request");

/* cudaDataType */
enum { R_32F = 0, R_64F = 1, C_32F = 4, C_64F = 5 };

int rgpu_fft_legacy_types(struct fft_desc *d, int type)
{
    static const struct { int type, in, out, exec; } types[] = {
        {CUFFT_C2C, C_32F, C_32F, C_32F}, {CUFFT_R2C, R_32F, C_32F, C_32F}, {CUFFT_C2R, C_32F, R_32F, C_32F},
        {CUFFT_Z2Z, C_64F, C_64F, C_64F}, {CUFFT_D2Z, R_64F, C_64F, C_64F}, {CUFFT_Z2D, C_64F, R_64F, C_64F}};
    for (size_t i = 0; i < sizeof types / sizeof *types; i++)
        if (types[i].type == type) {
            d->plan_type = type, d->input_type = types[i].in, d->output_type = types[i].out;
            d->exec_type = types[i].exec;
            return CUFFT_SUCCESS;
        }
    return CUFFT_INVALID_TYPE;
}

int rgpu_fft_describe(struct fft_desc *d, int rank, const long long *n, const long long *inembed, long long istride,
                      long long idist, const long long *onembed, long long ostride, long long odist, long long batch)
{
    if (rank < 1 || rank > RGPU_FFT_MAX_RANK)
        return CUFFT_INVALID_VALUE; /* cuFFT's answer to rank 4 (measured) */
    if (!n)
        return CUFFT_INVALID_VALUE;
    for (int i = 0; i < rank; i++)
        if (n[i] < 1)
            return CUFFT_INVALID_SIZE;
    if (batch < 1)
        return CUFFT_INVALID_SIZE;
    d->rank = rank, d->batch = batch;
    memcpy(d->n, n, sizeof *n * (size_t)rank);
    d->in_embed = inembed != NULL, d->out_embed = onembed != NULL;
    if (inembed)
        memcpy(d->inembed, inembed, sizeof *inembed * (size_t)rank);
    if (onembed)
        memcpy(d->onembed, onembed, sizeof *onembed * (size_t)rank);
    d->istride = istride, d->idist = idist, d->ostride = ostride, d->odist = odist;
    return CUFFT_SUCCESS;
}

static void pack(const struct fft_desc *d, uint8_t out[RGPU_FFT_PLAN_REQ_SIZE])
{
    rgpu_pack_fft_plan(out, &(struct rgpu_fft_plan_req){
        .plan_type = (uint32_t)d->plan_type, .input_type = (uint32_t)d->input_type,
        .output_type = (uint32_t)d->output_type, .exec_type = (uint32_t)d->exec_type, .rank = d->rank,
        .n0 = d->n[0], .n1 = d->n[1], .n2 = d->n[2], .in_embed = (uint32_t)d->in_embed, .inembed0 = d->inembed[0],
        .inembed1 = d->inembed[1], .inembed2 = d->inembed[2], .istride = d->istride, .idist = d->idist,
        .out_embed = (uint32_t)d->out_embed, .onembed0 = d->onembed[0], .onembed1 = d->onembed[1],
        .onembed2 = d->onembed[2], .ostride = d->ostride, .odist = d->odist, .batch = d->batch});
}

/* The thread's device context, as NVIDIA's libraries make it current: CUFFT_SETUP_FAILED without one. */
static int ready(void)
{
    return cudaFree(NULL) == 0 ? CUFFT_SUCCESS : CUFFT_SETUP_FAILED;
}

/* One FFT_PLAN or FFT_ESTIMATE round trip for `d`, its reply in `raw`: 0, or a cufftResult. */
static int ask(uint16_t op, const struct fft_desc *d, uint8_t *raw, size_t len)
{
    int r = ready();
    if (r)
        return r;
    uint8_t args[RGPU_FFT_PLAN_REQ_SIZE];
    pack(d, args);
    r = rgpu_ext_call(op, args, sizeof args, NULL, 0, raw, len, NULL, 0, NULL);
    return r ? rgpu_fft_status(r) : CUFFT_SUCCESS;
}

/* `described`: rgpu_fft_describe's or rgpu_fft_legacy_types' status, so each public call is one line. */
static int make(int handle, struct fft_desc *d, int described, size_t *work_size)
{
    struct fft_plan *p = rgpu_fft_plan(handle);
    if (!p)
        return CUFFT_INVALID_PLAN;
    if (p->made)
        return CUFFT_INVALID_PLAN; /* a plan is made once */
    if (described)
        return described;
    uint8_t raw[RGPU_FFT_PLAN_REP_SIZE];
    struct rgpu_fft_plan_rep rep;
    int r = ask(RGPU_OP_FFT_PLAN, d, raw, sizeof raw);
    if (r)
        return r;
    if (rgpu_unpack_fft_plan(raw, sizeof raw, &rep) || (!rep.status && !rep.plan))
        return rgpu_fft_status(rgpu_ext_bad_reply(RGPU_OP_FFT_PLAN, "no plan and no cuFFT status"));
    if (rep.status)
        return (int)rep.status;
    p->desc = *d, p->server = rep.plan, p->work_size = rep.work_size, p->made = 1;
    if (p->auto_allocate && p->work_size && !p->work && cudaMalloc(&p->owned_work, p->work_size)) {
        p->owned_work = NULL;
        return CUFFT_ALLOC_FAILED; /* the plan stays made, as cuFFT's does: the program may still set an area */
    }
    if (work_size)
        *work_size = p->work_size;
    return CUFFT_SUCCESS;
}

static int estimate(struct fft_desc *d, int described, size_t *work_size)
{
    if (described)
        return described;
    if (!work_size)
        return CUFFT_INVALID_VALUE;
    uint8_t raw[RGPU_FFT_ESTIMATE_REP_SIZE];
    struct rgpu_fft_estimate_rep rep;
    int r = ask(RGPU_OP_FFT_ESTIMATE, d, raw, sizeof raw);
    if (r)
        return r;
    if (rgpu_unpack_fft_estimate(raw, sizeof raw, &rep))
        return rgpu_fft_status(rgpu_ext_bad_reply(RGPU_OP_FFT_ESTIMATE, "reply size"));
    if (rep.status)
        return (int)rep.status;
    *work_size = rep.work_size;
    return CUFFT_SUCCESS;
}

/* -- descriptions of every shape of call --------------------------------------------------------------------- */
static int legacy(struct fft_desc *d, int rank, const long long *n, const long long *inembed, long long istride,
                  long long idist, const long long *onembed, long long ostride, long long odist, int type,
                  long long batch)
{
    memset(d, 0, sizeof *d);
    int r = rgpu_fft_describe(d, rank, n, inembed, istride, idist, onembed, ostride, odist, batch);
    return r ? r : rgpu_fft_legacy_types(d, type);
}

static int xt(struct fft_desc *d, int rank, const long long *n, const long long *inembed, long long istride,
              long long idist, int input_type, const long long *onembed, long long ostride, long long odist,
              int output_type, long long batch, int exec_type)
{
    memset(d, 0, sizeof *d);
    d->input_type = input_type, d->output_type = output_type, d->exec_type = exec_type; /* the server checks them */
    return rgpu_fft_describe(d, rank, n, inembed, istride, idist, onembed, ostride, odist, batch);
}

/* The int-array calls (cufftPlanMany...): their arrays widened, read only once the rank is known good. */
struct wide {
    long long n[RGPU_FFT_MAX_RANK], inembed[RGPU_FFT_MAX_RANK], onembed[RGPU_FFT_MAX_RANK];
};

static int many(struct fft_desc *d, int rank, const int *n, const int *inembed, int istride, int idist,
                const int *onembed, int ostride, int odist, int type, int batch)
{
    struct wide w;
    if (rank < 1 || rank > RGPU_FFT_MAX_RANK)
        return CUFFT_INVALID_VALUE; /* cuFFT's answer to rank 4 (measured) */
    if (!n)
        return CUFFT_INVALID_VALUE;
    for (int i = 0; i < rank; i++) {
        w.n[i] = n[i];
        w.inembed[i] = inembed ? inembed[i] : 0;
        w.onembed[i] = onembed ? onembed[i] : 0;
    }
    return legacy(d, rank, w.n, inembed ? w.inembed : NULL, istride, idist, onembed ? w.onembed : NULL, ostride,
                  odist, type, batch);
}

static int dims(struct fft_desc *d, int rank, int nx, int ny, int nz, int type, int batch)
{
    long long n[] = {nx, ny, nz};
    return legacy(d, rank, n, NULL, 1, 0, NULL, 1, 0, type, batch);
}

/* -- make ------------------------------------------------------------------------------------------------------ */
FFT_API int cufftMakePlan1d(int plan, int nx, int type, int batch, size_t *ws)
{
    struct fft_desc d;
    return make(plan, &d, dims(&d, 1, nx, 0, 0, type, batch), ws);
}

FFT_API int cufftMakePlan2d(int plan, int nx, int ny, int type, size_t *ws)
{
    struct fft_desc d;
    return make(plan, &d, dims(&d, 2, nx, ny, 0, type, 1), ws);
}

FFT_API int cufftMakePlan3d(int plan, int nx, int ny, int nz, int type, size_t *ws)
{
    struct fft_desc d;
    return make(plan, &d, dims(&d, 3, nx, ny, nz, type, 1), ws);
}

FFT_API int cufftMakePlanMany(int plan, int rank, int *n, int *inembed, int istride, int idist, int *onembed,
                              int ostride, int odist, int type, int batch, size_t *ws)
{
    struct fft_desc d;
    return make(plan, &d, many(&d, rank, n, inembed, istride, idist, onembed, ostride, odist, type, batch), ws);
}

FFT_API int cufftMakePlanMany64(int plan, int rank, long long *n, long long *inembed, long long istride,
                                long long idist, long long *onembed, long long ostride, long long odist, int type,
                                long long batch, size_t *ws)
{
    struct fft_desc d;
    return make(plan, &d, legacy(&d, rank, n, inembed, istride, idist, onembed, ostride, odist, type, batch), ws);
}

FFT_API int cufftXtMakePlanMany(int plan, int rank, long long *n, long long *inembed, long long istride,
                                long long idist, int input_type, long long *onembed, long long ostride,
                                long long odist, int output_type, long long batch, size_t *ws, int exec_type)
{
    struct fft_desc d;
    return make(plan, &d, xt(&d, rank, n, inembed, istride, idist, input_type, onembed, ostride, odist,
                             output_type, batch, exec_type), ws);
}

/* -- create and make ------------------------------------------------------------------------------------------- */
static int created(int *plan, int made)
{
    if (made) {
        cufftDestroy(*plan);
        *plan = RGPU_FFT_PLAN_NULL;
    }
    return made;
}

#define CREATE(plan, make_call) (!(plan) ? CUFFT_INVALID_VALUE : cufftCreate(plan) ? CUFFT_ALLOC_FAILED \
                                 : created((plan), (make_call)))

FFT_API int cufftPlan1d(int *plan, int nx, int type, int batch)
{
    return CREATE(plan, cufftMakePlan1d(*plan, nx, type, batch, NULL));
}

FFT_API int cufftPlan2d(int *plan, int nx, int ny, int type)
{
    return CREATE(plan, cufftMakePlan2d(*plan, nx, ny, type, NULL));
}

FFT_API int cufftPlan3d(int *plan, int nx, int ny, int nz, int type)
{
    return CREATE(plan, cufftMakePlan3d(*plan, nx, ny, nz, type, NULL));
}

FFT_API int cufftPlanMany(int *plan, int rank, int *n, int *inembed, int istride, int idist, int *onembed,
                          int ostride, int odist, int type, int batch)
{
    return CREATE(plan, cufftMakePlanMany(*plan, rank, n, inembed, istride, idist, onembed, ostride, odist, type,
                                          batch, NULL));
}

/* -- work size estimates: without a plan (cufftEstimate*), or for a created one (cufftGetSize*) ---------------- */
FFT_API int cufftEstimate1d(int nx, int type, int batch, size_t *ws)
{
    struct fft_desc d;
    return estimate(&d, dims(&d, 1, nx, 0, 0, type, batch), ws);
}

FFT_API int cufftEstimate2d(int nx, int ny, int type, size_t *ws)
{
    struct fft_desc d;
    return estimate(&d, dims(&d, 2, nx, ny, 0, type, 1), ws);
}

FFT_API int cufftEstimate3d(int nx, int ny, int nz, int type, size_t *ws)
{
    struct fft_desc d;
    return estimate(&d, dims(&d, 3, nx, ny, nz, type, 1), ws);
}

FFT_API int cufftEstimateMany(int rank, int *n, int *inembed, int istride, int idist, int *onembed, int ostride,
                              int odist, int type, int batch, size_t *ws)
{
    struct fft_desc d;
    return estimate(&d, many(&d, rank, n, inembed, istride, idist, onembed, ostride, odist, type, batch), ws);
}

static int of_plan(int plan, int described)
{
    return rgpu_fft_plan(plan) ? described : CUFFT_INVALID_PLAN;
}

FFT_API int cufftGetSize1d(int plan, int nx, int type, int batch, size_t *ws)
{
    struct fft_desc d;
    return estimate(&d, of_plan(plan, dims(&d, 1, nx, 0, 0, type, batch)), ws);
}

FFT_API int cufftGetSize2d(int plan, int nx, int ny, int type, size_t *ws)
{
    struct fft_desc d;
    return estimate(&d, of_plan(plan, dims(&d, 2, nx, ny, 0, type, 1)), ws);
}

FFT_API int cufftGetSize3d(int plan, int nx, int ny, int nz, int type, size_t *ws)
{
    struct fft_desc d;
    return estimate(&d, of_plan(plan, dims(&d, 3, nx, ny, nz, type, 1)), ws);
}

FFT_API int cufftGetSizeMany(int plan, int rank, int *n, int *inembed, int istride, int idist, int *onembed,
                             int ostride, int odist, int type, int batch, size_t *ws)
{
    struct fft_desc d;
    return estimate(&d, of_plan(plan, many(&d, rank, n, inembed, istride, idist, onembed, ostride, odist, type,
                                           batch)), ws);
}

FFT_API int cufftGetSizeMany64(int plan, int rank, long long *n, long long *inembed, long long istride,
                               long long idist, long long *onembed, long long ostride, long long odist, int type,
                               long long batch, size_t *ws)
{
    struct fft_desc d;
    return estimate(&d, of_plan(plan, legacy(&d, rank, n, inembed, istride, idist, onembed, ostride, odist, type,
                                             batch)), ws);
}

FFT_API int cufftXtGetSizeMany(int plan, int rank, long long *n, long long *inembed, long long istride,
                               long long idist, int input_type, long long *onembed, long long ostride,
                               long long odist, int output_type, long long batch, size_t *ws, int exec_type)
{
    struct fft_desc d;
    return estimate(&d, of_plan(plan, xt(&d, rank, n, inembed, istride, idist, input_type, onembed, ostride, odist,
                                         output_type, batch, exec_type)), ws);
}
