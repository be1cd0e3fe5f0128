"""CUDA arrays, texture and surface objects on the real driver: the CudaBackend mixin (requests are checked in
rgpu.dispatch.arrays).

Through cffi: the texture descriptions arrive as the driver's own structures and go to it as they are (the
resource's array handle made the driver's); copies fill the driver's CUDA_MEMCPY3D, whose host end is the
request's bulk or the reply's buffer."""

from __future__ import annotations

import struct

import cffi

from rgpu.backends.array_types import ARRAY, DEVICE, HOST, RESOURCE_ARRAY, RESOURCE_LINEAR, CopyEnd, Resource
from rgpu.backends.cuda_common import check_code, driver, handle

_ffi = cffi.FFI()
_ffi.cdef("""
    typedef struct {
        size_t Width, Height, Depth;
        int Format;
        unsigned int NumChannels, Flags;
    } CUDA_ARRAY3D_DESCRIPTOR;
    typedef struct {
        size_t srcXInBytes, srcY, srcZ, srcLOD;
        int srcMemoryType;
        const void *srcHost;
        unsigned long long srcDevice;
        void *srcArray;
        void *reserved0;
        size_t srcPitch, srcHeight;
        size_t dstXInBytes, dstY, dstZ, dstLOD;
        int dstMemoryType;
        void *dstHost;
        unsigned long long dstDevice;
        void *dstArray;
        void *reserved1;
        size_t dstPitch, dstHeight;
        size_t WidthInBytes, Height, Depth;
    } CUDA_MEMCPY3D;
    int cuArray3DCreate_v2(void **array, const CUDA_ARRAY3D_DESCRIPTOR *desc);
    int cuArrayDestroy(void *array);
    int cuMemcpy3D_v2(const CUDA_MEMCPY3D *copy);
    int cuMemcpy3DAsync_v2(const CUDA_MEMCPY3D *copy, uintptr_t stream);
    int cuTexObjectCreate(unsigned long long *object, const char *res, const char *tex, const char *view);
    int cuTexObjectDestroy(unsigned long long object);
    int cuSurfObjectCreate(unsigned long long *object, const char *res);
    int cuSurfObjectDestroy(unsigned long long object);
""")
_RESOURCE_SIZE = 144
_ARRAY_RESOURCE = struct.Struct("<I4xQ")
_MEMORY_RESOURCE = struct.Struct("<I4xQIIQQQ")


def _resource(res: Resource) -> bytes:
    """The CUDA_RESOURCE_DESC of a checked resource, the array the driver's own."""
    if res.type == RESOURCE_ARRAY:
        head = _ARRAY_RESOURCE.pack(RESOURCE_ARRAY, int(_ffi.cast("uintptr_t", res.array)))
    elif res.type == RESOURCE_LINEAR:
        head = _MEMORY_RESOURCE.pack(res.type, res.ptr, res.format, res.channels, res.size, 0, 0)
    else:
        head = _MEMORY_RESOURCE.pack(res.type, res.ptr, res.format, res.channels, res.width, res.height, res.pitch)
    return head.ljust(_RESOURCE_SIZE, b"\0")


class CudaArrays:
    """Mixed into CudaBackend."""

    def array_create(self, ctx, shape):
        self._use(ctx)
        desc = _ffi.new("CUDA_ARRAY3D_DESCRIPTOR *", {"Width": shape.width, "Height": shape.height,
                                                      "Depth": shape.depth, "Format": shape.format,
                                                      "NumChannels": shape.channels, "Flags": shape.flags})
        array = _ffi.new("void **")
        check_code(driver(_ffi).cuArray3DCreate_v2(array, desc))
        return array[0]

    def array_destroy(self, ctx, array) -> None:
        self._use(ctx)
        check_code(driver(_ffi).cuArrayDestroy(array))

    def array_copy(self, ctx, src: CopyEnd, dst: CopyEnd, width: int, height: int, rows, stream, asynchronous):
        self._use(ctx)
        copy = _ffi.new("CUDA_MEMCPY3D *", {"WidthInBytes": width, "Height": height, "Depth": 1})
        keep = []  # the host ends' buffers, alive through the call
        out = bytearray(width * height) if dst.type == HOST else None
        for end, side, host in ((src, "src", rows), (dst, "dst", out)):
            setattr(copy, f"{side}MemoryType", end.type)
            if end.type == HOST:
                buffer = _ffi.from_buffer(host, require_writable=side == "dst")
                keep.append(buffer)
                setattr(copy, f"{side}Host", buffer)
                setattr(copy, f"{side}Pitch", width)
            elif end.type == DEVICE:
                setattr(copy, f"{side}Device", end.obj)
                setattr(copy, f"{side}Pitch", end.pitch)
            else:
                assert end.type == ARRAY
                setattr(copy, f"{side}Array", end.obj)
                setattr(copy, f"{side}XInBytes", end.x)
                setattr(copy, f"{side}Y", end.y)
                setattr(copy, f"{side}Z", end.z)
        lib = driver(_ffi)
        # (a copy from the request's bulk finishes reading it before the call returns: pageable host memory)
        check_code(lib.cuMemcpy3DAsync_v2(copy, handle(stream)) if asynchronous else lib.cuMemcpy3D_v2(copy))
        return out

    def tex_object_create(self, ctx, res: Resource, desc, view):
        self._use(ctx)
        number = _ffi.new("unsigned long long *")
        check_code(driver(_ffi).cuTexObjectCreate(number, _resource(res), desc.raw,
                                                  view if view is not None else _ffi.NULL))
        return int(number[0]), int(number[0])

    def tex_object_destroy(self, ctx, obj) -> None:
        self._use(ctx)
        check_code(driver(_ffi).cuTexObjectDestroy(obj))

    def surf_object_create(self, ctx, res: Resource):
        self._use(ctx)
        number = _ffi.new("unsigned long long *")
        check_code(driver(_ffi).cuSurfObjectCreate(number, _resource(res)))
        return int(number[0]), int(number[0])

    def surf_object_destroy(self, ctx, obj) -> None:
        self._use(ctx)
        check_code(driver(_ffi).cuSurfObjectDestroy(obj))
