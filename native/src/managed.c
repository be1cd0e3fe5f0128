/* Managed memory (cuMemAllocManaged, cudaMallocManaged): one address that the program and its kernels both use.
 * The server allocates ordinary device memory; this side maps memory at the same address (the program's view),
 * so that a pointer stored in a structure, or written by a kernel, means the same bytes on both sides. The view
 * is one mapping of a memfd; a second, private mapping of it (the alias) is where rgpu moves bytes, so the
 * program's view changes protection only once its bytes are whole. The two copies are kept coherent in chunks,
 * as a GPU without concurrent managed access migrates pages:
 *   GONE   no access: the device's bytes are current. A touch faults (SIGSEGV); the handler copies the chunk
 *          back into the alias (a synchronous copy, after the work the program has sent, in the context that
 *          allocated it) and makes it CLEAN.
 *   CLEAN  read-only: both copies hold the same bytes. A write faults and makes the chunk DIRTY.
 *   DIRTY  read-write: the program's bytes are current.
 * Before any request goes to the server (rgpu_managed_enter, from conn_calls.c and conn_batch.c), every DIRTY
 * chunk is copied up from the alias and every chunk becomes GONE: what the request starts may read or write any
 * managed byte. A request's own buffers in managed memory are made current and pinned until its reply is in
 * (rgpu holds the connection while it reads or fills them, and a fault then could not be served): another
 * thread's request copies a pinned bulk up and leaves it readable, and leaves a pinned reply buffer alone.
 *
 * So the device reports CONCURRENT_MANAGED_ACCESS 0 (rgpu_managed_offered): as on such a GPU, the program
 * synchronizes before it touches managed memory the GPU may be using. Limits: a program that installs its own
 * SIGSEGV handler afterwards must chain to the one it replaced; a chunk that cannot be copied back (the server is
 * gone) leaves the program's fault unserved, after a log line; an error the copy back reports for earlier work is
 * logged, not kept for the program's next call; while any stream captures, requests settle nothing (the copies
 * would be captured); prefetches and advice are taken as hints; a forked child has no managed memory.
 *
 * __managed__ variables are memory the server's driver allocates as it loads their module. The runtime hands
 * their addresses over (rgpu_ext_managed_adopt) and they are kept the same way, the pages around them mapped here
 * too: only the variables' own bytes (a region's pieces) move, as only they are the session's to copy, each in its
 * own context. Variables of several images may share a page, and so a region; a device reset or a reload lets an
 * image's variables go without touching the others'. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "rgpu_shim.h"

#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif

#define API __attribute__((visibility("default")))
#define CHUNK ((uint64_t)64 << 10)
/* The server is asked again (keeping what it gave) while the program already maps the address it chose. */
#define MAP_ATTEMPTS 16

enum { GONE, CLEAN, DIRTY };

struct piece { /* a __managed__ variable: its bytes, the image that owns it, the context it lives in */
    uint64_t at, end, owner, ctx;
};

/* What the program advised and prefetched, per chunk (not per page, as CUDA keeps it), for cuMemRangeGetAttribute:
 * a location is a device, -1 the host (a host NUMA node too), -2 none. */
struct advice {
    uint64_t accessed_by; /* devices 0..62, and bit 63 the host */
    int32_t preferred, prefetched;
    uint8_t read_mostly;
};

struct managed {
    uint64_t start, span, bytes; /* the shared range (whole pages) and the size asked for */
    CUdeviceptr base;            /* what the server allocated (start is base rounded up to a page) */
    uint64_t ctx;                /* the context that allocated it: copies go there, whichever thread asks */
    uint8_t *alias;              /* the same pages, always read-write, for rgpu's copies */
    size_t chunks;
    uint8_t *state;        /* per chunk */
    struct advice *advice; /* per chunk */
    /* __managed__ variables (adopted): the bytes that are device memory, sorted; NULL for an allocation, all of
     * whose range is */
    size_t npieces;
    struct piece *pieces;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
RGPU_FORK_RESET(managed_lock, &lock)
static struct managed *regions; /* sorted by start */
static size_t nregions, cap;
static int live;              /* nregions, read without the lock by the fast paths */
static int held;              /* chunks CLEAN or DIRTY: a request must settle them first */
static __thread int moving;   /* this thread copies managed bytes: its own requests settle nothing */
static __thread int inside;   /* this thread is in a request (rgpu_managed_enter .. leave), nested or not */
static __thread int locked;   /* this thread holds `lock`: a fault now is not managed memory's to serve */
static struct sigaction replaced;
static uint64_t page;

static void take(void)
{
    pthread_mutex_lock(&lock);
    locked = 1;
}
static void give(void)
{
    locked = 0;
    pthread_mutex_unlock(&lock);
}

static struct managed *find(uint64_t p) /* under lock */
{
    size_t lo = 0, hi = nregions;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (regions[mid].start + regions[mid].span <= p)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < nregions && regions[lo].start <= p ? &regions[lo] : NULL;
}

static uint64_t chunk_at(const struct managed *m, size_t i) { return m->start + i * CHUNK; }
static uint64_t run_len(const struct managed *m, size_t first, size_t n)
{
    uint64_t end = (first + n) * CHUNK;
    return (end < m->span ? end : m->span) - first * CHUNK;
}

static int protect(const struct managed *m, size_t first, size_t n, int prot)
{
    return mprotect((void *)(uintptr_t)chunk_at(m, first), run_len(m, first, n), prot);
}

/* Bytes a request in flight reads (bulk) or fills (replies), under lock; a thread pins at most one of each. */
#define PINS 64
enum { PIN_READ, PIN_FILL };
static struct pin {
    uint64_t at, end;
    int kind;
} pins[PINS];
static __thread int my_pins[2] = {-1, -1};

static int pinned(const struct managed *m, size_t i, int kind) /* under lock */
{
    uint64_t at = chunk_at(m, i), end = at + run_len(m, i, 1);
    for (int k = 0; k < PINS; k++)
        if (pins[k].end && pins[k].kind == kind && pins[k].at < end && at < pins[k].end)
            return 1;
    return 0;
}

static void pin(int kind, uint64_t at, uint64_t end) /* under lock */
{
    for (int k = 0; k < PINS; k++)
        if (!pins[k].end) {
            pins[k] = (struct pin){at, end, kind};
            my_pins[kind] = k;
            return;
        }
    static int logged;
    if (!logged++)
        rgpu_log(RGPU_LOG_WARN, "managed memory: more than %d requests in flight name it as a buffer; another "
                                "thread's request may take it from this one", PINS);
}

/* A copy between the alias and the device, in the allocating context, settling nothing on the way. */
static CUresult move(const struct managed *m, size_t first, size_t n, int up)
{
    uint64_t prev = rgpu_thread_ctx(), lo = chunk_at(m, first), hi = lo + run_len(m, first, n);
    struct piece whole = {lo, hi, 0, m->ctx};
    const struct piece *part = m->pieces ? m->pieces : &whole;
    moving = 1;
    CUresult r = CUDA_SUCCESS;
    for (size_t k = 0; k < (m->pieces ? m->npieces : 1) && r == CUDA_SUCCESS; k++) {
        uint64_t at = part[k].at > lo ? part[k].at : lo, end = part[k].end < hi ? part[k].end : hi;
        if (at >= end)
            continue;
        uint8_t *here = m->alias + (at - m->start);
        rgpu_set_thread_ctx(part[k].ctx);
        r = up ? cuMemcpyHtoD_v2(at, here, end - at) : cuMemcpyDtoH_v2(here, at, end - at);
    }
    moving = 0;
    rgpu_set_thread_ctx(prev);
    if (r != CUDA_SUCCESS)
        rgpu_log(RGPU_LOG_ERROR, "managed memory 0x%llx+%llu could not be copied %s the GPU (error %d)",
                 (unsigned long long)chunk_at(m, first), (unsigned long long)run_len(m, first, n),
                 up ? "to" : "back from", (int)r);
    return r;
}

/* Chunk i current here and readable (under lock): 0, or -1 if it could not be copied back (it stays GONE). */
static int fetch(struct managed *m, size_t i)
{
    if (m->state[i] != GONE)
        return 0;
    if (move(m, i, 1, 0) != CUDA_SUCCESS || protect(m, i, 1, PROT_READ))
        return -1;
    m->state[i] = CLEAN;
    held++;
    return 0;
}

/* Every DIRTY chunk up to the device (a run of them in one copy), every chunk GONE, but for pinned ones: a bulk
 * being sent stays readable, a reply being filled stays as it is (under lock). */
static void settle_locked(void)
{
    for (size_t k = 0; k < nregions && held; k++) {
        struct managed *m = &regions[k];
        for (size_t i = 0; i < m->chunks;) {
            uint8_t s = m->state[i];
            int reading = pinned(m, i, PIN_READ);
            if (s == GONE || pinned(m, i, PIN_FILL) || (reading && s == CLEAN)) {
                i++;
                continue;
            }
            size_t n = 1;
            while (i + n < m->chunks && m->state[i + n] == s && pinned(m, i + n, PIN_READ) == reading &&
                   !pinned(m, i + n, PIN_FILL))
                n++;
            /* (the view first: a write meanwhile faults and waits for the lock, and is not lost) */
            protect(m, i, n, reading ? PROT_READ : PROT_NONE);
            if (s == DIRTY)
                move(m, i, n, 1);
            memset(m->state + i, reading ? CLEAN : GONE, n);
            if (!reading)
                held -= (int)n;
            i += n;
        }
    }
}

static int overlaps(uint64_t p, uint64_t n) /* under lock: whether [p, p+n) holds managed memory */
{
    for (size_t k = 0; k < nregions; k++)
        if (regions[k].start < p + n && p < regions[k].start + regions[k].span)
            return 1;
    return 0;
}

/* The program's bytes [p, p+n) current here, for rgpu to read (writing 0) or fill (1) while it holds the
 * connection (under lock). */
static void make_current(uint64_t p, uint64_t n, int writing)
{
    while (n) {
        struct managed *m = find(p);
        if (!m) { /* (on to the next region, if one starts within the range) */
            size_t next = 0;
            while (next < nregions && regions[next].start <= p)
                next++;
            if (next == nregions || regions[next].start >= p + n)
                return;
            n -= regions[next].start - p, p = regions[next].start;
            continue;
        }
        size_t i = (p - m->start) / CHUNK;
        if (fetch(m, i) == 0 && writing && m->state[i] == CLEAN && !protect(m, i, 1, PROT_READ | PROT_WRITE))
            m->state[i] = DIRTY;
        uint64_t end = chunk_at(m, i) + run_len(m, i, 1), k = end - p < n ? end - p : n;
        p += k, n -= k;
    }
}

void rgpu_managed_enter(const void *bulk, size_t bulk_len, const struct rgpu_sink *sinks, size_t nsinks)
{
    if (inside++ || !__atomic_load_n(&live, __ATOMIC_ACQUIRE) || moving)
        return;
    take();
    if (held && !rgpu_capture_active()) /* (a copy during a capture would be captured, or refused) */
        settle_locked();
    uint64_t at = (uint64_t)(uintptr_t)bulk;
    if (bulk_len && overlaps(at, bulk_len)) {
        make_current(at, bulk_len, 0);
        pin(PIN_READ, at, at + bulk_len);
    }
    uint64_t low = UINT64_MAX, high = 0;
    for (size_t i = 0; i < nsinks; i++)
        if (sinks[i].cap) {
            uint64_t p = (uint64_t)(uintptr_t)sinks[i].buf;
            low = p < low ? p : low, high = p + sinks[i].cap > high ? p + sinks[i].cap : high;
        }
    if (high && overlaps(low, high - low)) {
        for (size_t i = 0; i < nsinks; i++)
            if (sinks[i].cap)
                make_current((uint64_t)(uintptr_t)sinks[i].buf, sinks[i].cap, 1);
        pin(PIN_FILL, low, high);
    }
    give();
}

void rgpu_managed_leave(void)
{
    if (--inside || (my_pins[0] < 0 && my_pins[1] < 0))
        return;
    take();
    for (int k = 0; k < 2; k++)
        if (my_pins[k] >= 0)
            pins[my_pins[k]] = (struct pin){0, 0, 0}, my_pins[k] = -1;
    give();
}

int rgpu_managed_device_side(uint64_t p, uint64_t n)
{
    uint64_t start, size;
    return !moving && n && rgpu_managed_range(p, &start, &size) == 0 && p + n <= start + size;
}

/* A fault at `addr`: 1 if it was managed memory's and is served (or another thread served it meanwhile). */
static int serve_fault(uint64_t addr)
{
    if (!__atomic_load_n(&live, __ATOMIC_ACQUIRE) || moving || locked)
        return 0;
    if (inside) { /* (rgpu may hold the connection: the copy back could not be sent) */
        if (pthread_mutex_trylock(&lock) == 0) {
            if (find(addr))
                rgpu_log(RGPU_LOG_ERROR, "managed memory 0x%llx was touched while rgpu makes a request (a buffer "
                                         "it did not expect there): not supported", (unsigned long long)addr);
            pthread_mutex_unlock(&lock);
        }
        return 0;
    }
    take();
    struct managed *m = find(addr);
    int served = 0;
    if (m) {
        size_t i = (addr - m->start) / CHUNK;
        if (m->state[i] == GONE) {
            served = fetch(m, i) == 0; /* (a write faults once more, and finds it CLEAN) */
        } else if (m->state[i] == CLEAN) { /* a write, or a read that another thread's fetch served meanwhile */
            served = !protect(m, i, 1, PROT_READ | PROT_WRITE);
            if (served)
                m->state[i] = DIRTY;
        } else {
            served = 1; /* DIRTY: another thread made it writable meanwhile */
        }
    }
    give();
    return served;
}

static void on_fault(int sig, siginfo_t *info, void *context)
{
    int saved = errno;
    int served = serve_fault((uint64_t)(uintptr_t)info->si_addr);
    errno = saved;
    if (served)
        return;
    /* (sa_handler and sa_sigaction share their storage: the two special values first) */
    if (replaced.sa_handler == SIG_DFL || replaced.sa_handler == SIG_IGN)
        signal(sig, SIG_DFL); /* the default action, when the instruction faults again */
    else if (replaced.sa_flags & SA_SIGINFO)
        replaced.sa_sigaction(sig, info, context);
    else
        replaced.sa_handler(sig);
}

static pthread_once_t installed = PTHREAD_ONCE_INIT;
static int install_failed;
static void install(void)
{
    page = (uint64_t)sysconf(_SC_PAGESIZE);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_fault;
    sigemptyset(&sa.sa_mask);
    /* (an alternate stack the program set up for its own handler, as Go's and Rust's runtimes do, serves ours) */
    install_failed = sigaction(SIGSEGV, NULL, &replaced) != 0;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER | SA_RESTART | (replaced.sa_flags & SA_ONSTACK);
    install_failed = install_failed || sigaction(SIGSEGV, &sa, &replaced) != 0;
}

/* -- the driver API --------------------------------------------------------------------------------------------- */
int rgpu_managed_range(uint64_t ptr, uint64_t *start, uint64_t *size)
{
    if (!__atomic_load_n(&live, __ATOMIC_ACQUIRE))
        return -1;
    take();
    struct managed *m = find(ptr);
    int found = m && ptr < m->start + m->bytes;
    if (found)
        *start = m->start, *size = m->bytes;
    if (m && m->pieces) { /* (a variable's bytes, not the pages around it) */
        found = 0;
        for (size_t k = 0; k < m->npieces && !found; k++)
            if (m->pieces[k].at <= ptr && ptr < m->pieces[k].end)
                *start = m->pieces[k].at, *size = m->pieces[k].end - m->pieces[k].at, found = 1;
    }
    give();
    return found ? 0 : -1;
}

static CUresult add_region(const struct managed *made)
{
    struct managed m = *made;
    m.state = malloc(m.chunks);
    m.advice = malloc(m.chunks * sizeof *m.advice);
    if (!m.state || !m.advice) {
        free(m.state), free(m.advice);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    for (size_t i = 0; i < m.chunks; i++)
        m.advice[i] = (struct advice){0, -2, -2, 0};
    /* an allocation: both sides zero (the memfd is fresh, the device memset); a variable: the device's bytes */
    uint8_t initial = m.pieces ? GONE : CLEAN;
    memset(m.state, initial, m.chunks);
    take();
    if (nregions == cap) {
        size_t grown = cap ? 2 * cap : 16;
        struct managed *v = realloc(regions, grown * sizeof *v);
        if (!v) {
            give();
            free(m.state), free(m.advice);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        regions = v, cap = grown;
    }
    size_t at = 0;
    while (at < nregions && regions[at].start < m.start)
        at++;
    memmove(regions + at + 1, regions + at, (nregions - at) * sizeof *regions);
    regions[at] = m;
    nregions++;
    held += initial == CLEAN ? (int)m.chunks : 0;
    __atomic_store_n(&live, (int)nregions, __ATOMIC_RELEASE);
    give();
    return CUDA_SUCCESS;
}

/* The program's view of `fd` at `start`, and the alias: 0, or -1 if this process maps something there already. */
static int map_views(int fd, uint64_t start, uint64_t span, uint8_t **alias)
{
    void *view = mmap((void *)(uintptr_t)start, span, PROT_READ, MAP_SHARED | MAP_FIXED_NOREPLACE, fd, 0);
    if (view != (void *)(uintptr_t)start) {
        if (view != MAP_FAILED)
            munmap(view, span); /* (a kernel before 4.17 takes the address as a hint) */
        return -1;
    }
    void *a = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (a == MAP_FAILED) {
        munmap(view, span);
        return -1;
    }
    madvise(view, span, MADV_DONTFORK); /* (a child shares nothing of it: CUDA's children have no managed memory) */
    madvise(a, span, MADV_DONTFORK);
    *alias = a;
    return 0;
}

static int memory_file(uint64_t span)
{
    int fd = (int)syscall(SYS_memfd_create, "rgpu-managed", 0);
    if (fd < 0 || ftruncate(fd, (off_t)span)) {
        rgpu_log(RGPU_LOG_ERROR, "managed memory: no memory file of %llu bytes for it (%s)",
                 (unsigned long long)span, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    return fd;
}

API CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytes, unsigned int flags)
{
    if (!dptr || !bytes || (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST))
        return CUDA_ERROR_INVALID_VALUE;
    pthread_once(&installed, install);
    if (install_failed) {
        rgpu_log(RGPU_LOG_ERROR, "managed memory needs a SIGSEGV handler, and it could not be installed");
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    struct managed m = {.bytes = bytes, .span = (bytes + page - 1) / page * page};
    m.chunks = (size_t)((m.span + CHUNK - 1) / CHUNK);
    int fd = memory_file(m.span);
    if (fd < 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUdeviceptr tried[MAP_ATTEMPTS];
    int ntried = 0;
    CUresult r;
    for (;;) {
        if ((r = cuMemAlloc_v2(&m.base, m.span + page)) != CUDA_SUCCESS)
            break;
        m.start = (m.base + page - 1) / page * page;
        if (map_views(fd, m.start, m.span, &m.alias) == 0)
            break;
        if (ntried == MAP_ATTEMPTS) {
            rgpu_log(RGPU_LOG_ERROR, "managed memory: this process already maps the addresses of %d device "
                                     "allocations in a row (the last 0x%llx+%llu)", ntried + 1,
                     (unsigned long long)m.start, (unsigned long long)m.span);
            cuMemFree_v2(m.base);
            r = CUDA_ERROR_OUT_OF_MEMORY;
            break;
        }
        tried[ntried++] = m.base;
    }
    close(fd); /* (the mappings keep it) */
    for (int i = 0; i < ntried; i++)
        cuMemFree_v2(tried[i]);
    if (r != CUDA_SUCCESS)
        return r;
    /* (the range the program may name is the aligned one, of the size asked for: pointer queries and copies see
     * that) */
    rgpu_ranges_ctx(m.base, &m.ctx);
    rgpu_ranges_drop_device_within(m.base, 1);
    rgpu_ranges_note_device(m.start, m.bytes, m.ctx);
    if ((r = cuMemsetD8_v2(m.start, 0, m.span)) != CUDA_SUCCESS || (r = add_region(&m)) != CUDA_SUCCESS) {
        munmap((void *)(uintptr_t)m.start, m.span);
        munmap(m.alias, m.span);
        rgpu_ranges_drop_device_within(m.start, 1);
        cuMemFree_v2(m.base);
        return r;
    }
    *dptr = m.start;
    return CUDA_SUCCESS;
}

/* Region m out of the list (under lock), its chunks no longer held. */
static struct managed unlink_region(struct managed *m)
{
    struct managed gone = *m;
    for (size_t i = 0; i < gone.chunks; i++)
        held -= gone.state[i] != GONE;
    memmove(m, m + 1, (size_t)(regions + nregions - m - 1) * sizeof *m);
    nregions--;
    __atomic_store_n(&live, (int)nregions, __ATOMIC_RELEASE);
    return gone;
}

static void unmap_region(struct managed *gone)
{
    free(gone->state);
    free(gone->advice);
    munmap((void *)(uintptr_t)gone->start, gone->span);
    munmap(gone->alias, gone->span);
    if (gone->pieces)
        for (size_t k = 0; k < gone->npieces; k++)
            rgpu_ranges_drop_device_within(gone->pieces[k].at, 1);
    else
        rgpu_ranges_drop_device_within(gone->start, 1);
    free(gone->pieces);
}

int rgpu_managed_free(CUdeviceptr p, CUresult *r)
{
    if (!__atomic_load_n(&live, __ATOMIC_ACQUIRE))
        return 0;
    take();
    struct managed *m = find(p);
    if (!m || m->start != p || m->pieces) { /* (a variable is its module's to free) */
        give();
        return 0;
    }
    struct managed gone = unlink_region(m);
    give();
    unmap_region(&gone);
    *r = cuMemFree_v2(gone.base);
    return 1;
}

/* -- __managed__ variables -------------------------------------------------------------------------------------- */
static int by_address(const void *a, const void *b)
{
    const struct piece *x = a, *y = b;
    return x->at < y->at ? -1 : x->at > y->at;
}

static uint64_t page_down(uint64_t p) { return p / page * page; }
static uint64_t page_up(uint64_t p) { return (p + page - 1) / page * page; }

/* Regions unlinked under the lock, to unmap once it is given back; and variables' device ranges to forget. */
struct letgo {
    struct managed *regions;
    size_t nregions, nranges;
    uint64_t *ranges;
    int failed; /* out of memory: some are left as they were */
};

static void letgo_region(struct letgo *g, struct managed *m) /* under lock */
{
    struct managed *v = realloc(g->regions, (g->nregions + 1) * sizeof *v);
    if (!v) {
        g->failed = 1;
        return;
    }
    g->regions = v;
    g->regions[g->nregions++] = unlink_region(m);
}

static void letgo_finish(struct letgo *g) /* after the lock */
{
    for (size_t i = 0; i < g->nregions; i++)
        unmap_region(&g->regions[i]);
    for (size_t i = 0; i < g->nranges; i++)
        rgpu_ranges_drop_device_within(g->ranges[i], 1);
    free(g->regions);
    free(g->ranges);
}

/* Under lock: the variables `which` picks out of every adopted region; a region left with none goes. */
static void drop_pieces(int (*which)(const struct piece *, uint64_t), uint64_t arg, struct letgo *g)
{
    for (size_t k = 0; k < nregions;) {
        struct managed *m = &regions[k];
        size_t kept = 0;
        for (size_t i = 0; m->pieces && i < m->npieces; i++) {
            if (!which(&m->pieces[i], arg)) {
                m->pieces[kept++] = m->pieces[i];
                continue;
            }
            uint64_t *v = realloc(g->ranges, (g->nranges + 1) * sizeof *v);
            if (v)
                g->ranges = v, g->ranges[g->nranges++] = m->pieces[i].at;
        }
        if (!m->pieces || kept == m->npieces) {
            k++;
            continue;
        }
        m->npieces = kept;
        if (kept) {
            k++;
        } else {
            size_t before = g->nregions;
            letgo_region(g, m); /* (the list moved down one: k now names the next region) */
            k += g->nregions == before;
        }
    }
}

static int of_owner(const struct piece *p, uint64_t owner) { return p->owner == owner; }
static int in_ctx(const struct piece *p, uint64_t ctx) { return p->ctx == ctx; }

/* Under lock: an adopted region whose pages meet those of work[0..n), or NULL. */
static struct managed *meeting(const struct piece *work, size_t n)
{
    for (size_t k = 0; k < nregions; k++)
        for (size_t i = 0; regions[k].pieces && i < n; i++)
            if (page_down(work[i].at) < regions[k].start + regions[k].span && regions[k].start < page_up(work[i].end))
                return &regions[k];
    return NULL;
}

/* One region for the variables pieces[0..n) (sorted, their pages meeting): the device holds their bytes. */
static CUresult adopt_region(const struct piece *pieces, size_t n)
{
    struct managed m = {.start = page_down(pieces[0].at), .ctx = pieces[0].ctx, .npieces = n};
    uint64_t end = 0;
    for (size_t k = 0; k < n; k++)
        end = pieces[k].end > end ? pieces[k].end : end;
    m.span = m.bytes = page_up(end) - m.start;
    m.chunks = (size_t)((m.span + CHUNK - 1) / CHUNK);
    if (!(m.pieces = malloc(n * sizeof *m.pieces)))
        return CUDA_ERROR_OUT_OF_MEMORY;
    memcpy(m.pieces, pieces, n * sizeof *m.pieces);
    int fd = memory_file(m.span);
    if (fd < 0 || map_views(fd, m.start, m.span, &m.alias)) {
        if (fd >= 0) {
            close(fd);
            rgpu_log(RGPU_LOG_ERROR, "__managed__ variables at 0x%llx+%llu: this process maps something there "
                                     "already", (unsigned long long)m.start, (unsigned long long)m.span);
        }
        free(m.pieces);
        return fd < 0 ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_NOT_SUPPORTED;
    }
    close(fd);
    mprotect((void *)(uintptr_t)m.start, m.span, PROT_NONE); /* (GONE) */
    for (size_t k = 0; k < n; k++)
        rgpu_ranges_note_device(pieces[k].at, pieces[k].end - pieces[k].at, pieces[k].ctx);
    CUresult r = add_region(&m);
    if (r != CUDA_SUCCESS) {
        m.state = NULL, m.advice = NULL;
        unmap_region(&m);
    }
    return r;
}

/* Regions for the variables work[0..n), sorted: one for each run of them whose pages meet. */
static CUresult adopt_runs(struct piece *work, size_t n)
{
    qsort(work, n, sizeof *work, by_address);
    CUresult r = CUDA_SUCCESS;
    for (size_t i = 0, j; i < n && r == CUDA_SUCCESS; i = j) {
        uint64_t end = page_up(work[i].end);
        for (j = i + 1; j < n && page_down(work[j].at) < end; j++)
            end = page_up(work[j].end) > end ? page_up(work[j].end) : end;
        r = adopt_region(work + i, j - i);
    }
    return r;
}

/* The runtime's hand-over (register.c of the runtime stand-in, found by name): the n __managed__ variables of the
 * image `owner` just loaded in the current context, at the addresses the server's driver gave them, kept as
 * managed memory from now on. The image's variables from an earlier load are let go first. Another image's
 * variables whose pages meet these join their region: theirs go up to the device first, and the region is made
 * anew, all of it the device's. */
API CUresult rgpu_ext_managed_adopt(uint64_t owner, const CUdeviceptr *ptrs, const size_t *sizes, size_t n)
{
    if (!ptrs || !sizes || !n || n > ((size_t)1 << 20))
        return CUDA_ERROR_INVALID_VALUE;
    pthread_once(&installed, install);
    if (install_failed) {
        rgpu_log(RGPU_LOG_ERROR, "managed memory needs a SIGSEGV handler, and it could not be installed");
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    uint64_t ctx = rgpu_thread_ctx();
    size_t count = n;
    struct piece *work = malloc(n * sizeof *work);
    if (!work)
        return CUDA_ERROR_OUT_OF_MEMORY;
    for (size_t k = 0; k < n; k++) {
        if (!ptrs[k] || !sizes[k] || ptrs[k] + sizes[k] < ptrs[k] || ptrs[k] + sizes[k] > UINT64_MAX - page) {
            free(work);
            return CUDA_ERROR_INVALID_VALUE;
        }
        work[k] = (struct piece){ptrs[k], ptrs[k] + sizes[k], owner, ctx};
    }
    struct letgo g = {0};
    CUresult r = CUDA_SUCCESS;
    take();
    drop_pieces(of_owner, owner, &g);
    for (struct managed *m; r == CUDA_SUCCESS && (m = meeting(work, count));) {
        int busy = 0;
        for (size_t i = 0; i < m->chunks && !busy; i++)
            busy = pinned(m, i, PIN_READ) || pinned(m, i, PIN_FILL);
        if (busy) {
            rgpu_log(RGPU_LOG_ERROR, "__managed__ variables at 0x%llx share pages with others that a request in "
                                     "flight uses", (unsigned long long)work[0].at);
            r = CUDA_ERROR_NOT_SUPPORTED;
        }
        struct piece *more = r == CUDA_SUCCESS ? realloc(work, (count + m->npieces) * sizeof *work) : NULL;
        if (!more) {
            r = r == CUDA_SUCCESS ? CUDA_ERROR_OUT_OF_MEMORY : r;
            break;
        }
        work = more;
        for (size_t i = 0; i < m->chunks; i++) /* (what the program wrote there goes up before the region goes) */
            if (m->state[i] == DIRTY)
                move(m, i, 1, 1);
        memcpy(work + count, m->pieces, m->npieces * sizeof *work);
        count += m->npieces;
        letgo_region(&g, m);
        if (g.failed)
            r = CUDA_ERROR_OUT_OF_MEMORY;
    }
    give();
    letgo_finish(&g);
    if (r == CUDA_SUCCESS)
        r = adopt_runs(work, count);
    if (r != CUDA_SUCCESS) {
        /* (all of this image or none: the others it joined or would have joined, whose regions went above, keep
         * what regions can be made for them) */
        struct letgo undo = {0};
        take();
        drop_pieces(of_owner, owner, &undo);
        give();
        letgo_finish(&undo);
        size_t others = 0;
        for (size_t i = 0; i < count; i++)
            if (work[i].owner != owner)
                work[others++] = work[i];
        if (others)
            adopt_runs(work, others);
    }
    free(work);
    return r;
}

/* Context ctx destroyed, with everything in it: its managed memory's views go too (as after cuMemFree, a touch
 * is the program's fault). */
void rgpu_managed_drop_ctx(uint64_t ctx)
{
    struct letgo g = {0};
    take();
    drop_pieces(in_ctx, ctx, &g);
    for (size_t k = 0; k < nregions;) /* (allocations) */
        if (!regions[k].pieces && regions[k].ctx == ctx && !g.failed)
            letgo_region(&g, &regions[k]);
        else
            k++;
    give();
    letgo_finish(&g);
}

/* A hint's range and location: INVALID_VALUE where the range is not managed memory, INVALID_DEVICE where the
 * location is no device. */
static CUresult check_hint(CUdeviceptr p, size_t n, int device)
{
    uint64_t start, size;
    int count = 0;
    CUresult r = rgpu_ready();
    if (r != CUDA_SUCCESS)
        return r;
    if (!n || rgpu_managed_range(p, &start, &size) || p + n < p || p + n > start + size)
        return CUDA_ERROR_INVALID_VALUE;
    if (device >= 0 && (cuDeviceGetCount(&count) != CUDA_SUCCESS || device >= count))
        return CUDA_ERROR_INVALID_DEVICE;
    return CUDA_SUCCESS;
}

/* The device a location names (-1: the host), or -2: none. */
static int located(CUmemLocation where)
{
    switch (where.type) {
    case CU_MEM_LOCATION_TYPE_DEVICE:
        return where.id >= 0 ? where.id : -2;
    case CU_MEM_LOCATION_TYPE_HOST:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT:
        return -1;
    default:
        return -2;
    }
}

/* A hint taken: kept per chunk of [p, p+n) (a range check_hint found within one region), for the queries. */
enum { HINT_PREFETCH = 0 }; /* (besides CUmem_advise's values) */
static void remember(CUdeviceptr p, size_t n, int hint, int device)
{
    uint64_t bit = device < 0 ? 1ull << 63 : device < 63 ? 1ull << device : 0;
    take();
    struct managed *m = find(p);
    for (size_t i = m ? (p - m->start) / CHUNK : 0; m && i < m->chunks && chunk_at(m, i) < p + n; i++) {
        struct advice *a = &m->advice[i];
        switch (hint) {
        case HINT_PREFETCH: a->prefetched = device; break;
        case CU_MEM_ADVISE_SET_READ_MOSTLY: a->read_mostly = 1; break;
        case CU_MEM_ADVISE_UNSET_READ_MOSTLY: a->read_mostly = 0; break;
        case CU_MEM_ADVISE_SET_PREFERRED_LOCATION: a->preferred = device; break;
        case CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION: a->preferred = -2; break;
        case CU_MEM_ADVISE_SET_ACCESSED_BY: a->accessed_by |= bit; break;
        case CU_MEM_ADVISE_UNSET_ACCESSED_BY: a->accessed_by &= ~bit; break;
        }
    }
    give();
}

/* A prefetch is a hint here: the bytes move when the program or a request touches them. */
CUresult rgpu_managed_prefetch(CUdeviceptr p, size_t n, int device, CUstream s)
{
    (void)s;
    CUresult r = device < -1 ? CUDA_ERROR_INVALID_DEVICE : check_hint(p, n, device);
    if (r == CUDA_SUCCESS)
        remember(p, n, HINT_PREFETCH, device);
    return r;
}

API CUresult cuMemPrefetchAsync_v2(CUdeviceptr p, size_t n, CUmemLocation location, unsigned int flags, CUstream s)
{
    return flags ? CUDA_ERROR_INVALID_VALUE : rgpu_managed_prefetch(p, n, located(location), s);
}
API CUresult cuMemPrefetchAsync_v2_ptsz(CUdeviceptr p, size_t n, CUmemLocation location, unsigned int flags,
                                        CUstream s)
{
    return cuMemPrefetchAsync_v2(p, n, location, flags, s);
}

/* Advice changes where pages would live, not what they hold: taken, for a managed range. */
API CUresult cuMemAdvise_v2(CUdeviceptr p, size_t n, CUmem_advise advice, CUmemLocation location)
{
    if (advice < CU_MEM_ADVISE_SET_READ_MOSTLY || advice > CU_MEM_ADVISE_UNSET_ACCESSED_BY)
        return CUDA_ERROR_INVALID_VALUE;
    int device = located(location);
    int needs_location = advice != CU_MEM_ADVISE_SET_READ_MOSTLY && advice != CU_MEM_ADVISE_UNSET_READ_MOSTLY;
    if (needs_location && device < -1)
        return CUDA_ERROR_INVALID_DEVICE;
    CUresult r = check_hint(p, n, needs_location ? device : -1);
    if (r == CUDA_SUCCESS)
        remember(p, n, advice, device);
    return r;
}

/* What the hints of [p, p+n) say of one attribute, as CUDA does for a range: a location only where every chunk
 * agrees (else -2, none), read-mostly only where every chunk is, the devices every chunk is accessed by. */
static CUresult range_attribute(void *data, size_t size, CUmem_range_attribute attr, CUdeviceptr p, size_t n)
{
    uint64_t accessed = ~0ull;
    int32_t preferred = 0, prefetched = 0, first = 1, read_mostly = 1;
    if (!data)
        return CUDA_ERROR_INVALID_VALUE;
    int multi = attr == CU_MEM_RANGE_ATTRIBUTE_ACCESSED_BY;
    if (attr < CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY || attr > CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION_ID ||
        (multi ? !size || size % 4 : size != 4))
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = check_hint(p, n, -1);
    if (r != CUDA_SUCCESS)
        return r;
    take();
    struct managed *m = find(p);
    for (size_t i = m ? (p - m->start) / CHUNK : 0; m && i < m->chunks && chunk_at(m, i) < p + n; i++) {
        const struct advice *a = &m->advice[i];
        accessed &= a->accessed_by, read_mostly &= a->read_mostly;
        preferred = first || preferred == a->preferred ? a->preferred : -2;
        prefetched = first || prefetched == a->prefetched ? a->prefetched : -2;
        first = 0;
    }
    give();
    int32_t *out = data, where = attr == CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION ||
                                 attr == CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_TYPE ||
                                 attr == CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_ID ? preferred : prefetched;
    switch (attr) {
    case CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY:
        *out = read_mostly;
        break;
    case CU_MEM_RANGE_ATTRIBUTE_ACCESSED_BY: { /* (the devices in order, then the host; the rest none) */
        size_t k = 0;
        for (int d = 0; d < 64 && k < size / 4; d++)
            if (accessed & (1ull << (d < 63 ? d : 63)))
                out[k++] = d < 63 ? d : CU_DEVICE_CPU;
        while (k < size / 4)
            out[k++] = CU_DEVICE_INVALID;
        break;
    }
    case CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION:
    case CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION:
        *out = where == -1 ? CU_DEVICE_CPU : where == -2 ? CU_DEVICE_INVALID : where;
        break;
    case CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_TYPE:
    case CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION_TYPE:
        *out = where == -1 ? CU_MEM_LOCATION_TYPE_HOST : where == -2 ? CU_MEM_LOCATION_TYPE_INVALID
                                                                      : CU_MEM_LOCATION_TYPE_DEVICE;
        break;
    default: /* the _ID forms: a device's ordinal; the host's and none's id is not defined (CU_DEVICE_INVALID) */
        *out = where >= 0 ? where : CU_DEVICE_INVALID;
        break;
    }
    return CUDA_SUCCESS;
}

API CUresult cuMemRangeGetAttribute(void *data, size_t size, CUmem_range_attribute attr, CUdeviceptr p, size_t n)
{
    return range_attribute(data, size, attr, p, n);
}

API CUresult cuMemRangeGetAttributes(void **data, size_t *sizes, CUmem_range_attribute *attrs, size_t count,
                                     CUdeviceptr p, size_t n)
{
    if (!data || !sizes || !attrs || !count)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = CUDA_SUCCESS;
    for (size_t i = 0; i < count && r == CUDA_SUCCESS; i++)
        r = range_attribute(data[i], sizes[i], attrs[i], p, n);
    return r;
}

/* Every request settles all managed memory, so attaching to one stream changes nothing here. The length is 0
 * (the whole allocation) or the allocation's size, from its start. */
API CUresult cuStreamAttachMemAsync(CUstream s, CUdeviceptr p, size_t n, unsigned int flags)
{
    (void)s;
    uint64_t start, size;
    if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST && flags != CU_MEM_ATTACH_SINGLE)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = rgpu_ready();
    if (r != CUDA_SUCCESS)
        return r;
    if (rgpu_managed_range(p, &start, &size) || (n && (p != start || n != size)))
        return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}
API CUresult cuStreamAttachMemAsync_ptsz(CUstream s, CUdeviceptr p, size_t n, unsigned int flags)
{
    return cuStreamAttachMemAsync(s, p, n, flags);
}

/* What a device offers of managed memory here (see the top of this file). */
void rgpu_managed_offered(int32_t *attrs)
{
    attrs[CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY] = 1;
    attrs[CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS] = 0;
    attrs[CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS] = 0;
    attrs[CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES] = 0;
    attrs[CU_DEVICE_ATTRIBUTE_DIRECT_MANAGED_MEM_ACCESS_FROM_HOST] = 0;
}
