#include "quiet_thread.h"

#include <signal.h>
#include <stddef.h>

int rgpu_quiet_thread(pthread_t *t, int detached, void *(*fn)(void *), void *arg)
{
    sigset_t all, old;
    pthread_attr_t attr;
    pthread_t own;
    sigfillset(&all);
    /* The program's signals stay with its own threads, but for the ones a fault raises: a helper reads and writes
     * the program's buffers, and a program that tracks its pages with mprotect and a SIGSEGV handler must see the
     * fault (blocked, the kernel would kill the process instead). */
    static const int faults[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS};
    for (size_t i = 0; i < sizeof faults / sizeof *faults; i++)
        sigdelset(&all, faults[i]);
    if (pthread_attr_init(&attr))
        return -1;
    if (detached)
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int r = pthread_create(t ? t : &own, &attr, fn, arg);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&attr);
    return r ? -1 : 0;
}
