"""A session's memory quota, for allocations that are not cuMemAlloc's (VMM physical memory, pool memory):
the same accounting cuMemAlloc uses (AllocationMap.reserve, then `allocated`), in one place."""

from __future__ import annotations

from rgpu.session.state import Session


def charge(s: Session, size: int) -> None:
    """OUT_OF_MEMORY if `size` more bytes would exceed the session's limit; else count them."""
    s.memory.reserve(size)
    s.memory.allocated += size


def uncharge(s: Session, size: int) -> None:
    s.memory.allocated -= size
