"""A session's memory quota for allocations that are not cuMemAlloc's (VMM physical memory, pool memory): one
place that names what they are charged as, on the session's one accounting (Session.charge_memory)."""

from __future__ import annotations

from rgpu.session.state import Session

VMM = "virtual memory"
POOLS = "pool memory"
GRAPHS = "graph memory"


def charge(s: Session, size: int, what: str) -> None:
    """OUT_OF_MEMORY if `size` more bytes would exceed the session's limit; else count them."""
    s.charge_memory(size, what)


def uncharge(s: Session, size: int, what: str) -> None:
    s.release_memory(size, what)
