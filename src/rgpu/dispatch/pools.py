"""Stream-ordered memory: pools (cuMemPoolCreate...), cuMemAllocAsync / cuMemAllocFromPoolAsync, cuMemFreeAsync.

Every pool is the session's own, the "default" ones included: sessions never share the device's default pool,
whose cached memory another session could otherwise be handed. A pool belongs to the context current when it
was made and goes with it. Live pool allocations count against the session's memory quota from allocation
until the free is queued (memory a pool keeps cached after frees is bounded by the session's peak use). Pool
memory is device memory for the range checks from allocation until its free is queued: later work that names
it is refused, as on a GPU it would be a use after free.
"""

from __future__ import annotations

from typing import Any

import attrs

from rgpu.dispatch import access, ipc, quota
from rgpu.dispatch.access import LOCATION_DEVICE, device
from rgpu.dispatch.registry import handles
from rgpu.errors import CudaError, Status
from rgpu.protocol import ops
from rgpu.session.handles import Kind, Region
from rgpu.session.state import Session


OWNER = "pool"
INT_ATTRIBUTES = {1, 2, 3}  # the reuse policies; 4..8 are byte counts
RELEASE_THRESHOLD, RESERVED_HIGH, USED_HIGH = 4, 6, 8


@attrs.define(eq=False)
class PoolInfo:
    device: int
    access: dict = attrs.Factory(dict)  # (location type, id) -> flags, beyond the owning device's read-write


@attrs.define(eq=False)
class Allocation:
    pool: int  # session handle of the pool
    pool_obj: Any  # the backend's pool (it outlives the handle while it has allocations)
    size: int
    ctx: int


class PoolState:
    def __init__(self) -> None:
        self.defaults: dict[int, int] = {}  # device -> pool handle
        self.current: dict[int, int] = {}  # device -> pool handle (cuDeviceSetMemPool)
        self.allocations: dict[int, Allocation] = {}  # pointer -> allocation

    def release_context(self, s: Session, ctx: int) -> None:
        """Free what the context's pools still hand out, then the pools; pools of other contexts keep working."""
        dead = set(s.handles.owned_by(ctx=ctx, kind=Kind.MEM_POOL))
        for ptr, a in list(self.allocations.items()):
            if a.pool in dead or a.ctx == ctx:
                try:
                    _free(s, self, ptr, None)
                except CudaError as e:
                    s.log.debug("pool teardown: freeing 0x%x failed (%s)", ptr, e)
        for handle in dead:
            entry = s.handles.remove(handle)
            try:
                s.backend.pool_destroy(s.context(ctx).obj, entry.obj)
            except CudaError as e:
                s.log.debug("pool teardown: destroying a pool failed (%s)", e)
        for table in (self.defaults, self.current):
            for dev in [d for d, h in table.items() if h in dead]:
                del table[dev]


def state(s: Session) -> PoolState:
    pools = s.extensions.get("pools")
    if pools is None:
        pools = s.extensions["pools"] = PoolState()
    return pools


def _pool(s: Session, handle: int):
    try:
        return s.object(handle, Kind.MEM_POOL)
    except CudaError:
        raise CudaError(Status.INVALID_VALUE, f"0x{handle:x} is not a memory pool of this session") from None


def _make_pool(s: Session, dev: int, max_size: int = 0, usage: int = 0) -> int:
    ctx = s.context()
    obj = s.backend.pool_create(ctx.obj, dev, max_size, usage)
    return s.handles.add(Kind.MEM_POOL, obj, ctx=s.current_ctx, info=PoolInfo(dev))


def _default(s: Session, pools: PoolState, dev: int) -> int:
    handle = pools.defaults.get(dev)
    if handle is None or handle not in s.handles:
        handle = pools.defaults[dev] = _make_pool(s, dev)
    return handle


def _free(s: Session, pools: PoolState, ptr: int, stream: int | None) -> None:
    """Queue the free on `stream` (None: the allocating context's NULL stream)."""
    a = pools.allocations.pop(ptr)
    s.memory.remove(ptr)
    quota.uncharge(s, a.size, quota.POOLS)
    ctx, strm = s.stream(stream) if stream else (s.context(a.ctx), None)
    s.backend.pool_free(ctx.obj, a.pool_obj, ptr, strm)


# -- handlers --------------------------------------------------------------------------------------------------
@handles(ops.MEM_POOL_CREATE)
def _create(s: Session, args, bulk):
    if args.handle_types:
        raise CudaError(Status.NOT_SUPPORTED, "pools of exportable memory (shareable handles cannot cross the "
                                              "network)")
    return (_make_pool(s, device(s, args.device), args.max_size, args.usage),)


@handles(ops.MEM_POOL_DESTROY, blocking=True)
def _destroy(s: Session, args, bulk):
    ctx, entry = _pool(s, args.pool)
    pools = state(s)
    if args.pool in pools.defaults.values():
        raise CudaError(Status.INVALID_VALUE, "a device's default pool cannot be destroyed")
    # As on a GPU, what the pool handed out stays valid until freed (then it goes back to the device).
    s.handles.pop(args.pool, Kind.MEM_POOL)
    for dev in [d for d, h in pools.current.items() if h == args.pool]:
        del pools.current[dev]
    s.backend.pool_destroy(ctx.obj, entry.obj)


@handles(ops.MEM_POOL_GET_DEFAULT)
def _get_default(s: Session, args, bulk):
    return (_default(s, state(s), device(s, args.device)),)


@handles(ops.MEM_POOL_GET_CURRENT)
def _get_current(s: Session, args, bulk):
    pools, dev = state(s), device(s, args.device)
    handle = pools.current.get(dev)
    return (handle if handle in s.handles else _default(s, pools, dev),)


@handles(ops.MEM_POOL_SET_CURRENT)
def _set_current(s: Session, args, bulk):
    _, entry = _pool(s, args.pool)
    if entry.info.device != device(s, args.device):
        raise CudaError(Status.INVALID_VALUE, f"the pool is on device {entry.info.device}, not {args.device}")
    state(s).current[args.device] = args.pool


@handles(ops.MEM_ALLOC_ASYNC)
def _alloc_async(s: Session, args, bulk):
    if args.size == 0:
        raise CudaError(Status.INVALID_VALUE, "stream-ordered allocation of 0 bytes")
    pools = state(s)
    ctx, strm = s.stream(args.stream)
    ctx_handle = s.handles.get(args.stream, Kind.STREAM).ctx if args.stream else s.current_ctx
    handle = args.pool
    if not handle:
        handle = pools.current.get(ctx.info)
        if handle not in s.handles:
            handle = _default(s, pools, ctx.info)
    _, entry = _pool(s, handle)
    quota.charge(s, args.size, quota.POOLS)
    try:
        ptr = s.backend.pool_alloc(ctx.obj, entry.obj, args.size, strm)
    except BaseException:
        quota.uncharge(s, args.size, quota.POOLS)
        raise
    pools.allocations[ptr] = Allocation(handle, entry.obj, args.size, ctx_handle)
    s.memory.add(Region(ptr, args.size, ctx_handle, OWNER))
    return (ptr,)


@handles(ops.MEM_FREE_ASYNC)
def _free_async(s: Session, args, bulk):
    pools = state(s)
    if args.dptr in pools.allocations:
        _free(s, pools, args.dptr, args.stream)
        return
    # cuMemAlloc memory may be freed this way too; it is freed at once, as cuMemFree would.
    s.stream(args.stream)
    ipc.free_allocation(s, args.dptr)


def free_now(s: Session, ptr: int) -> bool:
    """cuMemFree of pool memory (allowed by CUDA): freed at once. False when `ptr` is not pool memory."""
    pools = s.extensions.get("pools")
    if pools is None or ptr not in pools.allocations:
        return False
    _free(s, pools, ptr, None)
    return True


@handles(ops.MEM_POOL_TRIM, blocking=True)
def _trim(s: Session, args, bulk):
    ctx, entry = _pool(s, args.pool)
    s.backend.pool_trim(ctx.obj, entry.obj, args.keep)


@handles(ops.MEM_POOL_SET_ATTRIBUTE)
def _set_attribute(s: Session, args, bulk):
    ctx, entry = _pool(s, args.pool)
    if args.attrib in INT_ATTRIBUTES:
        if args.value > 1:
            raise CudaError(Status.INVALID_VALUE, f"pool attribute {args.attrib} is a flag, not {args.value}")
    elif args.attrib in (RESERVED_HIGH, USED_HIGH):
        if args.value:
            raise CudaError(Status.INVALID_VALUE, "a high-water mark can only be reset to 0")
    elif args.attrib != RELEASE_THRESHOLD:
        raise CudaError(Status.INVALID_VALUE, f"pool attribute {args.attrib} cannot be set")
    s.backend.pool_set_attribute(ctx.obj, entry.obj, args.attrib, args.value)


@handles(ops.MEM_POOL_GET_ATTRIBUTE)
def _get_attribute(s: Session, args, bulk):
    ctx, entry = _pool(s, args.pool)
    if not 1 <= args.attrib <= USED_HIGH:
        raise CudaError(Status.INVALID_VALUE, f"pool attribute {args.attrib}")
    return (s.backend.pool_get_attribute(ctx.obj, entry.obj, args.attrib),)


@handles(ops.MEM_POOL_SET_ACCESS)
def _set_access(s: Session, args, bulk):
    ctx, entry = _pool(s, args.pool)
    descriptors = access.descriptors(s, args.count, bulk,
                                     host="pool access for a host location (it would be the server's)")
    s.backend.pool_set_access(ctx.obj, entry.obj, descriptors)
    for ltype, lid, flags in descriptors:
        entry.info.access[(ltype, lid)] = flags


@handles(ops.MEM_POOL_GET_ACCESS)
def _get_access(s: Session, args, bulk):
    _, entry = _pool(s, args.pool)
    info: Any = entry.info
    own = 3 if (args.location_type, args.location_id) == (LOCATION_DEVICE, info.device) else 0
    return (info.access.get((args.location_type, args.location_id), own),)
