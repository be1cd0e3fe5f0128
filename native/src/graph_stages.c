/* Executable graphs with nodes the client runs (host nodes, copies of host memory: graph_host.c), in stages.
 *
 * At instantiation every node gets the number of client-run nodes it must wait for along its longest path; the
 * nodes of one number that the server runs form one stage (a server exec with a handle minted here,
 * GRAPH_INSTANTIATE_PART), and the client-run nodes go between the stages they separate. cuGraphLaunch of such
 * an exec launches stage 1, waits for the stream, runs the host functions (and copies) that follow it on the
 * calling thread, launches stage 2, and so on. A graph without such nodes is untouched: one deferred
 * GRAPH_LAUNCH, as ever.
 *
 * Limits (docs/protocol.md, "Graphs, host nodes"): the launch of a graph with host nodes blocks the calling
 * thread until its last host function has run (natively it returns at once and a driver thread runs them), and
 * costs a round trip per stage; nodes parallel to a host node are serialized around it (a stage ends where any
 * host node begins); cuGraphExecUpdate of such a graph fails with CU_GRAPH_EXEC_UPDATE_ERROR_NOT_SUPPORTED
 * (instantiate it again); a stage of more than 4096 nodes is not supported. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "graph.h"
#include "graph_mirror.h"
#include "rgpu_consts.h"
#include "rgpu_shim.h"

#define API __attribute__((visibility("default")))
#define MAX_STAGE_NODES 4096 /* the server's limit on the nodes of one GRAPH_INSTANTIATE_PART */

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
RGPU_FORK_RESET(lock, &lock)

struct step {
    uint64_t exec; /* a stage to launch; 0: a node the client runs (a host function, or a copy) */
    uint64_t node;
    CUDA_HOST_NODE_PARAMS host; /* fn NULL: the copy */
    CUDA_MEMCPY3D copy;
};

struct staged {
    uint64_t exec;
    size_t n_steps, n_members;
    struct step *steps;
    uint64_t (*members)[2]; /* (graph node, the stage exec it is in) */
    struct staged *next;
};

static struct staged *staged_execs;
static int n_staged; /* launches of plain execs skip the list while it is 0 */

static void staged_free(struct staged *x)
{
    if (x) {
        free(x->steps);
        free(x->members);
        free(x);
    }
}

static struct staged *staged_find(uint64_t exe) /* under lock */
{
    struct staged *x = staged_execs;
    while (x && x->exec != exe)
        x = x->next;
    return x;
}

int rgpu_is_staged(uint64_t exe)
{
    if (!__atomic_load_n(&n_staged, __ATOMIC_ACQUIRE))
        return 0;
    pthread_mutex_lock(&lock);
    int found = staged_find(exe) != NULL;
    pthread_mutex_unlock(&lock);
    return found;
}

struct keyed {
    uint64_t handle;
    size_t index;
};

static int by_handle(const void *a, const void *b)
{
    uint64_t x = ((const struct keyed *)a)->handle, y = ((const struct keyed *)b)->handle;
    return x < y ? -1 : x > y;
}

static size_t index_of(const struct keyed *sorted, size_t n, uint64_t handle) /* n: not in the graph */
{
    struct keyed key = {handle, 0}, *hit = bsearch(&key, sorted, n, sizeof *sorted, by_handle);
    return hit ? hit->index : n;
}

/* The plan of graph g's exec (under the mirror lock): a topological order and, per node, its level (how many
 * host nodes lie before it on its longest path; a host node's own level is the stage it follows). */
static CUresult plan(struct gnode **members, size_t n, size_t *order, unsigned *level)
{
    struct keyed *sorted = malloc((n + 1) * sizeof *sorted);
    size_t *waiting = calloc(n + 1, sizeof *waiting), done = 0, head = 0;
    size_t **deps = calloc(n + 1, sizeof *deps);
    CUresult r = sorted && waiting && deps ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
    if (r == CUDA_SUCCESS) {
        for (size_t i = 0; i < n; i++)
            sorted[i] = (struct keyed){members[i]->handle, i};
        qsort(sorted, n, sizeof *sorted, by_handle);
    }
    for (size_t i = 0; i < n && r == CUDA_SUCCESS; i++) {
        if (!(deps[i] = malloc((members[i]->n_deps + 1) * sizeof **deps))) {
            r = CUDA_ERROR_OUT_OF_MEMORY;
            break;
        }
        for (size_t k = 0; k < members[i]->n_deps; k++)
            deps[i][k] = index_of(sorted, n, members[i]->deps[k]);
        waiting[i] = members[i]->n_deps;
    }
    for (size_t i = 0; i < n && r == CUDA_SUCCESS; i++) /* Kahn's order, roots in the order they were added */
        if (!waiting[i])
            order[done++] = i;
    while (r == CUDA_SUCCESS && head < done) {
        size_t v = order[head++];
        for (size_t u = 0; u < n; u++)
            for (size_t k = 0; k < members[u]->n_deps; k++)
                if (deps[u][k] == v && !--waiting[u])
                    order[done++] = u;
    }
    if (r == CUDA_SUCCESS && done != n)
        r = CUDA_ERROR_INVALID_VALUE; /* a cycle, or an edge from a node of another graph */
    for (size_t i = 0; i < n && r == CUDA_SUCCESS; i++) {
        size_t v = order[i];
        int host = rgpu_node_on_client(members[v]);
        level[v] = 0;
        for (size_t k = 0; k < members[v]->n_deps; k++) {
            size_t d = deps[v][k];
            unsigned l = level[d] + (rgpu_node_on_client(members[d]) && !host);
            if (l > level[v])
                level[v] = l;
        }
    }
    for (size_t i = 0; deps && i < n; i++)
        free(deps[i]);
    free(deps);
    free(waiting);
    free(sorted);
    return r;
}

/* The stages and steps of graph g's exec from its plan (under the mirror lock); stage execs minted, not sent. */
static CUresult cut(struct staged *x, struct gnode **members, size_t n, const size_t *order, const unsigned *level)
{
    unsigned top = 0;
    for (size_t i = 0; i < n; i++)
        top = level[i] > top ? level[i] : top;
    x->steps = calloc(2 * n + 1, sizeof *x->steps);
    x->members = calloc(n + 1, sizeof *x->members);
    if (!x->steps || !x->members)
        return CUDA_ERROR_OUT_OF_MEMORY;
    for (unsigned l = 0; l <= top; l++) {
        uint64_t stage = 0;
        for (size_t i = 0; i < n; i++) {
            struct gnode *m = members[order[i]];
            if (level[order[i]] != l || rgpu_node_on_client(m))
                continue;
            if (!stage) {
                stage = rgpu_graph_mint(KIND_GRAPH_EXEC);
                x->steps[x->n_steps++] = (struct step){.exec = stage};
            }
            x->members[x->n_members][0] = m->handle;
            x->members[x->n_members++][1] = stage;
        }
        for (size_t i = 0; i < n; i++) {
            struct gnode *m = members[order[i]];
            if (level[order[i]] == l && rgpu_node_on_client(m))
                x->steps[x->n_steps++] = (struct step){0, m->handle, m->client ? (CUDA_HOST_NODE_PARAMS){0} : m->host,
                                                       m->memcpy};
        }
    }
    return CUDA_SUCCESS;
}

static void destroy_stages(const struct staged *x, size_t upto) /* the first `upto` steps' stage execs */
{
    for (size_t i = 0; i < upto; i++)
        if (x->steps[i].exec) {
            uint8_t a[RGPU_GRAPH_EXEC_DESTROY_REQ_SIZE];
            rgpu_pack_graph_exec_destroy(a, &(struct rgpu_graph_exec_destroy_req){x->steps[i].exec});
            rgpu_defer(RGPU_OP_GRAPH_EXEC_DESTROY, a, sizeof a, NULL, 0);
        }
}

/* Each stage to the server: the handles of its nodes. */
static CUresult send_stages(const struct staged *x, uint64_t g, unsigned long long flags, size_t *sent)
{
    static int logged, old_logged;
    *sent = 0;
    CUresult old = rgpu_need_protocol(5, &old_logged, "graphs with host nodes");
    if (old != CUDA_SUCCESS)
        return old;
    uint8_t *bulk = malloc(8 * x->n_members + 1);
    CUresult r = bulk ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
    for (*sent = 0; *sent < x->n_steps && r == CUDA_SUCCESS; ++*sent) {
        uint64_t stage = x->steps[*sent].exec;
        uint32_t count = 0;
        for (size_t i = 0; stage && i < x->n_members; i++)
            if (x->members[i][1] == stage)
                rgpu_put_u64(bulk + 8 * count++, x->members[i][0]);
        if (count > MAX_STAGE_NODES) {
            r = rgpu_unsupported(&logged, "a stage of more than 4096 nodes in a graph with host nodes");
            break;
        }
        if (!stage)
            continue;
        uint8_t a[RGPU_GRAPH_INSTANTIATE_PART_REQ_SIZE];
        rgpu_pack_graph_instantiate_part(a, &(struct rgpu_graph_instantiate_part_req){g, stage, flags, count});
        r = rgpu_defer(RGPU_OP_GRAPH_INSTANTIATE_PART, a, sizeof a, bulk, 8 * (size_t)count);
    }
    free(bulk);
    return r;
}

CUresult rgpu_staged_instantiate(CUgraph g, unsigned long long flags, uint64_t exe)
{
    struct staged *x = calloc(1, sizeof *x);
    if (!x)
        return CUDA_ERROR_OUT_OF_MEMORY;
    x->exec = exe;
    pthread_mutex_lock(&rgpu_graph_nodes_lock);
    size_t n = rgpu_graph_members(H(g), NULL, 0);
    struct gnode **members = malloc((n + 1) * sizeof *members);
    size_t *order = malloc((n + 1) * sizeof *order);
    unsigned *level = malloc((n + 1) * sizeof *level);
    CUresult r = members && order && level ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
    if (r == CUDA_SUCCESS) {
        rgpu_graph_members(H(g), members, n);
        r = plan(members, n, order, level);
    }
    if (r == CUDA_SUCCESS)
        r = cut(x, members, n, order, level);
    pthread_mutex_unlock(&rgpu_graph_nodes_lock);
    free(members);
    free(order);
    free(level);
    size_t sent = 0;
    if (r == CUDA_SUCCESS && (r = send_stages(x, H(g), flags, &sent)) != CUDA_SUCCESS)
        destroy_stages(x, sent);
    if (r != CUDA_SUCCESS) {
        staged_free(x);
        return r;
    }
    pthread_mutex_lock(&lock);
    x->next = staged_execs;
    staged_execs = x;
    __atomic_add_fetch(&n_staged, 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&lock);
    return CUDA_SUCCESS;
}

static CUresult run_steps(uint16_t op, const struct step *steps, size_t n, CUstream s)
{
    uint64_t stream = rgpu_stream_handle(s);
    CUresult r = CUDA_SUCCESS;
    int pending = 1; /* work on the stream that a host function must wait for: what came before the launch */
    for (size_t i = 0; i < n && r == CUDA_SUCCESS; i++) {
        if (steps[i].exec) {
            uint8_t a[RGPU_GRAPH_LAUNCH_REQ_SIZE];
            rgpu_pack_graph_launch(a, &(struct rgpu_graph_launch_req){steps[i].exec, stream});
            r = rgpu_defer(op, a, sizeof a, NULL, 0);
            pending = 1;
        } else if (op == RGPU_OP_GRAPH_LAUNCH && !steps[i].host.fn) {
            r = rgpu_client_copy(&steps[i].copy, s); /* in stream order, after the work before it */
            pending = 1;
        } else if (op == RGPU_OP_GRAPH_LAUNCH) {
            if (pending && (r = cuStreamSynchronize(s)) != CUDA_SUCCESS)
                break;
            pending = 0;
            steps[i].host.fn(steps[i].host.userData);
        }
    }
    return r;
}

int rgpu_staged_run(uint16_t op, uint64_t exe, CUstream s, CUresult *r)
{
    if (!__atomic_load_n(&n_staged, __ATOMIC_ACQUIRE))
        return 0;
    pthread_mutex_lock(&lock);
    struct staged *x = staged_find(exe);
    size_t n = x ? x->n_steps : 0;
    struct step *steps = x ? malloc((n + 1) * sizeof *steps) : NULL;
    if (steps) /* a copy: a host function may set parameters or destroy the exec */
        memcpy(steps, x->steps, n * sizeof *steps);
    pthread_mutex_unlock(&lock);
    if (!x)
        return 0;
    *r = !steps ? CUDA_ERROR_OUT_OF_MEMORY
         : op == RGPU_OP_GRAPH_LAUNCH ? rgpu_capture_refuse(s, "launching a graph with host nodes")
                                      : CUDA_SUCCESS;
    if (*r == CUDA_SUCCESS)
        *r = run_steps(op, steps, n, s);
    free(steps);
    return 1;
}

int rgpu_staged_destroy(uint64_t exe)
{
    if (!__atomic_load_n(&n_staged, __ATOMIC_ACQUIRE))
        return 0;
    pthread_mutex_lock(&lock);
    struct staged **p = &staged_execs;
    while (*p && (*p)->exec != exe)
        p = &(*p)->next;
    struct staged *x = *p;
    if (x) {
        *p = x->next;
        __atomic_sub_fetch(&n_staged, 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&lock);
    if (!x)
        return 0;
    destroy_stages(x, x->n_steps);
    staged_free(x);
    return 1;
}

uint64_t rgpu_exec_target(uint64_t exe, uint64_t node)
{
    if (!__atomic_load_n(&n_staged, __ATOMIC_ACQUIRE))
        return exe;
    pthread_mutex_lock(&lock);
    struct staged *x = staged_find(exe);
    uint64_t target = x ? 0 : exe;
    for (size_t i = 0; x && i < x->n_members; i++)
        if (x->members[i][0] == node)
            target = x->members[i][1];
    pthread_mutex_unlock(&lock);
    return target;
}

API CUresult cuGraphExecHostNodeSetParams(CUgraphExec e, CUgraphNode h, const CUDA_HOST_NODE_PARAMS *p)
{
    if (!p || !p->fn || !rgpu_graph_is_live(H(e), KIND_GRAPH_EXEC))
        return CUDA_ERROR_INVALID_VALUE;
    int found = 0;
    pthread_mutex_lock(&lock);
    struct staged *x = staged_find(H(e));
    for (size_t i = 0; x && i < x->n_steps; i++)
        if (!x->steps[i].exec && x->steps[i].host.fn && x->steps[i].node == H(h))
            x->steps[i].host = *p, found = 1;
    pthread_mutex_unlock(&lock);
    return found ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE; /* an exec without host nodes has none to set */
}

CUresult rgpu_exec_set_copy(uint64_t exe, uint64_t node, const CUDA_MEMCPY3D *m)
{
    int found = 0;
    pthread_mutex_lock(&lock);
    struct staged *x = staged_find(exe);
    for (size_t i = 0; x && i < x->n_steps; i++)
        if (!x->steps[i].exec && !x->steps[i].host.fn && x->steps[i].node == node)
            x->steps[i].copy = *m, found = 1;
    pthread_mutex_unlock(&lock);
    return found ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
