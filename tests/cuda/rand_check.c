/* cuRAND's host API through whatever libcurand the loader gives (NVIDIA's natively, rgpu's stand-in through
 * rgpu): every generator type and distribution, checked against what any correct generator must show (range,
 * mean and variance within statistical bounds, the same seed and offset giving the same sequence, drawing on
 * continuing it, another seed or offset giving another, a stream not changing it) -- nothing that only one
 * library's sequences satisfy -- and a digest of every result so that two runs, natively and through rgpu on the
 * same GPU, can be compared line by line. Declares the few
 * prototypes it needs, so it builds without cuRAND headers.
 *
 *   rand_check        the checks above; exits non-zero on any failure
 *   rand_check bad    bad input (through rgpu only: natively a foreign pointer faults the context) */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib_check.h"

typedef void *gen_t;
int cudaMalloc(void **p, size_t n);
int cudaFree(void *p);
int cudaMemcpy(void *dst, const void *src, size_t n, int kind);
int cudaDeviceSynchronize(void);
int cudaStreamCreate(void **s);
int cudaStreamSynchronize(void *s);
int cudaStreamDestroy(void *s);
int curandCreateGenerator(gen_t *g, int type);
int curandCreateGeneratorHost(gen_t *g, int type);
int curandDestroyGenerator(gen_t g);
int curandSetStream(gen_t g, void *s);
int curandSetPseudoRandomGeneratorSeed(gen_t g, unsigned long long seed);
int curandSetGeneratorOffset(gen_t g, unsigned long long offset);
int curandSetGeneratorOrdering(gen_t g, int order);
int curandSetQuasiRandomGeneratorDimensions(gen_t g, unsigned dims);
int curandGenerate(gen_t g, unsigned *out, size_t n);
int curandGenerateLongLong(gen_t g, unsigned long long *out, size_t n);
int curandGenerateUniform(gen_t g, float *out, size_t n);
int curandGenerateUniformDouble(gen_t g, double *out, size_t n);
int curandGenerateNormal(gen_t g, float *out, size_t n, float mean, float sd);
int curandGenerateNormalDouble(gen_t g, double *out, size_t n, double mean, double sd);
int curandGenerateLogNormal(gen_t g, float *out, size_t n, float mean, float sd);
int curandGenerateLogNormalDouble(gen_t g, double *out, size_t n, double mean, double sd);
int curandGeneratePoisson(gen_t g, unsigned *out, size_t n, double lambda);
int curandGetVersion(int *v);

enum { XORWOW = 101, MRG32K3A = 121, MTGP32 = 141, MT19937 = 142, PHILOX = 161, SOBOL32 = 201, SCRAMBLED_SOBOL32 = 202,
       SOBOL64 = 203, SCRAMBLED_SOBOL64 = 204, PSEUDO_DEFAULT_TYPE = 100 };
enum { NOT_INITIALIZED = 101, TYPE_ERROR = 103, OUT_OF_RANGE = 104, LENGTH_NOT_MULTIPLE = 105, ALLOCATION_FAILED = 102 };
enum { N = 1 << 16, DIMS = 4 };



static uint64_t digest(const void *p, size_t n)
{
    const uint8_t *b = p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

/* Mean and variance of `n` values against the distribution's; `lo`/`hi` bound every value. Tolerances: six
 * standard errors of the mean, and 10% of the variance (quasirandom points are far closer than that). */
static void judge(const char *what, const double *v, size_t n, double mean, double var, double lo, double hi,
                  uint64_t h)
{
    double m = 0, s = 0;
    int in_range = 1;
    for (size_t i = 0; i < n; i++) {
        m += v[i];
        in_range &= v[i] >= lo && v[i] <= hi;
    }
    m /= n;
    for (size_t i = 0; i < n; i++)
        s += (v[i] - m) * (v[i] - m);
    s /= n - 1;
    int ok = in_range && fabs(m - mean) <= 6 * sqrt(var / n) && fabs(s - var) <= 0.1 * var;
    failures += !ok;
    printf("%-34s %s mean %.6f var %.6f digest %016llx\n", what, ok ? "OK" : "MISMATCH", m, s, (unsigned long long)h);
}

enum kind { U32, U64, UNIFORM, UNIFORM_D, NORMAL, NORMAL_D, LOGNORMAL, LOGNORMAL_D, POISSON };
static const char *kind_names[] = {"u32", "u64", "uniform", "uniform double", "normal", "normal double",
                                   "log-normal", "log-normal double", "poisson"};

/* Draw n values of `kind` into `dev` (device memory, or host memory for a host generator) and judge them. */
static void draw(gen_t g, const char *gname, enum kind kind, void *dev, int host, size_t n)
{
    static uint8_t raw[N * 8];
    static double v[N];
    size_t size = kind == U64 || kind == UNIFORM_D || kind == NORMAL_D || kind == LOGNORMAL_D ? 8 : 4;
    switch (kind) {
    case U32: CHECK(curandGenerate(g, dev, n)); break;
    case U64: CHECK(curandGenerateLongLong(g, dev, n)); break;
    case UNIFORM: CHECK(curandGenerateUniform(g, dev, n)); break;
    case UNIFORM_D: CHECK(curandGenerateUniformDouble(g, dev, n)); break;
    case NORMAL: CHECK(curandGenerateNormal(g, dev, n, 1.0f, 2.0f)); break;
    case NORMAL_D: CHECK(curandGenerateNormalDouble(g, dev, n, 1.0, 2.0)); break;
    case LOGNORMAL: CHECK(curandGenerateLogNormal(g, dev, n, 0.0f, 0.5f)); break;
    case LOGNORMAL_D: CHECK(curandGenerateLogNormalDouble(g, dev, n, 0.0, 0.5)); break;
    case POISSON: CHECK(curandGeneratePoisson(g, dev, n, 4.0)); break;
    }
    if (host)
        memcpy(raw, dev, n * size);
    else
        CHECK(cudaMemcpy(raw, dev, n * size, 2));
    for (size_t i = 0; i < n; i++) {
        switch (kind) {
        case U32: case POISSON: v[i] = ((uint32_t *)raw)[i]; break;
        case U64: v[i] = (double)((uint64_t *)raw)[i]; break;
        case UNIFORM: case NORMAL: case LOGNORMAL: v[i] = ((float *)raw)[i]; break;
        default: v[i] = ((double *)raw)[i]; break;
        }
        if (kind == U32)
            v[i] /= 4294967296.0;
        if (kind == U64)
            v[i] /= 18446744073709551616.0;
    }
    double ln_var = (exp(0.25) - 1) * exp(0.25);
    char what[96];
    snprintf(what, sizeof what, "%s %s", gname, kind_names[kind]);
    uint64_t h = digest(raw, n * size);
    switch (kind) {
    case U32: case U64: judge(what, v, n, 0.5, 1.0 / 12, 0, 1, h); break;
    case UNIFORM: case UNIFORM_D: judge(what, v, n, 0.5, 1.0 / 12, 1e-300, 1, h); break;
    case NORMAL: case NORMAL_D: judge(what, v, n, 1.0, 4.0, -HUGE_VAL, HUGE_VAL, h); break;
    case LOGNORMAL: case LOGNORMAL_D: judge(what, v, n, exp(0.125), ln_var, 0, HUGE_VAL, h); break;
    case POISSON: judge(what, v, n, 4.0, 4.0, 0, 1000, h); break;
    }
}

/* A fresh generator of `type` with `seed` (pseudorandom) and, unless 0, `offset`; `*offset_status` is the offset's
 * status (the Mersenne twisters take none). */
static gen_t fresh(int type, unsigned long long seed, unsigned long long offset, int *offset_status)
{
    gen_t g;
    CHECK(curandCreateGenerator(&g, type));
    CHECK(curandSetPseudoRandomGeneratorSeed(g, seed));
    int s = offset ? curandSetGeneratorOffset(g, offset) : 0;
    if (offset_status)
        *offset_status = s;
    return g;
}

/* The digest of the next 4096 32-bit results (a size every generator takes). */
static uint64_t next_4096(gen_t g, void *dev)
{
    static uint32_t out[4096];
    CHECK(curandGenerate(g, dev, 4096));
    CHECK(cudaMemcpy(out, dev, sizeof out, 2));
    return digest(out, sizeof out);
}

static void property(const char *what, int ok, uint64_t h)
{
    failures += !ok;
    printf("%-34s %s digest %016llx\n", what, ok ? "OK" : "MISMATCH", (unsigned long long)h);
}

static void pseudo(int type, const char *name, void *dev)
{
    gen_t g = fresh(type, 1234, 0, NULL);
    for (enum kind k = U32; k <= POISSON; k++)
        if (k != U64)
            draw(g, name, k, dev, 0, N);
    CHECK(curandDestroyGenerator(g));
    /* What holds for every generator, on the host and on the device: the same seed (and offset) gives the same
     * sequence, drawing on continues it, another seed gives another. (Whether setting the same seed again restarts
     * a generator that has drawn is the library's business: NVIDIA's keep their position, so it is not checked;
     * the digest still compares the two runs on the GPU.) */
    gen_t a = fresh(type, 99, 0, NULL), b = fresh(type, 99, 0, NULL), c = fresh(type, 100, 0, NULL);
    uint64_t first = next_4096(a, dev), second = next_4096(a, dev);
    property("same seed, same sequence", next_4096(b, dev) == first, first);
    property("drawing on continues it", second != first, second);
    property("another seed, another sequence", next_4096(c, dev) != first, 0);
    CHECK(curandSetPseudoRandomGeneratorSeed(a, 99));
    printf("%-34s digest %016llx\n", "seed 99 again after drawing", (unsigned long long)next_4096(a, dev));
    int s, s2;
    gen_t o = fresh(type, 99, 4096, &s), o2 = fresh(type, 99, 4096, &s2);
    if (!s) {
        uint64_t moved = next_4096(o, dev);
        property("offset 4096 moves it, repeatably", moved != first && next_4096(o2, dev) == moved, moved);
    } else {
        printf("%-34s status %d\n", "offset 4096", s);
    }
    for (gen_t *p = (gen_t[]){a, b, c, o, o2, NULL}; *p; p++)
        CHECK(curandDestroyGenerator(*p));
}

/* The digest of the next 4096 uniform floats of a quasirandom generator. */
static uint64_t next_uniform_4096(gen_t g, void *dev)
{
    static float out[4096];
    CHECK(curandGenerateUniform(g, dev, 4096));
    CHECK(cudaMemcpy(out, dev, sizeof out, 2));
    return digest(out, sizeof out);
}

static void quasi(int type, const char *name, void *dev)
{
    gen_t g, again;
    CHECK(curandCreateGenerator(&g, type));
    CHECK(curandSetQuasiRandomGeneratorDimensions(g, DIMS));
    int wide = type == SOBOL64 || type == SCRAMBLED_SOBOL64;
    draw(g, name, wide ? U64 : U32, dev, 0, N);
    for (enum kind k = UNIFORM; k <= LOGNORMAL_D; k++)
        draw(g, name, k, dev, 0, N);
    CHECK(curandSetGeneratorOffset(g, 64));
    draw(g, name, UNIFORM, dev, 0, N);
    /* A fresh generator with the same dimensions and offset gives the same points; another offset, others. */
    CHECK(curandDestroyGenerator(g));
    CHECK(curandCreateGenerator(&g, type));
    CHECK(curandCreateGenerator(&again, type));
    CHECK(curandSetQuasiRandomGeneratorDimensions(g, DIMS));
    CHECK(curandSetQuasiRandomGeneratorDimensions(again, DIMS));
    uint64_t first = next_uniform_4096(g, dev);
    property("same dimensions, same points", next_uniform_4096(again, dev) == first, first);
    CHECK(curandDestroyGenerator(again));
    CHECK(curandCreateGenerator(&again, type));
    CHECK(curandSetQuasiRandomGeneratorDimensions(again, DIMS));
    CHECK(curandSetGeneratorOffset(again, 4096));
    property("offset 4096, other points", next_uniform_4096(again, dev) != first, 0);
    CHECK(curandDestroyGenerator(again));
    CHECK(curandDestroyGenerator(g));
}

static int bad(void *dev)
{
    gen_t g, q, q64, gone;
    CHECK(curandCreateGenerator(&g, PSEUDO_DEFAULT_TYPE));
    CHECK(curandCreateGenerator(&q, SOBOL32));
    CHECK(curandCreateGenerator(&q64, SOBOL64));
    CHECK(curandCreateGenerator(&gone, PHILOX));
    CHECK(curandDestroyGenerator(gone));
    float *f = dev;
    expect("generate with a destroyed generator", curandGenerateUniform(gone, f, 16), NOT_INITIALIZED);
    expect("seed on a made-up generator", curandSetPseudoRandomGeneratorSeed((gen_t)&failures, 1), NOT_INITIALIZED);
    expect("destroy a destroyed generator", curandDestroyGenerator(gone), NOT_INITIALIZED);
    expect("create of an unknown type", curandCreateGenerator(&gone, 7), TYPE_ERROR);
    expect("normal of odd length (pseudorandom)", curandGenerateNormal(g, f, 15, 0, 1), LENGTH_NOT_MULTIPLE);
    expect("log-normal double of odd length", curandGenerateLogNormalDouble(g, dev, 7, 0, 1), LENGTH_NOT_MULTIPLE);
    CHECK(curandSetQuasiRandomGeneratorDimensions(q, 3));
    expect("quasirandom length not a multiple of dimensions", curandGenerateUniform(q, f, 16), LENGTH_NOT_MULTIPLE);
    expect("normal of odd length (quasirandom, 3 dimensions)", curandGenerateNormal(q, f, 15, 0, 1), 0);
    expect("64-bit results from a pseudorandom generator", curandGenerateLongLong(g, dev, 16), TYPE_ERROR);
    expect("32-bit results from a 64-bit quasirandom generator", curandGenerate(q64, dev, 16), TYPE_ERROR);
    expect("seed of a quasirandom generator", curandSetPseudoRandomGeneratorSeed(q, 5), TYPE_ERROR);
    expect("dimensions of a pseudorandom generator", curandSetQuasiRandomGeneratorDimensions(g, 2), TYPE_ERROR);
    expect("0 dimensions", curandSetQuasiRandomGeneratorDimensions(q, 0), OUT_OF_RANGE);
    expect("20001 dimensions", curandSetQuasiRandomGeneratorDimensions(q, 20001), OUT_OF_RANGE);
    expect("quasirandom ordering on a pseudorandom generator", curandSetGeneratorOrdering(g, 201), OUT_OF_RANGE);
    expect("Poisson lambda 0", curandGeneratePoisson(g, dev, 16, 0.0), OUT_OF_RANGE);
    gen_t mt;
    CHECK(curandCreateGenerator(&mt, MT19937));
    expect("offset of an MT19937 generator", curandSetGeneratorOffset(mt, 5), TYPE_ERROR);
    expect("BEST ordering of an MT19937 device generator", curandSetGeneratorOrdering(mt, 100), 0); /* H200 */
    expect("ordering 99 (none such)", curandSetGeneratorOrdering(mt, 99), OUT_OF_RANGE);
    expect("LEGACY ordering of an MT19937 generator", curandSetGeneratorOrdering(mt, 103), 0);
    CHECK(curandDestroyGenerator(mt));
    CHECK(cudaDeviceSynchronize());
    /* A range outside the program's memory: accepted now (deferred, like a kernel launch), refused by the server;
     * the next synchronising call reports it, and the generator works on. */
    expect("uniform past the end of an allocation (deferred)", curandGenerateUniform(g, f + N * 2 - 8, 16), 0);
    expect_failed_sync(cudaDeviceSynchronize());
    expect("the generator still works", curandGenerateUniform(g, f, 16), 0);
    expect("... and synchronises cleanly", cudaDeviceSynchronize(), 0);
    /* A host generator's results come back in one reply: at most 16 MiB per call through rgpu. */
    gen_t h;
    CHECK(curandCreateGeneratorHost(&h, XORWOW));
    float *big = malloc((size_t)(4u << 20) * sizeof(float) + 64);
    expect("host generator: 16 MiB + 4 bytes in one call", curandGenerateUniform(h, big, (4u << 20) + 1),
           ALLOCATION_FAILED);
    expect("host generator: 16 MiB in one call", curandGenerateUniform(h, big, 4u << 20), 0);
    free(big);
    CHECK(curandDestroyGenerator(h));
    CHECK(curandDestroyGenerator(g));
    CHECK(curandDestroyGenerator(q));
    CHECK(curandDestroyGenerator(q64));
    printf(failures ? "rand_check bad FAILED (%d)\n" : "rand_check bad OK\n", failures);
    return failures != 0;
}

int main(int argc, char **argv)
{
    void *dev;
    CHECK(cudaMalloc(&dev, (size_t)N * 8));
    if (argc > 1 && !strcmp(argv[1], "bad"))
        return bad(dev);
    static const struct { int type; const char *name; } pseudos[] = {
        {XORWOW, "XORWOW"}, {MRG32K3A, "MRG32K3A"}, {MTGP32, "MTGP32"}, {MT19937, "MT19937"}, {PHILOX, "PHILOX4_32_10"}};
    for (size_t i = 0; i < sizeof pseudos / sizeof *pseudos; i++)
        pseudo(pseudos[i].type, pseudos[i].name, dev);
    static const struct { int type; const char *name; } quasis[] = {
        {SOBOL32, "SOBOL32"}, {SCRAMBLED_SOBOL32, "SCRAMBLED_SOBOL32"}, {SOBOL64, "SOBOL64"},
        {SCRAMBLED_SOBOL64, "SCRAMBLED_SOBOL64"}};
    for (size_t i = 0; i < sizeof quasis / sizeof *quasis; i++)
        quasi(quasis[i].type, quasis[i].name, dev);

    /* On a stream of its own: the stream changes where the work runs, not the sequence. */
    gen_t g, plain;
    void *stream;
    CHECK(cudaStreamCreate(&stream));
    CHECK(curandCreateGenerator(&g, PHILOX));
    CHECK(curandSetStream(g, stream));
    CHECK(curandSetPseudoRandomGeneratorSeed(g, 7));
    CHECK(curandSetGeneratorOrdering(g, 103)); /* PSEUDO_LEGACY */
    draw(g, "PHILOX on a stream", NORMAL, dev, 0, N);
    uint64_t on_stream = next_4096(g, dev);
    CHECK(cudaStreamSynchronize(stream));
    plain = fresh(PHILOX, 7, 0, NULL);
    CHECK(curandSetGeneratorOrdering(plain, 103));
    CHECK(curandGenerateNormal(plain, dev, N, 1.0f, 2.0f)); /* as draw() did on the stream */
    property("the same draws on the default stream", next_4096(plain, dev) == on_stream, on_stream);
    CHECK(curandDestroyGenerator(plain));
    CHECK(curandDestroyGenerator(g));
    CHECK(cudaStreamDestroy(stream));

    /* A host generator: results in host memory. */
    static float host[N];
    CHECK(curandCreateGeneratorHost(&g, MRG32K3A));
    CHECK(curandSetPseudoRandomGeneratorSeed(g, 42));
    draw(g, "host MRG32K3A", UNIFORM, host, 1, N);
    draw(g, "host MRG32K3A", NORMAL, host, 1, N);
    CHECK(curandDestroyGenerator(g));
    CHECK(cudaFree(dev));
    printf(failures ? "rand_check FAILED (%d)\n" : "rand_check OK\n", failures);
    return failures != 0;
}
