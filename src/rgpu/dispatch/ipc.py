"""Inter-process sharing (cuIpcGetMemHandle, OpenMemHandle, CloseMemHandle, and the event forms; protocol 1.8).

A session exports an allocation of its own or an interprocess event: the server's registry (rgpu.session.ipc)
mints a handle for it. Another session of the server opens it in its current context: the memory becomes a
region of that session's that it may use but not free, counted against the exporter's quota, not its own; the
event an event of its own. A session cannot open what it exported itself, as a process cannot with CUDA.

The exporter's free, or the end of its context, withdraws the export. Memory another session still has open is
not freed then (freeing memory another process has mapped is undefined in CUDA): it leaves the exporter's address
space, stays charged to it, and is freed once the last opener has closed it, or when the exporter's context ends.
(What an opener still maps after the exporter's context ended is the driver's to keep or not; the quota of neither
session counts it then.)"""

from __future__ import annotations

import contextlib

import attrs

from rgpu.dispatch.registry import handles
from rgpu.errors import CudaError, Status
from rgpu.protocol import ops
from rgpu.session.handles import Kind
from rgpu.session.ipc import Export
from rgpu.session.state import Session

LAZY_ENABLE_PEER_ACCESS = 0x1  # the one flag cuIpcOpenMemHandle takes
EVENT_INTERPROCESS = 0x4
OPENED = "ipc"  # the owner of an opened region
PENDING = "exported memory still open elsewhere"  # what the quota calls memory freed but not yet released


@attrs.define(slots=True)
class IpcState:
    """Registered on a session's first export or open."""

    exported: dict[int, tuple[int, bytes]] = attrs.Factory(dict)  # allocation -> (context, handle)
    events: dict[int, bytes] = attrs.Factory(dict)  # event handle -> IPC handle
    opened: dict[bytes, list] = attrs.Factory(dict)  # IPC handle -> [address, opens]
    pending: dict[int, tuple[int, bytes, int]] = attrs.Factory(dict)  # freed, still open elsewhere: (ctx, handle, size)

    def release_context(self, s: Session, ctx: int) -> None:
        for ptr, (owner, handle) in list(self.exported.items()):
            if owner == ctx:
                del self.exported[ptr]
                _withdraw(s, owner, ptr, handle)
        for ptr, (owner, _, _) in list(self.pending.items()):
            if owner == ctx:  # (the context's end frees it on the driver whatever is mapped elsewhere)
                _release(s, ptr)
        for event in list(self.events):
            if s.handles.get(event, Kind.EVENT).ctx == ctx:
                forget_event(s, event)
        for handle, (ptr, _) in list(self.opened.items()):
            region = s.memory.region_at(ptr)
            if region is not None and region.ctx == ctx:
                del self.opened[handle]
                _close(s, handle, region)


@contextlib.contextmanager
def _registry_errors():
    """The registry's files could not be written (a full /dev/shm): the call fails, the server goes on."""
    try:
        yield
    except OSError as e:
        raise CudaError(Status.OUT_OF_MEMORY, f"the server could not record the export ({e})") from None


def _state(s: Session) -> IpcState:
    if s.ipc is None:
        raise CudaError(Status.NOT_SUPPORTED, "this server shares nothing between sessions")
    state = s.extensions.get("ipc")
    if state is None:
        state = s.extensions["ipc"] = IpcState()
    settle(s)  # (an opener elsewhere may have closed since: the exporter hears of it on its next call)
    return state


def _withdraw(s: Session, ctx: int, ptr: int, handle: bytes) -> None:
    s.ipc.withdraw(handle)
    s.backend.ipc_withdraw_memory(s.context(ctx).obj, ptr)


def _release(s: Session, ptr: int) -> None:
    state = s.extensions["ipc"]
    ctx, _, size = state.pending.pop(ptr)
    if not state.pending:
        s.reclaim = None
    try:
        s.backend.mem_free(s.context(ctx).obj, ptr)
    except CudaError as e:
        s.log.debug("freeing exported memory 0x%x failed (%s)", ptr, e)
    s.release_memory(size, PENDING)


def _release_closed(s: Session, state: IpcState) -> None:
    """Free what was waiting for its openers, where none is left."""
    for ptr, (_, handle, _) in list(state.pending.items()):
        if not s.ipc.opened_elsewhere(handle):
            _release(s, ptr)
    if not state.pending:
        s.reclaim = None


def settle(s: Session) -> None:
    """Before an allocation is charged: what waited for openers elsewhere who have closed it since goes now."""
    state = s.extensions.get("ipc")
    if state is not None and state.pending:
        _release_closed(s, state)


def free_allocation(s: Session, ptr: int) -> None:
    """cuMemFree (and cuMemFreeAsync) of an allocation of the session's: withdrawn if exported; freed at once
    unless another session has it open (see the module's docstring)."""
    region = s.memory.allocation_at(ptr)
    state = s.extensions.get("ipc")
    known = state.exported.pop(ptr, None) if state is not None else None
    if known is not None:
        # (withdrawn first, then the markers read; an opener marks first, then looks up: one of the two sees the other)
        _withdraw(s, region.ctx, ptr, known[1])
        if s.ipc.opened_elsewhere(known[1]):
            s.memory.remove(ptr)
            s.memory.charge(region.size, PENDING)  # (what the region's removal just gave back)
            state.pending[ptr] = (region.ctx, known[1], region.size)
            s.reclaim = lambda: settle(s)  # (every later charge first releases what its openers closed)
            return
    s.backend.mem_free(s.context(region.ctx).obj, ptr)
    s.memory.remove(ptr)
    if state is not None and state.pending:
        _release_closed(s, state)


def forget_event(s: Session, event: int) -> None:
    """`event` is about to be destroyed: if it was exported, the handle stops opening (EVENT_DESTROY calls this)."""
    state = s.extensions.get("ipc")
    handle = state.events.pop(event, None) if state is not None else None
    if handle is not None:
        s.ipc.withdraw(handle)


def _close(s: Session, handle: bytes, region) -> None:
    s.memory.remove(region.start)
    s.ipc.note_closed(handle, s.id)
    try:
        s.backend.ipc_close_memory(s.context(region.ctx).obj, region.start)
    except CudaError as e:
        s.log.debug("closing opened memory 0x%x failed (%s)", region.start, e)


@handles(ops.IPC_GET_MEM_HANDLE, blocking=True)
def _get_mem_handle(s: Session, args, bulk):
    state = _state(s)
    region = s.memory.allocation_at(args.dptr)
    known = state.exported.get(args.dptr)
    if known is None:
        handle = s.ipc.new_handle()
        ctx = s.context(region.ctx).obj
        with _registry_errors():
            payload = s.backend.ipc_export_memory(ctx, args.dptr, s.ipc.data_path(handle))
        try:
            with _registry_errors():
                s.ipc.publish(handle, Export("memory", s.id, payload))
        except CudaError:
            _withdraw(s, region.ctx, args.dptr, handle)
            raise
        known = state.exported[args.dptr] = (region.ctx, handle)
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
    ctx = s.context()
    with _registry_errors():
        s.ipc.note_open(handle, s.id)  # (before the lookup: an exporter's free after it sees the marker)
    try:
        export = s.ipc.lookup(handle, "memory")
        if export is None:
            raise CudaError(Status.INVALID_VALUE, "no memory is exported by that handle (never, or freed since)")
        if export.session == s.id:
            raise CudaError(Status.INVALID_CONTEXT, "a session cannot open memory it exported itself")
        ptr, size = s.backend.ipc_open_memory(ctx.obj, export.payload, args.flags)
    except BaseException:
        s.ipc.note_closed(handle, s.id)
        raise
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
        _close(s, handle, region)
    return (remaining,)


@handles(ops.IPC_GET_EVENT_HANDLE, blocking=True)
def _get_event_handle(s: Session, args, bulk):
    state = _state(s)
    ctx, entry = s.object(args.event, Kind.EVENT)
    if not entry.info & EVENT_INTERPROCESS:  # (the driver made it: INTERPROCESS came with DISABLE_TIMING)
        raise CudaError(Status.INVALID_HANDLE, "an IPC event is made with the INTERPROCESS flag")
    handle = state.events.get(args.event)
    if handle is None:
        handle = s.ipc.new_handle()
        payload = s.backend.ipc_export_event(ctx.obj, entry.obj)
        with _registry_errors():
            s.ipc.publish(handle, Export("event", s.id, payload))
        state.events[args.event] = handle
    return (handle,)


@handles(ops.IPC_OPEN_EVENT_HANDLE, blocking=True)
def _open_event_handle(s: Session, args, bulk):
    _state(s)
    export = s.ipc.lookup(bytes(args.handle), "event")
    if export is None:
        raise CudaError(Status.INVALID_VALUE, "no event is exported by that handle")
    if export.session == s.id:
        raise CudaError(Status.INVALID_CONTEXT, "a session cannot open an event it exported itself")
    ctx = s.context()
    event = s.backend.ipc_open_event(ctx.obj, export.payload)
    return (s.handles.add(Kind.EVENT, event, ctx=s.current_ctx, info=EVENT_INTERPROCESS),)
