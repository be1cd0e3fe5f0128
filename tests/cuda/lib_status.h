/* The C library checks' common core (lib_check.h, libcheck.h, fft_check.c): the failure count each program
 * returns, and CHECK, a call that must succeed or the program ends with its status. */
#ifndef LIB_STATUS_H
#define LIB_STATUS_H

#include <stdio.h>
#include <stdlib.h>

static int failures;

#define CHECK(call)                                                                                                 \
    do {                                                                                                            \
        int s_ = (call);                                                                                            \
        if (s_) {                                                                                                   \
            printf("FAIL %s -> status %d\n", #call, s_);                                                           \
            exit(1);                                                                                                \
        }                                                                                                           \
    } while (0)

#endif
