/* User objects (cuUserObjectCreate and friends): a program's resource whose lifetime follows the graphs and
 * executable graphs that hold references to it. Nothing of it reaches the server -- the references and the
 * destructor are the program's own -- so it lives here whole:
 *   - an object's count is the references the program and every holder (a graph or exec) have;
 *   - an exec instantiated from a graph holds copies of what the graph, its nodes and the graphs they own (bodies,
 *     moved children) hold, and takes the new graph's at an update; a clone copies them node by node; a child
 *     graph node holds copies of its child's;
 *   - a holder's references go when it is destroyed (a node's with the node or its graph; an exec's once the
 *     context's work is done, as CUDA lets them go once the exec's last launch has finished).
 * At zero the destructor runs on one shared thread of this library, as CUDA's runs on an internal thread: it may
 * not call CUDA, and nothing waits for it (CU_USER_OBJECT_NO_DESTRUCTOR_SYNC, the one flag CUDA defines).
 * Handles are checked against the objects this side made, so a stale or invented one is INVALID_VALUE. */
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include "graph.h"
#include "quiet_thread.h"
#include "rgpu_shim.h"

#define API __attribute__((visibility("default")))

struct user_object {
    uint64_t id; /* the program's handle: never an address, so a stale one never names a new object */
    void *ptr;
    CUhostFn destroy;
    unsigned long long refs;
    struct user_object *next;
};

struct holding { /* references a graph or exec holds to one object */
    uint64_t holder;
    struct user_object *object;
    unsigned long long count;
    struct holding *next;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
RGPU_FORK_RESET(user_objects_lock, &lock)
static struct user_object *objects;
static struct holding *holdings;
static uint64_t next_id = 1;

/* -- the destructor thread ------------------------------------------------------------------------------------ */
static pthread_mutex_t queue_lock = PTHREAD_MUTEX_INITIALIZER;
RGPU_FORK_RESET(user_object_queue_lock, &queue_lock)
static pthread_cond_t queue_ready = PTHREAD_COND_INITIALIZER;
static struct user_object *queue; /* objects at zero, destructors not yet run */
static int worker_started;

static void *destructor_thread(void *arg)
{
    (void)arg;
    for (;;) {
        pthread_mutex_lock(&queue_lock);
        while (!queue)
            pthread_cond_wait(&queue_ready, &queue_lock);
        struct user_object *o = queue;
        queue = o->next;
        pthread_mutex_unlock(&queue_lock);
        o->destroy(o->ptr);
        free(o);
    }
    return NULL;
}

static void forked_child(void) /* the thread stayed with the parent, and its destructors are the parent's to run */
{
    worker_started = 0;
    queue = NULL;
}
static void watch_forks(void) { pthread_atfork(NULL, NULL, forked_child); }

static void queue_destructor(struct user_object *o) /* o is out of every table */
{
    pthread_mutex_lock(&queue_lock);
    o->next = queue;
    queue = o;
    if (!worker_started) {
        static pthread_once_t once = PTHREAD_ONCE_INIT;
        pthread_once(&once, watch_forks);
        if (rgpu_quiet_thread(NULL, 1, destructor_thread, NULL) == 0)
            worker_started = 1;
        else
            rgpu_log(RGPU_LOG_WARN, "user objects: cannot start the destructor thread; destructors wait for it");
    }
    pthread_cond_signal(&queue_ready);
    pthread_mutex_unlock(&queue_lock);
}

/* -- references ------------------------------------------------------------------------------------------------- */
static struct user_object *find(CUuserObject h) /* under lock: one of ours, or NULL (never dereferenced first) */
{
    for (struct user_object *o = objects; o; o = o->next)
        if (o->id == (uint64_t)(uintptr_t)h)
            return o;
    return NULL;
}

/* Under lock: count references of o go; at zero it leaves the table and its destructor is queued (after the lock,
 * by the caller: *dead). */
static void drop(struct user_object *o, unsigned long long count, struct user_object **dead)
{
    o->refs -= count < o->refs ? count : o->refs; /* (a program that released what it did not own: zero, not a wrap) */
    if (o->refs)
        return;
    for (struct user_object **p = &objects; *p; p = &(*p)->next)
        if (*p == o) {
            *p = o->next;
            break;
        }
    for (struct holding **p = &holdings; *p;) { /* (holdings of it are all at zero now) */
        struct holding *h = *p;
        if (h->object == o) {
            *p = h->next;
            free(h);
        } else {
            p = &h->next;
        }
    }
    o->next = *dead;
    *dead = o;
}

static void run_dead(struct user_object *dead)
{
    while (dead) {
        struct user_object *o = dead;
        dead = o->next;
        queue_destructor(o);
    }
}

static struct holding *holding_of(uint64_t holder, struct user_object *o) /* under lock */
{
    for (struct holding *h = holdings; h; h = h->next)
        if (h->holder == holder && h->object == o)
            return h;
    return NULL;
}

static int hold(uint64_t holder, struct user_object *o, unsigned long long count) /* under lock; 0: no memory */
{
    struct holding *h = holding_of(holder, o);
    if (!h) {
        if (!(h = calloc(1, sizeof *h)))
            return 0;
        *h = (struct holding){holder, o, 0, holdings};
        holdings = h;
    }
    h->count += count;
    return 1;
}

static int valid_count(unsigned int count) { return count > 0 && count <= INT_MAX; }

API CUresult cuUserObjectCreate(CUuserObject *out, void *ptr, CUhostFn destroy, unsigned int refs, unsigned int flags)
{
    if (!out || !destroy || !valid_count(refs) || flags != CU_USER_OBJECT_NO_DESTRUCTOR_SYNC)
        return CUDA_ERROR_INVALID_VALUE;
    struct user_object *o = calloc(1, sizeof *o);
    if (!o)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *o = (struct user_object){0, ptr, destroy, refs, NULL};
    pthread_mutex_lock(&lock);
    o->id = next_id++;
    o->next = objects;
    objects = o;
    *out = (CUuserObject)(uintptr_t)o->id;
    pthread_mutex_unlock(&lock);
    return CUDA_SUCCESS;
}

API CUresult cuUserObjectRetain(CUuserObject h, unsigned int count)
{
    if (!valid_count(count))
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    struct user_object *o = find(h);
    if (o)
        o->refs += count;
    pthread_mutex_unlock(&lock);
    return o ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

API CUresult cuUserObjectRelease(CUuserObject h, unsigned int count)
{
    struct user_object *dead = NULL;
    if (!valid_count(count))
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    struct user_object *o = find(h);
    int ok = o && o->refs >= count; /* (more than all there are: the program's mistake, refused) */
    if (ok)
        drop(o, count, &dead);
    pthread_mutex_unlock(&lock);
    run_dead(dead);
    return ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

API CUresult cuGraphRetainUserObject(CUgraph g, CUuserObject h, unsigned int count, unsigned int flags)
{
    if (!valid_count(count) || (flags & ~(unsigned)CU_GRAPH_USER_OBJECT_MOVE) ||
        !rgpu_graph_is_live((uint64_t)(uintptr_t)g, KIND_GRAPH))
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    struct user_object *o = find(h);
    int moved = flags & CU_GRAPH_USER_OBJECT_MOVE;
    CUresult r = !o || (moved && o->refs < count) ? CUDA_ERROR_INVALID_VALUE
                 : hold((uint64_t)(uintptr_t)g, o, count) ? CUDA_SUCCESS
                                                          : CUDA_ERROR_OUT_OF_MEMORY;
    if (r == CUDA_SUCCESS && !moved) /* new references; moved ones were the caller's, already counted */
        o->refs += count;
    pthread_mutex_unlock(&lock);
    return r;
}

API CUresult cuGraphReleaseUserObject(CUgraph g, CUuserObject h, unsigned int count)
{
    struct user_object *dead = NULL;
    if (!valid_count(count))
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    struct user_object *o = find(h);
    struct holding *held = o ? holding_of((uint64_t)(uintptr_t)g, o) : NULL;
    int ok = held && held->count >= count;
    if (ok) {
        held->count -= count;
        drop(o, count, &dead);
    }
    pthread_mutex_unlock(&lock);
    run_dead(dead);
    return ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* -- holders made and destroyed (graph.c, graph_nodes.c) --------------------------------------------------------- */
int rgpu_user_objects_held(uint64_t holder)
{
    int held = 0;
    pthread_mutex_lock(&lock);
    for (struct holding *h = holdings; h && !held; h = h->next)
        held = h->holder == holder && h->count;
    pthread_mutex_unlock(&lock);
    return held;
}

CUresult rgpu_user_objects_copy(uint64_t from, uint64_t to)
{
    CUresult r = CUDA_SUCCESS;
    pthread_mutex_lock(&lock);
    for (struct holding *h = holdings; h && r == CUDA_SUCCESS; h = h->next)
        if (h->holder == from && h->count) {
            if (hold(to, h->object, h->count))
                h->object->refs += h->count;
            else
                r = CUDA_ERROR_OUT_OF_MEMORY;
        }
    pthread_mutex_unlock(&lock);
    return r;
}

void rgpu_user_objects_release(uint64_t holder)
{
    struct user_object *dead = NULL;
    struct holding *mine = NULL;
    pthread_mutex_lock(&lock);
    for (struct holding **p = &holdings; *p;) { /* out of the list first: drop() walks it */
        struct holding *h = *p;
        if (h->holder == holder) {
            *p = h->next;
            h->next = mine;
            mine = h;
        } else {
            p = &h->next;
        }
    }
    while (mine) {
        struct holding *h = mine;
        mine = h->next;
        if (h->count)
            drop(h->object, h->count, &dead);
        free(h);
    }
    pthread_mutex_unlock(&lock);
    run_dead(dead);
}
