"""Per-connection sessions: handle table, owned memory, authentication and teardown."""

from rgpu.session.handles import AllocationMap, HandleTable, Kind
from rgpu.session.state import Session

__all__ = ["AllocationMap", "HandleTable", "Kind", "Session"]
