/* Locks a forked child makes afresh (fork_locks.c, built into every library: libcuda and each stand-in keep their
 * own list). A thread of the parent may have held one when the process forked; that thread is not in the child,
 * which would wait on the copy forever. Every statically initialised lock a call can take registers itself at load
 * time -- RGPU_FORK_RESET(name, &lock) beside it -- and tests/test_copy_links.py checks that none is left out. */
#ifndef RGPU_FORK_LOCKS_H
#define RGPU_FORK_LOCKS_H

#include <pthread.h>

void rgpu_fork_reset(pthread_mutex_t *lock);
#define RGPU_FORK_RESET(name, lock)                                                                              \
    __attribute__((constructor)) static void rgpu_fork_reset_##name(void) { rgpu_fork_reset(lock); }

#endif
