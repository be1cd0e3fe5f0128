"""What a session owns: its handles and its device memory, and the checks that keep it to them."""

from __future__ import annotations

import bisect
import enum
import secrets
from typing import Any

import attrs

from rgpu.errors import CudaError, Status


class Kind(enum.IntEnum):
    CONTEXT = 1
    MODULE = 2
    FUNCTION = 3
    STREAM = 4
    EVENT = 5
    BLAS = 6  # a cuBLAS handle
    DNN = 7  # a cuDNN handle
    DNN_DESC = 8  # a finalized cuDNN backend descriptor
    SOLVER = 30  # a cuSOLVER dense handle
    SPARSE = 31  # a cuSPARSE handle
    SPARSE_SPGEMM = 34  # a cuSPARSE SpGEMM descriptor (the state between its phases)
    VMM_ALLOCATION = 20  # a physical allocation (cuMemCreate)
    MEM_POOL = 21  # a stream-ordered memory pool
    # CUDA graphs (rgpu.dispatch.graphs); their handles are minted by the client (see add_client), with these
    # numbers in them: native/gen/rgpu_consts.h carries them to the C side.
    GRAPH = 22
    GRAPH_EXEC = 23
    GRAPH_NODE = 24
    FFT_PLAN = 32  # a cuFFT plan (rgpu.dispatch.fft)
    RAND = 33  # a cuRAND generator
    JIT_LINK = 25  # a pending JIT linker invocation (rgpu.dispatch.jit_link)
    ARRAY = 26  # a CUDA array (rgpu.dispatch.arrays)


_KIND_SHIFT = 56
# Entry.info of a graph that a node owns (a conditional node's body, a child graph moved into its node): it goes
# with its node, never by itself.
GRAPH_BODY = "conditional body"


@attrs.define(slots=True)
class Entry:
    kind: Kind
    obj: Any  # the backend's object
    ctx: int  # handle of the owning context (0 for contexts themselves)
    parent: int = 0  # a function's module
    info: Any = None  # per-kind extras (a function's parameter layout, a context's device...)
    charge: tuple[int, str] | None = None  # (bytes, what) of the session's quota this object holds


class HandleTable:
    """Session-scoped handles: `kind << 56 | salt << 32 | n`. A session can only ever name entries in its own
    table; the random per-session salt also makes another session's handle an unknown number here rather than
    a coincidental match, so a client that mixes up connections gets INVALID_HANDLE, not the wrong object."""

    def __init__(self) -> None:
        self._entries: dict[int, Entry] = {}
        self._next = 1
        self._salt = secrets.randbits(24) << 32
        # Bumped by every removal of a watched handle -- one something was resolved from (launch targets, the
        # fast lane's bindings): those are stale once it moves. Others (an event made and destroyed every step,
        # as timing code does) leave them be, which would otherwise be rebuilt, through Python, every step.
        self.removals = 0
        self._watched: set[int] = set()

    def add(self, kind: Kind, obj: Any, ctx: int = 0, parent: int = 0, info: Any = None,
            charge: tuple[int, str] | None = None) -> int:
        handle = (int(kind) << _KIND_SHIFT) | self._salt | self._next
        self._next += 1
        self._entries[handle] = Entry(kind, obj, ctx, parent, info, charge)
        return handle

    def check_fresh(self, handle: int, kind: Kind) -> None:
        """INVALID_VALUE unless `handle` is one the client minted for `kind` (bit 63 set, the kind in bits 56..62)
        and not in use: checked before the backend makes what it will name, and again by add_client."""
        if handle >> _KIND_SHIFT != (1 << 7) | int(kind) or handle in self._entries:
            raise CudaError(Status.INVALID_VALUE, f"0x{handle:x} is not a fresh client {kind.name.lower()} handle")

    def add_client(self, handle: int, kind: Kind, obj: Any, ctx: int = 0, parent: int = 0, info: Any = None) -> int:
        """Register a handle the client minted: objects made by deferred calls get names before the server has
        seen them. Any other number, or one in use, is refused."""
        self.check_fresh(handle, kind)
        self._entries[handle] = Entry(kind, obj, ctx, parent, info)
        return handle

    def get(self, handle: int, kind: Kind) -> Entry:
        entry = self._entries.get(handle)
        if entry is None or entry.kind != kind:
            raise CudaError(Status.INVALID_HANDLE, f"0x{handle:x} is not a {kind.name.lower()} of this session")
        return entry

    def pop(self, handle: int, kind: Kind) -> Entry:
        entry = self.get(handle, kind)
        del self._entries[handle]
        self._removed(handle)
        return entry

    def remove(self, handle: int) -> Entry:
        entry = self._entries.pop(handle)
        self._removed(handle)
        return entry

    def watch(self, *handles: int) -> None:
        """Something is being resolved from these handles (0: none): their removal must bump `removals`."""
        self._watched.update(handles)

    def _removed(self, handle: int) -> None:
        if handle in self._watched:
            self._watched.discard(handle)
            self.removals += 1

    def owned_by(self, *, ctx: int | None = None, parent: int | None = None, kind: Kind | None = None):
        """Handles (newest first, so dependants go before what they depend on) matching the filters."""
        return [h for h, e in reversed(self._entries.items())
                if (ctx is None or e.ctx == ctx) and (parent is None or e.parent == parent)
                and (kind is None or e.kind == kind)]

    def children(self, kinds: tuple[Kind, ...]) -> dict[int, list[int]]:
        """parent -> the handles of these kinds under it (newest first), in one pass over the table."""
        out: dict[int, list[int]] = {}
        for h, e in reversed(self._entries.items()):
            if e.kind in kinds and e.parent:
                out.setdefault(e.parent, []).append(h)
        return out

    def counts(self) -> dict[str, int]:
        """Live handles by kind ("context": 1, ...); safe from another thread (the copy is one step)."""
        counts: dict[str, int] = {}
        for entry in list(self._entries.values()):
            name = entry.kind.name.lower()
            counts[name] = counts.get(name, 0) + 1
        return counts

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, handle: int) -> bool:
        return handle in self._entries


@attrs.frozen(slots=True)
class Region:
    start: int
    size: int
    ctx: int
    owner: str  # "alloc" (freeable) or "module:<handle>" (a module global)

    @property
    def end(self) -> int:
        return self.start + self.size


class AllocationMap:
    """The device address ranges a session may name, and the byte quota on all the device memory it makes.

    `allocated` is everything charged: allocations (charged as their regions are added) and whatever else a
    session makes device memory for -- module globals, and any later kind -- through charge()/release(),
    broken down by what it is in `charged`."""

    def __init__(self, limit: int | None = None):
        self.limit = limit
        self.allocated = 0
        self.peak = 0  # the most `allocated` has been
        self.charged: dict[str, int] = {}
        self._starts: list[int] = []
        self._regions: dict[int, Region] = {}
        self.changes = 0  # bumped by every add and remove: a copy of the ranges (the fast lane's) is stale

    def reserve(self, size: int) -> None:
        """Check the quota before asking the backend for memory."""
        if size < 0:
            raise CudaError(Status.INVALID_VALUE, f"negative size {size}")
        if self.limit is not None and self.allocated + size > self.limit:
            held = ", ".join(f"{what} {n}" for what, n in sorted(self.charged.items()) if n)
            raise CudaError(Status.OUT_OF_MEMORY,
                            f"session memory limit: {self.allocated} bytes in use ({held or 'nothing'}) + "
                            f"{size} exceeds {self.limit}")

    def charge(self, size: int, what: str) -> None:
        """Count `size` bytes against the quota, or raise OUT_OF_MEMORY and count nothing."""
        self.reserve(size)
        self.allocated += size
        self.peak = max(self.peak, self.allocated)
        self.charged[what] = self.charged.get(what, 0) + size

    def release(self, size: int, what: str) -> None:
        self.allocated -= size
        self.charged[what] -= size

    def add(self, region: Region) -> None:
        bisect.insort(self._starts, region.start)
        self._regions[region.start] = region
        self.changes += 1
        if region.owner == "alloc":
            self.charge(region.size, "alloc")

    def remove(self, start: int) -> Region:
        region = self._regions.pop(start)
        del self._starts[bisect.bisect_left(self._starts, start)]
        self.changes += 1
        if region.owner == "alloc":
            self.release(region.size, "alloc")
        return region

    def region_at(self, start: int) -> Region | None:
        return self._regions.get(start)

    def allocation_at(self, start: int) -> Region:
        region = self._regions.get(start)
        if region is None or region.owner != "alloc":
            raise CudaError(Status.INVALID_VALUE, f"0x{start:x} is not the start of an allocation of this session")
        return region

    def check_rows(self, ptr: int, pitch: int, width: int, height: int) -> Region | None:
        """check() for `height` rows of `width` bytes, `pitch` apart (rows wider than the pitch would overlap: the
        copies and memsets that name them refuse them); no rows touch nothing."""
        if height > 1 and width > pitch:
            raise CudaError(Status.INVALID_VALUE, f"width {width} exceeds pitch {pitch}")
        return self.check(ptr, pitch * (height - 1) + width) if height else None

    def check(self, ptr: int, size: int) -> Region:
        """The region that holds [ptr, ptr+size), or INVALID_VALUE: a session may only touch its own memory."""
        i = bisect.bisect_right(self._starts, ptr) - 1
        if i >= 0:
            region = self._regions[self._starts[i]]
            if ptr + size <= region.end and size >= 0:
                return region
        raise CudaError(Status.INVALID_VALUE,
                        f"device range 0x{ptr:x}+{size} is not inside memory owned by this session")

    def regions_by_start(self) -> list[Region]:
        """Every region, by start: what check() searches."""
        return [self._regions[start] for start in self._starts]

    def allocation_count(self) -> int:
        """cuMemAlloc allocations held; safe from another thread."""
        return sum(1 for r in list(self._regions.values()) if r.owner == "alloc")

    def regions(self, *, ctx: int | None = None, owner: str | None = None) -> list[Region]:
        # list() copies in one step: a status thread may ask while the session's thread adds and removes.
        return [r for r in list(self._regions.values())
                if (ctx is None or r.ctx == ctx) and (owner is None or r.owner == owner)]

    def __len__(self) -> int:
        return len(self._regions)
