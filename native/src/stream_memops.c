/* Stream memory operations (cuStreamWaitValue32/64, cuStreamWriteValue32/64, cuStreamBatchMemOp; protocol 1.8):
 * CUDA defines them as asynchronous work on the stream, so they are queued and batched like launches. The server
 * checks every operation; this side sends one without waiting only where it looks like one the server takes (a
 * known operation and flags, an aligned address inside device memory the server gave), so that a call the driver
 * would refuse is refused at the call -- with the server's own answer, a round trip -- and not at a later
 * synchronization.
 *
 * The program's host memory (page-locked or registered here; mapped memory is refused where it would be made) is
 * on this machine: a GPU on the server can neither wait on it nor write it, so an operation naming it is
 * NOT_SUPPORTED, logged once. Capture is the server's: on a capturing stream its driver records them as it does. */
#include "conn.h"
#include "rgpu_shim.h"

#define API __attribute__((visibility("default")))

typedef struct rgpu_stream_batch_mem_op_req_item mem_op;

static const uint32_t flags_taken[] = RGPU_MEM_OP_FLAGS;
static const uint8_t width_of[] = RGPU_MEM_OP_WIDTHS;

static int known(uint32_t operation) { return operation < 32 && (RGPU_MEM_OPS >> operation & 1); }

/* The server will take it, as far as this side can tell (only the server's answer counts). */
static int plain(const mem_op *op)
{
    if (!known(op->operation) || (op->flags & ~flags_taken[op->operation]))
        return 0;
    unsigned width = width_of[op->operation];
    return !width || (op->address % width == 0 && rgpu_is_device_range(op->address, width));
}

static int on_this_host(const mem_op *op)
{
    return known(op->operation) && width_of[op->operation] && rgpu_is_program_host(op->address);
}

static CUresult refuse_host(void)
{
    static int logged;
    return rgpu_unsupported(&logged, "stream memory operations on host memory (it is on this machine, the GPU on "
                                     "the server's)");
}

/* Deferred where every operation is plain, else a round trip; NOT_SUPPORTED from a server before 1.8. */
static CUresult send(uint16_t opcode, const void *args, size_t args_len, const void *bulk, size_t bulk_len, int defer,
                     int names_host_memory)
{
    static int logged;
    uint8_t routed[RGPU_ROUTE_BUF];
    const void *a = args;
    CUresult r = rgpu_ready();
    if (r != CUDA_SUCCESS)
        return r;
    if (names_host_memory)
        return refuse_host();
    /* (the server the call goes to must know the operations: with several, the stream's or the address's) */
    if (conn_select(opcode, &a, args_len, routed) == CUDA_SUCCESS &&
        (r = rgpu_need_protocol(8, &logged, "stream memory operations")) != CUDA_SUCCESS)
        return r;
    return defer ? rgpu_defer(opcode, args, args_len, bulk, bulk_len)
                 : rgpu_call(opcode, args, args_len, bulk, bulk_len, NULL, 0, NULL);
}

static CUresult one(CUstream s, uint32_t operation, CUdeviceptr addr, uint64_t value, unsigned flags)
{
    mem_op op = {.operation = operation, .flags = flags, .address = addr, .value = value};
    uint8_t a[RGPU_STREAM_MEM_OP_REQ_SIZE];
    rgpu_pack_stream_mem_op(a, &(struct rgpu_stream_mem_op_req){rgpu_stream_handle(s), operation, flags, addr, value});
    return send(RGPU_OP_STREAM_MEM_OP, a, sizeof a, NULL, 0, plain(&op), on_this_host(&op));
}

/* One of CUDA's records as the wire's: a wait's fields lie where a write's do, a flush's flags where a barrier's
 * do. An operation that is not CUDA's travels without its fields, for the server to refuse. */
static mem_op wire_op(const CUstreamBatchMemOpParams *p)
{
    mem_op op = {.operation = (uint32_t)p->operation};
    if (!known(op.operation))
        return op;
    if (!width_of[op.operation]) {
        op.flags = p->memoryBarrier.flags;
        return op;
    }
    op.flags = p->waitValue.flags, op.address = p->waitValue.address;
    op.value = width_of[op.operation] == 8 ? p->waitValue.value64 : p->waitValue.value;
    return op;
}

static CUresult batch(CUstream s, unsigned count, const CUstreamBatchMemOpParams *params, unsigned flags)
{
    if (count > RGPU_MAX_BATCH_MEM_OPS || (count && !params))
        return CUDA_ERROR_INVALID_VALUE;
    uint8_t records[RGPU_MAX_BATCH_MEM_OPS * RGPU_STREAM_BATCH_MEM_OP_REQ_ITEM_SIZE];
    int defer = count > 0 && flags == 0, host = 0;
    for (unsigned i = 0; i < count; i++) {
        mem_op op = wire_op(&params[i]);
        defer = defer && plain(&op);
        host = host || on_this_host(&op);
        rgpu_pack_stream_batch_mem_op_req_item(records + i * RGPU_STREAM_BATCH_MEM_OP_REQ_ITEM_SIZE, &op);
    }
    uint8_t a[RGPU_STREAM_BATCH_MEM_OP_REQ_SIZE];
    rgpu_pack_stream_batch_mem_op(a, &(struct rgpu_stream_batch_mem_op_req){rgpu_stream_handle(s), count, flags});
    return send(RGPU_OP_STREAM_BATCH_MEM_OP, a, sizeof a, records, count * RGPU_STREAM_BATCH_MEM_OP_REQ_ITEM_SIZE, defer,
                host);
}

/* The attributes that offer these operations read 0 from a device of a server before 1.8 (the calls are refused). */
void rgpu_memops_offered(int32_t *attrs)
{
    static const int offering[] = {CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1,
                                   CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS_V1,
                                   CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR_V1,
                                   CU_DEVICE_ATTRIBUTE_CAN_FLUSH_REMOTE_WRITES,
                                   CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS,
                                   CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR};
    if (rgpu_server_minor() < 8)
        for (size_t i = 0; i < sizeof offering / sizeof *offering; i++)
            attrs[offering[i]] = 0;
}

/* defines: cuStreamWaitValue32_v2 cuStreamWaitValue32_v2_ptsz cuStreamWaitValue64_v2 cuStreamWaitValue64_v2_ptsz
 * cuStreamWriteValue32_v2 cuStreamWriteValue32_v2_ptsz cuStreamWriteValue64_v2 cuStreamWriteValue64_v2_ptsz */
#define VALUE_OP(name, type, operation)                                                                           \
    API CUresult name(CUstream s, CUdeviceptr addr, type value, unsigned int flags)                               \
    {                                                                                                             \
        return one(s, operation, addr, value, flags);                                                             \
    }                                                                                                             \
    API CUresult name##_ptsz(CUstream s, CUdeviceptr addr, type value, unsigned int flags)                        \
    {                                                                                                             \
        return one(s, operation, addr, value, flags);                                                             \
    }
VALUE_OP(cuStreamWaitValue32_v2, cuuint32_t, CU_STREAM_MEM_OP_WAIT_VALUE_32)
VALUE_OP(cuStreamWaitValue64_v2, cuuint64_t, CU_STREAM_MEM_OP_WAIT_VALUE_64)
VALUE_OP(cuStreamWriteValue32_v2, cuuint32_t, CU_STREAM_MEM_OP_WRITE_VALUE_32)
VALUE_OP(cuStreamWriteValue64_v2, cuuint64_t, CU_STREAM_MEM_OP_WRITE_VALUE_64)

API CUresult cuStreamBatchMemOp_v2(CUstream s, unsigned int count, CUstreamBatchMemOpParams *params, unsigned int flags)
{
    return batch(s, count, params, flags);
}

API CUresult cuStreamBatchMemOp_v2_ptsz(CUstream s, unsigned int count, CUstreamBatchMemOpParams *params,
                                        unsigned int flags)
{
    return batch(s, count, params, flags);
}
