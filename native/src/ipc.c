/* IPC handles (protocol 1.8): cuIpcGetMemHandle, cuIpcOpenMemHandle, cuIpcCloseMemHandle, cuIpcGetEventHandle,
 * cuIpcOpenEventHandle. Each process is a session of its own on the server; a handle is 64 bytes the server
 * minted, which another process (another session of the same server) opens, as with CUDA any process of the
 * machine may. Opened memory is device memory to this process's copies and pointer queries. */
#include <string.h>

#include "rgpu_shim.h"

#define API __attribute__((visibility("default")))

_Static_assert(sizeof(CUipcMemHandle) == RGPU_IPC_HANDLE_SIZE, "a handle travels as it is");
_Static_assert(sizeof(CUipcEventHandle) == RGPU_IPC_HANDLE_SIZE, "a handle travels as it is");

static CUresult need_ipc(void)
{
    static int logged;
    CUresult r = rgpu_ready();
    return r == CUDA_SUCCESS ? rgpu_need_protocol(8, &logged, "IPC handles") : r;
}

API CUresult cuIpcGetMemHandle(CUipcMemHandle *handle, CUdeviceptr dptr)
{
    CUresult r = handle ? need_ipc() : CUDA_ERROR_INVALID_VALUE;
    if (r != CUDA_SUCCESS)
        return r;
    uint8_t a[RGPU_IPC_GET_MEM_HANDLE_REQ_SIZE], rep[RGPU_IPC_GET_MEM_HANDLE_REP_SIZE];
    struct rgpu_ipc_get_mem_handle_rep got;
    rgpu_pack_ipc_get_mem_handle(a, &(struct rgpu_ipc_get_mem_handle_req){dptr});
    r = rgpu_call(RGPU_OP_IPC_GET_MEM_HANDLE, a, sizeof a, NULL, 0, rep, sizeof rep, NULL);
    if (r == CUDA_SUCCESS && rgpu_unpack_ipc_get_mem_handle(rep, sizeof rep, &got) != 0)
        return rgpu_bad_reply(RGPU_OP_IPC_GET_MEM_HANDLE, "not a handle");
    if (r == CUDA_SUCCESS)
        memcpy(handle->reserved, got.handle, sizeof handle->reserved);
    return r;
}

API CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *dptr, CUipcMemHandle handle, unsigned int flags)
{
    CUresult r = dptr ? need_ipc() : CUDA_ERROR_INVALID_VALUE;
    if (r != CUDA_SUCCESS)
        return r;
    struct rgpu_ipc_open_mem_handle_req req = {.flags = flags};
    memcpy(req.handle, handle.reserved, sizeof req.handle);
    uint8_t a[RGPU_IPC_OPEN_MEM_HANDLE_REQ_SIZE], rep[RGPU_IPC_OPEN_MEM_HANDLE_REP_SIZE];
    struct rgpu_ipc_open_mem_handle_rep got;
    rgpu_pack_ipc_open_mem_handle(a, &req);
    r = rgpu_call(RGPU_OP_IPC_OPEN_MEM_HANDLE, a, sizeof a, NULL, 0, rep, sizeof rep, NULL);
    if (r == CUDA_SUCCESS && (rgpu_unpack_ipc_open_mem_handle(rep, sizeof rep, &got) != 0 || !got.dptr ||
                              !got.size || got.dptr + got.size < got.dptr))
        return rgpu_bad_reply(RGPU_OP_IPC_OPEN_MEM_HANDLE, "no memory");
    if (r == CUDA_SUCCESS) {
        rgpu_ranges_note_device(got.dptr, got.size, rgpu_thread_ctx());
        *dptr = (CUdeviceptr)got.dptr;
    }
    return r;
}

API CUresult cuIpcCloseMemHandle(CUdeviceptr dptr)
{
    CUresult r = need_ipc();
    if (r != CUDA_SUCCESS)
        return r;
    uint8_t a[RGPU_IPC_CLOSE_MEM_HANDLE_REQ_SIZE], rep[RGPU_IPC_CLOSE_MEM_HANDLE_REP_SIZE];
    struct rgpu_ipc_close_mem_handle_rep got;
    rgpu_pack_ipc_close_mem_handle(a, &(struct rgpu_ipc_close_mem_handle_req){dptr});
    r = rgpu_call(RGPU_OP_IPC_CLOSE_MEM_HANDLE, a, sizeof a, NULL, 0, rep, sizeof rep, NULL);
    if (r == CUDA_SUCCESS && rgpu_unpack_ipc_close_mem_handle(rep, sizeof rep, &got) != 0)
        return rgpu_bad_reply(RGPU_OP_IPC_CLOSE_MEM_HANDLE, "no count of opens");
    if (r == CUDA_SUCCESS && !got.opens) /* (one handle opened twice is one mapping, gone with its last close) */
        rgpu_ranges_drop_device_within(dptr, 1);
    return r;
}

API CUresult cuIpcGetEventHandle(CUipcEventHandle *handle, CUevent event)
{
    CUresult r = handle ? need_ipc() : CUDA_ERROR_INVALID_VALUE;
    if (r != CUDA_SUCCESS)
        return r;
    uint8_t a[RGPU_IPC_GET_EVENT_HANDLE_REQ_SIZE], rep[RGPU_IPC_GET_EVENT_HANDLE_REP_SIZE];
    struct rgpu_ipc_get_event_handle_rep got;
    rgpu_pack_ipc_get_event_handle(a, &(struct rgpu_ipc_get_event_handle_req){(uint64_t)(uintptr_t)event});
    r = rgpu_call(RGPU_OP_IPC_GET_EVENT_HANDLE, a, sizeof a, NULL, 0, rep, sizeof rep, NULL);
    if (r == CUDA_SUCCESS && rgpu_unpack_ipc_get_event_handle(rep, sizeof rep, &got) != 0)
        return rgpu_bad_reply(RGPU_OP_IPC_GET_EVENT_HANDLE, "not a handle");
    if (r == CUDA_SUCCESS)
        memcpy(handle->reserved, got.handle, sizeof handle->reserved);
    return r;
}

API CUresult cuIpcOpenEventHandle(CUevent *event, CUipcEventHandle handle)
{
    CUresult r = event ? need_ipc() : CUDA_ERROR_INVALID_VALUE;
    if (r != CUDA_SUCCESS)
        return r;
    struct rgpu_ipc_open_event_handle_req req;
    memcpy(req.handle, handle.reserved, sizeof req.handle);
    uint8_t a[RGPU_IPC_OPEN_EVENT_HANDLE_REQ_SIZE], rep[RGPU_IPC_OPEN_EVENT_HANDLE_REP_SIZE];
    struct rgpu_ipc_open_event_handle_rep got;
    rgpu_pack_ipc_open_event_handle(a, &req);
    r = rgpu_call(RGPU_OP_IPC_OPEN_EVENT_HANDLE, a, sizeof a, NULL, 0, rep, sizeof rep, NULL);
    if (r == CUDA_SUCCESS && (rgpu_unpack_ipc_open_event_handle(rep, sizeof rep, &got) != 0 || !got.event))
        return rgpu_bad_reply(RGPU_OP_IPC_OPEN_EVENT_HANDLE, "no event");
    if (r == CUDA_SUCCESS)
        *event = (CUevent)(uintptr_t)got.event;
    return r;
}
