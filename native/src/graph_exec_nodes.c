/* Changing an executable graph node by node (protocol 1.9): enabling and disabling kernel, memset and memcpy
 * nodes (cuGraphNodeSetEnabled, as XLA switches command-buffer commands on and off between launches), and a child
 * graph node's graph (cuGraphExecChildGraphNodeSetParams). Each change is one deferred call, sent to the stage of
 * the exec that has the node when it was cut around host nodes; the disabled nodes are also kept here, so that
 * cuGraphNodeGetEnabled needs no round trip. */
#include <pthread.h>

#include "graph.h"
#include "graph_mirror.h"
#include "rgpu_shim.h"

#define API __attribute__((visibility("default")))
#define MAX_DISABLED 4096

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
RGPU_FORK_RESET(lock, &lock)
static struct {
    uint64_t exec, node;
} disabled[MAX_DISABLED]; /* exec 0: a free slot */

static int disabled_slot(uint64_t exec, uint64_t node) /* under lock */
{
    for (int i = 0; i < MAX_DISABLED; i++)
        if (disabled[i].exec == exec && disabled[i].node == node)
            return i;
    return -1;
}

void rgpu_exec_nodes_forget(uint64_t exec)
{
    pthread_mutex_lock(&lock);
    for (int i = 0; i < MAX_DISABLED; i++)
        if (disabled[i].exec == exec)
            disabled[i].exec = disabled[i].node = 0;
    pthread_mutex_unlock(&lock);
}

/* The node h of a live exec, if it is one of `types` (a bit per CUgraphNodeType); *client: the client runs it;
 * *target: the exec (or stage of it) with the node. */
static CUresult exec_node(CUgraphExec exec, CUgraphNode h, unsigned types, int *client, uint64_t *target)
{
    if (!rgpu_graph_is_live(H(exec), KIND_GRAPH_EXEC) || !(*target = rgpu_exec_target(H(exec), H(h))))
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&rgpu_graph_nodes_lock);
    struct gnode *n = rgpu_node_find(H(h));
    int ok = n && (types >> n->type & 1);
    *client = ok && rgpu_node_on_client(n);
    pthread_mutex_unlock(&rgpu_graph_nodes_lock);
    return ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* exec_node for a call that changes the exec: a server of protocol 1.9 first (*logged: its log line, once). */
static CUresult changing(const char *what, int *logged, CUgraphExec exec, CUgraphNode h, unsigned types,
                         int *client, uint64_t *target)
{
    CUresult r = rgpu_graph_need();
    if (r == CUDA_SUCCESS)
        r = rgpu_need_protocol(9, logged, what);
    return r == CUDA_SUCCESS ? exec_node(exec, h, types, client, target) : r;
}

#define ENABLEABLE (1u << CU_GRAPH_NODE_TYPE_KERNEL | 1u << CU_GRAPH_NODE_TYPE_MEMSET | 1u << CU_GRAPH_NODE_TYPE_MEMCPY)

API CUresult cuGraphNodeSetEnabled(CUgraphExec exec, CUgraphNode h, unsigned int on)
{
    static int logged, client_logged;
    int client;
    uint64_t target;
    CUresult r = changing("enabling and disabling nodes of executable graphs", &logged, exec, h, ENABLEABLE, &client,
                          &target);
    if (r != CUDA_SUCCESS)
        return r;
    if (client)
        return rgpu_unsupported(&client_logged, "disabling a memcpy node with host memory");
    pthread_mutex_lock(&lock);
    int i = disabled_slot(H(exec), H(h));
    if (on && i >= 0)
        disabled[i].exec = disabled[i].node = 0;
    if (!on && i < 0 && (i = disabled_slot(0, 0)) >= 0)
        disabled[i].exec = H(exec), disabled[i].node = H(h);
    pthread_mutex_unlock(&lock);
    if (i < 0 && !on)
        return CUDA_ERROR_OUT_OF_MEMORY;
    uint8_t a[RGPU_GRAPH_NODE_ENABLE_REQ_SIZE];
    rgpu_pack_graph_node_enable(a, &(struct rgpu_graph_node_enable_req){target, H(h), on != 0});
    return rgpu_defer(RGPU_OP_GRAPH_NODE_ENABLE, a, sizeof a, NULL, 0);
}

API CUresult cuGraphNodeGetEnabled(CUgraphExec exec, CUgraphNode h, unsigned int *on)
{
    int client;
    uint64_t target;
    CUresult r = on ? exec_node(exec, h, ENABLEABLE, &client, &target) : CUDA_ERROR_INVALID_VALUE;
    if (r != CUDA_SUCCESS)
        return r;
    pthread_mutex_lock(&lock);
    *on = disabled_slot(H(exec), H(h)) < 0;
    pthread_mutex_unlock(&lock);
    return CUDA_SUCCESS;
}

API CUresult cuGraphExecChildGraphNodeSetParams(CUgraphExec exec, CUgraphNode h, CUgraph child)
{
    static int logged, host_logged;
    int client;
    uint64_t target;
    CUresult r = changing("changing a child graph node of an executable graph", &logged, exec, h,
                          1u << CU_GRAPH_NODE_TYPE_GRAPH, &client, &target);
    if (r == CUDA_SUCCESS && !rgpu_graph_is_live(H(child), KIND_GRAPH))
        r = CUDA_ERROR_INVALID_VALUE;
    if (r != CUDA_SUCCESS)
        return r;
    if (rgpu_graph_has_host_nodes(child, &r))
        return r != CUDA_SUCCESS ? r : rgpu_unsupported(&host_logged, "a child graph with host nodes");
    if (r != CUDA_SUCCESS)
        return r;
    uint8_t a[RGPU_GRAPH_EXEC_CHILD_SET_REQ_SIZE];
    rgpu_pack_graph_exec_child_set(a, &(struct rgpu_graph_exec_child_set_req){target, H(h), H(child)});
    return rgpu_defer(RGPU_OP_GRAPH_EXEC_CHILD_SET, a, sizeof a, NULL, 0);
}
