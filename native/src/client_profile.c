/* Where a program's own CPU time goes while it runs through the stand-ins (benchmarks): RGPU_CLIENT_PROFILE=<file>
 * samples every thread's stack every RGPU_CLIENT_PROFILE_US microseconds of the process's CPU time (SIGPROF,
 * default 1000) and, at exit, appends to <file> ("-": stderr) the share of samples by module and by function,
 * where the CPU was (self) and anywhere on the stack (inclusive).
 *
 * Why not `perf`: the GPU machines this is meant for may not let a container open perf events. Natively the
 * stand-ins are not loaded, so there is no native profile to compare with; what this answers is which part of
 * the program's CPU time through rgpu is the stand-ins' and which the program's own. The stand-ins' exported entry
 * points show inclusively (time inside cuLaunchKernel, cudaMemcpyAsync, ...), their internal functions as
 * "(internal)" of the stand-in's module, polling for a reply included (RGPU_CLIENT_STATS gives the wait).
 *
 * The signal handler only stores return addresses (backtrace() is warmed up first, so that its lazy loading of
 * the unwinder does not happen inside a handler); everything else happens at exit. A program with its own SIGPROF
 * handler keeps it: the profile is then not taken, and says so. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <execinfo.h>
#include <link.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "rgpu_shim.h"

#define MAX_SAMPLES (1u << 16)
#define DEPTH 24
/* backtrace() from the handler sees the handler itself and the kernel's signal trampoline first. */
#define SKIP 2
#define TOP 25

struct sample {
    void *pc[DEPTH];
    int depth;
};

static struct sample *samples;
static unsigned taken, dropped;
static pid_t owner; /* a forked child inherits the samples but not the timer: only this process reports */
static long interval_us;
static const char *target;
static double cpu_at_start;

static double cpu_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void on_sigprof(int sig, siginfo_t *info, void *context)
{
    (void)sig;
    (void)info;
    (void)context;
    int saved = errno;
    unsigned i = __atomic_fetch_add(&taken, 1, __ATOMIC_RELAXED);
    if (i < MAX_SAMPLES)
        samples[i].depth = backtrace(samples[i].pc, DEPTH);
    else
        __atomic_fetch_add(&dropped, 1, __ATOMIC_RELAXED);
    errno = saved;
}

__attribute__((constructor)) static void profile_start(void)
{
    target = getenv("RGPU_CLIENT_PROFILE");
    if (!target || !*target)
        return;
    const char *us = getenv("RGPU_CLIENT_PROFILE_US");
    interval_us = us ? strtol(us, NULL, 10) : 1000;
    if (interval_us < 100 || interval_us > 1000000) {
        rgpu_log(RGPU_LOG_WARN, "RGPU_CLIENT_PROFILE_US=%s is outside 100..1000000; sampling every 1000 us", us);
        interval_us = 1000;
    }
    struct sigaction old;
    if (sigaction(SIGPROF, NULL, &old) == 0 && old.sa_handler != SIG_DFL && old.sa_handler != SIG_IGN) {
        rgpu_log(RGPU_LOG_WARN, "RGPU_CLIENT_PROFILE: the program handles SIGPROF itself; no profile taken");
        target = NULL;
        return;
    }
    void *mem = mmap(NULL, sizeof(struct sample) * MAX_SAMPLES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                     -1, 0);
    if (mem == MAP_FAILED) {
        rgpu_log(RGPU_LOG_WARN, "RGPU_CLIENT_PROFILE: no memory for samples; no profile taken");
        target = NULL;
        return;
    }
    samples = mem;
    void *warm[4];
    backtrace(warm, 4);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_sigprof;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    owner = getpid();
    cpu_at_start = cpu_seconds();
    struct itimerval every = {{interval_us / 1000000, interval_us % 1000000}, {interval_us / 1000000, interval_us % 1000000}};
    if (sigaction(SIGPROF, &sa, NULL) != 0 || setitimer(ITIMER_PROF, &every, NULL) != 0) {
        rgpu_log(RGPU_LOG_WARN, "RGPU_CLIENT_PROFILE: cannot start the profiling timer; no profile taken");
        target = NULL;
    }
}

/* Names for addresses: "module function", or "module (internal)" for an address in no exported function (a
 * stand-in's own static functions, a stripped library's code). Samples share few distinct addresses: each is
 * named once (pc_slots), and each name is kept once (name_slots); both tables hold indices into `names`. */
struct name_count {
    char *name;
    unsigned self, incl;
    unsigned seen; /* the last sample counted inclusively */
};

#define PC_SLOTS (1u << 18)
#define NAME_SLOTS (1u << 16)

static struct name_count *names;
static size_t nnames, names_cap;
static struct pc_slot {
    uintptr_t key; /* the address, with bit 0 for "the exact pc" (the frame that was running) */
    int index;
} *pc_slots;
static int *name_slots; /* index + 1, 0 for empty */

static uint32_t mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return (uint32_t)x;
}

static uint32_t hash_text(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    while (*s)
        h = (h ^ (unsigned char)*s++) * 1099511628211ull;
    return mix(h);
}

static int intern(const char *text)
{
    for (uint32_t i = hash_text(text) & (NAME_SLOTS - 1);; i = (i + 1) & (NAME_SLOTS - 1)) {
        if (name_slots[i] == 0) {
            if (nnames + 1 >= NAME_SLOTS / 2)
                return -1; /* absurdly many functions: the rest go uncounted */
            if (nnames == names_cap) {
                size_t cap = names_cap ? names_cap * 2 : 256;
                struct name_count *grown = realloc(names, cap * sizeof *grown);
                if (!grown)
                    return -1;
                names = grown;
                names_cap = cap;
            }
            char *copy = strdup(text);
            if (!copy)
                return -1;
            names[nnames] = (struct name_count){copy, 0, 0, 0};
            name_slots[i] = (int)++nnames;
            return (int)nnames - 1;
        }
        if (strcmp(names[name_slots[i] - 1].name, text) == 0)
            return name_slots[i] - 1;
    }
}

static int name_of(void *pc, int exact)
{
    uintptr_t key = ((uintptr_t)pc << 1) | (uintptr_t)(exact != 0);
    uint32_t i = mix(key) & (PC_SLOTS - 1);
    for (unsigned probes = 0; pc_slots[i].key && pc_slots[i].key != key; probes++) {
        if (probes == PC_SLOTS)
            return -1;
        i = (i + 1) & (PC_SLOTS - 1);
    }
    if (pc_slots[i].key == key)
        return pc_slots[i].index;
    char buf[512];
    Dl_info info;
    const ElfW(Sym) *sym = NULL;
    /* A return address points after its call: look one byte back, into the calling function. */
    void *at = exact ? pc : (void *)((uintptr_t)pc - 1);
    if (!dladdr1(at, &info, (void **)&sym, RTLD_DL_SYMENT) || !info.dli_fname) {
        snprintf(buf, sizeof buf, "? (no module)");
    } else {
        const char *module = strrchr(info.dli_fname, '/');
        module = module ? module + 1 : info.dli_fname;
        if (!*module)
            module = "(program)";
        int inside = info.dli_sname && sym && (uintptr_t)at < (uintptr_t)info.dli_saddr + sym->st_size;
        snprintf(buf, sizeof buf, "%s %s", module, inside ? info.dli_sname : "(internal)");
    }
    pc_slots[i].key = key;
    pc_slots[i].index = intern(buf);
    return pc_slots[i].index;
}

static int by_self(const void *a, const void *b)
{
    const struct name_count *x = a, *y = b;
    return (y->self > x->self) - (y->self < x->self);
}

static int by_incl(const void *a, const void *b)
{
    const struct name_count *x = a, *y = b;
    return (y->incl > x->incl) - (y->incl < x->incl);
}

/* Self samples by module: the part of the name before the space. */
static void print_modules(FILE *out, unsigned total)
{
    struct name_count *mods = calloc(nnames ? nnames : 1, sizeof *mods);
    size_t nmods = 0;
    if (!mods)
        return;
    for (size_t i = 0; i < nnames; i++) {
        size_t len = strcspn(names[i].name, " ");
        size_t j = 0;
        while (j < nmods && !(strlen(mods[j].name) == len && strncmp(mods[j].name, names[i].name, len) == 0))
            j++;
        if (j == nmods) {
            mods[nmods++].name = strndup(names[i].name, len);
            if (!mods[j].name)
                break;
        }
        mods[j].self += names[i].self;
    }
    qsort(mods, nmods, sizeof *mods, by_self);
    fprintf(out, "  self, by module:\n");
    for (size_t j = 0; j < nmods && j < TOP; j++)
        if (mods[j].self)
            fprintf(out, "    %6.2f%%  %s\n", 100.0 * mods[j].self / total, mods[j].name);
    for (size_t j = 0; j < nmods; j++)
        free(mods[j].name);
    free(mods);
}

__attribute__((destructor)) static void profile_report(void)
{
    if (!target || !samples || getpid() != owner)
        return;
    struct itimerval off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_PROF, &off, NULL);
    signal(SIGPROF, SIG_IGN); /* a signal already on its way must not run the handler while we read */
    unsigned total = __atomic_load_n(&taken, __ATOMIC_RELAXED);
    if (total > MAX_SAMPLES)
        total = MAX_SAMPLES;
    pc_slots = calloc(PC_SLOTS, sizeof *pc_slots);
    name_slots = calloc(NAME_SLOTS, sizeof *name_slots);
    if (!pc_slots || !name_slots) {
        rgpu_log(RGPU_LOG_WARN, "RGPU_CLIENT_PROFILE: no memory to name the samples; no profile written");
        return;
    }
    unsigned used = 0;
    for (unsigned s = 0; s < total; s++) {
        struct sample *sm = &samples[s];
        if (sm->depth <= SKIP)
            continue;
        used++;
        for (int f = SKIP; f < sm->depth; f++) {
            int n = name_of(sm->pc[f], f == SKIP);
            if (n < 0)
                continue;
            if (f == SKIP)
                names[n].self++;
            if (names[n].seen != used) { /* a function twice on one stack counts once */
                names[n].seen = used;
                names[n].incl++;
            }
        }
    }
    FILE *out = strcmp(target, "-") == 0 ? stderr : fopen(target, "a");
    if (!out) {
        rgpu_log(RGPU_LOG_WARN, "RGPU_CLIENT_PROFILE: cannot write %s: %s", target, strerror(errno));
        return;
    }
    char exe[256] = "?";
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    exe[len > 0 ? len : 1] = 0;
    /* The kernel checks CPU-time timers at its clock tick, so samples come at most once a tick (4 ms at
     * HZ=250) whatever the interval asked for: the shares hold, the count says how many they rest on. */
    fprintf(out, "rgpu client profile: pid %d (%s), %.3f s of CPU time, %u samples (asked for one per %ld us), "
            "%u dropped\n", (int)owner, exe, cpu_seconds() - cpu_at_start, used, interval_us,
            __atomic_load_n(&dropped, __ATOMIC_RELAXED));
    if (used) {
        print_modules(out, used);
        qsort(names, nnames, sizeof *names, by_self);
        fprintf(out, "  self, by function:\n");
        for (size_t i = 0; i < nnames && i < TOP && names[i].self; i++)
            fprintf(out, "    %6.2f%%  %s\n", 100.0 * names[i].self / used, names[i].name);
        qsort(names, nnames, sizeof *names, by_incl);
        fprintf(out, "  inclusive (anywhere on the stack), by function:\n");
        for (size_t i = 0; i < nnames && i < TOP; i++)
            fprintf(out, "    %6.2f%%  %s\n", 100.0 * names[i].incl / used, names[i].name);
    }
    if (out != stderr)
        fclose(out);
    else
        fflush(out);
}
