"""Inter-process sharing (cuIpcGetMemHandle, OpenMemHandle, CloseMemHandle, and the event forms; protocol 1.8).

A session exports an allocation of its own or an interprocess event: the server's registry (rgpu.session.ipc)
mints a handle for it. Another session of the server opens it in its current context: the memory becomes a
region of that session's that it may use but not free, counted against the exporter's quota, not its own; the
event an event of its own. A session cannot open what it exported itself, as a process cannot with CUDA. The
exporter's free, or the end of its context, withdraws the export; what others opened stays theirs until they
close it or their context ends."""

from __future__ import annotations

import attrs

from rgpu.dispatch.registry import handles
from rgpu.errors import CudaError, Status
from rgpu.protocol import ops
from rgpu.session.handles import Kind
from rgpu.session.ipc import Export
from rgpu.session.state import Session

LAZY_ENABLE_PEER_ACCESS = 0x1  # the one flag cuIpcOpenMemHandle takes
EVENT_INTERPROCESS, EVENT_DISABLE_TIMING = 0x4, 0x2
OPENED = "ipc"  # the owner of an opened region


@attrs.define(slots=True)
class IpcState:
    """Registered on a session's first export or open."""

    exported: dict[int, tuple[int, bytes]] = attrs.Factory(dict)  # allocation -> (context, handle)
    events: dict[int, bytes] = attrs.Factory(dict)  # event handle -> IPC handle
    opened: dict[bytes, list] = attrs.Factory(dict)  # IPC handle -> [address, opens]

    def release_context(self, s: Session, ctx: int) -> None:
        for ptr, (owner, _) in list(self.exported.items()):
            if owner == ctx:
                withdraw(s, ptr)
        for event in list(self.events):
            if s.handles.get(event, Kind.EVENT).ctx == ctx:
                forget_event(s, event)
        for handle, (ptr, _) in list(self.opened.items()):
            region = s.memory.region_at(ptr)
            if region is not None and region.ctx == ctx:
                del self.opened[handle]
                _close(s, region)


def _state(s: Session) -> IpcState:
    if s.ipc is None:
        raise CudaError(Status.NOT_SUPPORTED, "this server shares nothing between sessions")
    state = s.extensions.get("ipc")
    if state is None:
        state = s.extensions["ipc"] = IpcState()
    return state


def withdraw(s: Session, ptr: int) -> None:
    """`ptr` is about to be freed: if it was exported, the handle stops opening (MEM_FREE calls this)."""
    state = s.extensions.get("ipc")
    known = state.exported.pop(ptr, None) if state is not None else None
    if known is not None:
        s.ipc.withdraw(known[1])
        s.backend.ipc_withdraw_memory(s.context(known[0]).obj, ptr)


def forget_event(s: Session, event: int) -> None:
    """`event` is about to be destroyed: if it was exported, the handle stops opening (EVENT_DESTROY calls this)."""
    state = s.extensions.get("ipc")
    handle = state.events.pop(event, None) if state is not None else None
    if handle is not None:
        s.ipc.withdraw(handle)


def _close(s: Session, region) -> None:
    s.memory.remove(region.start)
    try:
        s.backend.ipc_close_memory(s.context(region.ctx).obj, region.start)
    except CudaError as e:
        s.log.debug("closing opened memory 0x%x failed (%s)", region.start, e)


@handles(ops.IPC_GET_MEM_HANDLE)
def _get_mem_handle(s: Session, args, bulk):
    state = _state(s)
    region = s.memory.allocation_at(args.dptr)
    known = state.exported.get(args.dptr)
    if known is None:
        payload = s.backend.ipc_export_memory(s.context(region.ctx).obj, args.dptr)
        known = state.exported[args.dptr] = (region.ctx, s.ipc.publish(Export("memory", s.id, payload)))
    return (known[1],)


@handles(ops.IPC_OPEN_MEM_HANDLE, blocking=True)
def _open_mem_handle(s: Session, args, bulk):
    state = _state(s)
    if args.flags & ~LAZY_ENABLE_PEER_ACCESS:
        raise CudaError(Status.INVALID_VALUE, f"IPC open flags 0x{args.flags:x}")
    handle = bytes(args.handle)
    if handle in state.opened:  # (CUDA: the same address again, one more reference)
        state.opened[handle][1] += 1
        ptr = state.opened[handle][0]
        return ptr, s.memory.region_at(ptr).size
    export = s.ipc.lookup(handle, "memory")
    if export is None:
        raise CudaError(Status.INVALID_VALUE, "no memory is exported by that handle (never, or freed since)")
    if export.session == s.id:
        raise CudaError(Status.INVALID_CONTEXT, "a session cannot open memory it exported itself")
    ctx = s.context()
    ptr, size = s.backend.ipc_open_memory(ctx.obj, export.payload, args.flags)
    s.add_region(ptr, size, s.current_ctx, OPENED)
    state.opened[handle] = [ptr, 1]
    return ptr, size


@handles(ops.IPC_CLOSE_MEM_HANDLE, blocking=True)
def _close_mem_handle(s: Session, args, bulk):
    state = _state(s)
    region = s.memory.region_at(args.dptr)
    if region is None or region.owner != OPENED:
        raise CudaError(Status.INVALID_VALUE, f"0x{args.dptr:x} is not memory opened from another session")
    handle = next(h for h, (ptr, _) in state.opened.items() if ptr == args.dptr)
    state.opened[handle][1] -= 1
    remaining = state.opened[handle][1]
    if not remaining:
        del state.opened[handle]
        _close(s, region)
    return (remaining,)


@handles(ops.IPC_GET_EVENT_HANDLE)
def _get_event_handle(s: Session, args, bulk):
    state = _state(s)
    ctx, entry = s.object(args.event, Kind.EVENT)
    if entry.info != EVENT_INTERPROCESS | EVENT_DISABLE_TIMING:
        raise CudaError(Status.INVALID_HANDLE, "an IPC event is made with INTERPROCESS | DISABLE_TIMING")
    handle = state.events.get(args.event)
    if handle is None:
        payload = s.backend.ipc_export_event(ctx.obj, entry.obj)
        handle = state.events[args.event] = s.ipc.publish(Export("event", s.id, payload))
    return (handle,)


@handles(ops.IPC_OPEN_EVENT_HANDLE)
def _open_event_handle(s: Session, args, bulk):
    _state(s)
    export = s.ipc.lookup(bytes(args.handle), "event")
    if export is None:
        raise CudaError(Status.INVALID_VALUE, "no event is exported by that handle")
    if export.session == s.id:
        raise CudaError(Status.INVALID_CONTEXT, "a session cannot open an event it exported itself")
    ctx = s.context()
    event = s.backend.ipc_open_event(ctx.obj, export.payload)
    return (s.handles.add(Kind.EVENT, event, ctx=s.current_ctx, info=EVENT_INTERPROCESS | EVENT_DISABLE_TIMING),)
