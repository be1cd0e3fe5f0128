/* FFTs through whatever libcufft the loader gives (NVIDIA's natively, rgpu's stand-in through rgpu), every result
 * compared with a naive DFT on the CPU: 1D/2D/3D and batched C2C, R2C, C2R, Z2Z, D2Z, Z2D, basic, padded in-place
 * and advanced layouts, made by every kind of plan call (cufftPlan*, cufftPlanMany, cufftMakePlanMany64 with a
 * caller-allocated work area, cufftXtMakePlanMany + cufftXtExec). Then bad input that cuFFT itself refuses (the
 * same answers natively and through rgpu), including a plan handle used by another process.
 *   fft_check             the above; prints one line per check, results as hashes of their bytes (so two runs on
 *                         one GPU can be compared line for line); exits non-zero on any mismatch
 *   fft_check --hostile   also what only rgpu can catch (an operand outside the program's memory, a work area
 *                         smaller than the plan's): refused by the server, reported at the next synchronisation
 * Declares the few prototypes it needs, so it builds without CUDA or cuFFT headers. */
#include <complex.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

int cudaMalloc(void **p, size_t n);
int cudaFree(void *p);
int cudaMemcpy(void *dst, const void *src, size_t n, int kind);
int cudaMemset(void *p, int value, size_t n);
int cudaDeviceSynchronize(void);
int cudaStreamCreate(void **stream);
int cudaStreamSynchronize(void *stream);
int cudaStreamDestroy(void *stream);
int cudaGetLastError(void);
int cudaStreamBeginCapture(void *stream, int mode);
int cudaStreamEndCapture(void *stream, void **graph);
int cudaGraphInstantiate(void **exec, void *graph, unsigned long long flags);
int cudaGraphLaunch(void *exec, void *stream);
int cudaGraphExecDestroy(void *exec);
int cudaGraphDestroy(void *graph);
int cufftPlan1d(int *plan, int nx, int type, int batch);
int cufftPlan2d(int *plan, int nx, int ny, int type);
int cufftPlan3d(int *plan, int nx, int ny, int nz, int type);
int cufftPlanMany(int *plan, int rank, int *n, int *inembed, int istride, int idist, int *onembed, int ostride,
                  int odist, int type, int batch);
int cufftCreate(int *plan);
int cufftDestroy(int plan);
int cufftSetAutoAllocation(int plan, int autoAllocate);
int cufftSetWorkArea(int plan, void *work);
int cufftSetStream(int plan, void *stream);
int cufftGetSize(int plan, size_t *ws);
int cufftMakePlanMany64(int plan, int rank, long long *n, long long *inembed, long long istride, long long idist,
                        long long *onembed, long long ostride, long long odist, int type, long long batch,
                        size_t *ws);
int cufftXtMakePlanMany(int plan, int rank, long long *n, long long *inembed, long long istride, long long idist,
                        int itype, long long *onembed, long long ostride, long long odist, int otype,
                        long long batch, size_t *ws, int etype);
int cufftMakePlan1d(int plan, int nx, int type, int batch, size_t *ws);
int cufftEstimate1d(int nx, int type, int batch, size_t *ws);
int cufftGetSize2d(int plan, int nx, int ny, int type, size_t *ws);
int cufftExecC2C(int plan, void *in, void *out, int direction);
int cufftExecZ2Z(int plan, void *in, void *out, int direction);
int cufftExecR2C(int plan, void *in, void *out);
int cufftExecD2Z(int plan, void *in, void *out);
int cufftExecC2R(int plan, void *in, void *out);
int cufftExecZ2D(int plan, void *in, void *out);
int cufftXtExec(int plan, void *in, void *out, int direction);
int cufftGetVersion(int *version);

enum { H2D = 1, D2H = 2, FORWARD = -1, INVERSE = 1 };
enum { C2C = 0x29, R2C = 0x2a, C2R = 0x2c, Z2Z = 0x69, D2Z = 0x6a, Z2D = 0x6c };
enum { R_32F = 0, R_64F = 1, C_32F = 4, C_64F = 5 };
enum how { PLAN, MANY, MANY64, XT };

#include "lib_status.h"

/* One side of a transform: basic (dense; the real side of an in-place real transform padded to
 * 2 * (n_last / 2 + 1)) or advanced (embed, stride, dist). */
struct side {
    int advanced;
    long long embed[3], stride, dist;
};

struct fft_case {
    const char *name;
    enum how how;
    int type, rank, n[3], batch, direction, in_place;
    struct side in, out;
    int captured; /* run as a CUDA graph captured on the plan's stream, launched twice */
};

static int precision(int type) { return type & 0x40 ? 8 : 4; }
static int complex_in(int type) { return type != R2C && type != D2Z; }
static int complex_out(int type) { return type != C2R && type != Z2D; }

/* The logical dimensions of a side: the complex side of a real transform holds n_last / 2 + 1. */
static void side_dims(const struct fft_case *c, int is_complex, long long *dims)
{
    for (int i = 0; i < c->rank; i++)
        dims[i] = c->n[i];
    if (is_complex && (c->type & 0xf) != 0x9)
        dims[c->rank - 1] = c->n[c->rank - 1] / 2 + 1;
}

/* The element offset of (b, idx) on a side, and the side's extent in elements. */
static long long offset(const struct fft_case *c, const struct side *s, int is_complex, long long b,
                        const long long *idx, long long *extent)
{
    long long dims[3], embed[3], stride = 1, dist;
    side_dims(c, is_complex, dims);
    for (int i = 0; i < c->rank; i++)
        embed[i] = s->advanced ? s->embed[i] : dims[i];
    if (!s->advanced && c->in_place && !is_complex && (c->type & 0xf) != 0x9)
        embed[c->rank - 1] = 2 * (dims[c->rank - 1] / 2 + 1);
    if (s->advanced) {
        stride = s->stride, dist = s->dist;
    } else {
        dist = 1;
        for (int i = 0; i < c->rank; i++)
            dist *= embed[i];
    }
    long long at = 0, reach = 0;
    for (int i = 0; i < c->rank; i++) {
        long long pitch = 1;
        for (int j = i + 1; j < c->rank; j++)
            pitch *= embed[j];
        at += idx[i] * pitch, reach += (dims[i] - 1) * pitch;
    }
    *extent = (c->batch - 1) * dist + stride * reach + 1;
    return b * dist + stride * at;
}

static long long count(const struct fft_case *c, int is_complex)
{
    long long dims[3], total = c->batch;
    side_dims(c, is_complex, dims);
    for (int i = 0; i < c->rank; i++)
        total *= dims[i];
    return total;
}

/* Logical element e (batch-major, row-major) -> (b, idx). */
static long long unflatten(const struct fft_case *c, int is_complex, long long e, long long *idx)
{
    long long dims[3];
    side_dims(c, is_complex, dims);
    for (int i = c->rank - 1; i >= 0; i--)
        idx[i] = e % dims[i], e /= dims[i];
    return e;
}

/* Where index idx of a transform lies in a dense array over n (the complex side of a real transform is the
 * first n_last / 2 + 1 columns of the full spectrum). */
static long long dense(const struct fft_case *c, const long long *idx)
{
    long long at = 0;
    for (int i = 0; i < c->rank; i++)
        at = at * c->n[i] + idx[i];
    return at;
}

/* The naive DFT of every transform: x and y dense over n (complex), sign -1 forward, unnormalized. */
static void dft(const struct fft_case *c, const double complex *x, double complex *y, int sign)
{
    int n0 = c->n[0], n1 = c->rank > 1 ? c->n[1] : 1, n2 = c->rank > 2 ? c->n[2] : 1, size = n0 * n1 * n2;
    for (int b = 0; b < c->batch; b++)
        for (int k = 0; k < size; k++) {
            int k0 = k / (n1 * n2), k1 = k / n2 % n1, k2 = k % n2;
            double complex sum = 0;
            for (int j = 0; j < size; j++) {
                int j0 = j / (n1 * n2), j1 = j / n2 % n1, j2 = j % n2;
                double phase = (double)k0 * j0 / n0 + (double)k1 * j1 / n1 + (double)k2 * j2 / n2;
                sum += x[b * size + j] * cexp(sign * 2 * M_PI * I * phase);
            }
            y[b * size + k] = sum;
        }
}

static uint64_t fnv(const void *p, size_t n, uint64_t h)
{
    for (size_t i = 0; i < n; i++)
        h = (h ^ ((const uint8_t *)p)[i]) * 0x100000001b3ull;
    return h;
}

static void put(void *buf, int prec, long long at, double v)
{
    if (prec == 4)
        ((float *)buf)[at] = (float)v;
    else
        ((double *)buf)[at] = v;
}

static double get(const void *buf, int prec, long long at)
{
    return prec == 4 ? ((const float *)buf)[at] : ((const double *)buf)[at];
}

static double lcg(uint32_t *state)
{
    *state = *state * 1664525u + 1013904223u;
    return (double)(*state >> 8) / (1 << 24) - 0.5;
}

static void widen(const struct fft_case *c, const struct side *s, long long *n, long long *embed)
{
    for (int i = 0; i < c->rank; i++)
        n[i] = c->n[i], embed[i] = s->embed[i];
}

/* The plan, made the way the case says; `work` gets a caller-allocated work area (MANY64, XT), or NULL. */
static int make(const struct fft_case *c, void **work, void *stream)
{
    int plan, type = c->type;
    *work = NULL;
    if (c->how == PLAN) {
        if (c->rank == 1)
            CHECK(cufftPlan1d(&plan, c->n[0], type, c->batch));
        else if (c->rank == 2)
            CHECK(cufftPlan2d(&plan, c->n[0], c->n[1], type));
        else
            CHECK(cufftPlan3d(&plan, c->n[0], c->n[1], c->n[2], type));
        return plan;
    }
    if (c->how == MANY) {
        int n[3], ie[3], oe[3];
        for (int i = 0; i < c->rank; i++)
            n[i] = c->n[i], ie[i] = (int)c->in.embed[i], oe[i] = (int)c->out.embed[i];
        CHECK(cufftPlanMany(&plan, c->rank, n, c->in.advanced ? ie : NULL, (int)c->in.stride, (int)c->in.dist,
                            c->out.advanced ? oe : NULL, (int)c->out.stride, (int)c->out.dist, type, c->batch));
        return plan;
    }
    long long n[3], ie[3], oe[3];
    widen(c, &c->in, n, ie);
    widen(c, &c->out, n, oe);
    size_t ws = 0, again = 0;
    CHECK(cufftCreate(&plan));
    CHECK(cufftSetAutoAllocation(plan, 0));
    if (c->how == MANY64) {
        CHECK(cufftMakePlanMany64(plan, c->rank, n, c->in.advanced ? ie : NULL, c->in.stride, c->in.dist,
                                  c->out.advanced ? oe : NULL, c->out.stride, c->out.dist, type, c->batch, &ws));
    } else {
        int prec = precision(type), r = prec == 4 ? R_32F : R_64F, z = prec == 4 ? C_32F : C_64F;
        CHECK(cufftXtMakePlanMany(plan, c->rank, n, c->in.advanced ? ie : NULL, c->in.stride, c->in.dist,
                                  complex_in(type) ? z : r, c->out.advanced ? oe : NULL, c->out.stride, c->out.dist,
                                  complex_out(type) ? z : r, c->batch, &ws, z));
    }
    CHECK(cufftGetSize(plan, &again));
    if (again != ws)
        printf("FAIL cufftGetSize says %zu, make said %zu\n", again, ws), failures++;
    if (ws)
        CHECK(cudaMalloc(work, ws));
    CHECK(cufftSetWorkArea(plan, *work));
    CHECK(cufftSetStream(plan, stream));
    return plan;
}

static int exec(const struct fft_case *c, int plan, void *in, void *out)
{
    if (c->how == XT)
        return cufftXtExec(plan, in, out, c->direction);
    switch (c->type) {
    case C2C: return cufftExecC2C(plan, in, out, c->direction);
    case Z2Z: return cufftExecZ2Z(plan, in, out, c->direction);
    case R2C: return cufftExecR2C(plan, in, out);
    case D2Z: return cufftExecD2Z(plan, in, out);
    case C2R: return cufftExecC2R(plan, in, out);
    default: return cufftExecZ2D(plan, in, out);
    }
}

static void run_case(const struct fft_case *c, void *stream)
{
    int prec = precision(c->type), cin = complex_in(c->type), cout = complex_out(c->type);
    long long nin = count(c, cin), nout = count(c, cout), ext_in, ext_out, idx[3];
    offset(c, &c->in, cin, 0, (long long[3]){0}, &ext_in);
    offset(c, &c->out, cout, 0, (long long[3]){0}, &ext_out);
    size_t in_bytes = (size_t)ext_in * prec * (cin ? 2 : 1), out_bytes = (size_t)ext_out * prec * (cout ? 2 : 1);
    if (c->in_place)
        in_bytes = out_bytes = in_bytes > out_bytes ? in_bytes : out_bytes;
    /* The signal, dense over n: complex for C2C, real otherwise. The reference: its DFT, or for C2R (whose input
     * is the signal's half spectrum) the signal times the transform's size. */
    long long full = count(c, 0), size = full / c->batch;
    double complex *sig = calloc((size_t)full, sizeof *sig), *spec = calloc((size_t)full, sizeof *spec);
    double complex *ref = calloc((size_t)full, sizeof *ref), *x = sig;
    uint32_t seed = 12345;
    for (long long e = 0; e < full; e++)
        sig[e] = lcg(&seed) + (cin && cout ? I * lcg(&seed) : 0);
    if (!cout) {
        dft(c, sig, spec, FORWARD);
        for (long long e = 0; e < full; e++)
            ref[e] = size * sig[e];
        x = spec;
    } else {
        dft(c, sig, ref, cin ? c->direction : FORWARD);
    }
    uint8_t *host = malloc(in_bytes), *back = malloc(out_bytes);
    for (size_t i = 0; i < in_bytes / prec; i++) /* gaps hold a value no transform would produce from the signal */
        put(host, prec, (long long)i, 1e3);
    for (long long e = 0; e < nin; e++) {
        long long b = unflatten(c, cin, e, idx), scratch, at = offset(c, &c->in, cin, b, idx, &scratch);
        double complex v = x[b * size + dense(c, idx)];
        put(host, prec, cin ? 2 * at : at, creal(v));
        if (cin)
            put(host, prec, 2 * at + 1, cimag(v));
    }
    void *din, *dout, *work;
    CHECK(cudaMalloc(&din, in_bytes));
    dout = din;
    if (!c->in_place)
        CHECK(cudaMalloc(&dout, out_bytes));
    CHECK(cudaMemcpy(din, host, in_bytes, H2D));
    int plan = make(c, &work, stream);
    if (c->captured) {
        void *graph, *instance;
        CHECK(cudaStreamBeginCapture(stream, 0));
        CHECK(exec(c, plan, din, dout));
        CHECK(cudaStreamEndCapture(stream, &graph));
        if (!c->in_place) /* captured work has not run: only the graph's launches may produce the output */
            CHECK(cudaMemset(dout, 0, out_bytes));
        CHECK(cudaGraphInstantiate(&instance, graph, 0));
        CHECK(cudaGraphLaunch(instance, stream));
        CHECK(cudaGraphLaunch(instance, stream));
        CHECK(cudaStreamSynchronize(stream));
        CHECK(cudaGraphExecDestroy(instance));
        CHECK(cudaGraphDestroy(graph));
    } else {
        CHECK(exec(c, plan, din, dout));
    }
    if (stream)
        CHECK(cudaStreamSynchronize(stream));
    CHECK(cudaMemcpy(back, dout, out_bytes, D2H));
    double err = 0, scale = 1;
    uint64_t hash = 0xcbf29ce484222325ull;
    for (long long e = 0; e < nout; e++) {
        long long b = unflatten(c, cout, e, idx), scratch, at = offset(c, &c->out, cout, b, idx, &scratch);
        double complex want = ref[b * size + dense(c, idx)];
        double complex got = cout ? get(back, prec, 2 * at) + I * get(back, prec, 2 * at + 1) : get(back, prec, at);
        hash = fnv(back + (cout ? 2 * at : at) * prec, (size_t)prec * (cout ? 2 : 1), hash);
        err = fmax(err, cabs(got - want)), scale = fmax(scale, cabs(want));
    }
    double tol = prec == 4 ? 1e-5 : 1e-12;
    int ok = err / scale <= tol;
    failures += !ok;
    printf("%-40s %s (relative error %s, result %016llx)\n", c->name, ok ? "OK" : "MISMATCH",
           !ok ? "> tol" : err / scale <= tol / 10 ? "< tol/10" : "< tol", (unsigned long long)hash);
    if (!ok)
        printf("    relative error %.3e > %.1e\n", err / scale, tol);
    CHECK(cufftDestroy(plan));
    cudaFree(work);
    if (dout != din)
        cudaFree(dout);
    cudaFree(din);
    free(sig), free(spec), free(ref), free(host), free(back);
}

#define BASIC {0, {0}, 0, 0}

static const struct fft_case CASES[] = {
    {"C2C 1d n=16 batch 3 forward", PLAN, C2C, 1, {16}, 3, FORWARD, 0, BASIC, BASIC},
    {"C2C 1d n=16 batch 3 inverse in place", PLAN, C2C, 1, {16}, 3, INVERSE, 1, BASIC, BASIC},
    {"C2C 2d 8x12", PLAN, C2C, 2, {8, 12}, 1, FORWARD, 0, BASIC, BASIC},
    {"C2C 3d 4x6x5", PLAN, C2C, 3, {4, 6, 5}, 1, INVERSE, 0, BASIC, BASIC},
    {"C2C many advanced (strided in)", MANY, C2C, 1, {10}, 3, FORWARD, 0, {1, {20}, 2, 25}, {1, {10}, 1, 10}},
    {"C2C many 2d batched", MANY, C2C, 2, {6, 4}, 2, FORWARD, 0, BASIC, BASIC},
    {"R2C 1d n=16 batch 2", PLAN, R2C, 1, {16}, 2, FORWARD, 0, BASIC, BASIC},
    {"R2C 2d 6x8 in place (padded)", PLAN, R2C, 2, {6, 8}, 1, FORWARD, 1, BASIC, BASIC},
    {"C2R 1d n=16 batch 2", PLAN, C2R, 1, {16}, 2, INVERSE, 0, BASIC, BASIC},
    {"C2R 3d 4x4x6", PLAN, C2R, 3, {4, 4, 6}, 1, INVERSE, 0, BASIC, BASIC},
    {"C2R many advanced", MANY, C2R, 1, {12}, 2, INVERSE, 0, {1, {7}, 1, 8}, {1, {24}, 2, 30}},
    {"Z2Z 1d n=30 batch 2", PLAN, Z2Z, 1, {30}, 2, FORWARD, 0, BASIC, BASIC},
    {"Z2Z 2d 5x7 inverse", PLAN, Z2Z, 2, {5, 7}, 1, INVERSE, 0, BASIC, BASIC},
    {"D2Z 2d 5x6", PLAN, D2Z, 2, {5, 6}, 1, FORWARD, 0, BASIC, BASIC},
    {"Z2D 2d 5x6", PLAN, Z2D, 2, {5, 6}, 1, INVERSE, 0, BASIC, BASIC},
    {"D2Z many64 2d own work area", MANY64, D2Z, 2, {6, 10}, 3, FORWARD, 0, BASIC, BASIC},
    {"C2C many64 advanced, stream", MANY64, C2C, 2, {4, 5}, 2, INVERSE, 0, {1, {4, 6}, 1, 26}, {1, {4, 5}, 1, 20}},
    {"Xt C2C 1d n=64 batch 4", XT, C2C, 1, {64}, 4, FORWARD, 0, BASIC, BASIC},
    {"Xt R2C 2d 8x8 (R_32F -> C_32F)", XT, R2C, 2, {8, 8}, 2, FORWARD, 0, BASIC, BASIC},
    {"Xt Z2D 1d n=20 (C_64F -> R_64F)", XT, Z2D, 1, {20}, 3, INVERSE, 0, BASIC, BASIC},
    {"Xt C2C captured in a graph, run twice", XT, C2C, 1, {32}, 2, FORWARD, 0, BASIC, BASIC, 1},
    {"D2Z many64 captured in a graph", MANY64, D2Z, 1, {24}, 2, FORWARD, 0, BASIC, BASIC, 1},
};

/* A call that must be refused: the status is printed (cuFFT's own choice of code shows when native and rgpu
 * runs are compared); only acceptance counts as a failure here. */
static void refused(const char *what, int status)
{
    failures += status == 0;
    printf("%-40s %s (status %d)\n", what, status ? "refused" : "ACCEPTED", status);
}

static void accepted(const char *what, int status)
{
    failures += status != 0;
    printf("%-40s %s (status %d)\n", what, status ? "REFUSED" : "accepted", status);
}

/* The child: a plan handle of another process is no plan here, whatever it numbers. */
static int child(int handle)
{
    void *buf;
    CHECK(cudaMalloc(&buf, 4096));
    int e = cufftExecC2C(handle, buf, buf, FORWARD), d = cufftDestroy(handle);
    printf("%-40s %s (exec %d, destroy %d)\n", "plan handle of another process", e && d ? "refused" : "ACCEPTED",
           e, d);
    return !(e && d);
}

static void bad_input(const char *self)
{
    int plan, other;
    void *buf;
    size_t ws;
    CHECK(cudaMalloc(&buf, 1 << 16));
    refused("exec on a handle never made", cufftExecC2C(12345, buf, buf, FORWARD));
    refused("plan of size 0", cufftPlan1d(&plan, 0, C2C, 1));
    refused("plan of an unknown type", cufftPlan1d(&plan, 16, 0x33, 1));
    refused("plan of rank 4", cufftPlanMany(&plan, 4, (int[]){2, 2, 2, 2}, NULL, 1, 0, NULL, 1, 0, C2C, 1));
    refused("estimate of size 0", cufftEstimate1d(0, C2C, 1, &ws));
    CHECK(cufftCreate(&plan));
    refused("exec on a plan created, not made", cufftExecC2C(plan, buf, buf, FORWARD));
    CHECK(cufftGetSize2d(plan, 8, 8, C2C, &ws));
    CHECK(cufftDestroy(plan));
    refused("exec on a destroyed plan", cufftExecC2C(plan, buf, buf, FORWARD));
    refused("destroy twice", cufftDestroy(plan));
    CHECK(cufftPlan1d(&plan, 16, C2C, 1));
    CHECK(cufftPlan1d(&other, 16, R2C, 1));
    accepted("exec of another type", cufftExecR2C(plan, buf, buf)); /* as NVIDIA's cuFFT: the plan's own runs */
    refused("exec with direction 0", cufftExecC2C(plan, buf, buf, 0));
    CHECK(cudaDeviceSynchronize());
    char arg[32];
    snprintf(arg, sizeof arg, "%d", plan);
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        execl(self, self, "--child", arg, (char *)NULL);
        _exit(127);
    }
    int status = -1;
    waitpid(pid, &status, 0);
    failures += !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK(cufftDestroy(plan));
    CHECK(cufftDestroy(other));
    cudaFree(buf);
}

/* Only rgpu can refuse these: natively they read or write memory that is not the operand's (or, for a NULL
 * operand, may). */
static void expect_sync_error(const char *what, int exec_status)
{
    int sync = cudaDeviceSynchronize();
    cudaGetLastError();
    int ok = exec_status == 0 && sync != 0;
    failures += !ok;
    printf("%-40s %s (exec %d, then synchronize %d)\n", what, ok ? "OK" : "NOT REFUSED", exec_status, sync);
}

static void hostile(void)
{
    int plan;
    size_t ws;
    void *buf, *small;
    CHECK(cudaMalloc(&buf, 1 << 16));
    CHECK(cufftPlan1d(&plan, 64, C2C, 4)); /* 2 KiB in, 2 KiB out */
    refused("exec with a NULL input", cufftExecC2C(plan, NULL, buf, FORWARD));
    expect_sync_error("input outside the program's memory", cufftExecC2C(plan, (void *)0x10000, buf, FORWARD));
    expect_sync_error("output past the end of its allocation", cufftExecC2C(plan, buf, (char *)buf + 63 * 1024,
                                                                           FORWARD));
    CHECK(cufftDestroy(plan));
    CHECK(cufftCreate(&plan));
    CHECK(cufftSetAutoAllocation(plan, 0));
    CHECK(cufftMakePlan1d(plan, 997, C2C, 2, &ws)); /* a prime size: cuFFT needs a work area for it */
    if (ws) {
        refused("exec without a work area", cufftExecC2C(plan, buf, buf, FORWARD));
        CHECK(cudaMalloc(&small, ws / 2));
        CHECK(cufftSetWorkArea(plan, small));
        expect_sync_error("work area smaller than the plan's", cufftExecC2C(plan, buf, buf, FORWARD));
        cudaFree(small);
    } else {
        printf("%-40s SKIPPED (work size 0)\n", "work area smaller than the plan's");
    }
    CHECK(cufftDestroy(plan));
    /* The session is still fine after its refused calls. */
    struct fft_case again = CASES[0];
    again.name = "C2C after the refusals";
    run_case(&again, NULL);
    cudaFree(buf);
}

int main(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "--child"))
        return child(atoi(argv[2]));
    int version;
    void *stream;
    CHECK(cufftGetVersion(&version));
    printf("cuFFT version reported: %s\n", version >= 10000 ? "ok" : "implausible");
    CHECK(cudaStreamCreate(&stream));
    for (size_t i = 0; i < sizeof CASES / sizeof *CASES; i++)
        run_case(&CASES[i], CASES[i].how == MANY64 || CASES[i].how == XT ? stream : NULL);
    bad_input(argv[0]);
    if (argc == 2 && !strcmp(argv[1], "--hostile"))
        hostile();
    CHECK(cudaStreamDestroy(stream));
    printf(failures ? "fft_check FAILED (%d)\n" : "fft_check OK\n", failures);
    return failures != 0;
}
