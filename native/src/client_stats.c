/* The client's side of where a program's time goes (benchmarks): how many requests this process sent, how many it
 * waited for, the seconds spent waiting for their replies, and the frames and bytes it sent. With
 * RGPU_CLIENT_STATS=1 one line goes to stderr at exit; the server's --stats-file has the other side. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rgpu_shim.h"
#include "rgpu_clock.h"

static uint64_t waits, wait_ns, frames, bytes;
static pid_t owner; /* a forked child inherits the counts, not the calls: only this process reports */

__attribute__((constructor)) static void own(void)
{
    owner = getpid();
}

void rgpu_stats_waited(uint64_t since_ns)
{
    __atomic_add_fetch(&waits, 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&wait_ns, rgpu_now_ns() - since_ns, __ATOMIC_RELAXED);
}

void rgpu_stats_sent(uint64_t nframes, uint64_t nbytes)
{
    __atomic_add_fetch(&frames, nframes, __ATOMIC_RELAXED);
    __atomic_add_fetch(&bytes, nbytes, __ATOMIC_RELAXED);
}

__attribute__((destructor)) static void report(void)
{
    const char *on = getenv("RGPU_CLIENT_STATS");
    if (!on || strcmp(on, "1") != 0 || getpid() != owner)
        return;
    fprintf(stderr, "rgpu client stats: requests %u, waited for %llu, %.6f s waiting for replies, %llu frames and "
                    "%llu bytes sent\n",
            rgpu_request_seq(), (unsigned long long)waits, (double)wait_ns / 1e9, (unsigned long long)frames,
            (unsigned long long)bytes);
}
