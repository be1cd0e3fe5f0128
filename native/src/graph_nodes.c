/* The explicit graph API in the driver shim: the mirror and the graph's structure (kernel, memset and memcpy
 * nodes are graph_params.c's). Every node is built in the mirror first: the shim keeps a mirror of each graph made
 * with cuGraphCreate (or cloned from one) -- nodes, types, parameters, edges -- so queries need no round trip,
 * and each change goes to the server as one deferred call with a handle minted here.
 *
 * A graph that came from stream capture is mirrored on first use, from one GRAPH_GET_NODES round trip.
 *
 * Host nodes are mirror nodes the client runs (graph_host.c): the server has an empty node in their place.
 *
 * Memcpy nodes with host memory are run by the client too (graph_host.c).
 *
 * Memory allocation nodes get their address from the server (one round trip); the memory counts against the
 * session's quota while the graph or an exec made from it lives (docs/protocol.md, "Graph memory").
 *
 * Limits: a child graph with host nodes, copies of host memory or memory nodes is not supported; nor are cloning
 * a graph with memory nodes and destroying a memory node. */
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "graph.h"
#include "graph_mirror.h"
#include "rgpu_consts.h"
#include "rgpu_shim.h"

#define API __attribute__((visibility("default")))
pthread_mutex_t rgpu_graph_nodes_lock = PTHREAD_MUTEX_INITIALIZER;
RGPU_FORK_RESET(graph_nodes_lock, &rgpu_graph_nodes_lock)
static struct gnode *nodes; /* newest first */
#define MAX_MIRRORED 1024
static uint64_t mirrored[MAX_MIRRORED]; /* graphs whose nodes this side knows */
static unsigned char grown[MAX_MIRRORED]; /* ... but for nodes a capture into it added on the server */

static int mirror_slot(uint64_t g) /* under lock */
{
    for (int i = 0; i < MAX_MIRRORED; i++)
        if (mirrored[i] == g)
            return i;
    return -1;
}

struct gnode *rgpu_node_find(uint64_t h) /* under the lock */
{
    for (struct gnode *n = nodes; n; n = n->next)
        if (n->handle == h)
            return n;
    return NULL;
}


void rgpu_node_forget_bodies(struct gnode *n)
{
    for (unsigned i = 0; i < n->n_bodies; i++)
        if (n->bodies[i]) { /* (a node whose making failed part way has empty places) */
            rgpu_graph_live_drop(H(n->bodies[i]));
            rgpu_graph_forget(H(n->bodies[i]));
        }
}

void rgpu_graph_forget(uint64_t graph)
{
    struct gnode *gone = NULL;
    pthread_mutex_lock(&rgpu_graph_nodes_lock);
    int i = mirror_slot(graph);
    if (i >= 0)
        mirrored[i] = 0, grown[i] = 0; /* (the slot's next graph starts with a mirror of its own) */
    for (struct gnode **p = &nodes; *p;) {
        struct gnode *n = *p;
        if (n->graph == graph) {
            *p = n->next;
            if (n->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC) /* no more device memory here, for copies' routing */
                rgpu_ranges_drop_device_within(n->object, 1);
            n->next = gone;
            gone = n;
        } else {
            p = &n->next;
        }
    }
    pthread_mutex_unlock(&rgpu_graph_nodes_lock);
    while (gone) {
        struct gnode *n = gone;
        gone = n->next;
        rgpu_node_forget_bodies(n);
        rgpu_user_objects_release(n->handle);
        rgpu_node_free(n);
    }
    rgpu_host_forget(graph);
    rgpu_user_objects_release(graph);
}

/* Under the lock: the holders of user-object references that come with graph g (or node `node` of it) when it is
 * instantiated or cloned -- the graph, its nodes (a child graph node holds its copy's references), and the graphs
 * its nodes own, with theirs -- into out[cap] from index n; returns how many there are. */
static size_t holders_of_node(const struct gnode *x, uint64_t *out, size_t cap, size_t n);
static size_t holders_within(uint64_t g, uint64_t *out, size_t cap, size_t n)
{
    if (n < cap)
        out[n] = g;
    n++;
    for (struct gnode *x = nodes; x; x = x->next)
        if (x->graph == g)
            n = holders_of_node(x, out, cap, n);
    return n;
}

static size_t holders_of_node(const struct gnode *x, uint64_t *out, size_t cap, size_t n)
{
    if (n < cap)
        out[n] = x->handle;
    n++;
    for (unsigned i = 0; i < x->n_bodies; i++)
        n = holders_within(H(x->bodies[i]), out, cap, n);
    return n;
}

/* to takes copies of the references of graph g and what comes with it (node: of that node instead, if it is
 * still there). */
static CUresult hold_within(uint64_t g, uint64_t node, uint64_t to)
{
    pthread_mutex_lock(&rgpu_graph_nodes_lock);
    struct gnode *x = node ? rgpu_node_find(node) : NULL;
    size_t n = node ? (x ? holders_of_node(x, NULL, 0, 0) : 0) : holders_within(g, NULL, 0, 0);
    uint64_t *holders = malloc((n ? n : 1) * sizeof *holders);
    if (holders)
        n = node ? (x ? holders_of_node(x, holders, n, 0) : 0) : holders_within(g, holders, n, 0);
    pthread_mutex_unlock(&rgpu_graph_nodes_lock);
    CUresult r = holders ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
    for (size_t i = 0; i < n && r == CUDA_SUCCESS && holders; i++)
        r = rgpu_user_objects_copy(holders[i], to);
    free(holders);
    return r;
}

CUresult rgpu_graph_hold_within(uint64_t g, uint64_t to) { return hold_within(g, 0, to); }

void rgpu_graph_grew(uint64_t graph)
{
    pthread_mutex_lock(&rgpu_graph_nodes_lock);
    int i = mirror_slot(graph);
    if (i >= 0)
        grown[i] = 1;
    pthread_mutex_unlock(&rgpu_graph_nodes_lock);
}

/* One node record of GRAPH_GET_NODES at in[*off..len) -> a mirror node of graph g (NULL: malformed). */
static struct gnode *node_from_record(uint64_t g, const uint8_t *in, size_t len, size_t *off)
{
    struct rgpu_graph_node_info_rep rec;
    if (len - *off < RGPU_GRAPH_NODE_INFO_REP_SIZE ||
        rgpu_unpack_graph_node_info(in + *off, RGPU_GRAPH_NODE_INFO_REP_SIZE, &rec) < 0)
        return NULL;
    *off += RGPU_GRAPH_NODE_INFO_REP_SIZE;
    if (rec.params > MAX_PARAMS || (len - *off) / 8 < rec.deps || len - *off - 8 * (size_t)rec.deps < rec.params)
        return NULL;
    struct gnode *n = calloc(1, sizeof *n);
    if (!n || !(n->deps = calloc(rec.deps ? rec.deps : 1, sizeof *n->deps))) {
        free(n);
        return NULL;
    }
    n->handle = rec.node, n->graph = g, n->type = (CUgraphNodeType)rec.type, n->n_deps = rec.deps;
    for (uint32_t i = 0; i < rec.deps; i++, *off += 8)
        n->deps[i] = rgpu_get_u64(in + *off);
    memcpy(n->params, in + *off, rec.params);
    *off += rec.params;
    n->n_params = rec.params;
    n->func = rgpu_function_by_handle(rec.function); /* NULL: a library's kernel, as natively unknown */
    unsigned dims[7] = {rec.grid_x, rec.grid_y, rec.grid_z, rec.block_x, rec.block_y, rec.block_z, rec.shared_mem};
    memcpy(n->dims, dims, sizeof dims);
    size_t po, ps;
    for (unsigned i = 0; n->func && i < 64 && cuFuncGetParamInfo(n->func, i, &po, &ps) == CUDA_SUCCESS; i++)
        n->param_ptrs[i] = po + ps <= n->n_params ? n->params + po : NULL;
    n->memset = (CUDA_MEMSET_NODE_PARAMS){rec.dst, rec.dst_pitch, rec.value, rec.element_size, rec.width,
                                          rec.height};
    n->memcpy.srcMemoryType = n->memcpy.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    n->memcpy.srcDevice = rec.src, n->memcpy.srcPitch = rec.src_pitch;
    n->memcpy.dstDevice = rec.dst, n->memcpy.dstPitch = rec.dst_pitch;
    n->memcpy.WidthInBytes = rec.width, n->memcpy.Height = rec.height, n->memcpy.Depth = 1;
    n->object = rec.object;
    rgpu_host_claim(n);
    return n;
}

/* A graph from stream capture: its nodes live on the server; fetch them once (one round trip) and mirror them,
 * so the explicit API works on it too. */
static CUresult fetch_mirror(uint64_t g)
{
    size_t cap = 1 << 20;
    for (int attempt = 0; attempt < 2; attempt++) {
        uint8_t a[RGPU_GRAPH_GET_NODES_REQ_SIZE], rep[RGPU_GRAPH_GET_NODES_REP_SIZE], *buf = malloc(cap);
        struct rgpu_sink sink = {buf, cap, 0};
        struct rgpu_graph_get_nodes_rep out;
        if (!buf)
            return CUDA_ERROR_OUT_OF_MEMORY;
        rgpu_pack_graph_get_nodes(a, &(struct rgpu_graph_get_nodes_req){g});
        CUresult r = rgpu_call(RGPU_OP_GRAPH_GET_NODES, a, sizeof a, NULL, 0, rep, sizeof rep, &sink);
        if (r == CUDA_SUCCESS && sink.len > cap) { /* larger than guessed: ask again for all of it */
            free(buf);
            cap = sink.len;
            continue;
        }
        if (r == CUDA_SUCCESS && rgpu_unpack_graph_get_nodes(rep, sizeof rep, &out) < 0)
            r = rgpu_bad_reply(RGPU_OP_GRAPH_GET_NODES, "reply of the wrong size");
        struct gnode *got = NULL, **tail = &got;
        size_t off = 0;
        for (uint32_t i = 0; r == CUDA_SUCCESS && i < out.count; i++) {
            struct gnode *n = node_from_record(g, buf, sink.len, &off);
            if (!n)
                r = rgpu_bad_reply(RGPU_OP_GRAPH_GET_NODES, "node records shorter than their count");
            else
                *tail = n, tail = &n->next;
        }
        if (r == CUDA_SUCCESS && off != sink.len)
            r = rgpu_bad_reply(RGPU_OP_GRAPH_GET_NODES, "bytes past its node records");
        free(buf);
        struct gnode *known = NULL;
        pthread_mutex_lock(&rgpu_graph_nodes_lock);
        int slot = r == CUDA_SUCCESS ? mirror_slot(g) : -1;
        if (r == CUDA_SUCCESS && slot < 0 && (slot = mirror_slot(0)) >= 0)
            mirrored[slot] = g;
        if (slot >= 0) {
            grown[slot] = 0;
            while (got) { /* oldest first onto a newest-first list: the graph lists in the server's order */
                struct gnode *n = got;
                got = n->next;
                if (rgpu_node_find(n->handle)) { /* a mirrored graph that grew: it has this one (or another fetch) */
                    n->next = known;
                    known = n;
                    continue;
                }
                n->next = nodes;
                nodes = n;
            }
        }
        pthread_mutex_unlock(&rgpu_graph_nodes_lock);
        for (struct gnode *lists[2] = {got, known}, **l = lists; l < lists + 2; l++)
            while (*l) {
                struct gnode *n = *l;
                *l = n->next;
                rgpu_node_free(n);
            }
        return r != CUDA_SUCCESS ? r : slot < 0 ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_SUCCESS;
    }
    return rgpu_bad_reply(RGPU_OP_GRAPH_GET_NODES, "the node records outgrew the size they announced");
}

static CUresult mirrored_graph(CUgraph g) /* INVALID_VALUE for no graph */
{
    if (!rgpu_graph_is_live(H(g), KIND_GRAPH))
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&rgpu_graph_nodes_lock);
    int slot = mirror_slot(H(g)), known = slot >= 0 && !grown[slot];
    pthread_mutex_unlock(&rgpu_graph_nodes_lock);
    return known ? CUDA_SUCCESS : fetch_mirror(H(g));
}

CUresult rgpu_graph_mirrored(CUgraph g) { return mirrored_graph(g); }

CUresult rgpu_graph_nodes_of(CUgraph g, const CUgraphNode *deps, size_t n)
{
    CUresult r = mirrored_graph(g);
    if (r != CUDA_SUCCESS || (n && !deps))
        return r != CUDA_SUCCESS ? r : CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&rgpu_graph_nodes_lock);
    for (size_t i = 0; i < n && r == CUDA_SUCCESS; i++) {
        struct gnode *d = rgpu_node_find(H(deps[i]));
        if (!d || d->graph != H(g))
            r = CUDA_ERROR_INVALID_VALUE;
    }
    pthread_mutex_unlock(&rgpu_graph_nodes_lock);
    return r;
}

static int has_node_of(uint64_t g, unsigned types) /* under the lock: a node of g of one of types (a bit each) */
{
    for (struct gnode *n = nodes; n; n = n->next)
        if (n->graph == g && (types >> n->type & 1))
            return 1;
    return 0;
}

/* the server refuses to clone or nest a graph with memory nodes */
#define MEMORY_NODES (1u << CU_GRAPH_NODE_TYPE_MEM_ALLOC | 1u << CU_GRAPH_NODE_TYPE_MEM_FREE)

size_t rgpu_graph_members(uint64_t g, struct gnode **out, size_t cap) /* under the lock */
{
    size_t total = 0;
    for (struct gnode *n = nodes; n; n = n->next)
        total += n->graph == g;
    size_t i = total;
    for (struct gnode *n = nodes; out && n; n = n->next) /* the list is newest first */
        if (n->graph == g && --i < cap)
            out[i] = n;
    return total;
}

static struct gnode *owner_of(uint64_t g) /* under the lock: the node that owns graph g, if one does */
{
    for (struct gnode *n = nodes; n; n = n->next)
        for (unsigned i = 0; i < n->n_bodies; i++)
            if (H(n->bodies[i]) == g)
                return n;
    return NULL;
}

int rgpu_graph_owner_type(uint64_t g)
{
    pthread_mutex_lock(&rgpu_graph_nodes_lock);
    struct gnode *o = owner_of(g);
    int type = o ? (int)o->type : -1;
    pthread_mutex_unlock(&rgpu_graph_nodes_lock);
    return type;
}

int rgpu_graph_is_body(uint64_t g) { return rgpu_graph_owner_type(g) >= 0; }

uint64_t rgpu_graph_mint_empty(void)
{
    uint64_t g = rgpu_graph_mint(KIND_GRAPH);
    pthread_mutex_lock(&rgpu_graph_nodes_lock);
    int slot = mirror_slot(0);
    if (slot >= 0)
        mirrored[slot] = g;
    pthread_mutex_unlock(&rgpu_graph_nodes_lock);
    if (slot >= 0 && rgpu_graph_live_add(g))
        return g;
    rgpu_graph_forget(g);
    return 0;
}

API CUresult cuGraphCreate(CUgraph *out, unsigned int flags)
{
    if (!out || flags)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = rgpu_graph_need();
    if (r != CUDA_SUCCESS)
        return r;
    uint64_t g = rgpu_graph_mint_empty();
    if (!g)
        return CUDA_ERROR_OUT_OF_MEMORY;
    uint8_t a[RGPU_GRAPH_CREATE_REQ_SIZE];
    rgpu_pack_graph_create(a, &(struct rgpu_graph_create_req){g, 0});
    r = rgpu_defer(RGPU_OP_GRAPH_CREATE, a, sizeof a, NULL, 0);
    if (r == CUDA_SUCCESS)
        *out = (CUgraph)(uintptr_t)g;
    return r;
}

/* A new mirror node in graph g after deps (all of g), not yet linked in; NULL with *r set on failure. */
struct gnode *rgpu_node_new(CUgraph g, const CUgraphNode *deps, size_t n, CUgraphNodeType type, CUresult *r)
{
    *r = mirrored_graph(g);
    if (*r != CUDA_SUCCESS)
        return NULL;
    if (n && !deps) {
        *r = CUDA_ERROR_INVALID_VALUE;
        return NULL;
    }
    struct gnode *node = calloc(1, sizeof *node);
    if (!node || !(node->deps = calloc(n ? n : 1, sizeof *node->deps))) {
        free(node);
        *r = CUDA_ERROR_OUT_OF_MEMORY;
        return NULL;
    }
    node->graph = H(g);
    node->type = type;
    node->n_deps = n;
    pthread_mutex_lock(&rgpu_graph_nodes_lock);
    for (size_t i = 0; i < n; i++) {
        struct gnode *d = rgpu_node_find(H(deps[i]));
        if (!d || d->graph != H(g))
            *r = CUDA_ERROR_INVALID_VALUE;
        node->deps[i] = H(deps[i]);
    }
    pthread_mutex_unlock(&rgpu_graph_nodes_lock);
    if (*r != CUDA_SUCCESS) {
        rgpu_node_free(node);
        return NULL;
    }
    node->handle = rgpu_graph_mint(KIND_GRAPH_NODE);
    return node;
}

void rgpu_node_free(struct gnode *node)
{
    free(node->deps);
    free(node->dep_data);
    free(node->bodies);
    free(node);
}

/* A new node's last step: once the server was told of it (`sent`), it joins the mirror and the caller gets its
 * handle; otherwise it is dropped and `sent` is the answer. */
CUresult rgpu_node_added(struct gnode *node, CUresult sent, CUgraphNode *out)
{
    if (sent != CUDA_SUCCESS) {
        rgpu_node_free(node);
        return sent;
    }
    rgpu_node_link(node, out);
    return CUDA_SUCCESS;
}

void rgpu_node_link(struct gnode *node, CUgraphNode *out)
{
    pthread_mutex_lock(&rgpu_graph_nodes_lock);
    node->next = nodes;
    nodes = node;
    pthread_mutex_unlock(&rgpu_graph_nodes_lock);
    *out = (CUgraphNode)(uintptr_t)node->handle;
}

/* Bulk of a node operation: the dependencies, then `tail`. */
size_t rgpu_node_deps_bulk(uint8_t *out, const struct gnode *node)
{
    for (size_t i = 0; i < node->n_deps; i++)
        rgpu_put_u64(out + 8 * i, node->deps[i]);
    return 8 * node->n_deps;
}

struct gnode *rgpu_node_typed(CUgraphNode h, CUgraphNodeType type) /* under the lock */
{
    struct gnode *n = rgpu_node_find(H(h));
    return n && n->type == type ? n : NULL;
}

CUresult rgpu_node_field(CUgraphNode h, CUgraphNodeType type, size_t offset, void *out, size_t size)
{
    if (!out)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&rgpu_graph_nodes_lock);
    struct gnode *n = rgpu_node_typed(h, type);
    if (n)
        memcpy(out, (const uint8_t *)n + offset, size);
    pthread_mutex_unlock(&rgpu_graph_nodes_lock);
    return n ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* -- empty, host, event and child-graph nodes ------------------------------------------------------------- */
static CUresult send_other(const struct gnode *node, CUgraphNodeType type, uint64_t object)
{
    uint8_t a[RGPU_GRAPH_OTHER_NODE_REQ_SIZE], *bulk = malloc(8 * node->n_deps + 1);
    if (!bulk)
        return CUDA_ERROR_OUT_OF_MEMORY;
    size_t len = rgpu_node_deps_bulk(bulk, node);
    rgpu_pack_graph_other_node(a, &(struct rgpu_graph_other_node_req){node->graph, node->handle,
                                                                      (uint32_t)node->n_deps, (uint32_t)type, object});
    CUresult r = rgpu_defer(RGPU_OP_GRAPH_OTHER_NODE, a, sizeof a, bulk, len);
    free(bulk);
    return r;
}

CUresult rgpu_send_placeholder(const struct gnode *node) { return send_other(node, CU_GRAPH_NODE_TYPE_EMPTY, 0); }

/* host: the parameters of a host node, which the server keeps as an empty node */
static CUresult add_other(CUgraphNode *out, CUgraph g, const CUgraphNode *deps, size_t n, CUgraphNodeType type,
                          uint64_t object, const CUDA_HOST_NODE_PARAMS *host)
{
    static int logged, nested_logged;
    CUresult r;
    if (!out)
        return CUDA_ERROR_INVALID_VALUE;
    if (type == CU_GRAPH_NODE_TYPE_GRAPH && (object == H(g) || !rgpu_graph_is_live(object, KIND_GRAPH)))
        return CUDA_ERROR_INVALID_VALUE;
    if (type == CU_GRAPH_NODE_TYPE_GRAPH && rgpu_graph_has_host_nodes((CUgraph)(uintptr_t)object, &r))
        return r != CUDA_SUCCESS ? r : rgpu_unsupported(&logged, "a child graph with host nodes");
    if (type == CU_GRAPH_NODE_TYPE_GRAPH) {
        pthread_mutex_lock(&rgpu_graph_nodes_lock);
        int memory = has_node_of(object, MEMORY_NODES);
        pthread_mutex_unlock(&rgpu_graph_nodes_lock);
        if (memory) /* as CUDA's */
            return CUDA_ERROR_NOT_SUPPORTED;
    }
    int owner = host ? rgpu_graph_owner_type(H(g)) : -1;
    if (owner == CU_GRAPH_NODE_TYPE_CONDITIONAL)
        return CUDA_ERROR_INVALID_VALUE; /* as CUDA's: a conditional body runs on the device alone */
    if (owner >= 0) /* a child graph's: its node's graph would need stages */
        return rgpu_unsupported(&nested_logged, "host nodes in a child graph");
    if (type == CU_GRAPH_NODE_TYPE_GRAPH && rgpu_graph_is_body(object))
        return CUDA_ERROR_INVALID_VALUE; /* a graph that belongs to a node is no other node's child */
    struct gnode *node = rgpu_node_new(g, deps, n, host ? CU_GRAPH_NODE_TYPE_HOST : type, &r);
    if (!node)
        return r;
    node->object = object;
    if (host) {
        node->host = *host;
        rgpu_client_node_made();
    }
    /* the node's copy of the child holds what the child holds, the node's until it goes */
    r = type == CU_GRAPH_NODE_TYPE_GRAPH ? hold_within(object, 0, node->handle) : CUDA_SUCCESS;
    if (r == CUDA_SUCCESS && (r = send_other(node, type, object)) != CUDA_SUCCESS)
        rgpu_user_objects_release(node->handle);
    return rgpu_node_added(node, r, out);
}

/* A child graph node that takes its graph (CU_GRAPH_CHILD_GRAPH_OWNERSHIP_MOVE, as XLA nests command buffers): the
 * graph becomes the node's, as a conditional node's bodies are, and its nodes keep their handles (an exec's
 * parameter setters name them). */
CUresult rgpu_graph_move_child(CUgraphNode *out, CUgraph g, const CUgraphNode *deps, size_t n, CUgraph child)
{
    static int logged, host_logged;
    CUresult r = rgpu_graph_need();
    if (r == CUDA_SUCCESS)
        r = rgpu_need_protocol(9, &logged, "a child graph moved into its node (CU_GRAPH_CHILD_GRAPH_OWNERSHIP_MOVE)");
    if (r != CUDA_SUCCESS)
        return r;
    if (!out || !child || child == g || !rgpu_graph_is_live(H(child), KIND_GRAPH))
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&rgpu_graph_nodes_lock);
    int bad = owner_of(H(child)) != NULL;
    for (struct gnode *o = owner_of(H(g)); o && !bad; o = owner_of(o->graph)) /* g is not inside child */
        bad = o->graph == H(child);
    pthread_mutex_unlock(&rgpu_graph_nodes_lock);
    if (bad)
        return CUDA_ERROR_INVALID_VALUE;
    if (rgpu_graph_captured_into(H(child)))
        return CUDA_ERROR_ILLEGAL_STATE; /* as the server would say, later */
    if (rgpu_graph_has_host_nodes(child, &r))
        return r != CUDA_SUCCESS ? r : rgpu_unsupported(&host_logged, "a child graph with host nodes");
    if (r != CUDA_SUCCESS)
        return r;
    struct gnode *node = rgpu_node_new(g, deps, n, CU_GRAPH_NODE_TYPE_GRAPH, &r);
    if (!node)
        return r;
    uint8_t *bulk = malloc(8 * n + 1);
    if (!bulk || !(node->bodies = malloc(sizeof *node->bodies))) {
        free(bulk);
        return rgpu_node_added(node, CUDA_ERROR_OUT_OF_MEMORY, out);
    }
    node->object = H(child);
    node->bodies[0] = child, node->n_bodies = 1;
    size_t len = rgpu_node_deps_bulk(bulk, node);
    uint8_t a[RGPU_GRAPH_MOVE_CHILD_NODE_REQ_SIZE];
    rgpu_pack_graph_move_child_node(a, &(struct rgpu_graph_move_child_node_req){H(g), node->handle, (uint32_t)n,
                                                                                H(child)});
    r = rgpu_defer(RGPU_OP_GRAPH_MOVE_CHILD_NODE, a, sizeof a, bulk, len);
    free(bulk);
    if (r != CUDA_SUCCESS)
        node->n_bodies = 0; /* the program keeps its graph (and its references: they come with it from now) */
    return rgpu_node_added(node, r, out);
}

/* A child graph node's own graph: the one moved into it, or a handle minted now for the copy the node made, which
 * the node then owns as it owns a moved one (its mirror is fetched at its first use). One at a time, so that two
 * threads asking at once do not both name it. */
static pthread_mutex_t child_graph_lock = PTHREAD_MUTEX_INITIALIZER;
RGPU_FORK_RESET(child_graph_lock, &child_graph_lock)

static CUgraph own_graph(CUgraphNode h, int *found) /* takes the nodes' lock */
{
    pthread_mutex_lock(&rgpu_graph_nodes_lock);
    struct gnode *n = rgpu_node_typed(h, CU_GRAPH_NODE_TYPE_GRAPH);
    CUgraph g = n && n->n_bodies ? n->bodies[0] : NULL;
    *found = n != NULL;
    pthread_mutex_unlock(&rgpu_graph_nodes_lock);
    return g;
}

API CUresult cuGraphChildGraphNodeGetGraph(CUgraphNode h, CUgraph *out)
{
    static int logged;
    int found;
    if (!out)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&child_graph_lock);
    CUgraph g = own_graph(h, &found);
    CUresult r = !found ? CUDA_ERROR_INVALID_VALUE : g ? CUDA_SUCCESS
               : rgpu_need_protocol(9, &logged, "a child graph node's own graph (cuGraphChildGraphNodeGetGraph)");
    CUgraph *bodies = r == CUDA_SUCCESS && !g ? malloc(sizeof *bodies) : NULL;
    if (r == CUDA_SUCCESS && !g) {
        uint64_t minted = bodies ? rgpu_graph_mint(KIND_GRAPH) : 0;
        if (!bodies || !rgpu_graph_live_add(minted)) {
            r = CUDA_ERROR_OUT_OF_MEMORY;
        } else {
            uint8_t a[RGPU_GRAPH_CHILD_GRAPH_REQ_SIZE];
            rgpu_pack_graph_child_graph(a, &(struct rgpu_graph_child_graph_req){H(h), minted});
            r = rgpu_defer(RGPU_OP_GRAPH_CHILD_GRAPH, a, sizeof a, NULL, 0);
        }
        pthread_mutex_lock(&rgpu_graph_nodes_lock);
        struct gnode *n = r == CUDA_SUCCESS ? rgpu_node_typed(h, CU_GRAPH_NODE_TYPE_GRAPH) : NULL;
        if (n) { /* (destroyed meanwhile: the server forgets the handle with the node) */
            g = bodies[0] = (CUgraph)(uintptr_t)minted;
            n->bodies = bodies, n->n_bodies = 1;
            bodies = NULL;
        } else if (r == CUDA_SUCCESS) {
            r = CUDA_ERROR_INVALID_VALUE;
        }
        pthread_mutex_unlock(&rgpu_graph_nodes_lock);
        if (r != CUDA_SUCCESS && minted)
            rgpu_graph_live_drop(minted); /* (dropping one never made is a no-op) */
    }
    pthread_mutex_unlock(&child_graph_lock);
    free(bodies);
    if (r == CUDA_SUCCESS)
        *out = g;
    return r;
}

API CUresult cuGraphAddEmptyNode(CUgraphNode *out, CUgraph g, const CUgraphNode *deps, size_t n)
{
    return add_other(out, g, deps, n, CU_GRAPH_NODE_TYPE_EMPTY, 0, NULL);
}
API CUresult cuGraphAddHostNode(CUgraphNode *out, CUgraph g, const CUgraphNode *deps, size_t n,
                                const CUDA_HOST_NODE_PARAMS *p)
{
    return p && p->fn ? add_other(out, g, deps, n, CU_GRAPH_NODE_TYPE_EMPTY, 0, p) : CUDA_ERROR_INVALID_VALUE;
}
/* -- memory nodes: the address comes from the server (one round trip); the memory counts in the session's quota
 * while the graph or an exec made from it lives ------------------------------------------------------------ */
API CUresult cuGraphAddMemAllocNode(CUgraphNode *out, CUgraph g, const CUgraphNode *deps, size_t n,
                                    CUDA_MEM_ALLOC_NODE_PARAMS *p)
{
    static int logged, old_logged;
    CUresult r = rgpu_ready();
    if (r != CUDA_SUCCESS)
        return r;
    if ((r = rgpu_need_protocol(5, &old_logged, "graph memory allocation nodes")) != CUDA_SUCCESS)
        return r;
    if (!out || !p || !p->bytesize || p->poolProps.allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
        p->poolProps.location.type != CU_MEM_LOCATION_TYPE_DEVICE || (p->accessDescCount && !p->accessDescs))
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < p->accessDescCount; i++) /* the owning device reads and writes; no peers */
        if (p->accessDescs[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
            p->accessDescs[i].location.id != p->poolProps.location.id)
            return rgpu_unsupported(&logged, "graph memory allocation nodes with peer access");
    if (p->poolProps.handleTypes)
        return rgpu_unsupported(&logged, "graph memory allocation nodes with shareable handles");
    struct gnode *node = rgpu_node_new(g, deps, n, CU_GRAPH_NODE_TYPE_MEM_ALLOC, &r);
    if (!node)
        return r;
    uint8_t a[RGPU_GRAPH_MEM_ALLOC_NODE_REQ_SIZE], rep[RGPU_GRAPH_MEM_ALLOC_NODE_REP_SIZE], *bulk = malloc(8 * n + 1);
    struct rgpu_graph_mem_alloc_node_rep got;
    if (!bulk)
        return rgpu_node_added(node, CUDA_ERROR_OUT_OF_MEMORY, out);
    size_t len = rgpu_node_deps_bulk(bulk, node);
    rgpu_pack_graph_mem_alloc_node(a, &(struct rgpu_graph_mem_alloc_node_req){H(g), node->handle, (uint32_t)n,
                                                                              (uint32_t)p->poolProps.location.id,
                                                                              p->bytesize});
    r = rgpu_call(RGPU_OP_GRAPH_MEM_ALLOC_NODE, a, sizeof a, bulk, len, rep, sizeof rep, NULL);
    free(bulk);
    if (r == CUDA_SUCCESS && rgpu_unpack_graph_mem_alloc_node(rep, sizeof rep, &got) < 0)
        r = rgpu_bad_reply(RGPU_OP_GRAPH_MEM_ALLOC_NODE, "reply of the wrong size");
    if (r == CUDA_SUCCESS) {
        node->alloc = *p;
        node->alloc.accessDescs = NULL, node->alloc.accessDescCount = 0;
        node->object = node->alloc.dptr = p->dptr = got.dptr;
        rgpu_ranges_note_device(got.dptr, p->bytesize, rgpu_thread_ctx());
    }
    return rgpu_node_added(node, r, out);
}

API CUresult cuGraphMemAllocNodeGetParams(CUgraphNode h, CUDA_MEM_ALLOC_NODE_PARAMS *p)
{
    return rgpu_node_field(h, CU_GRAPH_NODE_TYPE_MEM_ALLOC, offsetof(struct gnode, alloc), p, sizeof *p);
}

API CUresult cuGraphAddMemFreeNode(CUgraphNode *out, CUgraph g, const CUgraphNode *deps, size_t n, CUdeviceptr dptr)
{
    int known = 0; /* the address an allocation node was given (the server checks the rest) */
    pthread_mutex_lock(&rgpu_graph_nodes_lock);
    for (struct gnode *m = nodes; m && !known; m = m->next)
        known = m->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC && m->object == dptr;
    pthread_mutex_unlock(&rgpu_graph_nodes_lock);
    return known ? add_other(out, g, deps, n, CU_GRAPH_NODE_TYPE_MEM_FREE, dptr, NULL) : CUDA_ERROR_INVALID_VALUE;
}

API CUresult cuGraphMemFreeNodeGetParams(CUgraphNode h, CUdeviceptr *dptr)
{
    _Static_assert(sizeof(CUdeviceptr) == sizeof(uint64_t), "the address is the node's object");
    return rgpu_node_field(h, CU_GRAPH_NODE_TYPE_MEM_FREE, offsetof(struct gnode, object), dptr, sizeof *dptr);
}

API CUresult cuGraphAddEventRecordNode(CUgraphNode *out, CUgraph g, const CUgraphNode *deps, size_t n, CUevent e)
{
    return e ? add_other(out, g, deps, n, CU_GRAPH_NODE_TYPE_EVENT_RECORD, H(e), NULL) : CUDA_ERROR_INVALID_VALUE;
}
API CUresult cuGraphAddEventWaitNode(CUgraphNode *out, CUgraph g, const CUgraphNode *deps, size_t n, CUevent e)
{
    return e ? add_other(out, g, deps, n, CU_GRAPH_NODE_TYPE_WAIT_EVENT, H(e), NULL) : CUDA_ERROR_INVALID_VALUE;
}
API CUresult cuGraphAddChildGraphNode(CUgraphNode *out, CUgraph g, const CUgraphNode *deps, size_t n, CUgraph child)
{
    return add_other(out, g, deps, n, CU_GRAPH_NODE_TYPE_GRAPH, H(child), NULL);
}

static CUresult node_event(CUgraphNode h, CUgraphNodeType type, CUevent *out)
{
    if (!out)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&rgpu_graph_nodes_lock);
    struct gnode *n = rgpu_node_typed(h, type);
    if (n)
        *out = (CUevent)(uintptr_t)n->object;
    pthread_mutex_unlock(&rgpu_graph_nodes_lock);
    return n ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
API CUresult cuGraphEventRecordNodeGetEvent(CUgraphNode h, CUevent *out)
{
    return node_event(h, CU_GRAPH_NODE_TYPE_EVENT_RECORD, out);
}
API CUresult cuGraphEventWaitNodeGetEvent(CUgraphNode h, CUevent *out)
{
    return node_event(h, CU_GRAPH_NODE_TYPE_WAIT_EVENT, out);
}

/* exec NULL: the node in its graph (the mirror follows); otherwise the node's copy in exec. */
static CUresult set_node_event(CUgraphExec exec, CUgraphNode h, CUgraphNodeType type, CUevent e)
{
    static int logged;
    CUresult r = rgpu_need_protocol(9, &logged, "changing an event node's event");
    if (r != CUDA_SUCCESS)
        return r;
    if (!e || (exec && !rgpu_graph_is_live(H(exec), KIND_GRAPH_EXEC)))
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&rgpu_graph_nodes_lock);
    struct gnode *n = rgpu_node_typed(h, type);
    if (n && !exec)
        n->object = H(e);
    pthread_mutex_unlock(&rgpu_graph_nodes_lock);
    uint64_t target = exec ? rgpu_exec_target(H(exec), H(h)) : 0;
    if (!n || (exec && !target)) /* (0: a staged exec without the node, which the server would take for none) */
        return CUDA_ERROR_INVALID_VALUE;
    uint8_t a[RGPU_GRAPH_EVENT_NODE_SET_REQ_SIZE];
    rgpu_pack_graph_event_node_set(a, &(struct rgpu_graph_event_node_set_req){target, H(h), H(e)});
    return rgpu_defer(RGPU_OP_GRAPH_EVENT_NODE_SET, a, sizeof a, NULL, 0);
}
API CUresult cuGraphEventRecordNodeSetEvent(CUgraphNode h, CUevent e)
{
    return set_node_event(NULL, h, CU_GRAPH_NODE_TYPE_EVENT_RECORD, e);
}
API CUresult cuGraphEventWaitNodeSetEvent(CUgraphNode h, CUevent e)
{
    return set_node_event(NULL, h, CU_GRAPH_NODE_TYPE_WAIT_EVENT, e);
}
API CUresult cuGraphExecEventRecordNodeSetEvent(CUgraphExec exec, CUgraphNode h, CUevent e)
{
    return exec ? set_node_event(exec, h, CU_GRAPH_NODE_TYPE_EVENT_RECORD, e) : CUDA_ERROR_INVALID_VALUE;
}
API CUresult cuGraphExecEventWaitNodeSetEvent(CUgraphExec exec, CUgraphNode h, CUevent e)
{
    return exec ? set_node_event(exec, h, CU_GRAPH_NODE_TYPE_WAIT_EVENT, e) : CUDA_ERROR_INVALID_VALUE;
}

/* -- structure: edges, queries, clones ----------------------------------------------------------------------- */
int rgpu_default_edges(const CUgraphEdgeData *data, size_t n)
{
    static const CUgraphEdgeData zero;
    for (size_t i = 0; data && i < n; i++)
        if (memcmp(&data[i], &zero, sizeof zero))
            return 0;
    return 1;
}

static CUgraphEdgeData edge_of(const struct gnode *n, size_t k)
{
    static const CUgraphEdgeData plain;
    return n->dep_data ? n->dep_data[k] : plain;
}

/* b gains the edge from a (with its data), under the lock. */
static CUresult add_edge(struct gnode *b, const struct gnode *a, const CUgraphEdgeData *data)
{
    static const CUgraphEdgeData plain;
    uint64_t *grown = realloc(b->deps, (b->n_deps + 1) * sizeof *grown);
    if (!grown)
        return CUDA_ERROR_OUT_OF_MEMORY;
    b->deps = grown;
    if (b->dep_data || (data && memcmp(data, &plain, sizeof plain))) {
        CUgraphEdgeData *more = realloc(b->dep_data, (b->n_deps + 1) * sizeof *more);
        if (!more)
            return CUDA_ERROR_OUT_OF_MEMORY;
        if (!b->dep_data)
            memset(more, 0, b->n_deps * sizeof *more);
        b->dep_data = more;
        b->dep_data[b->n_deps] = data ? *data : plain;
    }
    b->deps[b->n_deps++] = a->handle;
    return CUDA_SUCCESS;
}

/* The wire form of edges: (from, to) pairs, and with GRAPH_EDGES_DATA (1.4) the edge data after each pair. */
#define EDGE_PAIR 16
#define EDGE_WITH_DATA (EDGE_PAIR + sizeof(CUgraphEdgeData))
_Static_assert(sizeof(CUgraphEdgeData) == 8, "CUgraphEdgeData travels as its 8 bytes");

CUresult rgpu_graph_edges(CUgraph g, const CUgraphNode *from, const CUgraphNode *to, const CUgraphEdgeData *data,
                          size_t n, int remove)
{
    static int logged;
    CUresult r = mirrored_graph(g);
    if (r != CUDA_SUCCESS)
        return r;
    if (n && (!from || !to))
        return CUDA_ERROR_INVALID_VALUE;
    int with_data = !rgpu_default_edges(data, n);
    CUresult old = with_data ? rgpu_need_protocol(4, &logged, "graph edges with data (programmatic edges)")
                             : CUDA_SUCCESS;
    if (old != CUDA_SUCCESS)
        return old;
    size_t record = with_data ? EDGE_WITH_DATA : EDGE_PAIR;
    uint8_t *bulk = malloc(record * n + 1);
    if (!bulk)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&rgpu_graph_nodes_lock);
    for (size_t i = 0; i < n && r == CUDA_SUCCESS; i++) {
        struct gnode *a = rgpu_node_find(H(from[i])), *b = rgpu_node_find(H(to[i]));
        if (!a || !b || a->graph != H(g) || b->graph != H(g) || a == b) {
            r = CUDA_ERROR_INVALID_VALUE;
            break;
        }
        size_t k = 0;
        while (k < b->n_deps && b->deps[k] != a->handle)
            k++;
        if (remove ? k == b->n_deps : k < b->n_deps) {
            r = CUDA_ERROR_INVALID_VALUE;
            break;
        }
        rgpu_put_u64(bulk + record * i, a->handle);
        rgpu_put_u64(bulk + record * i + 8, b->handle);
        if (with_data)
            memcpy(bulk + record * i + EDGE_PAIR, &data[i], sizeof data[i]);
    }
    for (size_t i = 0; i < n && r == CUDA_SUCCESS; i++) { /* checked all: now change the mirror */
        struct gnode *a = rgpu_node_find(H(from[i])), *b = rgpu_node_find(H(to[i]));
        if (remove) {
            size_t k = 0;
            while (b->deps[k] != a->handle)
                k++;
            b->deps[k] = b->deps[--b->n_deps];
            if (b->dep_data)
                b->dep_data[k] = b->dep_data[b->n_deps];
        } else {
            r = add_edge(b, a, data ? &data[i] : NULL);
        }
    }
    pthread_mutex_unlock(&rgpu_graph_nodes_lock);
    if (r == CUDA_SUCCESS && with_data) {
        uint8_t a[RGPU_GRAPH_EDGES_DATA_REQ_SIZE];
        rgpu_pack_graph_edges_data(a, &(struct rgpu_graph_edges_data_req){H(g), (uint32_t)n, (uint32_t)remove});
        r = rgpu_defer(RGPU_OP_GRAPH_EDGES_DATA, a, sizeof a, bulk, record * n);
    } else if (r == CUDA_SUCCESS) {
        uint8_t a[RGPU_GRAPH_EDGES_REQ_SIZE];
        rgpu_pack_graph_edges(a, &(struct rgpu_graph_edges_req){H(g), (uint32_t)n, (uint32_t)remove});
        r = rgpu_defer(RGPU_OP_GRAPH_EDGES, a, sizeof a, bulk, record * n);
    }
    free(bulk);
    return r;
}

API CUresult cuGraphAddDependencies_v2(CUgraph g, const CUgraphNode *from, const CUgraphNode *to,
                                       const CUgraphEdgeData *data, size_t n)
{
    return rgpu_graph_edges(g, from, to, data, n, 0);
}
API CUresult cuGraphRemoveDependencies_v2(CUgraph g, const CUgraphNode *from, const CUgraphNode *to,
                                          const CUgraphEdgeData *data, size_t n)
{
    return rgpu_graph_edges(g, from, to, data, n, 1);
}

/* Nodes of g in the order they were added (the list is newest first). */
static CUresult list_nodes(CUgraph g, CUgraphNode *out, size_t *count, int roots_only)
{
    if (!count)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = mirrored_graph(g);
    if (r != CUDA_SUCCESS)
        return r;
    size_t total = 0, cap = *count;
    pthread_mutex_lock(&rgpu_graph_nodes_lock);
    for (struct gnode *n = nodes; n; n = n->next)
        if (n->graph == H(g) && (!roots_only || !n->n_deps))
            total++;
    if (out) {
        size_t i = total;
        for (struct gnode *n = nodes; n; n = n->next)
            if (n->graph == H(g) && (!roots_only || !n->n_deps) && --i < cap)
                out[i] = (CUgraphNode)(uintptr_t)n->handle;
    }
    pthread_mutex_unlock(&rgpu_graph_nodes_lock);
    if (out && cap > total)
        for (size_t i = total; i < cap; i++)
            out[i] = NULL;
    *count = out && total > cap ? cap : total; /* (what was obtained, as CUDA says) */
    return CUDA_SUCCESS;
}

API CUresult cuGraphGetNodes(CUgraph g, CUgraphNode *out, size_t *n) { return list_nodes(g, out, n, 0); }
API CUresult cuGraphGetRootNodes(CUgraph g, CUgraphNode *out, size_t *n) { return list_nodes(g, out, n, 1); }

API CUresult cuGraphGetEdges_v2(CUgraph g, CUgraphNode *from, CUgraphNode *to, CUgraphEdgeData *data, size_t *n)
{
    if (!n || (!from) != (!to))
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = mirrored_graph(g);
    if (r != CUDA_SUCCESS)
        return r;
    size_t total = 0, cap = *n;
    pthread_mutex_lock(&rgpu_graph_nodes_lock);
    for (struct gnode *b = nodes; b; b = b->next)
        if (b->graph == H(g))
            for (size_t k = 0; k < b->n_deps; k++, total++)
                if (from && total < cap) {
                    from[total] = (CUgraphNode)(uintptr_t)b->deps[k];
                    to[total] = (CUgraphNode)(uintptr_t)b->handle;
                    if (data)
                        data[total] = edge_of(b, k);
                }
    pthread_mutex_unlock(&rgpu_graph_nodes_lock);
    *n = from && total > cap ? cap : total;
    return CUDA_SUCCESS;
}

API CUresult cuGraphNodeGetType(CUgraphNode h, CUgraphNodeType *type)
{
    if (!type)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&rgpu_graph_nodes_lock);
    struct gnode *n = rgpu_node_find(H(h));
    if (n)
        *type = n->type;
    pthread_mutex_unlock(&rgpu_graph_nodes_lock);
    return n ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

API CUresult cuGraphNodeGetDependencies_v2(CUgraphNode h, CUgraphNode *deps, CUgraphEdgeData *data, size_t *count)
{
    if (!count)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&rgpu_graph_nodes_lock);
    struct gnode *n = rgpu_node_find(H(h));
    if (n) {
        for (size_t k = 0; deps && k < *count; k++) {
            deps[k] = k < n->n_deps ? (CUgraphNode)(uintptr_t)n->deps[k] : NULL;
            if (data && k < n->n_deps)
                data[k] = edge_of(n, k);
        }
        *count = deps && n->n_deps > *count ? *count : n->n_deps;
    }
    pthread_mutex_unlock(&rgpu_graph_nodes_lock);
    return n ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

API CUresult cuGraphNodeGetDependentNodes_v2(CUgraphNode h, CUgraphNode *out, CUgraphEdgeData *data, size_t *count)
{
    if (!count)
        return CUDA_ERROR_INVALID_VALUE;
    size_t total = 0;
    pthread_mutex_lock(&rgpu_graph_nodes_lock);
    struct gnode *n = rgpu_node_find(H(h));
    for (struct gnode *m = nodes; n && m; m = m->next)
        for (size_t k = 0; m->graph == n->graph && k < m->n_deps; k++)
            if (m->deps[k] == n->handle) {
                if (out && total < *count) {
                    out[total] = (CUgraphNode)(uintptr_t)m->handle;
                    if (data)
                        data[total] = edge_of(m, k);
                }
                total++;
            }
    pthread_mutex_unlock(&rgpu_graph_nodes_lock);
    if (!n)
        return CUDA_ERROR_INVALID_VALUE;
    *count = out && total > *count ? *count : total;
    return CUDA_SUCCESS;
}

API CUresult cuGraphClone(CUgraph *out, CUgraph g)
{
    if (!out)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = mirrored_graph(g);
    if (r != CUDA_SUCCESS)
        return r;
    static int logged, cond_logged;
    pthread_mutex_lock(&rgpu_graph_nodes_lock);
    int memory = has_node_of(H(g), MEMORY_NODES), conditional = has_node_of(H(g), 1u << CU_GRAPH_NODE_TYPE_CONDITIONAL);
    pthread_mutex_unlock(&rgpu_graph_nodes_lock);
    if (memory)
        return rgpu_unsupported(&logged, "cloning a graph with memory allocation or free nodes");
    if (conditional)
        return rgpu_unsupported(&cond_logged, "cloning a graph with conditional nodes");
    uint64_t clone = rgpu_graph_mint(KIND_GRAPH);
    size_t count = 0, i = 0;
    pthread_mutex_lock(&rgpu_graph_nodes_lock);
    int slot = mirror_slot(0);
    for (struct gnode *n = nodes; n; n = n->next)
        count += n->graph == H(g);
    struct gnode **copies = calloc(count ? count : 1, sizeof *copies);
    uint8_t *pairs = malloc(16 * count + 1);
    for (struct gnode *n = nodes; copies && pairs && n && r == CUDA_SUCCESS; n = n->next) {
        if (n->graph != H(g))
            continue;
        struct gnode *c = malloc(sizeof *c);
        uint64_t *deps = malloc((n->n_deps ? n->n_deps : 1) * sizeof *deps);
        CUgraphEdgeData *dep_data = n->dep_data ? malloc((n->n_deps ? n->n_deps : 1) * sizeof *dep_data) : NULL;
        if (!c || !deps || (n->dep_data && !dep_data)) {
            free(c);
            free(deps);
            free(dep_data);
            r = CUDA_ERROR_OUT_OF_MEMORY;
            break;
        }
        *c = *n;
        c->bodies = NULL, c->n_bodies = 0; /* the server's clone has its own copies of what n owns, unnamed */
        c->graph = clone;
        c->handle = 1ull << 63 | (uint64_t)KIND_GRAPH_NODE << 56; /* numbered below, outside this lock */
        c->deps = deps;
        memcpy(deps, n->deps, n->n_deps * sizeof *deps);
        c->dep_data = dep_data;
        if (dep_data)
            memcpy(dep_data, n->dep_data, n->n_deps * sizeof *dep_data);
        rgpu_put_u64(pairs + 16 * i, n->handle);
        copies[i++] = c;
    }
    pthread_mutex_unlock(&rgpu_graph_nodes_lock);
    if (!copies || !pairs || slot < 0 || r != CUDA_SUCCESS) {
        for (size_t k = 0; k < i; k++)
            rgpu_node_free(copies[k]);
        free(copies);
        free(pairs);
        return r != CUDA_SUCCESS ? r : CUDA_ERROR_OUT_OF_MEMORY;
    }
    for (size_t k = 0; k < i; k++) {
        copies[k]->handle = rgpu_graph_mint(KIND_GRAPH_NODE);
        rgpu_put_u64(pairs + 16 * k + 8, copies[k]->handle);
    }
    for (size_t k = 0; k < i; k++) /* dependencies name the clone's nodes */
        for (size_t d = 0; d < copies[k]->n_deps; d++)
            for (size_t m = 0; m < i; m++)
                if (rgpu_get_u64(pairs + 16 * m) == copies[k]->deps[d])
                    copies[k]->deps[d] = copies[m]->handle;
    uint8_t a[RGPU_GRAPH_CLONE_REQ_SIZE];
    rgpu_pack_graph_clone(a, &(struct rgpu_graph_clone_req){H(g), clone, (uint32_t)i});
    r = rgpu_graph_live_add(clone) ? rgpu_defer(RGPU_OP_GRAPH_CLONE, a, sizeof a, pairs, 16 * i)
                                   : CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&rgpu_graph_nodes_lock);
    if (r == CUDA_SUCCESS)
        mirrored[slot] = clone;
    for (size_t k = i; k-- > 0;) { /* oldest first, so the clone lists its nodes in the original's order */
        if (r == CUDA_SUCCESS) {
            copies[k]->next = nodes;
            nodes = copies[k];
        } else {
            rgpu_node_free(copies[k]);
        }
    }
    pthread_mutex_unlock(&rgpu_graph_nodes_lock);
    if (r == CUDA_SUCCESS)
        r = rgpu_user_objects_copy(H(g), clone);
    for (size_t k = 0; k < i && r == CUDA_SUCCESS; k++) /* each node's, with what its original owns */
        r = hold_within(0, rgpu_get_u64(pairs + 16 * k), copies[k]->handle);
    free(copies);
    free(pairs);
    if (r != CUDA_SUCCESS)
        cuGraphDestroy((CUgraph)(uintptr_t)clone);
    if (r == CUDA_SUCCESS)
        *out = (CUgraph)(uintptr_t)clone;
    return r;
}

API CUresult cuGraphNodeFindInClone(CUgraphNode *out, CUgraphNode original, CUgraph clone)
{
    if (!out)
        return CUDA_ERROR_INVALID_VALUE;
    /* A clone's nodes are numbered in the original's order: match by position among the graph's nodes. */
    pthread_mutex_lock(&rgpu_graph_nodes_lock);
    struct gnode *o = rgpu_node_find(H(original));
    size_t pos = 0, k = 0;
    int found = 0;
    for (struct gnode *n = nodes; o && n; n = n->next)
        if (n->graph == o->graph) {
            if (n == o)
                found = 1;
            else if (!found)
                pos++;
        }
    *out = NULL;
    for (struct gnode *n = nodes; found && n; n = n->next)
        if (n->graph == H(clone) && k++ == pos)
            *out = (CUgraphNode)(uintptr_t)n->handle;
    pthread_mutex_unlock(&rgpu_graph_nodes_lock);
    return *out ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

API CUresult cuGraphDestroyNode(CUgraphNode h)
{
    pthread_mutex_lock(&rgpu_graph_nodes_lock);
    struct gnode **p = &nodes;
    while (*p && (*p)->handle != H(h))
        p = &(*p)->next;
    struct gnode *n = *p;
    if (n && (n->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC || n->type == CU_GRAPH_NODE_TYPE_MEM_FREE)) {
        pthread_mutex_unlock(&rgpu_graph_nodes_lock); /* the server keeps memory nodes until their graph goes */
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    if (n) {
        *p = n->next;
        for (struct gnode *m = nodes; m; m = m->next) /* and every edge into it, with its data */
            for (size_t k = 0; m->graph == n->graph && k < m->n_deps;)
                if (m->deps[k] == n->handle) {
                    m->deps[k] = m->deps[--m->n_deps];
                    if (m->dep_data)
                        m->dep_data[k] = m->dep_data[m->n_deps];
                } else {
                    k++;
                }
    }
    pthread_mutex_unlock(&rgpu_graph_nodes_lock);
    if (!n)
        return CUDA_ERROR_INVALID_VALUE;
    rgpu_node_forget_bodies(n);
    rgpu_user_objects_release(n->handle);
    rgpu_node_free(n);
    uint8_t a[RGPU_GRAPH_DESTROY_NODE_REQ_SIZE];
    rgpu_pack_graph_destroy_node(a, &(struct rgpu_graph_destroy_node_req){H(h)});
    return rgpu_defer(RGPU_OP_GRAPH_DESTROY_NODE, a, sizeof a, NULL, 0);
}
