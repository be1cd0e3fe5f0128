"""cuRAND's host API: generators are session handles in the context that made them; every result range is
checked against the session's memory before the library writes it. A host generator (curandCreateGeneratorHost)
runs on the server's CPU and only ever answers RAND_GENERATE_HOST, whose results travel back in the reply: it
must never be pointed at an address, which would be one in the server's own memory."""

from __future__ import annotations

import attrs

from rgpu.dispatch.registry import Reply, handles
from rgpu.errors import CudaError, Status
from rgpu.protocol import ops, rand_wire
from rgpu.session.handles import Kind
from rgpu.session.state import Session


@attrs.frozen(slots=True)
class Generator:
    host: bool


@handles(ops.RAND_CREATE)
def _create(s: Session, args, bulk):
    ctx = s.context()
    if args.rng_type not in rand_wire.RNG_TYPES:
        return (0, rand_wire.RandStatus.TYPE_ERROR)
    gen, status = s.backend.rand_create(ctx.obj, args.rng_type, bool(args.host))
    if status:
        return (0, status)
    return (s.handles.add(Kind.RAND, gen, ctx=s.current_ctx, info=Generator(bool(args.host))), 0)


@handles(ops.RAND_DESTROY, blocking=True)
def _destroy(s: Session, args, bulk):
    ctx, entry = s.object(args.handle, Kind.RAND)
    s.handles.pop(args.handle, Kind.RAND)
    s.backend.rand_destroy(ctx.obj, entry.obj)


@handles(ops.RAND_SET)
def _set(s: Session, args, bulk):
    ctx, entry = s.object(args.handle, Kind.RAND)
    if args.what not in rand_wire.Setting.__members__.values():
        raise CudaError(Status.INVALID_VALUE, f"unknown cuRAND setting {args.what}")
    if args.what in (rand_wire.Setting.ORDERING, rand_wire.Setting.DIMENSIONS) and args.value >> 32:
        return (rand_wire.RandStatus.OUT_OF_RANGE,)  # cuRAND takes them as 32-bit values
    return (s.backend.rand_set(ctx.obj, entry.obj, rand_wire.Setting(args.what), args.value),)


@handles(ops.RAND_GENERATE)
def _generate(s: Session, args, bulk):
    ctx, entry = s.object(args.handle, Kind.RAND)
    if entry.info.host:
        raise CudaError(Status.INVALID_VALUE, "a host generator's results go to the program's host memory")
    kind = rand_wire.draw(args.kind)
    s.memory.check(args.output, args.count * kind.size)
    stream_ctx, strm = s.stream(args.stream)
    if stream_ctx is not ctx:
        raise CudaError(Status.INVALID_HANDLE, "cuRAND generator and stream belong to different contexts")
    s.backend.rand_generate(ctx.obj, entry.obj, strm, kind, args.output, args.count, args.a, args.b)


@handles(ops.RAND_GENERATE_HOST, blocking=True)
def _generate_host(s: Session, args, bulk):
    ctx, entry = s.object(args.handle, Kind.RAND)
    if not entry.info.host:
        raise CudaError(Status.INVALID_VALUE, "a device generator's results go to device memory")
    kind = rand_wire.draw(args.kind)
    if args.count * kind.size > rand_wire.MAX_HOST_BYTES:
        return (rand_wire.RandStatus.ALLOCATION_FAILED,)
    status, results = s.backend.rand_generate_host(ctx.obj, entry.obj, kind, args.count, args.a, args.b)
    return Reply((status,), results if not status else b"")
