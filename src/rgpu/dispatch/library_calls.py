"""What the handlers of the math libraries' handles share (rgpu.dispatch.solver, rgpu.dispatch.sparse): a handle
made in the current context, its release, and the stream a call runs on, which must be of the handle's context."""

from __future__ import annotations

import struct

from rgpu.errors import CudaError, Status
from rgpu.session.handles import Kind
from rgpu.session.state import Session


def create(s: Session, kind: Kind, make) -> tuple:
    ctx = s.context()
    return (s.handles.add(kind, make(ctx.obj), ctx=s.current_ctx),)


def destroy(s: Session, handle: int, kind: Kind, release) -> None:
    ctx, entry = s.object(handle, kind)
    s.handles.pop(handle, kind)
    release(ctx.obj, entry.obj)


def on_stream(s: Session, handle: int, kind: Kind, stream: int):
    """(context entry, library handle entry, backend stream) for a call on `stream`."""
    ctx, entry = s.object(handle, kind)
    stream_ctx, strm = s.stream(stream)
    if stream_ctx is not ctx:
        raise CudaError(Status.INVALID_HANDLE, f"{kind.name.lower()} handle and stream belong to different contexts")
    return ctx, entry, strm


def read_pointers(s: Session, ctx, stream, address: int, count: int) -> tuple[int, ...]:
    """An array of `count` device pointers in the session's memory, read once `stream` has reached the call."""
    s.memory.check(address, 8 * count)
    return struct.unpack(f"<{count}Q", bytes(s.backend.memcpy_dtoh(ctx.obj, address, 8 * count, stream)))
