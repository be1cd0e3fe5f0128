/* fork_locks.h's list. Its child handler is registered with the first lock, at load time, so it runs before any
 * registered later (libcuda's conn_fork.c, which then finds every lock free). */
#include <pthread.h>

#include "fork_locks.h"

#define FORK_LOCKS 64 /* (libcuda registers 23, libcudart 5) */
static pthread_mutex_t *locks[FORK_LOCKS];
static int n_locks;

static void forked_child(void)
{
    for (int i = 0; i < n_locks; i++)
        pthread_mutex_init(locks[i], NULL);
}

void rgpu_fork_reset(pthread_mutex_t *lock) /* (from constructors: the loader runs them one at a time) */
{
    if (!n_locks && pthread_atfork(NULL, NULL, forked_child))
        return;
    if (n_locks < FORK_LOCKS)
        locks[n_locks++] = lock;
}
