/* Graph memory figures (protocol 1.9): cuDeviceGraphMemTrim and cuDeviceGet/SetGraphMemAttribute, one round trip
 * each. The figures are the session's own graph memory on the device, as the server counts it against the
 * session's quota: another program's graphs on the same GPU are not this one's to see. */
#include <string.h>

#include "graph.h"
#include "rgpu_shim.h"

#define API __attribute__((visibility("default")))

/* GRAPH_MEM's `which`: 0 trim, 1 + attribute for a figure, 5 / 6 reset a high-water mark */
static CUresult graph_mem(CUdevice dev, uint32_t which, uint64_t *value)
{
    static int logged;
    CUresult r = rgpu_graph_need();
    if (r == CUDA_SUCCESS)
        r = rgpu_need_protocol(9, &logged, "graph memory figures (cuDeviceGetGraphMemAttribute)");
    if (r != CUDA_SUCCESS)
        return r;
    uint8_t a[RGPU_GRAPH_MEM_REQ_SIZE], rep[RGPU_GRAPH_MEM_REP_SIZE];
    struct rgpu_graph_mem_rep got;
    rgpu_pack_graph_mem(a, &(struct rgpu_graph_mem_req){(int32_t)dev, which});
    r = rgpu_call(RGPU_OP_GRAPH_MEM, a, sizeof a, NULL, 0, rep, sizeof rep, NULL);
    if (r == CUDA_SUCCESS && rgpu_unpack_graph_mem(rep, sizeof rep, &got) < 0)
        r = rgpu_bad_reply(RGPU_OP_GRAPH_MEM, "reply of the wrong size");
    if (r == CUDA_SUCCESS)
        *value = got.value;
    return r;
}

API CUresult cuDeviceGraphMemTrim(CUdevice dev)
{
    uint64_t ignored;
    return graph_mem(dev, 0, &ignored);
}

API CUresult cuDeviceGetGraphMemAttribute(CUdevice dev, CUgraphMem_attribute attr, void *value)
{
    uint64_t v;
    if (!value || (unsigned)attr > CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = graph_mem(dev, 1 + (uint32_t)attr, &v);
    if (r == CUDA_SUCCESS)
        memcpy(value, &v, sizeof v); /* a cuuint64_t, for every attribute */
    return r;
}

API CUresult cuDeviceSetGraphMemAttribute(CUdevice dev, CUgraphMem_attribute attr, void *value)
{
    uint64_t v;
    /* Only the high-water marks can be set, and only to 0: reset to the current figure. */
    if (!value || (attr != CU_GRAPH_MEM_ATTR_USED_MEM_HIGH && attr != CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH))
        return CUDA_ERROR_INVALID_VALUE;
    memcpy(&v, value, sizeof v);
    if (v)
        return CUDA_ERROR_INVALID_VALUE;
    return graph_mem(dev, attr == CU_GRAPH_MEM_ATTR_USED_MEM_HIGH ? 5 : 6, &v);
}
