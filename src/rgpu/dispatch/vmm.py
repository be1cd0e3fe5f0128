"""Virtual memory management (cuMemCreate, cuMemAddressReserve, cuMemMap...): per-session state and handlers.

A session owns its physical allocations (handles of kind VMM_ALLOCATION), its address reservations and the
mappings in them. Physical bytes count against the session's memory quota from cuMemCreate until the memory
is really gone: released by the program *and* unmapped everywhere (CUDA keeps mapped memory alive after
cuMemRelease, and llama.cpp releases right after mapping). Mapped ranges are device memory for the server's
range checks; adjacent mappings in one reservation form one checked span, because a buffer may straddle them
(PyTorch's expandable segments). Everything is released at context teardown, in CUDA's order: unmap, release,
free the addresses.

Shareable handle types: a POSIX file descriptor or a fabric handle names memory on the server's machine and
means nothing to the client, so exporting is refused. Requesting POSIX-fd exportability at cuMemCreate is
accepted and recorded (PyTorch asks for it by default and never exports unless it shares tensors between
processes); fabric and Win32 requests are refused with NOT_SUPPORTED, which PyTorch and XLA take as "not on
this machine" and fall back from. Granularity queries ignore the requested handle types: they answer for the
allocation rgpu would really make.
"""

from __future__ import annotations

import bisect
from typing import Any

import attrs

from rgpu.dispatch import access, quota
from rgpu.dispatch.access import ACCESS_NONE, device, refuse
from rgpu.dispatch.registry import handles
from rgpu.errors import CudaError, Status
from rgpu.protocol import ops
from rgpu.session.handles import Kind, Region
from rgpu.session.state import Session


HANDLE_POSIX_FD, HANDLE_WIN32, HANDLE_WIN32_KMT, HANDLE_FABRIC = 0x1, 0x2, 0x4, 0x8
_KNOWN_HANDLE_TYPES = HANDLE_POSIX_FD | HANDLE_WIN32 | HANDLE_WIN32_KMT | HANDLE_FABRIC
_REFUSED_HANDLE_TYPES = HANDLE_WIN32 | HANDLE_WIN32_KMT | HANDLE_FABRIC
# What one session may reserve in all (address space only; physical memory is what the quota limits).
MAX_RESERVED = 1 << 44

# Device attributes a client must see as "no" whatever the server's GPU says: exporting memory to an OS handle
# (POSIX fd 103, Win32 104/105, fabric 128, pool IPC 119), GPUDirect RDMA (110), and host-memory locations
# for VMM and pools (141, 142, 144, 145) -- none of which can reach the client's machine.
ATTRIBUTE_OVERRIDES = {103: 0, 104: 0, 105: 0, 110: 0, 119: 0, 128: 0, 141: 0, 142: 0, 144: 0, 145: 0}

@attrs.define(eq=False)
class Physical:
    obj: Any  # the backend's allocation
    size: int
    props: tuple  # (device, handle types, compression, usage), as MEM_GET_ALLOCATION_PROPERTIES answers
    refs: int = 1  # cuMemCreate and cuMemRetainAllocationHandle, less cuMemRelease
    maps: int = 0


@attrs.define(eq=False)
class Mapping:
    start: int
    size: int
    handle: int  # the physical allocation's session handle
    access: dict = attrs.Factory(dict)  # (location type, id) -> flags

    @property
    def end(self) -> int:
        return self.start + self.size


@attrs.define(eq=False)
class Reservation:
    start: int
    size: int
    ctx: int
    mappings: list = attrs.Factory(list)  # Mapping, sorted by start

    @property
    def owner(self) -> str:
        return f"vmm:{self.start:x}"

    def overlapping(self, start: int, end: int) -> list[Mapping]:
        return [m for m in self.mappings if m.start < end and start < m.end]


class VmmState:
    """One session's reservations, mappings and (through its handle table) physical allocations."""

    def __init__(self) -> None:
        self.reservations: dict[int, Reservation] = {}
        self._starts: list[int] = []
        self.reserved = 0

    def reservation_of(self, ptr: int, size: int) -> Reservation:
        """The reservation holding [ptr, ptr+size), or INVALID_VALUE."""
        i = bisect.bisect_right(self._starts, ptr) - 1
        if i >= 0 and size >= 0:
            r = self.reservations[self._starts[i]]
            if ptr + size <= r.start + r.size:
                return r
        raise CudaError(Status.INVALID_VALUE, f"0x{ptr:x}+{size} is not inside an address range this session "
                                              "reserved")

    def add(self, r: Reservation) -> None:
        bisect.insort(self._starts, r.start)
        self.reservations[r.start] = r
        self.reserved += r.size

    def remove(self, r: Reservation) -> None:
        del self.reservations[r.start]
        del self._starts[bisect.bisect_left(self._starts, r.start)]
        self.reserved -= r.size

    def mapping_at(self, ptr: int) -> tuple[Reservation, Mapping]:
        r = self.reservation_of(ptr, 1)
        for m in r.mappings:
            if m.start <= ptr < m.end:
                return r, m
        raise CudaError(Status.INVALID_VALUE, f"0x{ptr:x} is not mapped")

    # -- teardown ------------------------------------------------------------------------------------
    def release_context(self, s: Session, ctx: int) -> None:
        """Everything made in context `ctx`, in CUDA's order: unmap, release, free the addresses. Memory of
        this context mapped into another context's reservation is unmapped there too."""
        for r in [r for r in self.reservations.values() if r.ctx == ctx]:
            for m in list(r.mappings):
                _quietly(s, _unmap_one, s, self, r, m)
        dead = set(s.handles.owned_by(ctx=ctx, kind=Kind.VMM_ALLOCATION))
        for r in list(self.reservations.values()):
            for m in [m for m in r.mappings if m.handle in dead]:
                _quietly(s, _unmap_one, s, self, r, m)
        for handle in dead:
            if handle in s.handles:  # not already freed by its last unmap above
                _quietly(s, _free_physical, s, handle)
        for r in [r for r in self.reservations.values() if r.ctx == ctx]:
            self.remove(r)
            _quietly(s, s.backend.vmm_address_free, s.context(ctx).obj, r.start, r.size)


def _quietly(s: Session, fn, *args) -> None:
    try:
        fn(*args)
    except CudaError as e:
        s.log.debug("vmm teardown: %s failed (%s); the context's destruction releases it", fn.__name__, e)


def state(s: Session) -> VmmState:
    vmm = s.extensions.get("vmm")
    if vmm is None:
        vmm = s.extensions["vmm"] = VmmState()
    return vmm


def _physical(s: Session, handle: int) -> Physical:
    """A live physical allocation (one the program still holds a reference to)."""
    try:
        entry = s.handles.get(handle, Kind.VMM_ALLOCATION)
    except CudaError:
        raise CudaError(Status.INVALID_VALUE, f"0x{handle:x} is not a memory handle of this session") from None
    if entry.info.refs <= 0:
        raise CudaError(Status.INVALID_VALUE, f"memory handle 0x{handle:x} was released")
    return entry.info


def _free_physical(s: Session, handle: int) -> None:
    entry = s.handles.remove(handle)
    try:
        s.backend.vmm_release(s.context(entry.ctx).obj, entry.obj)
    finally:
        quota.uncharge(s, entry.info.size, quota.VMM)


def _drop_reference(s: Session, handle: int) -> None:
    phys = s.handles.get(handle, Kind.VMM_ALLOCATION).info
    if phys.refs <= 0 and phys.maps <= 0:
        _free_physical(s, handle)


def _refresh_regions(s: Session, r: Reservation) -> None:
    """The reservation's checked spans: its mappings, adjacent ones merged."""
    for region in s.memory.regions(owner=r.owner):
        s.memory.remove(region.start)
    span_start = span_end = None
    for m in r.mappings:
        if span_end == m.start:
            span_end = m.end
            continue
        if span_start is not None:
            s.memory.add(Region(span_start, span_end - span_start, r.ctx, r.owner))
        span_start, span_end = m.start, m.end
    if span_start is not None:
        s.memory.add(Region(span_start, span_end - span_start, r.ctx, r.owner))


def _unmap_one(s: Session, vmm: VmmState, r: Reservation, m: Mapping) -> None:
    r.mappings.remove(m)
    _refresh_regions(s, r)
    phys = s.handles.get(m.handle, Kind.VMM_ALLOCATION).info
    phys.maps -= 1
    try:
        s.backend.vmm_unmap(s.context(r.ctx).obj, m.start, m.size)
    finally:
        _drop_reference(s, m.handle)


def _check_handle_types(handle_types: int) -> None:
    if handle_types & ~_KNOWN_HANDLE_TYPES:
        raise CudaError(Status.INVALID_VALUE, f"unknown handle types 0x{handle_types:x}")


# -- handlers ----------------------------------------------------------------------------------------
@handles(ops.MEM_GET_GRANULARITY)
def _granularity(s: Session, args, bulk):
    a = args
    _check_handle_types(a.handle_types)
    if a.option not in (0, 1):
        raise CudaError(Status.INVALID_VALUE, f"granularity option {a.option}")
    return (s.backend.vmm_granularity(device(s, a.device), a.option, a.compression),)


@handles(ops.MEM_CREATE)
def _create(s: Session, args, bulk):
    a = args
    _check_handle_types(a.handle_types)
    if a.handle_types & _REFUSED_HANDLE_TYPES:
        raise refuse("cuMemCreate with fabric or Win32 handle types (shareable handles cannot cross the network)")
    if a.size == 0 or a.flags:
        raise CudaError(Status.INVALID_VALUE, f"cuMemCreate of {a.size} bytes, flags 0x{a.flags:x}")
    ctx = s.context()
    dev = device(s, a.device)
    quota.charge(s, a.size, quota.VMM)
    try:
        obj = s.backend.vmm_create(ctx.obj, dev, a.size, a.compression, a.usage)
    except BaseException:
        quota.uncharge(s, a.size, quota.VMM)
        raise
    props = (dev, a.handle_types, a.compression, a.usage)
    return (s.handles.add(Kind.VMM_ALLOCATION, obj, ctx=s.current_ctx, info=Physical(obj, a.size, props)),)


@handles(ops.MEM_RELEASE, blocking=True)
def _release(s: Session, args, bulk):
    handle = args.handle
    _physical(s, handle).refs -= 1
    _drop_reference(s, handle)


@handles(ops.MEM_ADDRESS_RESERVE)
def _reserve(s: Session, args, bulk):
    a = args
    vmm = state(s)
    if a.size == 0 or a.alignment & (a.alignment - 1) or a.flags & ~0x1:
        raise CudaError(Status.INVALID_VALUE, f"cuMemAddressReserve({a.size}, alignment {a.alignment}, "
                                              f"flags 0x{a.flags:x})")
    if vmm.reserved + a.size > MAX_RESERVED:
        raise CudaError(Status.OUT_OF_MEMORY, f"a session reserves at most {MAX_RESERVED} bytes of addresses")
    ctx = s.context()
    ptr = s.backend.vmm_address_reserve(ctx.obj, a.size, a.alignment, a.addr, a.flags)
    vmm.add(Reservation(ptr, a.size, s.current_ctx))
    return (ptr,)


@handles(ops.MEM_ADDRESS_FREE, blocking=True)
def _address_free(s: Session, args, bulk):
    ptr, size = args.ptr, args.size
    vmm = state(s)
    r = vmm.reservations.get(ptr)
    if r is None or r.size != size:
        raise CudaError(Status.INVALID_VALUE, f"0x{ptr:x}+{size} is not an address range this session reserved")
    if r.mappings:
        raise CudaError(Status.INVALID_VALUE, f"0x{ptr:x}: {len(r.mappings)} mapping(s) still in the range")
    vmm.remove(r)
    s.backend.vmm_address_free(s.context(r.ctx).obj, ptr, size)


@handles(ops.MEM_MAP)
def _map(s: Session, args, bulk):
    a = args
    vmm = state(s)
    phys = _physical(s, a.handle)
    r = vmm.reservation_of(a.ptr, a.size)
    if a.size == 0 or a.flags or a.offset + a.size > phys.size:
        raise CudaError(Status.INVALID_VALUE, f"cuMemMap of {a.size} bytes at offset {a.offset} of a "
                                              f"{phys.size}-byte allocation, flags 0x{a.flags:x}")
    if r.overlapping(a.ptr, a.ptr + a.size):
        raise CudaError(Status.INVALID_VALUE, f"0x{a.ptr:x}+{a.size} overlaps an existing mapping")
    entry = s.handles.get(a.handle, Kind.VMM_ALLOCATION)
    s.backend.vmm_map(s.context(r.ctx).obj, a.ptr, a.size, a.offset, entry.obj)
    phys.maps += 1
    bisect.insort(r.mappings, Mapping(a.ptr, a.size, a.handle), key=lambda m: m.start)
    _refresh_regions(s, r)


@handles(ops.MEM_UNMAP, blocking=True)
def _unmap(s: Session, args, bulk):
    ptr, size = args.ptr, args.size
    vmm = state(s)
    r = vmm.reservation_of(ptr, size)
    hit = r.overlapping(ptr, ptr + size)
    if size == 0:
        raise CudaError(Status.INVALID_VALUE, f"cuMemUnmap of 0 bytes at 0x{ptr:x}")
    if not hit:
        return  # NVIDIA's driver (580, measured on the H200) accepts unmapping a reserved range with nothing in it
    if any(m.start < ptr or m.end > ptr + size for m in hit):
        raise CudaError(Status.INVALID_VALUE, f"0x{ptr:x}+{size} would unmap part of a mapping")
    for m in hit:
        _unmap_one(s, vmm, r, m)


@handles(ops.MEM_SET_ACCESS)
def _set_access(s: Session, args, bulk):
    a = args
    descriptors = access.descriptors(s, a.count, bulk,
                                     host="cuMemSetAccess for a host location (the client's memory is not the server's)")
    vmm = state(s)
    r = vmm.reservation_of(a.ptr, a.size)
    hit = r.overlapping(a.ptr, a.ptr + a.size)
    covered = sum(min(m.end, a.ptr + a.size) - max(m.start, a.ptr) for m in hit)
    if a.size == 0 or covered != a.size:
        raise CudaError(Status.INVALID_VALUE, f"0x{a.ptr:x}+{a.size} is not entirely mapped")
    s.backend.vmm_set_access(s.context(r.ctx).obj, a.ptr, a.size, descriptors)
    for m in hit:
        for ltype, lid, flags in descriptors:
            m.access[(ltype, lid)] = flags


@handles(ops.MEM_GET_ACCESS)
def _get_access(s: Session, args, bulk):
    a = args
    _, m = state(s).mapping_at(a.ptr)
    return (m.access.get((a.location_type, a.location_id), ACCESS_NONE),)


@handles(ops.MEM_GET_ALLOCATION_PROPERTIES)
def _properties(s: Session, args, bulk):
    return _physical(s, args.handle).props


@handles(ops.MEM_RETAIN_ALLOCATION_HANDLE)
def _retain(s: Session, args, bulk):
    ptr = args.ptr
    _, m = state(s).mapping_at(ptr)
    phys = s.handles.get(m.handle, Kind.VMM_ALLOCATION).info
    phys.refs += 1
    return (m.handle, phys.size)
