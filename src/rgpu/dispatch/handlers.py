"""Opcode -> handler. Handlers are plain functions `(session, args, bulk) -> results`; results are a tuple for
the reply's fixed fields, or `Reply(values, bulk)`.

`blocking=True` marks calls that can wait on the GPU (synchronisation, synchronous copies, frees, module
loads that JIT): the dispatcher runs those on the session's worker thread, everything else inline, so the
event loop -- and every other session -- never waits for a GPU.
"""

from __future__ import annotations

import struct

from rgpu.backends import lane
from rgpu.backends.base import ATTRIBUTE_UNSUPPORTED
from rgpu.dispatch import library_calls
from rgpu.dispatch.registry import HANDLERS, Handler, Reply, handles, handles_fields  # noqa: F401 (re-exported)
from rgpu.errors import CudaError, Status
from rgpu.protocol import blas_wire, dnn_wire, ops, runs
from rgpu.session.handles import Kind
from rgpu.session.state import Session


def _text(bulk) -> str:
    try:
        return bytes(bulk).decode("utf-8")
    except UnicodeDecodeError:
        raise CudaError(Status.INVALID_VALUE, "name is not UTF-8") from None


# -- init and devices ------------------------------------------------------------------------------
@handles(ops.INIT)
def _init(s: Session, args, bulk):
    if args.flags:
        raise CudaError(Status.INVALID_VALUE, "cuInit flags must be 0")


@handles(ops.DRIVER_GET_VERSION)
def _driver_version(s, args, bulk):
    return (s.backend.driver_version(),)


@handles(ops.DEVICE_GET_COUNT)
def _device_count(s, args, bulk):
    return (s.backend.device_count(),)


@handles(ops.DEVICE_GET)
def _device_get(s, args, bulk):
    if not 0 <= args.ordinal < s.backend.device_count():
        raise CudaError(Status.INVALID_DEVICE, f"device ordinal {args.ordinal} out of range")
    return (args.ordinal,)


@handles(ops.DEVICE_GET_NAME)
def _device_name(s, args, bulk):
    return Reply((), s.backend.device_name(args.device).encode())


def _attribute(s: Session, attrib: int, dev: int) -> int:
    value = s.backend.device_attribute(attrib, dev)
    return vmm.ATTRIBUTE_OVERRIDES.get(attrib, value)  # what cannot cross the network reads as absent


@handles(ops.DEVICE_GET_ATTRIBUTE)
def _device_attribute(s, args, bulk):
    return (_attribute(s, args.attrib, args.device),)


@handles(ops.DEVICE_TOTAL_MEM)
def _device_total_mem(s, args, bulk):
    return (s.backend.device_total_mem(args.device),)


@handles(ops.DEVICE_GET_UUID)
def _device_uuid(s, args, bulk):
    return (s.backend.device_uuid(args.device),)


@handles(ops.DEVICE_GET_ATTRIBUTES)
def _device_attributes(s, args, bulk):
    count = args.count
    if count > 1024:
        raise CudaError(Status.INVALID_VALUE, "at most 1024 attributes per call")
    values = []
    for attrib in range(1, count + 1):
        try:
            values.append(_attribute(s, attrib, args.device))
        except CudaError as e:
            if e.code == Status.INVALID_DEVICE:
                raise
            values.append(ATTRIBUTE_UNSUPPORTED)
    return Reply((count,), struct.pack(f"<{count}i", *values))


# -- contexts --------------------------------------------------------------------------------------
@handles(ops.PRIMARY_CTX_RETAIN)
def _primary_retain(s: Session, args, bulk):
    dev = args.device
    slot = s.primary.get(dev)
    if slot is None:
        ctx = s.backend.ctx_create(0, dev)
        slot = s.primary[dev] = [s.handles.add(Kind.CONTEXT, ctx, info=dev), 0]
    slot[1] += 1
    return (slot[0],)


@handles(ops.PRIMARY_CTX_RELEASE, blocking=True)
def _primary_release(s: Session, args, bulk):
    dev = args.device
    slot = s.primary.get(dev)
    if slot is None:
        raise CudaError(Status.INVALID_CONTEXT, f"primary context of device {dev} is not retained")
    slot[1] -= 1
    if slot[1] == 0:
        del s.primary[dev]
        s.destroy_context(slot[0])


@handles(ops.CTX_CREATE)
def _ctx_create(s: Session, args, bulk):
    handle = s.handles.add(Kind.CONTEXT, s.backend.ctx_create(args.flags, args.device), info=args.device)
    s.current_ctx = handle
    return (handle,)


@handles(ops.CTX_DESTROY, blocking=True)
def _ctx_destroy(s: Session, args, bulk):
    handle = args.ctx
    s.context(handle)
    if any(slot[0] == handle for slot in s.primary.values()):
        raise CudaError(Status.INVALID_CONTEXT, "a primary context is released, not destroyed")
    s.destroy_context(handle)


@handles(ops.CTX_SET_CURRENT)
def _ctx_set_current(s: Session, args, bulk):
    if args.ctx:
        s.context(args.ctx)
    s.current_ctx = args.ctx


@handles(ops.CTX_GET_CURRENT)
def _ctx_get_current(s: Session, args, bulk):
    return (s.current_ctx,)


@handles(ops.CTX_SYNCHRONIZE, blocking=True)
def _ctx_synchronize(s: Session, args, bulk):
    s.backend.ctx_synchronize(s.context().obj)
    s.bind_lane_stream(0)  # the C request loop answers the next ones itself


# cuCtxSetLimit can resize per-thread stacks or the heap of a busy context: it may block.
_LIMITS = range(7)  # CU_LIMIT_STACK_SIZE .. CU_LIMIT_PERSISTING_L2_CACHE_SIZE


@handles(ops.CTX_GET_LIMIT)
def _ctx_get_limit(s: Session, args, bulk):
    if args.limit not in _LIMITS:
        raise CudaError(Status.INVALID_VALUE, f"unknown limit {args.limit}")
    return (s.backend.ctx_get_limit(s.context().obj, args.limit),)


@handles(ops.CTX_SET_LIMIT, blocking=True)
def _ctx_set_limit(s: Session, args, bulk):
    if args.limit not in _LIMITS:
        raise CudaError(Status.INVALID_VALUE, f"unknown limit {args.limit}")
    s.backend.ctx_set_limit(s.context().obj, args.limit, args.value)


# -- memory ----------------------------------------------------------------------------------------
@handles(ops.MEM_ALLOC)
def _mem_alloc(s: Session, args, bulk):
    size = args.size
    ctx = s.context()
    if size == 0:
        raise CudaError(Status.INVALID_VALUE, "cuMemAlloc of 0 bytes")
    ipc.settle(s)
    s.memory.reserve(size)
    ptr = s.backend.mem_alloc(ctx.obj, size)
    s.add_region(ptr, size, s.current_ctx, "alloc")
    return (ptr,)


@handles(ops.MEM_FREE, blocking=True)
def _mem_free(s: Session, args, bulk):
    ptr = args.dptr
    if pools.free_now(s, ptr):  # stream-ordered pool memory, which cuMemFree may free too
        return
    ipc.free_allocation(s, ptr)


@handles(ops.MEM_GET_INFO)
def _mem_get_info(s: Session, args, bulk):
    free, total = s.backend.mem_get_info(s.context().obj)
    if s.memory.limit is not None:
        # Report what this session may still take, as a container would.
        total = min(total, s.memory.limit)
        free = min(free, max(0, s.memory.limit - s.memory.allocated))
    else:
        s.bind_lane_stream(0)  # the C request loop answers the next one itself (it is the C stand-ins' null call)
    return (free, total)


@handles(ops.MEMCPY_HTOD, blocking=True)
def _memcpy_htod(s: Session, args, bulk):
    s.memory.check(args.dst, len(bulk))
    s.backend.memcpy_htod(s.context().obj, args.dst, bulk)
    s.bind_lane_stream(0)  # the C request loop streams the next ones on the NULL stream (native/src/lane/serve.c)


@handles_fields(ops.MEMCPY_HTOD_ASYNC, blocking=True)
def _memcpy_htod_async(s: Session, bulk, dst, stream):
    copy = s.async_copier(stream)
    s.memory.check(dst, len(bulk))
    copy(dst, bulk)
    s.bind_lane_stream(stream)


@handles_fields(ops.MEMCPY_HTOD_RUNS, blocking=True)
def _memcpy_htod_runs(s: Session, bulk, dst, stream, size):
    # (the fast lane decodes straight into its copy ring; this is the path without it, or where it gives up)
    copy = s.async_copier(stream)
    s.memory.check(dst, size)
    try:
        # (in C where the library is loaded: a coding of many short segments costs Python ms, C us; where C
        # refuses it, Python's decoder, which refuses it too, says what is wrong)
        data = lane.decode_runs(bulk, size) if lane.library() is not None else None
        if data is None:
            data = runs.decode(bulk, size)
    except runs.CodingError as e:
        raise CudaError(Status.INVALID_VALUE, f"MEMCPY_HTOD_RUNS: {e}") from None
    copy(dst, data)
    s.bind_lane_stream(stream)


def _dtoh(s: Session, src: int, nbytes: int, stream: int | None):
    s.memory.check(src, nbytes)
    ctx, strm = s.stream(stream or 0)
    data = s.backend.memcpy_dtoh(ctx.obj, src, nbytes, strm)
    s.bind_lane_stream(stream or 0)  # the C request loop answers the next ones itself
    return Reply((), data)


@handles(ops.MEMCPY_DTOH, blocking=True)
def _memcpy_dtoh(s: Session, args, bulk):
    return _dtoh(s, args.src, args.size, None)


@handles(ops.MEMCPY_DTOH_ASYNC, blocking=True)
def _memcpy_dtoh_async(s: Session, args, bulk):
    return _dtoh(s, args.src, args.size, args.stream)


@handles(ops.MEMCPY_DTOD, blocking=True)
def _memcpy_dtod(s: Session, args, bulk):
    s.memory.check(args.dst, args.size)
    s.memory.check(args.src, args.size)
    s.backend.memcpy_dtod(s.context().obj, args.dst, args.src, args.size)


@handles(ops.MEMCPY_DTOD_ASYNC)
def _memcpy_dtod_async(s: Session, args, bulk):
    s.memory.check(args.dst, args.size)
    s.memory.check(args.src, args.size)
    ctx, strm = s.stream(args.stream)
    s.backend.memcpy_dtod(ctx.obj, args.dst, args.src, args.size, strm, asynchronous=True)


def _memset(s: Session, dst: int, value: int, count: int, width: int, stream: int | None = None):
    """stream None: the synchronous memset (on the current context's NULL stream)."""
    s.memory.check(dst, count * width)
    ctx, strm = s.stream(stream or 0)
    s.backend.memset(ctx.obj, dst, value, count, width, strm, asynchronous=stream is not None)
    if stream is not None:
        s.bind_lane_stream(stream)


@handles(ops.MEMSET_D8, blocking=True)
def _memset_d8(s, args, bulk):
    _memset(s, args.dst, args.value, args.count, 1)


@handles(ops.MEMSET_D32, blocking=True)
def _memset_d32(s, args, bulk):
    _memset(s, args.dst, args.value, args.count, 4)


@handles_fields(ops.MEMSET_D8_ASYNC)
def _memset_d8_async(s, bulk, dst, value, count, stream):
    _memset(s, dst, value, count, 1, stream)


@handles_fields(ops.MEMSET_D32_ASYNC)
def _memset_d32_async(s, bulk, dst, value, count, stream):
    _memset(s, dst, value, count, 4, stream)


# -- modules and launches --------------------------------------------------------------------------
def _load_module(s: Session, image: bytes) -> int:
    return s.load_module(image)


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
    image = s.module_cache.get(args.sha256) if s.module_cache is not None else None
    if image is None:
        raise CudaError(Status.NOT_FOUND, "image not cached; send it with MODULE_LOAD_DATA")
    return (_load_module(s, image),)


@handles(ops.MODULE_UNLOAD, blocking=True)
def _module_unload(s: Session, args, bulk):
    s.unload_module(args.module)


@handles(ops.MODULE_GET_FUNCTION)
def _module_get_function(s: Session, args, bulk):
    ctx, entry = s.object(args.module, Kind.MODULE)
    func = s.backend.module_get_function(ctx.obj, entry.obj, _text(bulk))
    try:
        layout = tuple(s.backend.func_param_info(ctx.obj, func))
    except CudaError as e:
        if e.code != Status.NOT_SUPPORTED:
            raise
        layout = None  # a driver before cuFuncGetParamInfo: the client packs the buffer from the image
    handle = s.handles.add(Kind.FUNCTION, func, ctx=entry.ctx, parent=args.module, info=layout)
    if layout is None:
        return Reply((handle, LAYOUT_UNKNOWN), b"")
    return Reply((handle, len(layout)), _layout_bytes(layout))


LAYOUT_UNKNOWN = 0xFFFF_FFFF


def _layout_bytes(layout) -> bytes:
    return b"".join(struct.pack("<II", o, n) for o, n in layout)


@handles(ops.MODULE_GET_GLOBAL)
def _module_get_global(s: Session, args, bulk):
    ctx, entry = s.object(args.module, Kind.MODULE)
    ptr, size = s.backend.module_get_global(ctx.obj, entry.obj, _text(bulk))
    owner = f"module:{args.module:x}"
    if not any(r.start == ptr for r in s.memory.regions(owner=owner)):
        s.add_region(ptr, size, entry.ctx, owner)
    return (ptr, size)


@handles(ops.FUNC_GET_PARAM_INFO)
def _func_param_info(s: Session, args, bulk):
    layout = s.handles.get(args.function, Kind.FUNCTION).info
    if layout is None:
        raise CudaError(Status.NOT_SUPPORTED, "the server's driver cannot report this function's parameters")
    return Reply((len(layout),), _layout_bytes(layout))


@handles_fields(ops.LAUNCH_KERNEL)
def launch_kernel(s: Session, bulk, function, grid_x, grid_y, grid_z, block_x, block_y, block_z, shared_mem, stream):
    target = s.launch_target(function, stream)
    target.check_params(len(bulk))
    target.launch(grid_x, grid_y, grid_z, block_x, block_y, block_z, shared_mem, bulk)


FUNC_ATTRIBUTE_COUNT = 16  # CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK .. CLUSTER_SCHEDULING_POLICY_PREFERENCE


@handles(ops.FUNC_GET_ATTRIBUTES)
def _func_attributes(s: Session, args, bulk):
    ctx, func = s.object(args.function, Kind.FUNCTION)
    count = min(args.count, FUNC_ATTRIBUTE_COUNT)
    values = s.backend.func_attributes(ctx.obj, func.obj, count)
    return Reply((count,), struct.pack(f"<{count}i", *values))


@handles(ops.FUNC_SET_ATTRIBUTE)
def _func_set_attribute(s: Session, args, bulk):
    ctx, func = s.object(args.function, Kind.FUNCTION)
    s.backend.func_set_attribute(ctx.obj, func.obj, args.attrib, args.value)


@handles(ops.OCCUPANCY_MAX_BLOCKS)
def _occupancy(s: Session, args, bulk):
    ctx, func = s.object(args.function, Kind.FUNCTION)
    if args.block_size <= 0:
        raise CudaError(Status.INVALID_VALUE, f"block size {args.block_size}")
    return (s.backend.occupancy_max_blocks(ctx.obj, func.obj, args.block_size, args.dynamic_smem, args.flags),)


# -- 2D memory -------------------------------------------------------------------------------------
_H2D, _D2H, _D2D = 1, 2, 3


def _memcpy_2d(s: Session, args, bulk, asynchronous: bool):
    kind, dst, dpitch, src, spitch, width, height = (args.kind, args.dst, args.dst_pitch, args.src, args.src_pitch,
                                                      args.width, args.height)
    if kind not in (_H2D, _D2H, _D2D) or (asynchronous and kind == _D2H):
        raise CudaError(Status.INVALID_VALUE, f"2D copy kind {kind}")
    if kind != _H2D:
        s.memory.check_rows(src, spitch, width, height)
    if kind != _D2H:
        s.memory.check_rows(dst, dpitch, width, height)
    if kind == _H2D and len(bulk) != width * height:
        raise CudaError(Status.INVALID_VALUE, f"{len(bulk)} bytes of rows for a {width}x{height} copy")
    ctx, strm = s.stream(args.stream)
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
    if args.element_size not in (1, 2, 4):
        raise CudaError(Status.INVALID_VALUE, f"element size {args.element_size}")
    s.memory.check_rows(args.dst, args.pitch, args.width * args.element_size, args.height)
    ctx, strm = s.stream(args.stream)
    s.backend.memset_2d(ctx.obj, args.dst, args.pitch, args.value, args.element_size, args.width, args.height, strm,
                        asynchronous)


@handles(ops.MEMSET_2D, blocking=True)
def _memset_2d_sync(s: Session, args, bulk):
    _memset_2d(s, args, False)


@handles(ops.MEMSET_2D_ASYNC)
def _memset_2d_async(s: Session, args, bulk):
    _memset_2d(s, args, True)


# -- streams and events ----------------------------------------------------------------------------
@handles(ops.STREAM_CREATE)
def _stream_create(s: Session, args, bulk):
    ctx = s.context()
    return (s.handles.add(Kind.STREAM, s.backend.stream_create(ctx.obj, args.flags), ctx=s.current_ctx),)


@handles(ops.STREAM_CREATE_WITH_PRIORITY)
def _stream_create_with_priority(s: Session, args, bulk):
    ctx = s.context()
    stream = s.backend.stream_create(ctx.obj, args.flags, args.priority)
    return (s.handles.add(Kind.STREAM, stream, ctx=s.current_ctx),)


@handles(ops.CTX_GET_STREAM_PRIORITY_RANGE)
def _stream_priority_range(s: Session, args, bulk):
    return s.backend.stream_priority_range(s.context().obj)


@handles(ops.STREAM_DESTROY, blocking=True)
def _stream_destroy(s: Session, args, bulk):
    _destroy(s, args.stream, Kind.STREAM, s.backend.stream_destroy)


@handles(ops.STREAM_SYNCHRONIZE, blocking=True)
def _stream_synchronize(s: Session, args, bulk):
    ctx, strm = s.stream(args.stream)
    s.backend.stream_synchronize(ctx.obj, strm)
    s.bind_lane_stream(args.stream)


def _ready_or_not(ready: bool):
    if not ready:
        raise CudaError(Status.NOT_READY)


@handles(ops.STREAM_QUERY)
def _stream_query(s: Session, args, bulk):
    ctx, strm = s.stream(args.stream)
    _ready_or_not(s.backend.stream_query(ctx.obj, strm))


@handles(ops.STREAM_GET_INFO)
def _stream_get_info(s: Session, args, bulk):
    ctx, strm = s.stream(args.stream)
    ctx_handle = s.handles.get(args.stream, Kind.STREAM).ctx if args.stream else s.current_ctx
    flags, priority, stream_id = s.backend.stream_info(ctx.obj, strm)
    return flags, priority, ctx_handle, stream_id


def _stream_attribute_id(ident: int) -> int:
    if ident not in ops.STREAM_ATTRIBUTES:
        raise CudaError(Status.INVALID_VALUE, f"unknown stream attribute {ident}")
    return ident


@handles(ops.STREAM_SET_ATTRIBUTE)
def _stream_set_attribute(s: Session, args, bulk):
    ctx, strm = s.stream(args.stream)
    if len(bulk) != ops.STREAM_ATTRIBUTE_VALUE_SIZE:
        raise CudaError(Status.INVALID_VALUE, f"a stream attribute value of {len(bulk)} bytes")
    s.backend.stream_set_attribute(ctx.obj, strm, _stream_attribute_id(args.id), bytes(bulk))


@handles(ops.STREAM_GET_ATTRIBUTE)
def _stream_get_attribute(s: Session, args, bulk):
    ctx, strm = s.stream(args.stream)
    return Reply((), s.backend.stream_get_attribute(ctx.obj, strm, _stream_attribute_id(args.id)))


@handles(ops.STREAM_COPY_ATTRIBUTES)
def _stream_copy_attributes(s: Session, args, bulk):
    (dst_ctx, dst), (src_ctx, src) = s.stream(args.dst_stream), s.stream(args.src_stream)
    if dst_ctx is not src_ctx:
        raise CudaError(Status.INVALID_VALUE, "streams of different contexts")
    s.backend.stream_copy_attributes(dst_ctx.obj, dst, src)


@handles(ops.STREAM_WAIT_EVENT)
def _stream_wait_event(s: Session, args, bulk):
    ctx, strm = s.stream(args.stream)
    _, ev = s.object(args.event, Kind.EVENT)
    s.backend.stream_wait_event(ctx.obj, strm, ev.obj, args.flags)


@handles(ops.EVENT_CREATE)
def _event_create(s: Session, args, bulk):
    ctx = s.context()
    # (the flags kept: only an INTERPROCESS event may be exported, rgpu.dispatch.ipc)
    return (s.handles.add(Kind.EVENT, s.backend.event_create(ctx.obj, args.flags), ctx=s.current_ctx,
                          info=args.flags),)


@handles(ops.EVENT_DESTROY)
def _event_destroy(s: Session, args, bulk):
    ipc.forget_event(s, args.event)
    _destroy(s, args.event, Kind.EVENT, s.backend.event_destroy)


@handles_fields(ops.EVENT_RECORD)
def _event_record(s: Session, bulk, event, stream):
    ctx, ev = s.object(event, Kind.EVENT)
    _, strm = s.stream(stream)
    s.backend.event_record(ctx.obj, ev.obj, strm)


@handles(ops.EVENT_SYNCHRONIZE, blocking=True)
def _event_synchronize(s: Session, args, bulk):
    ctx, ev = s.object(args.event, Kind.EVENT)
    s.backend.event_synchronize(ctx.obj, ev.obj)


@handles(ops.EVENT_QUERY)
def _event_query(s: Session, args, bulk):
    ctx, ev = s.object(args.event, Kind.EVENT)
    _ready_or_not(s.backend.event_query(ctx.obj, ev.obj))


@handles(ops.EVENT_ELAPSED_TIME)
def _event_elapsed(s: Session, args, bulk):
    ctx, a = s.object(args.start, Kind.EVENT)
    _, b = s.object(args.end, Kind.EVENT)
    return (s.backend.event_elapsed(ctx.obj, a.obj, b.obj),)


# -- cuBLAS and cuBLASLt ---------------------------------------------------------------------------
def _check_ranges(s: Session, ranges) -> None:
    for ptr, nbytes in ranges:
        s.memory.check(ptr, nbytes)


_create, _destroy = library_calls.create, library_calls.destroy


@handles(ops.BLAS_CREATE)
def _blas_create(s: Session, args, bulk):
    return _create(s, Kind.BLAS, s.backend.blas_create)


@handles(ops.BLAS_DESTROY, blocking=True)
def _blas_destroy(s: Session, args, bulk):
    _destroy(s, args.handle, Kind.BLAS, s.backend.blas_destroy)


@handles(ops.BLAS_GEMM)
def _blas_gemm(s: Session, args, bulk):
    ctx, entry = s.object(args.handle, Kind.BLAS)
    gemm = blas_wire.Gemm.from_request(args)
    _check_ranges(s, gemm.ranges())
    _, strm = s.stream(args.stream)
    s.backend.blas_gemm(ctx.obj, entry.obj, strm, gemm)


MAX_HEURISTIC_RESULTS = 64


@handles(ops.LT_HEURISTIC, blocking=True)
def _lt_heuristic(s: Session, args, bulk):
    if args.requested <= 0:
        raise CudaError(Status.INVALID_VALUE, f"{args.requested} heuristic results requested")
    # cuBLASLt may return fewer results than asked for; XLA asks for 128. Beyond 64 the server's work and the
    # reply grow for nothing a program uses.
    requested = min(args.requested, MAX_HEURISTIC_RESULTS)
    op = blas_wire.parse_operation(bytes(bulk))
    results = s.backend.lt_heuristic(s.context().obj, op, requested)
    return Reply((len(results),), b"".join(results))


@handles(ops.LT_MATMUL)
def _lt_matmul(s: Session, args, bulk):
    op = blas_wire.parse_operation(bytes(bulk))
    abcd = (args.a, args.b, args.c, args.d)
    _check_ranges(s, op.ranges(*abcd) + ([(args.workspace, args.workspace_size)] if args.workspace_size else []))
    ctx, strm = s.stream(args.stream)
    s.backend.lt_matmul(ctx.obj, op, abcd, args.alpha, args.beta, args.workspace, args.workspace_size, strm)


# -- cuDNN --------------------------------------------------------------------------------------------
@handles(ops.DNN_CREATE)
def _dnn_create(s: Session, args, bulk):
    return _create(s, Kind.DNN, s.backend.dnn_create)


@handles(ops.DNN_DESTROY, blocking=True)
def _dnn_destroy(s: Session, args, bulk):
    _destroy(s, args.handle, Kind.DNN, s.backend.dnn_destroy)


def _dnn_resolver(s: Session):
    def resolve(atype: int, ident: int):
        kind = Kind.DNN if atype == dnn_wire.TYPE_HANDLE else Kind.DNN_DESC
        return s.object(ident, kind)[1].obj

    return resolve


@handles(ops.DNN_FINALIZE, blocking=True)
def _dnn_finalize(s: Session, args, bulk):
    dtype = args.type
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
    name, atype, requested = args.name, args.type, args.requested
    if not 0 <= requested <= dnn_wire.MAX_ELEMENTS or atype == dnn_wire.TYPE_HANDLE:
        raise CudaError(Status.INVALID_VALUE, f"cuDNN get attribute {name}: type {atype}, {requested} elements")
    ctx, entry = s.object(args.descriptor, Kind.DNN_DESC)
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
    _destroy(s, args.descriptor, Kind.DNN_DESC, s.backend.dnn_destroy_descriptor)


@handles(ops.DNN_EXECUTE)
def _dnn_execute(s: Session, args, bulk):
    ctx, h = s.object(args.handle, Kind.DNN)
    _, p = s.object(args.plan, Kind.DNN_DESC)
    pack_bytes = bytes(bulk)
    attributes, by_value = dnn_wire.split_by_value(dnn_wire.parse_attributes(pack_bytes))
    ranges = []  # what was checked: the fast lane checks the same again at every run
    for a in attributes:
        if a.type in (dnn_wire.TYPE_DESCRIPTOR, dnn_wire.TYPE_HANDLE):
            raise CudaError(Status.INVALID_VALUE, "a variant pack holds values and pointers only")
        if a.name == dnn_wire.VARIANT_PACK_DATA_POINTERS:
            # The tensors' extents live in the plan on the GPU side; each pointer must at least be the
            # session's own (a kernel's reach beyond that is the malicious-kernel case in SECURITY.md). A
            # pass-by-value tensor's pointer names client memory: its bytes came along and replace it.
            ranges += [(ptr, 1) for i, ptr in enumerate(a.ids()) if i not in by_value]
        elif a.name == dnn_wire.VARIANT_PACK_WORKSPACE and a.count:
            if a.count != 1:
                raise CudaError(Status.INVALID_VALUE, f"a variant pack has one workspace, not {a.count}")
            (ptr,) = a.ids()
            _, size = p.info
            if size is None:  # not a plan cuDNN finalized here: ask, and let cuDNN refuse it
                size = _plan_workspace(s, ctx, p.obj)
            if ptr or size:
                ranges.append((ptr, max(size, 1)))
    _check_ranges(s, ranges)
    stream_ctx, strm = s.stream(args.stream)
    s.backend.dnn_execute(ctx.obj, h.obj, p.obj, attributes, strm, by_value)
    if not by_value and stream_ctx is ctx:  # (values change from call to call; a pack holding them is never kept)
        s.bind_lane_dnn_execute(args.handle, args.plan, pack_bytes, ctx, h, p, attributes, ranges, args.stream)


@handles(ops.DNN_BN_INFERENCE)
def _dnn_bn_inference(s: Session, args, bulk):
    ctx, h = s.object(args.handle, Kind.DNN)
    tensors_bytes = bytes(bulk)
    x, y, bn = tensors = dnn_wire.parse_tensors(tensors_bytes, 3)
    params = (args.scale, args.bias, args.mean, args.var)
    _check_ranges(s, [(args.x, x.nbytes()), (args.y, y.nbytes())] + [(p, bn.nbytes()) for p in params])
    stream_ctx, strm = s.stream(args.stream)
    s.backend.dnn_bn_inference(ctx.obj, h.obj, strm, args.mode, args.alpha, args.beta, args.epsilon, tensors,
                               (args.x, args.y, *params))
    if stream_ctx is ctx:  # (the lane runs a handle's batch norms on its own context's streams only)
        s.bind_lane_batch_norm(args.handle, tensors_bytes, ctx, h, tensors, args.stream)


def _bn_ranges(pointers_and_tensors):
    return [(p, t.nbytes()) for p, t in pointers_and_tensors if p]


@handles(ops.DNN_BN_SIZES, blocking=True)
def _dnn_bn_sizes(s: Session, args, bulk):
    ctx, h = s.object(args.handle, Kind.DNN)
    if args.which not in (0, 1, 2):
        raise CudaError(Status.INVALID_VALUE, f"batch-norm size query {args.which}")
    x, bn = dnn_wire.parse_tensors(bytes(bulk), 2)
    return (s.backend.dnn_bn_size(ctx.obj, h.obj, args.mode, args.ops, args.which, x, bn),)


def _run_bn_training(s: Session, a, ctx, h, x, y, bn, extra=(), fusion=None):
    """Plain or fused: every operand range checked (`extra`: the fused ones, (pointer, tensor)), then run."""
    params = (a.scale, a.bias, a.running_mean, a.running_var, a.saved_mean, a.saved_inv_var)
    scratch = ((a.workspace, a.workspace_size), (a.reserve, a.reserve_size))
    _check_ranges(s, _bn_ranges([(a.x, x), (a.y, y), *extra] + [(q, bn) for q in params])
                  + [r for r in scratch if r[1]])
    _, strm = s.stream(a.stream)
    pointers = (a.x, a.y, *params, a.workspace, a.workspace_size, a.reserve, a.reserve_size)
    s.backend.dnn_bn_training(ctx.obj, h.obj, strm, a.mode, a.ops, a.alpha, a.beta, a.factor, a.epsilon, (x, y, bn),
                              pointers, fusion=fusion)


def _run_bn_backward(s: Session, a, ctx, h, x, dy, dx, bn, extra=(), fusion=None):
    params = (a.scale, a.dscale, a.dbias, a.saved_mean, a.saved_inv_var)
    scratch = ((a.workspace, a.workspace_size), (a.reserve, a.reserve_size))
    _check_ranges(s, _bn_ranges([(a.x, x), (a.dy, dy), (a.dx, dx), *extra] + [(q, bn) for q in params])
                  + [r for r in scratch if r[1]])
    _, strm = s.stream(a.stream)
    pointers = (a.x, a.dy, a.dx, *params, a.workspace, a.workspace_size, a.reserve, a.reserve_size)
    s.backend.dnn_bn_backward(ctx.obj, h.obj, strm, a.mode, a.ops, (a.alpha_data, a.beta_data, a.alpha_params,
                                                                    a.beta_params), a.epsilon, (x, dy, dx, bn), pointers,
                              fusion=fusion)


@handles(ops.DNN_BN_TRAINING)
def _dnn_bn_training(s: Session, a, bulk):
    ctx, h = s.object(a.handle, Kind.DNN)
    _run_bn_training(s, a, ctx, h, *dnn_wire.parse_tensors(bytes(bulk), 3))


@handles(ops.DNN_BN_BACKWARD)
def _dnn_bn_backward(s: Session, a, bulk):
    ctx, h = s.object(a.handle, Kind.DNN)
    _run_bn_backward(s, a, ctx, h, *dnn_wire.parse_tensors(bytes(bulk), 4))


# -- batch norm fused with an activation (and an addition): the plain checks plus the fused operands ----------
_BN_ACTIVATION, _BN_ADD_ACTIVATION = 1, 2  # cudnnBatchNormOps_t


def _bn_fusion(a) -> dnn_wire.Activation:
    if a.ops not in (_BN_ACTIVATION, _BN_ADD_ACTIVATION):
        raise CudaError(Status.INVALID_VALUE, f"fused batch norm with bnOps {a.ops}")
    return dnn_wire.Activation(a.activation_mode, a.activation_nan, a.activation_coef)


@handles(ops.DNN_BN_SIZES_EX, blocking=True)
def _dnn_bn_sizes_ex(s: Session, args, bulk):
    ctx, h = s.object(args.handle, Kind.DNN)
    if args.which not in (0, 1, 2):
        raise CudaError(Status.INVALID_VALUE, f"batch-norm size query {args.which}")
    activation = _bn_fusion(args)
    tensors = dnn_wire.parse_tensors(bytes(bulk), 6)
    return (s.backend.dnn_bn_size(ctx.obj, h.obj, args.mode, args.ops, args.which, tensors[0], tensors[5],
                                  fusion=(activation, tensors[1:5])),)


@handles(ops.DNN_BN_TRAINING_EX)
def _dnn_bn_training_ex(s: Session, a, bulk):
    ctx, h = s.object(a.handle, Kind.DNN)
    activation = _bn_fusion(a)
    x, y, bn, z = dnn_wire.parse_tensors(bytes(bulk), 4)
    if a.ops == _BN_ADD_ACTIVATION and not a.z:
        raise CudaError(Status.INVALID_VALUE, "batch norm with an addition and no z")
    z_ptr = a.z if a.ops == _BN_ADD_ACTIVATION else 0
    _run_bn_training(s, a, ctx, h, x, y, bn, extra=[(z_ptr, z)], fusion=(activation, z, z_ptr))


@handles(ops.DNN_BN_BACKWARD_EX)
def _dnn_bn_backward_ex(s: Session, a, bulk):
    ctx, h = s.object(a.handle, Kind.DNN)
    activation = _bn_fusion(a)
    x, dy, dx, bn, y, dz = dnn_wire.parse_tensors(bytes(bulk), 6)
    if not a.y or (a.ops == _BN_ADD_ACTIVATION and not a.dz):
        raise CudaError(Status.INVALID_VALUE, "fused batch-norm backward without y, or with an addition and no dz")
    dz_ptr = a.dz if a.ops == _BN_ADD_ACTIVATION else 0
    _run_bn_backward(s, a, ctx, h, x, dy, dx, bn, extra=[(a.y, y), (dz_ptr, dz), (a.bias, bn)],
                     fusion=(activation, y, a.y, dz, dz_ptr, a.bias))


@handles(ops.NOP)
def _nop(s, args, bulk):
    return ()


# Handlers in modules of their own register themselves on import (they import `handles` from the registry).
from rgpu.dispatch import (arrays, blas_batched, blas_level1, blas_routines, fft, graphs, ipc,  # noqa: E402, F401
                           jit_link, links, memops, occupancy, peers, pools, rand, solver, sparse, tensormap, vmm)
