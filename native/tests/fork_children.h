/* Shared by fork_locks_check.c and fork_runtime_check.c: fork `forks` children one after another while the
 * caller's thread keeps a lock busy; each child runs `child` under a 2-second alarm and exits with its answer (0:
 * as expected). Prints "children: N <ok>, H hung, O other" and returns whether any hung or went otherwise. */
#include <signal.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

static int fork_children(int forks, int (*child)(void), const char *ok)
{
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
    printf("children: %d %s, %d hung, %d other\n", good, ok, hung, other);
    return hung || other;
}
