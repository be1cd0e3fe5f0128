/* Shared by fork_locks_check.c and fork_runtime_check.c: while a thread of the parent calls `busy` over and over
 * (keeping one of the library's locks taken most of the time), fork `forks` children one after another; each runs
 * `child` under a 2-second alarm and exits with its answer (0: as expected). Prints "children: N <ok>, H hung,
 * O other" and returns whether any hung or went otherwise. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile int fork_children_done;

static void *fork_children_busy(void *busy)
{
    while (!fork_children_done)
        ((void (*)(void))busy)();
    return NULL;
}

static int fork_children(int forks, void (*busy)(void), int (*child)(void), const char *ok)
{
    pthread_t t;
    pthread_create(&t, NULL, fork_children_busy, (void *)busy);
    usleep(10000);
    int good = 0, hung = 0, other = 0;
    for (int i = 0; i < forks; i++) {
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) {
            alarm(2);
            _exit(child());
        }
        int st = 0;
        if (pid < 0 || waitpid(pid, &st, 0) != pid)
            other++;
        else if (WIFSIGNALED(st) && WTERMSIG(st) == SIGALRM)
            hung++;
        else if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
            good++;
        else
            other++;
    }
    fork_children_done = 1;
    pthread_join(t, NULL);
    printf("children: %d %s, %d hung, %d other\n", good, ok, hung, other);
    return hung || other;
}
