/* What the math-library checks in C share (solver_check.c, sparse_check.c): a failing call ends the program, a
 * result is reported against its tolerance or expected value, device buffers come from host data (or zeros),
 * and a deferred refusal is seen at the next synchronizing call. Declares the few runtime calls it needs, so the
 * programs build without CUDA headers. Include once, from the program's own file. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

int cudaMalloc(void **p, size_t n);
int cudaFree(void *p);
int cudaMemcpy(void *dst, const void *src, size_t n, int kind);
int cudaMemset(void *p, int v, size_t n);
int cudaDeviceSynchronize(void);

#include "lib_status.h"

static void report(const char *what, double err, double tol)
{
    int ok = err <= tol;
    failures += !ok;
    printf("%-40s %s (max error %.1e)\n", what, ok ? "OK" : "MISMATCH", err);
}

/* As report, without the error itself: for results NVIDIA's library may round differently from run to run (its
 * documented non-deterministic algorithms), which a native run and one through rgpu cannot match bit for bit. */
__attribute__((unused)) static void within(const char *what, double err, double tol)
{
    int ok = err <= tol;
    failures += !ok;
    printf("%-40s %s (within %.0e)\n", what, ok ? "OK" : "MISMATCH", tol);
}

static void expect(const char *what, long got, long want)
{
    failures += got != want;
    printf("%-40s %s (%ld, expected %ld)\n", what, got == want ? "OK" : "MISMATCH", got, want);
}

/* After a call the server refused (deferred), the next synchronizing call reports it; the one after is clean. */
static void expect_refused(const char *what)
{
    int sync = cudaDeviceSynchronize(), again = cudaDeviceSynchronize();
    failures += sync == 0 || again != 0;
    printf("%-40s %s (reported %d, then %d)\n", what, sync && !again ? "OK" : "MISMATCH", sync, again);
}

/* n bytes of device memory holding `host`'s bytes, or zeros. */
static void *dev(const void *host, size_t n)
{
    void *d;
    CHECK(cudaMalloc(&d, n ? n : 1));
    if (host)
        CHECK(cudaMemcpy(d, host, n, 1));
    else
        CHECK(cudaMemset(d, 0, n));
    return d;
}

static void get(void *host, const void *d, size_t n)
{
    CHECK(cudaMemcpy(host, d, n, 2));
}

static double max_diff(const double *x, const double *y, int n)
{
    double e = 0;
    for (int i = 0; i < n; i++)
        e = fmax(e, fabs(x[i] - y[i]) / (1 + fabs(y[i])));
    return e;
}

/* A value in [-scale, scale] in steps of scale / 1000. */
static double random_value(double scale)
{
    return (rand() % 2001 - 1000) / 1000.0 * scale;
}
