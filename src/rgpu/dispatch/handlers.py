"""Opcode -> handler. Handlers are plain functions `(session, args, bulk) -> results`; results are a tuple for
the reply's fixed fields, or `Reply(values, bulk)`.

`blocking=True` marks calls that can wait on the GPU (synchronisation, synchronous copies, frees, module
loads that JIT): the dispatcher runs those on the session's worker thread, everything else inline, so the
event loop -- and every other session -- never waits for a GPU.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

import attrs

from rgpu.dispatch import blas_wire, dnn_wire
from rgpu.dispatch.backend import ATTRIBUTE_UNSUPPORTED
from rgpu.errors import CudaError, Status
from rgpu.protocol import ops
from rgpu.session.handles import Kind
from rgpu.session.state import Session


@attrs.frozen(slots=True)
class Reply:
    values: tuple = ()
    bulk: bytes | bytearray | memoryview = b""


@attrs.frozen(slots=True)
class Handler:
    op: ops.Op
    fn: Callable
    blocking: bool


HANDLERS: dict[int, Handler] = {}


def handles(op: ops.Op, *, blocking: bool = False):
    def register(fn):
        HANDLERS[op.code] = Handler(op, fn, blocking)
        return fn

    return register


def _text(bulk) -> str:
    try:
        return bytes(bulk).decode("utf-8")
    except UnicodeDecodeError:
        raise CudaError(Status.INVALID_VALUE, "name is not UTF-8") from None


# -- init and devices ------------------------------------------------------------------------------
@handles(ops.INIT)
def _init(s: Session, args, bulk):
    (flags,) = args
    if flags:
        raise CudaError(Status.INVALID_VALUE, "cuInit flags must be 0")


@handles(ops.DRIVER_GET_VERSION)
def _driver_version(s, args, bulk):
    return (s.backend.driver_version(),)


@handles(ops.DEVICE_GET_COUNT)
def _device_count(s, args, bulk):
    return (s.backend.device_count(),)


@handles(ops.DEVICE_GET)
def _device_get(s, args, bulk):
    (ordinal,) = args
    if not 0 <= ordinal < s.backend.device_count():
        raise CudaError(Status.INVALID_DEVICE, f"device ordinal {ordinal} out of range")
    return (ordinal,)


@handles(ops.DEVICE_GET_NAME)
def _device_name(s, args, bulk):
    return Reply((), s.backend.device_name(args[0]).encode())


@handles(ops.DEVICE_GET_ATTRIBUTE)
def _device_attribute(s, args, bulk):
    attrib, dev = args
    return (s.backend.device_attribute(attrib, dev),)


@handles(ops.DEVICE_TOTAL_MEM)
def _device_total_mem(s, args, bulk):
    return (s.backend.device_total_mem(args[0]),)


@handles(ops.DEVICE_GET_UUID)
def _device_uuid(s, args, bulk):
    return (s.backend.device_uuid(args[0]),)


@handles(ops.DEVICE_GET_ATTRIBUTES)
def _device_attributes(s, args, bulk):
    dev, count = args
    if count > 1024:
        raise CudaError(Status.INVALID_VALUE, "at most 1024 attributes per call")
    values = []
    for attrib in range(1, count + 1):
        try:
            values.append(s.backend.device_attribute(attrib, dev))
        except CudaError as e:
            if e.code == Status.INVALID_DEVICE:
                raise
            values.append(ATTRIBUTE_UNSUPPORTED)
    return Reply((count,), struct.pack(f"<{count}i", *values))


# -- contexts --------------------------------------------------------------------------------------
@handles(ops.PRIMARY_CTX_RETAIN)
def _primary_retain(s: Session, args, bulk):
    (dev,) = args
    slot = s.primary.get(dev)
    if slot is None:
        ctx = s.backend.ctx_create(0, dev)
        slot = s.primary[dev] = [s.handles.add(Kind.CONTEXT, ctx, info=dev), 0]
    slot[1] += 1
    return (slot[0],)


@handles(ops.PRIMARY_CTX_RELEASE, blocking=True)
def _primary_release(s: Session, args, bulk):
    (dev,) = args
    slot = s.primary.get(dev)
    if slot is None:
        raise CudaError(Status.INVALID_CONTEXT, f"primary context of device {dev} is not retained")
    slot[1] -= 1
    if slot[1] == 0:
        del s.primary[dev]
        s.destroy_context(slot[0])


@handles(ops.CTX_CREATE)
def _ctx_create(s: Session, args, bulk):
    flags, dev = args
    handle = s.handles.add(Kind.CONTEXT, s.backend.ctx_create(flags, dev), info=dev)
    s.current_ctx = handle
    return (handle,)


@handles(ops.CTX_DESTROY, blocking=True)
def _ctx_destroy(s: Session, args, bulk):
    (handle,) = args
    s.context(handle)
    if any(slot[0] == handle for slot in s.primary.values()):
        raise CudaError(Status.INVALID_CONTEXT, "a primary context is released, not destroyed")
    s.destroy_context(handle)


@handles(ops.CTX_SET_CURRENT)
def _ctx_set_current(s: Session, args, bulk):
    (handle,) = args
    if handle:
        s.context(handle)
    s.current_ctx = handle


@handles(ops.CTX_GET_CURRENT)
def _ctx_get_current(s: Session, args, bulk):
    return (s.current_ctx,)


@handles(ops.CTX_SYNCHRONIZE, blocking=True)
def _ctx_synchronize(s: Session, args, bulk):
    s.backend.ctx_synchronize(s.context().obj)


# cuCtxSetLimit can resize per-thread stacks or the heap of a busy context: it may block.
_LIMITS = range(7)  # CU_LIMIT_STACK_SIZE .. CU_LIMIT_PERSISTING_L2_CACHE_SIZE


@handles(ops.CTX_GET_LIMIT)
def _ctx_get_limit(s: Session, args, bulk):
    (limit,) = args
    if limit not in _LIMITS:
        raise CudaError(Status.INVALID_VALUE, f"unknown limit {limit}")
    return (s.backend.ctx_get_limit(s.context().obj, limit),)


@handles(ops.CTX_SET_LIMIT, blocking=True)
def _ctx_set_limit(s: Session, args, bulk):
    limit, value = args
    if limit not in _LIMITS:
        raise CudaError(Status.INVALID_VALUE, f"unknown limit {limit}")
    s.backend.ctx_set_limit(s.context().obj, limit, value)


# -- memory ----------------------------------------------------------------------------------------
@handles(ops.MEM_ALLOC)
def _mem_alloc(s: Session, args, bulk):
    (size,) = args
    ctx = s.context()
    if size == 0:
        raise CudaError(Status.INVALID_VALUE, "cuMemAlloc of 0 bytes")
    s.memory.reserve(size)
    ptr = s.backend.mem_alloc(ctx.obj, size)
    s.add_region(ptr, size, s.current_ctx, "alloc")
    return (ptr,)


@handles(ops.MEM_FREE, blocking=True)
def _mem_free(s: Session, args, bulk):
    (ptr,) = args
    region = s.memory.allocation_at(ptr)
    s.backend.mem_free(s.context(region.ctx).obj, ptr)
    s.memory.remove(ptr)


@handles(ops.MEM_GET_INFO)
def _mem_get_info(s: Session, args, bulk):
    free, total = s.backend.mem_get_info(s.context().obj)
    if s.memory.limit is not None:
        # Report what this session may still take, as a container would.
        total = min(total, s.memory.limit)
        free = min(free, max(0, s.memory.limit - s.memory.allocated))
    return (free, total)


@handles(ops.MEMCPY_HTOD, blocking=True)
def _memcpy_htod(s: Session, args, bulk):
    (dst,) = args
    s.memory.check(dst, len(bulk))
    s.backend.memcpy_htod(s.context().obj, dst, bulk)


@handles(ops.MEMCPY_HTOD_ASYNC, blocking=True)
def _memcpy_htod_async(s: Session, args, bulk):
    dst, stream = args
    ctx, strm = s.stream(stream)
    s.memory.check(dst, len(bulk))
    s.backend.memcpy_htod(ctx.obj, dst, bulk, strm if stream else None)


def _dtoh(s: Session, src: int, nbytes: int, stream: int | None):
    s.memory.check(src, nbytes)
    ctx, strm = s.stream(stream or 0)
    return Reply((), s.backend.memcpy_dtoh(ctx.obj, src, nbytes, strm))


@handles(ops.MEMCPY_DTOH, blocking=True)
def _memcpy_dtoh(s: Session, args, bulk):
    src, nbytes = args
    return _dtoh(s, src, nbytes, None)


@handles(ops.MEMCPY_DTOH_ASYNC, blocking=True)
def _memcpy_dtoh_async(s: Session, args, bulk):
    src, nbytes, stream = args
    return _dtoh(s, src, nbytes, stream)


@handles(ops.MEMCPY_DTOD, blocking=True)
def _memcpy_dtod(s: Session, args, bulk):
    dst, src, nbytes = args
    s.memory.check(dst, nbytes)
    s.memory.check(src, nbytes)
    s.backend.memcpy_dtod(s.context().obj, dst, src, nbytes)


@handles(ops.MEMCPY_DTOD_ASYNC)
def _memcpy_dtod_async(s: Session, args, bulk):
    dst, src, nbytes, stream = args
    s.memory.check(dst, nbytes)
    s.memory.check(src, nbytes)
    ctx, strm = s.stream(stream)
    s.backend.memcpy_dtod(ctx.obj, dst, src, nbytes, strm, asynchronous=True)


def _memset(s: Session, dst, value, count, width, stream=None):
    s.memory.check(dst, count * width)
    ctx, strm = s.stream(stream or 0)
    s.backend.memset(ctx.obj, dst, value, count, width, strm, asynchronous=stream is not None)


@handles(ops.MEMSET_D8, blocking=True)
def _memset_d8(s, args, bulk):
    _memset(s, *args, 1)


@handles(ops.MEMSET_D32, blocking=True)
def _memset_d32(s, args, bulk):
    _memset(s, *args, 4)


@handles(ops.MEMSET_D8_ASYNC)
def _memset_d8_async(s, args, bulk):
    dst, value, count, stream = args
    _memset(s, dst, value, count, 1, stream)


@handles(ops.MEMSET_D32_ASYNC)
def _memset_d32_async(s, args, bulk):
    dst, value, count, stream = args
    _memset(s, dst, value, count, 4, stream)


# -- modules and launches --------------------------------------------------------------------------
def _load_module(s: Session, image: bytes) -> int:
    ctx = s.context()
    module = s.backend.module_load(ctx.obj, image)
    return s.handles.add(Kind.MODULE, module, ctx=s.current_ctx)


@handles(ops.MODULE_LOAD_DATA, blocking=True)
def _module_load(s: Session, args, bulk):
    if not len(bulk):
        raise CudaError(Status.INVALID_VALUE, "empty module image")
    image = bytes(bulk)
    handle = _load_module(s, image)
    if s.module_cache is not None:
        s.module_cache.put(image)  # only images the backend accepted
    return (handle,)


@handles(ops.MODULE_LOAD_CACHED, blocking=True)
def _module_load_cached(s: Session, args, bulk):
    (digest,) = args
    image = s.module_cache.get(digest) if s.module_cache is not None else None
    if image is None:
        raise CudaError(Status.NOT_FOUND, "image not cached; send it with MODULE_LOAD_DATA")
    return (_load_module(s, image),)


@handles(ops.MODULE_UNLOAD, blocking=True)
def _module_unload(s: Session, args, bulk):
    (handle,) = args
    ctx, entry = s.object(handle, Kind.MODULE)
    for h in s.handles.owned_by(parent=handle):
        s.handles.pop(h, Kind.FUNCTION)
    for region in s.memory.regions(owner=f"module:{handle:x}"):
        s.memory.remove(region.start)
    s.handles.pop(handle, Kind.MODULE)
    s.backend.module_unload(ctx.obj, entry.obj)


@handles(ops.MODULE_GET_FUNCTION)
def _module_get_function(s: Session, args, bulk):
    (handle,) = args
    ctx, entry = s.object(handle, Kind.MODULE)
    func = s.backend.module_get_function(ctx.obj, entry.obj, _text(bulk))
    try:
        layout = tuple(s.backend.func_param_info(ctx.obj, func))
    except CudaError as e:
        if e.code != Status.NOT_SUPPORTED:
            raise
        layout = None  # a driver before cuFuncGetParamInfo: the client packs the buffer from the image
    handle = s.handles.add(Kind.FUNCTION, func, ctx=entry.ctx, parent=handle, info=layout)
    if layout is None:
        return Reply((handle, LAYOUT_UNKNOWN), b"")
    return Reply((handle, len(layout)), _layout_bytes(layout))


LAYOUT_UNKNOWN = 0xFFFF_FFFF


def _layout_bytes(layout) -> bytes:
    return b"".join(struct.pack("<II", o, n) for o, n in layout)


@handles(ops.MODULE_GET_GLOBAL)
def _module_get_global(s: Session, args, bulk):
    (handle,) = args
    ctx, entry = s.object(handle, Kind.MODULE)
    ptr, size = s.backend.module_get_global(ctx.obj, entry.obj, _text(bulk))
    owner = f"module:{handle:x}"
    if not any(r.start == ptr for r in s.memory.regions(owner=owner)):
        s.add_region(ptr, size, entry.ctx, owner)
    return (ptr, size)


@handles(ops.FUNC_GET_PARAM_INFO)
def _func_param_info(s: Session, args, bulk):
    (handle,) = args
    layout = s.handles.get(handle, Kind.FUNCTION).info
    if layout is None:
        raise CudaError(Status.NOT_SUPPORTED, "the server's driver cannot report this function's parameters")
    return Reply((len(layout),), _layout_bytes(layout))


@handles(ops.LAUNCH_KERNEL)
def _launch(s: Session, args, bulk):
    func_h, gx, gy, gz, bx, by, bz, shmem, stream = args
    target = s.launch_target(func_h, stream)
    target.check_params(len(bulk))
    target.launch(gx, gy, gz, bx, by, bz, shmem, bulk)


FUNC_ATTRIBUTE_COUNT = 16  # CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK .. CLUSTER_SCHEDULING_POLICY_PREFERENCE


@handles(ops.FUNC_GET_ATTRIBUTES)
def _func_attributes(s: Session, args, bulk):
    handle, count = args
    ctx, func = s.object(handle, Kind.FUNCTION)
    count = min(count, FUNC_ATTRIBUTE_COUNT)
    values = s.backend.func_attributes(ctx.obj, func.obj, count)
    return Reply((count,), struct.pack(f"<{count}i", *values))


@handles(ops.FUNC_SET_ATTRIBUTE)
def _func_set_attribute(s: Session, args, bulk):
    handle, attrib, value = args
    ctx, func = s.object(handle, Kind.FUNCTION)
    s.backend.func_set_attribute(ctx.obj, func.obj, attrib, value)


@handles(ops.OCCUPANCY_MAX_BLOCKS)
def _occupancy(s: Session, args, bulk):
    handle, block_size, dynamic_smem, flags = args
    ctx, func = s.object(handle, Kind.FUNCTION)
    if block_size <= 0:
        raise CudaError(Status.INVALID_VALUE, f"block size {block_size}")
    return (s.backend.occupancy_max_blocks(ctx.obj, func.obj, block_size, dynamic_smem, flags),)


# -- 2D memory -------------------------------------------------------------------------------------
_H2D, _D2H, _D2D = 1, 2, 3


def _extent(pitch: int, width: int, height: int) -> int:
    if height > 1 and width > pitch:
        raise CudaError(Status.INVALID_VALUE, f"width {width} exceeds pitch {pitch}")
    return pitch * (height - 1) + width if height else 0


def _memcpy_2d(s: Session, args, bulk, asynchronous: bool):
    kind, dst, dpitch, src, spitch, width, height, stream = args
    if kind not in (_H2D, _D2H, _D2D) or (asynchronous and kind == _D2H):
        raise CudaError(Status.INVALID_VALUE, f"2D copy kind {kind}")
    if kind != _H2D:
        s.memory.check(src, _extent(spitch, width, height))
    if kind != _D2H:
        s.memory.check(dst, _extent(dpitch, width, height))
    if kind == _H2D and len(bulk) != width * height:
        raise CudaError(Status.INVALID_VALUE, f"{len(bulk)} bytes of rows for a {width}x{height} copy")
    ctx, strm = s.stream(stream)
    out = s.backend.memcpy_2d(ctx.obj, kind, dst, dpitch, src, spitch, width, height,
                              bulk if kind == _H2D else None, strm, asynchronous)
    return Reply((), out) if kind == _D2H else None


@handles(ops.MEMCPY_2D, blocking=True)
def _memcpy_2d_sync(s: Session, args, bulk):
    return _memcpy_2d(s, args, bulk, False)


@handles(ops.MEMCPY_2D_ASYNC, blocking=True)
def _memcpy_2d_async(s: Session, args, bulk):
    _memcpy_2d(s, args, bulk, True)


def _memset_2d(s: Session, args, asynchronous: bool):
    dst, pitch, value, elem, width, height, stream = args
    if elem not in (1, 2, 4):
        raise CudaError(Status.INVALID_VALUE, f"element size {elem}")
    s.memory.check(dst, _extent(pitch, width * elem, height))
    ctx, strm = s.stream(stream)
    s.backend.memset_2d(ctx.obj, dst, pitch, value, elem, width, height, strm, asynchronous)


@handles(ops.MEMSET_2D, blocking=True)
def _memset_2d_sync(s: Session, args, bulk):
    _memset_2d(s, args, False)


@handles(ops.MEMSET_2D_ASYNC)
def _memset_2d_async(s: Session, args, bulk):
    _memset_2d(s, args, True)


# -- streams and events ----------------------------------------------------------------------------
@handles(ops.STREAM_CREATE)
def _stream_create(s: Session, args, bulk):
    (flags,) = args
    ctx = s.context()
    return (s.handles.add(Kind.STREAM, s.backend.stream_create(ctx.obj, flags), ctx=s.current_ctx),)


@handles(ops.STREAM_CREATE_WITH_PRIORITY)
def _stream_create_with_priority(s: Session, args, bulk):
    flags, priority = args
    ctx = s.context()
    stream = s.backend.stream_create(ctx.obj, flags, priority)
    return (s.handles.add(Kind.STREAM, stream, ctx=s.current_ctx),)


@handles(ops.CTX_GET_STREAM_PRIORITY_RANGE)
def _stream_priority_range(s: Session, args, bulk):
    return s.backend.stream_priority_range(s.context().obj)


@handles(ops.STREAM_DESTROY, blocking=True)
def _stream_destroy(s: Session, args, bulk):
    _destroy(s, args[0], Kind.STREAM, s.backend.stream_destroy)


@handles(ops.STREAM_SYNCHRONIZE, blocking=True)
def _stream_synchronize(s: Session, args, bulk):
    ctx, strm = s.stream(args[0])
    s.backend.stream_synchronize(ctx.obj, strm)


def _ready_or_not(ready: bool):
    if not ready:
        raise CudaError(Status.NOT_READY)


@handles(ops.STREAM_QUERY)
def _stream_query(s: Session, args, bulk):
    ctx, strm = s.stream(args[0])
    _ready_or_not(s.backend.stream_query(ctx.obj, strm))


@handles(ops.STREAM_WAIT_EVENT)
def _stream_wait_event(s: Session, args, bulk):
    stream, event, flags = args
    ctx, strm = s.stream(stream)
    _, ev = s.object(event, Kind.EVENT)
    s.backend.stream_wait_event(ctx.obj, strm, ev.obj, flags)


@handles(ops.EVENT_CREATE)
def _event_create(s: Session, args, bulk):
    ctx = s.context()
    return (s.handles.add(Kind.EVENT, s.backend.event_create(ctx.obj, args[0]), ctx=s.current_ctx),)


@handles(ops.EVENT_DESTROY)
def _event_destroy(s: Session, args, bulk):
    _destroy(s, args[0], Kind.EVENT, s.backend.event_destroy)


@handles(ops.EVENT_RECORD)
def _event_record(s: Session, args, bulk):
    event, stream = args
    ctx, ev = s.object(event, Kind.EVENT)
    _, strm = s.stream(stream)
    s.backend.event_record(ctx.obj, ev.obj, strm)


@handles(ops.EVENT_SYNCHRONIZE, blocking=True)
def _event_synchronize(s: Session, args, bulk):
    ctx, ev = s.object(args[0], Kind.EVENT)
    s.backend.event_synchronize(ctx.obj, ev.obj)


@handles(ops.EVENT_QUERY)
def _event_query(s: Session, args, bulk):
    ctx, ev = s.object(args[0], Kind.EVENT)
    _ready_or_not(s.backend.event_query(ctx.obj, ev.obj))


@handles(ops.EVENT_ELAPSED_TIME)
def _event_elapsed(s: Session, args, bulk):
    start, end = args
    ctx, a = s.object(start, Kind.EVENT)
    _, b = s.object(end, Kind.EVENT)
    return (s.backend.event_elapsed(ctx.obj, a.obj, b.obj),)


# -- cuBLAS and cuBLASLt ---------------------------------------------------------------------------
def _check_ranges(s: Session, ranges) -> None:
    for ptr, nbytes in ranges:
        s.memory.check(ptr, nbytes)


def _create(s: Session, kind: Kind, make) -> tuple:
    """A new backend object in the current context, as a session handle."""
    ctx = s.context()
    return (s.handles.add(kind, make(ctx.obj), ctx=s.current_ctx),)


def _destroy(s: Session, handle: int, kind: Kind, release) -> None:
    ctx, entry = s.object(handle, kind)
    s.handles.pop(handle, kind)
    release(ctx.obj, entry.obj)


@handles(ops.BLAS_CREATE)
def _blas_create(s: Session, args, bulk):
    return _create(s, Kind.BLAS, s.backend.blas_create)


@handles(ops.BLAS_DESTROY, blocking=True)
def _blas_destroy(s: Session, args, bulk):
    _destroy(s, args[0], Kind.BLAS, s.backend.blas_destroy)


@handles(ops.BLAS_GEMM)
def _blas_gemm(s: Session, args, bulk):
    handle, stream, *rest = args
    ctx, entry = s.object(handle, Kind.BLAS)
    gemm = blas_wire.Gemm.from_args(tuple(rest))
    _check_ranges(s, gemm.ranges())
    _, strm = s.stream(stream)
    s.backend.blas_gemm(ctx.obj, entry.obj, strm, gemm)


@handles(ops.LT_HEURISTIC, blocking=True)
def _lt_heuristic(s: Session, args, bulk):
    (requested,) = args
    if not 0 < requested <= 64:
        raise CudaError(Status.INVALID_VALUE, f"{requested} heuristic results requested (1..64)")
    op = blas_wire.parse_operation(bytes(bulk))
    results = s.backend.lt_heuristic(s.context().obj, op, requested)
    return Reply((len(results),), b"".join(results))


@handles(ops.LT_MATMUL)
def _lt_matmul(s: Session, args, bulk):
    stream, a, b, c, d, workspace, workspace_size, alpha, beta = args
    op = blas_wire.parse_operation(bytes(bulk))
    _check_ranges(s, op.ranges(a, b, c, d) + ([(workspace, workspace_size)] if workspace_size else []))
    ctx, strm = s.stream(stream)
    s.backend.lt_matmul(ctx.obj, op, (a, b, c, d), alpha, beta, workspace, workspace_size, strm)


# -- cuDNN --------------------------------------------------------------------------------------------
@handles(ops.DNN_CREATE)
def _dnn_create(s: Session, args, bulk):
    return _create(s, Kind.DNN, s.backend.dnn_create)


@handles(ops.DNN_DESTROY, blocking=True)
def _dnn_destroy(s: Session, args, bulk):
    _destroy(s, args[0], Kind.DNN, s.backend.dnn_destroy)


def _dnn_resolver(s: Session):
    def resolve(atype: int, ident: int):
        kind = Kind.DNN if atype == dnn_wire.TYPE_HANDLE else Kind.DNN_DESC
        return s.object(ident, kind)[1].obj

    return resolve


@handles(ops.DNN_FINALIZE, blocking=True)
def _dnn_finalize(s: Session, args, bulk):
    (dtype,) = args
    attributes = dnn_wire.parse_attributes(bytes(bulk))
    if any(a.type == dnn_wire.TYPE_VOID_PTR and a.count for a in attributes):
        raise CudaError(Status.NOT_SUPPORTED, "device pointers are accepted only in a variant pack")
    ctx = s.context()
    desc, status = s.backend.dnn_finalize(ctx.obj, dtype, attributes, _dnn_resolver(s))
    if desc is None:
        return (0, status)
    # A plan's workspace size is fixed once finalized: read it here, not at every execution.
    workspace = _plan_workspace(s, ctx, desc) if dtype == dnn_wire.EXECUTION_PLAN else None
    return (s.handles.add(Kind.DNN_DESC, desc, ctx=s.current_ctx, info=(dtype, workspace)), 0)


def _plan_workspace(s: Session, ctx, plan) -> int:
    status, _, raw = s.backend.dnn_get_attribute(ctx.obj, plan, dnn_wire.EXECUTION_PLAN_WORKSPACE_SIZE,
                                                 dnn_wire.TYPE_INT64, 1, [])
    return struct.unpack("<q", bytes(raw))[0] if not status and len(raw) == 8 else 0


@handles(ops.DNN_GET_ATTRIBUTE, blocking=True)
def _dnn_get_attribute(s: Session, args, bulk):
    handle, name, atype, requested = args
    if not 0 <= requested <= dnn_wire.MAX_ELEMENTS or atype == dnn_wire.TYPE_HANDLE:
        raise CudaError(Status.INVALID_VALUE, f"cuDNN get attribute {name}: type {atype}, {requested} elements")
    ctx, entry = s.object(handle, Kind.DNN_DESC)
    out_types = []
    if atype == dnn_wire.TYPE_DESCRIPTOR:
        if len(bulk) != 4 * requested:
            raise CudaError(Status.INVALID_VALUE, "one descriptor type per requested descriptor")
        out_types = list(struct.unpack(f"<{requested}I", bytes(bulk)))
    status, count, payload = s.backend.dnn_get_attribute(ctx.obj, entry.obj, name, atype, requested, out_types)
    if atype == dnn_wire.TYPE_DESCRIPTOR:
        ids = [s.handles.add(Kind.DNN_DESC, d, ctx=entry.ctx, info=(t, None)) for d, t in zip(payload, out_types)]
        payload = struct.pack(f"<{len(ids)}Q", *ids)
    return Reply((status, count), payload)


@handles(ops.DNN_DESTROY_DESCRIPTOR)
def _dnn_destroy_descriptor(s: Session, args, bulk):
    _destroy(s, args[0], Kind.DNN_DESC, s.backend.dnn_destroy_descriptor)


@handles(ops.DNN_EXECUTE)
def _dnn_execute(s: Session, args, bulk):
    handle, plan, stream = args
    ctx, h = s.object(handle, Kind.DNN)
    _, p = s.object(plan, Kind.DNN_DESC)
    attributes = dnn_wire.parse_attributes(bytes(bulk))
    for a in attributes:
        if a.type in (dnn_wire.TYPE_DESCRIPTOR, dnn_wire.TYPE_HANDLE):
            raise CudaError(Status.INVALID_VALUE, "a variant pack holds values and pointers only")
        if a.name == dnn_wire.VARIANT_PACK_DATA_POINTERS:
            # The tensors' extents live in the plan on the GPU side; each pointer must at least be the
            # session's own (a kernel's reach beyond that is the malicious-kernel case in SECURITY.md).
            for ptr in a.ids():
                s.memory.check(ptr, 1)
        elif a.name == dnn_wire.VARIANT_PACK_WORKSPACE and a.count:
            if a.count != 1:
                raise CudaError(Status.INVALID_VALUE, f"a variant pack has one workspace, not {a.count}")
            (ptr,) = a.ids()
            _, size = p.info
            if size is None:  # not a plan cuDNN finalized here: ask, and let cuDNN refuse it
                size = _plan_workspace(s, ctx, p.obj)
            if ptr or size:
                s.memory.check(ptr, max(size, 1))
    _, strm = s.stream(stream)
    s.backend.dnn_execute(ctx.obj, h.obj, p.obj, attributes, strm)


@handles(ops.DNN_BN_INFERENCE)
def _dnn_bn_inference(s: Session, args, bulk):
    handle, stream, mode, alpha, beta, epsilon, *pointers = args
    ctx, h = s.object(handle, Kind.DNN)
    x, y, bn = dnn_wire.parse_tensors(bytes(bulk), 3)
    _check_ranges(s, [(pointers[0], x.nbytes()), (pointers[1], y.nbytes())] + [(p, bn.nbytes()) for p in pointers[2:]])
    _, strm = s.stream(stream)
    s.backend.dnn_bn_inference(ctx.obj, h.obj, strm, mode, alpha, beta, epsilon, (x, y, bn), pointers)


def _bn_ranges(pointers_and_tensors):
    return [(p, t.nbytes()) for p, t in pointers_and_tensors if p]


@handles(ops.DNN_BN_SIZES, blocking=True)
def _dnn_bn_sizes(s: Session, args, bulk):
    handle, mode, bn_ops, which = args
    ctx, h = s.object(handle, Kind.DNN)
    if which not in (0, 1, 2):
        raise CudaError(Status.INVALID_VALUE, f"batch-norm size query {which}")
    x, bn = dnn_wire.parse_tensors(bytes(bulk), 2)
    return (s.backend.dnn_bn_size(ctx.obj, h.obj, mode, bn_ops, which, x, bn),)


@handles(ops.DNN_BN_TRAINING)
def _dnn_bn_training(s: Session, args, bulk):
    handle, stream, mode, bn_ops, alpha, beta, factor, epsilon, *p = args
    ctx, h = s.object(handle, Kind.DNN)
    x, y, bn = dnn_wire.parse_tensors(bytes(bulk), 3)
    x_p, y_p, scale, bias, rmean, rvar, smean, sinv, ws, ws_size, reserve, reserve_size = p
    _check_ranges(s, _bn_ranges([(x_p, x), (y_p, y)] + [(q, bn) for q in (scale, bias, rmean, rvar, smean, sinv)])
                  + [(q, n) for q, n in ((ws, ws_size), (reserve, reserve_size)) if n])
    _, strm = s.stream(stream)
    s.backend.dnn_bn_training(ctx.obj, h.obj, strm, mode, bn_ops, alpha, beta, factor, epsilon, (x, y, bn), p)


@handles(ops.DNN_BN_BACKWARD)
def _dnn_bn_backward(s: Session, args, bulk):
    handle, stream, mode, bn_ops, alpha_d, beta_d, alpha_p, beta_p, epsilon, *p = args
    ctx, h = s.object(handle, Kind.DNN)
    x, dy, dx, bn = dnn_wire.parse_tensors(bytes(bulk), 4)
    x_p, dy_p, dx_p, scale, dscale, dbias, smean, sinv, ws, ws_size, reserve, reserve_size = p
    _check_ranges(s, _bn_ranges([(x_p, x), (dy_p, dy), (dx_p, dx)] + [(q, bn) for q in (scale, dscale, dbias, smean,
                                                                                        sinv)])
                  + [(q, n) for q, n in ((ws, ws_size), (reserve, reserve_size)) if n])
    _, strm = s.stream(stream)
    s.backend.dnn_bn_backward(ctx.obj, h.obj, strm, mode, bn_ops, (alpha_d, beta_d, alpha_p, beta_p), epsilon,
                              (x, dy, dx, bn), p)


@handles(ops.NOP)
def _nop(s, args, bulk):
    return ()
from rgpu.dispatch import graphs as _graphs  # noqa: E402,F401  (registers the graph and launch-attribute handlers)
