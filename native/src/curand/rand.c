/* libcurand.so.10: generators, their settings, and generation (see rand.h). */
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>

#include "rand.h"
#include "fork_locks.h"

_Static_assert(RGPU_RAND_DESTROY_REQ_SIZE == RGPU_BLAS_DESTROY_REQ_SIZE, "destroyed like the other libraries' handles");

/* The curandGenerator_t the program holds. Only generators in `live` are accepted: a destroyed or made-up one
 * gets CURAND_STATUS_NOT_INITIALIZED instead of a read through a stale pointer. */
struct curandGenerator_st {
    uint64_t server;
    int type; /* as created, defaults resolved */
    int host;
    void *stream;
    unsigned dimensions;
    struct curandGenerator_st *next;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
RGPU_FORK_RESET(lock, &lock)
static struct curandGenerator_st *live;

static void rand_log(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    rgpu_standin_vlog("curand", RGPU_STANDIN_WARN, fmt, ap);
    va_end(ap);
}

/* cuRAND has no "not supported" status; a program checking for errors sees an internal error, and the log says
 * which call it was. */
int rgpu_rand_unsupported(int *logged, const char *name)
{
    return rgpu_standin_unsupported(logged, "curand", name, CURAND_STATUS_INTERNAL_ERROR,
                                    "CURAND_STATUS_INTERNAL_ERROR");
}

/* A CUresult from the connection: the server refused the generator, ran out of memory, or an earlier
 * asynchronous call failed. */
static int status_of(int r, int otherwise)
{
    switch (r) {
    case 0:
        return CURAND_STATUS_SUCCESS;
    case 2: /* CUDA_ERROR_OUT_OF_MEMORY */
        return CURAND_STATUS_ALLOCATION_FAILED;
    case 400: /* CUDA_ERROR_INVALID_HANDLE: not a generator of this session */
        return CURAND_STATUS_NOT_INITIALIZED;
    default:
        return otherwise;
    }
}

/* One round trip, as a cuRAND status. The reply's fixed part arrives whole or not at all (the connection
 * checks its size), so its unpacking cannot fail. */
static int call(uint16_t op, const void *args, size_t args_len, void *rep, size_t rep_len, void *out, size_t out_cap,
                size_t *out_len, int otherwise)
{
    return status_of(rgpu_ext_call(op, args, args_len, NULL, 0, rep, rep_len, out, out_cap, out_len), otherwise);
}

static struct curandGenerator_st *find(struct curandGenerator_st *g)
{
    pthread_mutex_lock(&lock);
    struct curandGenerator_st *p = live;
    while (p && p != g)
        p = p->next;
    pthread_mutex_unlock(&lock);
    return p;
}

static int resolved_type(int t)
{
    switch (t) {
    case CURAND_RNG_PSEUDO_DEFAULT:
        return CURAND_RNG_PSEUDO_XORWOW;
    case CURAND_RNG_QUASI_DEFAULT:
        return CURAND_RNG_QUASI_SOBOL32;
    case CURAND_RNG_PSEUDO_XORWOW: case CURAND_RNG_PSEUDO_MRG32K3A: case CURAND_RNG_PSEUDO_MTGP32:
    case CURAND_RNG_PSEUDO_MT19937: case CURAND_RNG_PSEUDO_PHILOX4_32_10: case CURAND_RNG_QUASI_SOBOL32:
    case CURAND_RNG_QUASI_SCRAMBLED_SOBOL32: case CURAND_RNG_QUASI_SOBOL64: case CURAND_RNG_QUASI_SCRAMBLED_SOBOL64:
        return t;
    default:
        return 0;
    }
}

static int is_quasi(int t) { return t >= CURAND_RNG_QUASI_DEFAULT; }
static int is_quasi64(int t) { return t == CURAND_RNG_QUASI_SOBOL64 || t == CURAND_RNG_QUASI_SCRAMBLED_SOBOL64; }

static int create(struct curandGenerator_st **out, int rng_type, int host)
{
    if (!out)
        return CURAND_STATUS_NOT_INITIALIZED;
    int type = resolved_type(rng_type);
    if (!type)
        return CURAND_STATUS_TYPE_ERROR;
    if (cudaFree(NULL) != 0) /* no device or no server */
        return CURAND_STATUS_INITIALIZATION_FAILED;
    uint8_t args[RGPU_RAND_CREATE_REQ_SIZE], rep[RGPU_RAND_CREATE_REP_SIZE];
    rgpu_pack_rand_create(args, &(struct rgpu_rand_create_req){.rng_type = (uint32_t)rng_type, .host = (uint32_t)host});
    int s = call(RGPU_OP_RAND_CREATE, args, sizeof args, rep, sizeof rep, NULL, 0, NULL,
                 CURAND_STATUS_INITIALIZATION_FAILED);
    struct rgpu_rand_create_rep got;
    if (s || rgpu_unpack_rand_create(rep, sizeof rep, &got))
        return s;
    if (got.status)
        return (int)got.status;
    struct curandGenerator_st *g = calloc(1, sizeof *g);
    if (!g) {
        rgpu_standin_close(RGPU_OP_RAND_DESTROY, got.handle);
        return CURAND_STATUS_ALLOCATION_FAILED;
    }
    *g = (struct curandGenerator_st){.server = got.handle, .type = type, .host = host, .dimensions = 1};
    pthread_mutex_lock(&lock);
    g->next = live, live = g;
    pthread_mutex_unlock(&lock);
    *out = g;
    return CURAND_STATUS_SUCCESS;
}

RAND_API int curandCreateGenerator(struct curandGenerator_st **out, int rng_type) { return create(out, rng_type, 0); }
RAND_API int curandCreateGeneratorHost(struct curandGenerator_st **out, int rng_type) { return create(out, rng_type, 1); }

/* Takes `g` out of `live`: 1 if it was there. */
static int unlink_generator(struct curandGenerator_st *g)
{
    pthread_mutex_lock(&lock);
    struct curandGenerator_st **p = &live;
    while (*p && *p != g)
        p = &(*p)->next;
    int found = *p != NULL;
    if (found)
        *p = g->next;
    pthread_mutex_unlock(&lock);
    return found;
}

RAND_API int curandDestroyGenerator(struct curandGenerator_st *g)
{
    if (!g || !unlink_generator(g))
        return CURAND_STATUS_NOT_INITIALIZED;
    int r = rgpu_standin_close(RGPU_OP_RAND_DESTROY, g->server);
    free(g);
    return status_of(r, CURAND_STATUS_PREEXISTING_FAILURE);
}

RAND_API int curandSetStream(struct curandGenerator_st *g, void *stream)
{
    if (!find(g))
        return CURAND_STATUS_NOT_INITIALIZED;
    g->stream = stream;
    return CURAND_STATUS_SUCCESS;
}

/* The server's generator answers: its checks (which orderings a type takes...) are cuRAND's own. */
static int set(struct curandGenerator_st *g, enum rand_setting what, uint64_t value)
{
    if (!find(g))
        return CURAND_STATUS_NOT_INITIALIZED;
    uint8_t args[RGPU_RAND_SET_REQ_SIZE], rep[RGPU_RAND_SET_REP_SIZE];
    rgpu_pack_rand_set(args, &(struct rgpu_rand_set_req){.handle = g->server, .what = what, .value = value});
    int s = call(RGPU_OP_RAND_SET, args, sizeof args, rep, sizeof rep, NULL, 0, NULL, CURAND_STATUS_PREEXISTING_FAILURE);
    struct rgpu_rand_set_rep got;
    if (s || rgpu_unpack_rand_set(rep, sizeof rep, &got))
        return s;
    if (got.status == CURAND_STATUS_SUCCESS && what == RAND_DIMENSIONS)
        g->dimensions = (unsigned)value;
    return (int)got.status;
}

RAND_API int curandSetPseudoRandomGeneratorSeed(struct curandGenerator_st *g, unsigned long long seed)
{
    return set(g, RAND_SEED, seed);
}
RAND_API int curandSetGeneratorOffset(struct curandGenerator_st *g, unsigned long long offset)
{
    return set(g, RAND_OFFSET, offset);
}
RAND_API int curandSetGeneratorOrdering(struct curandGenerator_st *g, int order)
{
    return set(g, RAND_ORDERING, (uint32_t)order);
}
RAND_API int curandSetQuasiRandomGeneratorDimensions(struct curandGenerator_st *g, unsigned int dimensions)
{
    return set(g, RAND_DIMENSIONS, dimensions);
}
RAND_API int curandGenerateSeeds(struct curandGenerator_st *g) { return set(g, RAND_SEEDS, 0); }

/* -- generation ---------------------------------------------------------------------------------------------- */
static size_t result_size(enum rand_kind kind)
{
    switch (kind) {
    case RAND_U64: case RAND_UNIFORM_DOUBLE: case RAND_NORMAL_DOUBLE: case RAND_LOG_NORMAL_DOUBLE:
        return 8;
    default:
        return 4;
    }
}

/* What cuRAND refuses before it generates. */
static int check(const struct curandGenerator_st *g, enum rand_kind kind, size_t n, double a)
{
    if (kind == RAND_U64 ? !is_quasi64(g->type) : kind == RAND_U32 && is_quasi64(g->type))
        return CURAND_STATUS_TYPE_ERROR;
    /* Normals come in pairs (Box-Muller) from XORWOW and MRG32k3a; the other types take any count, as
     * NVIDIA's library answers (src/rgpu/protocol/rand_wire.py has the same rules, tested against it). */
    int paired = g->type == CURAND_RNG_PSEUDO_XORWOW || g->type == CURAND_RNG_PSEUDO_MRG32K3A;
    if (is_quasi(g->type) ? n % g->dimensions != 0
                          : paired && n % 2 != 0 && (kind == RAND_NORMAL || kind == RAND_NORMAL_DOUBLE ||
                                                     kind == RAND_LOG_NORMAL || kind == RAND_LOG_NORMAL_DOUBLE))
        return CURAND_STATUS_LENGTH_NOT_MULTIPLE;
    if (kind == RAND_POISSON && !(a > 0 && a <= 400000))
        return CURAND_STATUS_OUT_OF_RANGE;
    return CURAND_STATUS_SUCCESS;
}

static int generate_host(struct curandGenerator_st *g, enum rand_kind kind, void *out, size_t n, double a, double b)
{
    static int logged;
    size_t bytes = n * result_size(kind);
    if (n > RGPU_RAND_HOST_MAX_BYTES / result_size(kind)) {
        if (!__atomic_exchange_n(&logged, 1, __ATOMIC_RELAXED))
            rand_log("a host generator makes at most %u bytes per call through rgpu (%zu results asked for): "
                     "CURAND_STATUS_ALLOCATION_FAILED", RGPU_RAND_HOST_MAX_BYTES, n);
        return CURAND_STATUS_ALLOCATION_FAILED;
    }
    uint8_t args[RGPU_RAND_GENERATE_HOST_REQ_SIZE], rep[RGPU_RAND_GENERATE_HOST_REP_SIZE];
    rgpu_pack_rand_generate_host(args, &(struct rgpu_rand_generate_host_req){
                                           .handle = g->server, .kind = kind, .count = n, .a = a, .b = b});
    size_t got_len = 0;
    int s = call(RGPU_OP_RAND_GENERATE_HOST, args, sizeof args, rep, sizeof rep, out, bytes, &got_len,
                 CURAND_STATUS_PREEXISTING_FAILURE);
    struct rgpu_rand_generate_host_rep got;
    if (s || rgpu_unpack_rand_generate_host(rep, sizeof rep, &got))
        return s;
    if (!got.status && got_len != bytes) /* fewer results than asked for: the server is not to be trusted */
        return status_of(rgpu_ext_bad_reply(RGPU_OP_RAND_GENERATE_HOST, "results"), CURAND_STATUS_INTERNAL_ERROR);
    return (int)got.status;
}

static int generate(struct curandGenerator_st *g, enum rand_kind kind, void *out, size_t n, double a, double b)
{
    if (!find(g))
        return CURAND_STATUS_NOT_INITIALIZED;
    int s = check(g, kind, n, a);
    if (s || !n)
        return s;
    if (g->host)
        return generate_host(g, kind, out, n, a, b);
    uint8_t args[RGPU_RAND_GENERATE_REQ_SIZE];
    rgpu_pack_rand_generate(args, &(struct rgpu_rand_generate_req){
                                      .handle = g->server, .stream = rgpu_ext_stream(g->stream),
                                      .output = (uintptr_t)out, .kind = kind, .count = n, .a = a, .b = b});
    return status_of(rgpu_ext_defer(RGPU_OP_RAND_GENERATE, args, sizeof args, NULL, 0),
                     CURAND_STATUS_PREEXISTING_FAILURE);
}

RAND_API int curandGenerate(struct curandGenerator_st *g, unsigned int *out, size_t n)
{
    return generate(g, RAND_U32, out, n, 0, 0);
}
RAND_API int curandGenerateLongLong(struct curandGenerator_st *g, unsigned long long *out, size_t n)
{
    return generate(g, RAND_U64, out, n, 0, 0);
}
RAND_API int curandGenerateUniform(struct curandGenerator_st *g, float *out, size_t n)
{
    return generate(g, RAND_UNIFORM, out, n, 0, 0);
}
RAND_API int curandGenerateUniformDouble(struct curandGenerator_st *g, double *out, size_t n)
{
    return generate(g, RAND_UNIFORM_DOUBLE, out, n, 0, 0);
}
RAND_API int curandGenerateNormal(struct curandGenerator_st *g, float *out, size_t n, float mean, float stddev)
{
    return generate(g, RAND_NORMAL, out, n, mean, stddev);
}
RAND_API int curandGenerateNormalDouble(struct curandGenerator_st *g, double *out, size_t n, double mean,
                                        double stddev)
{
    return generate(g, RAND_NORMAL_DOUBLE, out, n, mean, stddev);
}
RAND_API int curandGenerateLogNormal(struct curandGenerator_st *g, float *out, size_t n, float mean, float stddev)
{
    return generate(g, RAND_LOG_NORMAL, out, n, mean, stddev);
}
RAND_API int curandGenerateLogNormalDouble(struct curandGenerator_st *g, double *out, size_t n, double mean,
                                           double stddev)
{
    return generate(g, RAND_LOG_NORMAL_DOUBLE, out, n, mean, stddev);
}
RAND_API int curandGeneratePoisson(struct curandGenerator_st *g, unsigned int *out, size_t n, double lambda)
{
    return generate(g, RAND_POISSON, out, n, lambda, 0);
}

/* -- versions ------------------------------------------------------------------------------------------------ */
RAND_API int curandGetVersion(int *version)
{
    if (!version)
        return CURAND_STATUS_OUT_OF_RANGE;
    *version = RGPU_CURAND_VERSION_MAJOR * 1000 + RGPU_CURAND_VERSION_MINOR * 100 + RGPU_CURAND_VERSION_PATCH;
    return CURAND_STATUS_SUCCESS;
}

RAND_API int curandGetProperty(int type, int *value)
{
    int parts[] = {RGPU_CURAND_VERSION_MAJOR, RGPU_CURAND_VERSION_MINOR, RGPU_CURAND_VERSION_PATCH};
    if (!value || type < 0 || type > 2) /* MAJOR_VERSION, MINOR_VERSION, PATCH_LEVEL */
        return CURAND_STATUS_OUT_OF_RANGE;
    *value = parts[type];
    return CURAND_STATUS_SUCCESS;
}
