/* The AEAD pipe (aead_pipe.h): one helper thread per process, handed pieces through a small ring of jobs. */
#define _GNU_SOURCE
#include "aead_pipe.h"
#include "quiet_thread.h"
#include "rgpu_clock.h"

#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* How long the helper polls for the next piece before it sleeps: as long as rgpu's sockets poll by default, so
 * that back-to-back copies find it awake. */
#define POLL_NS 300000ull

struct job {
    struct rgpu_aead *a;
    const uint8_t *in;
    uint8_t *out;
    size_t len;
};

struct rgpu_aead_pipe {
    pthread_mutex_t hold; /* one record at a time */
    pthread_mutex_t lock; /* the helper's sleep */
    pthread_cond_t wake;
    int state;            /* 0: not started, 1: running, -1: not to be used */
    unsigned base;        /* `given` when this hold began */
    struct job jobs[RGPU_AEAD_PIPE_DEPTH];
    unsigned given, claimed, done; /* pieces since the thread started (unsigned: differences survive wrapping) */
    int failed, sleeping;
};

static struct rgpu_aead_pipe the_pipe = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER,
                                         PTHREAD_COND_INITIALIZER};
static pthread_once_t once = PTHREAD_ONCE_INIT;

static inline void relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* A caller waiting for a piece another thread runs: it polls (a piece takes ~7 us), but once it has polled far
 * longer than a piece takes -- that thread was preempted, say on a machine with a CPU quota -- it gives its CPU
 * away between polls instead of spinning out its time slice. */
static void wait_a_little(unsigned *polls)
{
    if (++*polls > 2000)
        sched_yield();
    else
        relax();
}

/* Runs the next piece given, if nobody runs it: 1 if this thread did. Pieces run in order, one at a time, each by
 * whichever thread claims it -- the helper, or a caller waiting in give or take while the helper has not woken
 * yet (a caller never idles waiting for it). `claimed` is `done` or one ahead: a claim succeeds only on the
 * piece after the last done, whose state the claimer then sees (acquire of done, release of the next). */
static int run_next(struct rgpu_aead_pipe *p)
{
    unsigned d = __atomic_load_n(&p->done, __ATOMIC_ACQUIRE), expected = d;
    if (__atomic_load_n(&p->given, __ATOMIC_ACQUIRE) == d ||
        !__atomic_compare_exchange_n(&p->claimed, &expected, d + 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
        return 0;
    struct job j = p->jobs[d % RGPU_AEAD_PIPE_DEPTH];
    if (rgpu_aead_update(j.a, j.in, j.len, j.out))
        __atomic_store_n(&p->failed, 1, __ATOMIC_RELAXED);
    __atomic_store_n(&p->done, d + 1, __ATOMIC_RELEASE);
    return 1;
}

static void *helper(void *arg)
{
    struct rgpu_aead_pipe *p = arg;
    unsigned long long idle_since = 0;
    for (;;) {
        if (run_next(p)) {
            idle_since = 0;
            continue;
        }
        unsigned long long t = rgpu_now_ns();
        if (!idle_since) {
            idle_since = t;
        } else if (t - idle_since > POLL_NS) {
            /* Sleeping is announced before given is looked at again, and give looks at `sleeping` after
             * publishing (both sequentially consistent): one of the two sees the other. */
            pthread_mutex_lock(&p->lock);
            __atomic_store_n(&p->sleeping, 1, __ATOMIC_SEQ_CST);
            while (__atomic_load_n(&p->given, __ATOMIC_SEQ_CST) == __atomic_load_n(&p->done, __ATOMIC_SEQ_CST))
                pthread_cond_wait(&p->wake, &p->lock);
            __atomic_store_n(&p->sleeping, 0, __ATOMIC_SEQ_CST);
            pthread_mutex_unlock(&p->lock);
            idle_since = 0;
        } else {
            relax();
        }
    }
    return NULL;
}

/* A forked child has no helper (only the forking thread goes on) and may have copied a hold taken by another
 * thread: it starts afresh. */
static void after_fork_in_child(void)
{
    struct rgpu_aead_pipe *p = &the_pipe;
    pthread_mutex_init(&p->hold, NULL);
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->wake, NULL);
    p->given = p->claimed = p->done = p->base = 0, p->failed = p->sleeping = 0;
    if (p->state > 0)
        p->state = 0;
}

/* The CPUs this process may run on (its affinity; else those online). */
static int cpus(void)
{
    cpu_set_t set;
    return sched_getaffinity(0, sizeof set, &set) ? (int)sysconf(_SC_NPROCESSORS_ONLN) : CPU_COUNT(&set);
}

static void init(void)
{
    const char *off = getenv("RGPU_AEAD_PIPE");
    if ((off && !strcmp(off, "0")) || cpus() < 2 || pthread_atfork(NULL, NULL, after_fork_in_child))
        the_pipe.state = -1; /* (one CPU: the helper would only take turns with the caller) */
}

static int start(struct rgpu_aead_pipe *p)
{
    return rgpu_quiet_thread(NULL, 1, helper, p);
}

struct rgpu_aead_pipe *rgpu_aead_pipe_acquire(void)
{
    struct rgpu_aead_pipe *p = &the_pipe;
    pthread_once(&once, init);
    if (__atomic_load_n(&p->state, __ATOMIC_ACQUIRE) < 0 || pthread_mutex_trylock(&p->hold))
        return NULL;
    if (p->state == 0) /* (written only under the hold; read without it above) */
        __atomic_store_n(&p->state, start(p) ? -1 : 1, __ATOMIC_RELEASE);
    if (p->state < 0) {
        pthread_mutex_unlock(&p->hold);
        return NULL;
    }
    p->base = p->given, p->failed = 0;
    return p;
}

void rgpu_aead_pipe_give(struct rgpu_aead_pipe *p, struct rgpu_aead *a, const uint8_t *in, size_t len, uint8_t *out)
{
    unsigned polls = 0;
    while (p->given - __atomic_load_n(&p->done, __ATOMIC_ACQUIRE) >= RGPU_AEAD_PIPE_DEPTH)
        if (!run_next(p)) /* (a job's place is taken again only once its piece is done) */
            wait_a_little(&polls);
    p->jobs[p->given % RGPU_AEAD_PIPE_DEPTH] = (struct job){a, in, out, len};
    __atomic_store_n(&p->given, p->given + 1, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(&p->sleeping, __ATOMIC_SEQ_CST)) {
        pthread_mutex_lock(&p->lock);
        pthread_cond_signal(&p->wake);
        pthread_mutex_unlock(&p->lock);
    }
}

unsigned rgpu_aead_pipe_given(const struct rgpu_aead_pipe *p) { return p->given - p->base; }

unsigned rgpu_aead_pipe_done(const struct rgpu_aead_pipe *p)
{
    return __atomic_load_n(&p->done, __ATOMIC_ACQUIRE) - p->base;
}

int rgpu_aead_pipe_help(struct rgpu_aead_pipe *p, unsigned behind)
{
    return rgpu_aead_pipe_given(p) - rgpu_aead_pipe_done(p) >= behind && run_next(p);
}

int rgpu_aead_pipe_take(struct rgpu_aead_pipe *p, unsigned upto)
{
    if (upto > rgpu_aead_pipe_given(p))
        upto = rgpu_aead_pipe_given(p);
    unsigned polls = 0;
    while (rgpu_aead_pipe_done(p) < upto)
        if (!run_next(p))
            wait_a_little(&polls);
    return __atomic_load_n(&p->failed, __ATOMIC_RELAXED) ? -1 : 0;
}

int rgpu_aead_pipe_release(struct rgpu_aead_pipe *p)
{
    int r = rgpu_aead_pipe_take(p, rgpu_aead_pipe_given(p));
    pthread_mutex_unlock(&p->hold);
    return r;
}
