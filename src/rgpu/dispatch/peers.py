"""Several devices of one server in one session: peer access between the session's contexts, and copies
between devices (cuMemcpyPeer), done on the server so the bytes never cross the network.

A context's handle entry carries its device (`info`). A peer copy names both contexts, as cuMemcpyPeer does;
each range must lie in memory of this session that belongs to a context of the device named, so a pointer of
another session -- or of the other device -- is refused with INVALID_VALUE, never copied.
"""

from __future__ import annotations

from rgpu.dispatch.registry import handles
from rgpu.errors import CudaError, Status
from rgpu.protocol import ops
from rgpu.session.handles import Entry
from rgpu.session.state import Session


def _named_context(s: Session, handle: int) -> Entry:
    """A context the call names explicitly (0 is no context here, not the current one)."""
    if not handle:
        raise CudaError(Status.INVALID_CONTEXT, "no context named")
    return s.context(handle)


def _check_range(s: Session, ptr: int, size: int, ctx: Entry, which: str) -> None:
    device = s.device_of(s.memory.check(ptr, size))
    if device != ctx.info:
        raise CudaError(Status.INVALID_VALUE, f"{which} 0x{ptr:x} is memory of device {device}, not of "
                                              f"device {ctx.info} (the context named)")


@handles(ops.DEVICE_CAN_ACCESS_PEER)
def _can_access_peer(s: Session, args, bulk):
    return (int(s.backend.device_can_access_peer(args.device, args.peer)),)


@handles(ops.CTX_ENABLE_PEER_ACCESS)
def _enable_peer_access(s: Session, args, bulk):
    ctx, peer = s.context(), _named_context(s, args.peer_ctx)
    s.backend.ctx_enable_peer_access(ctx.obj, peer.obj, args.flags)


@handles(ops.CTX_DISABLE_PEER_ACCESS)
def _disable_peer_access(s: Session, args, bulk):
    ctx, peer = s.context(), _named_context(s, args.peer_ctx)
    s.backend.ctx_disable_peer_access(ctx.obj, peer.obj)


def _peer_copy(s: Session, args, stream: int | None):
    dst_ctx, src_ctx = _named_context(s, args.dst_ctx), _named_context(s, args.src_ctx)
    _check_range(s, args.dst, args.size, dst_ctx, "destination")
    _check_range(s, args.src, args.size, src_ctx, "source")
    if stream is None:
        s.backend.memcpy_peer(dst_ctx.obj, args.dst, src_ctx.obj, args.src, args.size)
        return
    stream_ctx, strm = s.stream(stream)
    s.backend.memcpy_peer(dst_ctx.obj, args.dst, src_ctx.obj, args.src, args.size, stream_ctx.obj, strm,
                          asynchronous=True)


@handles(ops.MEMCPY_PEER, blocking=True)
def _memcpy_peer(s: Session, args, bulk):
    _peer_copy(s, args, None)


@handles(ops.MEMCPY_PEER_ASYNC)
def _memcpy_peer_async(s: Session, args, bulk):
    _peer_copy(s, args, args.stream)
