"""Memory access descriptors (CUmemAccessDesc), as cuMemSetAccess and cuMemPoolSetAccess send them: one reading
and checking for both. Only device locations can be granted through rgpu: a host location would be the
server's memory, not the program's."""

from __future__ import annotations

import logging
import struct

from rgpu.errors import CudaError, Status
from rgpu.session.state import Session

log = logging.getLogger("rgpu.access")

LOCATION_DEVICE = 1
ACCESS_NONE, ACCESS_READ, ACCESS_READWRITE = 0x0, 0x1, 0x3
MAX_ACCESS_DESCRIPTORS = 64
_DESCRIPTOR = struct.Struct("<IiI")  # location type, location id, flags

_logged: set[str] = set()


def refuse(what: str) -> CudaError:
    """NOT_SUPPORTED for something that cannot cross the network; the server logs it once."""
    if what not in _logged:
        _logged.add(what)
        log.warning("%s: not supported through rgpu (logged once)", what)
    return CudaError(Status.NOT_SUPPORTED, what)


def device(s: Session, dev: int) -> int:
    if not 0 <= dev < s.backend.device_count():
        raise CudaError(Status.INVALID_DEVICE, f"device {dev}")
    return dev


def descriptors(s: Session, count: int, bulk, *, host: str) -> list[tuple[int, int, int]]:
    """`count` (location type, id, flags) records from `bulk`, every one a device of this server with known
    flags; a host location is refused as `host` says."""
    if not 0 < count <= MAX_ACCESS_DESCRIPTORS or len(bulk) != count * _DESCRIPTOR.size:
        raise CudaError(Status.INVALID_VALUE, f"{count} access descriptors in {len(bulk)} bytes")
    out = [_DESCRIPTOR.unpack_from(bulk, i * _DESCRIPTOR.size) for i in range(count)]
    for ltype, lid, flags in out:
        if ltype != LOCATION_DEVICE:
            raise refuse(host)
        device(s, lid)
        if flags not in (ACCESS_NONE, ACCESS_READ, ACCESS_READWRITE):
            raise CudaError(Status.INVALID_VALUE, f"access flags 0x{flags:x}")
    return out
