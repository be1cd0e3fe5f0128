/* Helper threads of rgpu's own (the AEAD pipe, copy links, their receiving side in the worker) that leave the
 * program's signals to the program's threads. */
#ifndef RGPU_QUIET_THREAD_H
#define RGPU_QUIET_THREAD_H

#include <pthread.h>

/* pthread_create with every signal blocked in the new thread but those a fault raises; detached if `detached`
 * (then *t may be NULL). 0, or -1. */
int rgpu_quiet_thread(pthread_t *t, int detached, void *(*fn)(void *), void *arg);

#endif
