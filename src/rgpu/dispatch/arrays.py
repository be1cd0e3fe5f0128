"""CUDA arrays, and texture and surface objects (protocol 1.8).

An array is a session handle whose bytes count against the session's memory limit; the driver lays its elements
out as it likes, so they are reached only by copies, each checked here against the array's extent and the
session's memory. A texture or surface object is the driver's own number, which kernels take as a parameter:
the session remembers which numbers it was given, so that only those can be destroyed and a context's teardown
destroys its own. Their descriptions travel as the driver's structures and are checked field by field."""

from __future__ import annotations

import struct

import attrs

from rgpu.backends.array_types import (ARRAY, ARRAY_LAYERED, ARRAY_SURFACE_LDST, DEVICE, HOST, RESOURCE_ARRAY,
                                       RESOURCE_LINEAR, RESOURCE_MIPMAPPED, RESOURCE_PITCH2D, ArrayShape, CopyEnd,
                                       Resource, TextureDesc)
from rgpu.dispatch.registry import Reply, handles
from rgpu.errors import CudaError, Status
from rgpu.protocol import ops
from rgpu.session.handles import Kind
from rgpu.session.state import Session

MAX_OBJECTS = 1 << 16  # texture and surface objects a session may hold at once
# CUDA_ARRAY3D_*: LAYERED, SURFACE_LDST, CUBEMAP, TEXTURE_GATHER change no layout rgpu checks against; DEPTH_TEXTURE,
# COLOR_ATTACHMENT, SPARSE, DEFERRED_MAPPING are refused as not supported
_ARRAY_FLAGS = ARRAY_LAYERED | ARRAY_SURFACE_LDST | 0x04 | 0x08
_KNOWN_ARRAY_FLAGS = _ARRAY_FLAGS | 0x10 | 0x20 | 0x40 | 0x80
# CU_TRSF_*: READ_AS_INTEGER, NORMALIZED_COORDINATES, SRGB, DISABLE_TRILINEAR_OPTIMIZATION, SEAMLESS_CUBEMAP
_TEXTURE_FLAGS = 0x01 | 0x02 | 0x10 | 0x20 | 0x40
_RESOURCE_HEAD = struct.Struct("<I4xQIIQQQ")  # resType, then array/devPtr, format, channels, width|size, height, pitch
_RESOURCE_FLAGS = struct.Struct("<I")  # at 136
# addressMode[3], filterMode, flags, maxAnisotropy, mipmap filter, bias and clamps, borderColor[4]
_TEXTURE = struct.Struct("<3IIIIIfff4f")


@attrs.define(slots=True)
class ObjectState:
    """Registered on a session's first texture or surface object."""

    objects: dict[int, tuple[int, object, bool]] = attrs.Factory(dict)  # number -> (context, backend's, surface?)

    def release_context(self, s: Session, ctx: int) -> None:
        for number, (owner, obj, surface) in list(self.objects.items()):
            if owner == ctx:
                del self.objects[number]
                destroy = s.backend.surf_object_destroy if surface else s.backend.tex_object_destroy
                try:
                    destroy(s.context(ctx).obj, obj)
                except CudaError as e:
                    s.log.debug("teardown: destroying a texture or surface object failed (%s)", e)


def _objects(s: Session) -> ObjectState:
    state = s.extensions.get("texture_objects")
    if state is None:
        state = s.extensions["texture_objects"] = ObjectState()
    return state


def _shape(width: int, height: int, depth: int, fmt: int, channels: int, flags: int) -> ArrayShape:
    if fmt not in ops.ARRAY_FORMATS:
        raise CudaError(Status.NOT_SUPPORTED, f"array format 0x{fmt:x} (rgpu takes the integer, half and float ones)")
    if flags & ~_ARRAY_FLAGS & _KNOWN_ARRAY_FLAGS:
        raise CudaError(Status.NOT_SUPPORTED, f"array flags 0x{flags:x} (depth textures, color attachments, sparse "
                                              "and deferred-mapping arrays)")
    if channels not in (1, 2, 4) or not width or flags & ~_ARRAY_FLAGS:
        raise CudaError(Status.INVALID_VALUE, f"an array of {width} elements of {channels} channels, flags 0x{flags:x}")
    if depth and not height and not flags & ARRAY_LAYERED:
        raise CudaError(Status.INVALID_VALUE, "a 3D array needs a height")
    shape = ArrayShape(width, height, depth, fmt, channels, flags)
    if shape.nbytes > 1 << 40:
        raise CudaError(Status.OUT_OF_MEMORY, f"an array of {shape.nbytes} bytes")
    return shape


@handles(ops.ARRAY_CREATE, blocking=True)
def _array_create(s: Session, args, bulk):
    shape = _shape(args.width, args.height, args.depth, args.format, args.channels, args.flags)
    ctx = s.context()
    s.charge_memory(shape.nbytes, "arrays")
    try:
        array = s.backend.array_create(ctx.obj, shape)
    except BaseException:
        s.release_memory(shape.nbytes, "arrays")
        raise
    return (s.add_charged(Kind.ARRAY, array, shape.nbytes, "arrays", ctx=s.current_ctx, info=shape),)


@handles(ops.ARRAY_DESTROY, blocking=True)
def _array_destroy(s: Session, args, bulk):
    ctx, entry = s.object(args.array, Kind.ARRAY)
    s.remove_handle(args.array, Kind.ARRAY)
    s.backend.array_destroy(ctx.obj, entry.obj)


def _end(s: Session, type_: int, where: int, x: int, y: int, z: int, pitch: int, width: int, height: int) -> CopyEnd:
    if type_ == HOST:
        return CopyEnd(HOST)
    if type_ == DEVICE:
        s.memory.check_rows(where, pitch, width, height)
        return CopyEnd(DEVICE, where, pitch=pitch)
    _, entry = s.object(where, Kind.ARRAY)
    shape = entry.info
    if x + width > shape.row_bytes or y + height > shape.rows or z >= shape.slices:
        raise CudaError(Status.INVALID_VALUE, f"{width} bytes x {height} rows from ({x}, {y}, {z}) of an array of "
                                              f"{shape.row_bytes} bytes x {shape.rows} rows x {shape.slices}")
    return CopyEnd(ARRAY, entry.obj, x, y, z)


def _memcpy_array(s: Session, args, bulk, asynchronous: bool):
    src_type, dst_type = args.kind & 0xF, args.kind >> 4
    if (src_type not in (HOST, DEVICE, ARRAY) or dst_type not in (HOST, DEVICE, ARRAY) or ARRAY not in
            (src_type, dst_type) or (asynchronous and dst_type == HOST)):
        raise CudaError(Status.INVALID_VALUE, f"array copy kind 0x{args.kind:x}")
    width, height = args.width, args.height
    if not width or not height:
        raise CudaError(Status.INVALID_VALUE, f"a copy of {width} bytes x {height} rows")
    if src_type == HOST and len(bulk) != width * height:
        raise CudaError(Status.INVALID_VALUE, f"{len(bulk)} bytes of rows for a {width}x{height} copy")
    src = _end(s, src_type, args.src_at, args.src_x, args.src_y, args.src_z, args.src_pitch, width, height)
    dst = _end(s, dst_type, args.dst_at, args.dst_x, args.dst_y, args.dst_z, args.dst_pitch, width, height)
    ctx, stream = s.stream(args.stream)
    out = s.backend.array_copy(ctx.obj, src, dst, width, height, bulk if src_type == HOST else None, stream,
                               asynchronous)
    return Reply((), out) if dst_type == HOST else None


@handles(ops.MEMCPY_ARRAY, blocking=True)
def _memcpy_array_sync(s: Session, args, bulk):
    return _memcpy_array(s, args, bulk, False)


@handles(ops.MEMCPY_ARRAY_ASYNC, blocking=True)
def _memcpy_array_async(s: Session, args, bulk):
    _memcpy_array(s, args, bulk, True)


def resource(s: Session, raw) -> Resource:
    kind, where, fmt, channels, a, b, c = _RESOURCE_HEAD.unpack_from(raw)
    if _RESOURCE_FLAGS.unpack_from(raw, 136)[0]:
        raise CudaError(Status.INVALID_VALUE, "a resource description's flags must be 0")
    if kind == RESOURCE_ARRAY:
        _, entry = s.object(where, Kind.ARRAY)
        return Resource(RESOURCE_ARRAY, entry.obj, entry.info)
    if kind not in (RESOURCE_LINEAR, RESOURCE_PITCH2D):
        raise CudaError(Status.NOT_SUPPORTED if kind == RESOURCE_MIPMAPPED else Status.INVALID_VALUE,
                        f"resource type {kind} (rgpu takes arrays, linear and pitched memory)")
    element = _shape(1, 0, 0, fmt, channels, 0).element
    if kind == RESOURCE_LINEAR:
        if a < element:  # (a tail shorter than an element is not part of the texture, as the driver counts)
            raise CudaError(Status.INVALID_VALUE, f"linear memory of {a} bytes for {element}-byte elements")
        s.memory.check(where, a)
        return Resource(RESOURCE_LINEAR, ptr=where, format=fmt, channels=channels, size=a)
    if not a or not b or c < a * element:
        raise CudaError(Status.INVALID_VALUE, f"pitched memory of {a} x {b} elements, rows {c} bytes apart")
    s.memory.check_rows(where, c, a * element, b)
    return Resource(RESOURCE_PITCH2D, ptr=where, format=fmt, channels=channels, width=a, height=b, pitch=c)


def texture_desc(raw) -> TextureDesc:
    a0, a1, a2, filter_mode, flags, _anisotropy, mip_filter, *_rest, b0, b1, b2, b3 = _TEXTURE.unpack_from(raw)
    # (an anisotropy above 16 is the driver's to clamp, as it documents)
    if max(a0, a1, a2) > 3 or filter_mode > 1 or mip_filter > 1 or flags & ~_TEXTURE_FLAGS:
        raise CudaError(Status.INVALID_VALUE, f"texture description: address modes {a0, a1, a2}, filter "
                                              f"{filter_mode}, flags 0x{flags:x}")
    return TextureDesc((a0, a1, a2), filter_mode, flags, (b0, b1, b2, b3), bytes(raw))


def _register(s: Session, number: int, obj, surface: bool) -> int:
    state = _objects(s)
    if number in state.objects:  # the backend gave a number it gave before: it is broken, not the client
        raise CudaError(Status.UNKNOWN, f"object number {number} given twice")
    state.objects[number] = (s.current_ctx, obj, surface)
    return number


def _room(s: Session) -> None:
    if len(_objects(s).objects) >= MAX_OBJECTS:
        raise CudaError(Status.OUT_OF_MEMORY, f"{MAX_OBJECTS} texture and surface objects are open already")


@handles(ops.TEX_OBJECT_CREATE)
def _tex_create(s: Session, args, bulk):
    size = ops.RESOURCE_DESC_SIZE + ops.TEXTURE_DESC_SIZE + (ops.RESOURCE_VIEW_DESC_SIZE if args.view else 0)
    if args.view > 1 or len(bulk) != size:
        raise CudaError(Status.INVALID_VALUE, f"{len(bulk)} bytes of texture object description")
    _room(s)
    res = resource(s, bulk)
    tex = texture_desc(bulk[ops.RESOURCE_DESC_SIZE:])
    view = bytes(bulk[ops.RESOURCE_DESC_SIZE + ops.TEXTURE_DESC_SIZE :]) if args.view else None
    ctx = s.context()
    number, obj = s.backend.tex_object_create(ctx.obj, res, tex, view)
    return (_register(s, number, obj, False),)


@handles(ops.SURF_OBJECT_CREATE)
def _surf_create(s: Session, args, bulk):
    if len(bulk) != ops.RESOURCE_DESC_SIZE:
        raise CudaError(Status.INVALID_VALUE, f"{len(bulk)} bytes of surface object description")
    _room(s)
    res = resource(s, bulk)
    if res.type != RESOURCE_ARRAY or not res.shape.flags & ARRAY_SURFACE_LDST:
        raise CudaError(Status.INVALID_VALUE, "a surface is an array made with the SURFACE_LDST flag")
    number, obj = s.backend.surf_object_create(s.context().obj, res)
    return (_register(s, number, obj, True),)


def _destroy(s: Session, number: int, surface: bool) -> None:
    state = _objects(s)
    known = state.objects.get(number)
    if known is None or known[2] != surface:
        raise CudaError(Status.INVALID_VALUE, f"{number} is not a {'surface' if surface else 'texture'} object "
                                              "of this session")
    del state.objects[number]
    ctx, obj, _ = known
    (s.backend.surf_object_destroy if surface else s.backend.tex_object_destroy)(s.context(ctx).obj, obj)


@handles(ops.TEX_OBJECT_DESTROY)
def _tex_destroy(s: Session, args, bulk):
    _destroy(s, args.object, False)


@handles(ops.SURF_OBJECT_DESTROY)
def _surf_destroy(s: Session, args, bulk):
    _destroy(s, args.object, True)
