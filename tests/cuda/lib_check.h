/* What the C library checks share (blas_check.c, blas_more_check.c, rand_check.c): a call that must succeed, and a
 * status or an error bound compared and printed, one line per check; `failures` counts the mismatches. */
#ifndef LIB_CHECK_H
#define LIB_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#include "lib_status.h"

__attribute__((unused)) static void expect(const char *what, int got, int want)
{
    int ok = got == want;
    failures += !ok;
    printf("%-58s %s (status %d, want %d)\n", what, ok ? "OK" : "MISMATCH", got, want);
}

__attribute__((unused)) static void report(const char *what, double err, double tol)
{
    int ok = err <= tol;
    failures += !ok;
    printf("%-58s %s (max error %.2e)\n", what, ok ? "OK" : "MISMATCH", err);
}

/* As report, without the error itself: for results that may round differently natively and through rgpu (which
 * may compute them another way, such as a GEMV as a GEMM). */
__attribute__((unused)) static void within(const char *what, double err, double tol)
{
    int ok = err <= tol;
    failures += !ok;
    printf("%-58s %s (within %.0e)\n", what, ok ? "OK" : "MISMATCH", tol);
}

/* A call deferred like a kernel launch was refused: the next synchronisation must say so. */
__attribute__((unused)) static void expect_failed_sync(int sync)
{
    failures += sync == 0;
    printf("%-58s %s (cudaDeviceSynchronize -> %d)\n", "... reported at the next synchronisation",
           sync ? "OK" : "MISMATCH", sync);
}

#endif
