"""CUDA arrays, texture and surface objects on the fake backend: the FakeBackend mixin (requests are checked in
rgpu.dispatch.arrays).

An array is a (slices, rows, row bytes) numpy buffer. A texture object samples its resource as the hardware's
texture unit does for the cases the fake kernels use: point and linear filtering (linear here in exact float
arithmetic, where the hardware weighs texels with 8 fractional bits), the four address modes (wrap and mirror only
with normalized coordinates, as CUDA has it), integer formats read as normalized floats unless read as integers;
a 1D fetch from linear memory reads 0 outside it."""

from __future__ import annotations

import attrs
import numpy as np

from rgpu.backends.array_types import (ARRAY, DEVICE, HOST, RESOURCE_ARRAY, RESOURCE_LINEAR, CopyEnd, Resource,
                                       TextureDesc)
from rgpu.errors import CudaError, Status

_DTYPES = {0x01: np.uint8, 0x02: np.uint16, 0x03: np.uint32, 0x08: np.int8, 0x09: np.int16, 0x0A: np.int32,
           0x10: np.float16, 0x20: np.float32}
_WRAP, _CLAMP, _MIRROR, _BORDER = 0, 1, 2, 3


class FakeArrayGone(Exception):
    """A kernel read an array that was destroyed: a fault, as an illegal address is."""


@attrs.define(eq=False)
class FakeArray:
    data: np.ndarray | None  # (slices, rows, row bytes); None once destroyed

    def rows(self) -> np.ndarray:
        if self.data is None:
            raise FakeArrayGone("a destroyed array")
        return self.data


@attrs.define(eq=False)
class FakeTexture:
    resource: Resource
    desc: TextureDesc | None  # None for a surface
    view: object  # (ptr, nbytes) -> bytes of device memory, for resources in it

    def _channel0(self, rows: np.ndarray, width: int) -> np.ndarray:
        """The first channel of each element of (rows, bytes) data, as the format's numbers."""
        res = self.resource
        fmt, channels = (res.shape.format, res.shape.channels) if res.shape is not None else (res.format,
                                                                                               res.channels)
        dtype = np.dtype(_DTYPES[fmt])
        return np.ascontiguousarray(rows[:, : width * dtype.itemsize * channels]).view(dtype)[:, ::channels]

    def _as_read(self, values: np.ndarray) -> np.ndarray:
        # 8- and 16-bit integers read as normalized floats unless read as integers (32-bit ones never are);
        # signed ones reach -1.0 from both of their two lowest values
        if (self.desc is not None and not self.desc.read_as_integer and values.dtype.kind in "ui"
                and values.dtype.itemsize < 4):
            scaled = values.astype(np.float32) / np.float32(np.iinfo(values.dtype).max)
            return np.maximum(scaled, np.float32(-1)) if values.dtype.kind == "i" else scaled
        return values.astype(np.float32)

    def texels(self) -> np.ndarray:
        """The resource's first channel as a 2D float32 image (rows, width)."""
        res = self.resource
        if res.type == RESOURCE_ARRAY:
            shape = res.shape
            return self._as_read(self._channel0(res.array.rows()[0], shape.width))
        element = np.dtype(_DTYPES[res.format]).itemsize * res.channels
        data = np.frombuffer(self.view(res.ptr, res.pitch * (res.height - 1) + res.width * element), np.uint8)
        rows = np.lib.stride_tricks.as_strided(data, shape=(res.height, res.width * element), strides=(res.pitch, 1))
        return self._as_read(self._channel0(rows, res.width))

    def _index(self, i: np.ndarray, size: int, mode: int) -> tuple[np.ndarray, np.ndarray]:
        """(texel indices, inside?) for integer coordinates `i` along an axis of `size` texels."""
        if not self.desc.normalized and mode in (_WRAP, _MIRROR):
            mode = _CLAMP
        if mode == _WRAP:
            return np.mod(i, size), np.ones(i.shape, bool)
        if mode == _MIRROR:
            period = np.mod(i, 2 * size)
            return np.where(period < size, period, 2 * size - 1 - period), np.ones(i.shape, bool)
        inside = (i >= 0) & (i < size)
        return np.clip(i, 0, size - 1), inside if mode == _BORDER else np.ones(i.shape, bool)

    def sample_2d(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """tex2D<float> at float32 coordinates."""
        image = self.texels()
        height, width = image.shape
        if self.desc.normalized:
            x, y = x * np.float32(width), y * np.float32(height)
        border = np.float32(self.desc.border[0])

        def at(ix, iy):
            cx, inx = self._index(ix, width, self.desc.address[0])
            cy, iny = self._index(iy, height, self.desc.address[1])
            return np.where(inx & iny, image[cy, cx], border)

        if self.desc.filter == 0:
            return at(np.floor(x).astype(np.int64), np.floor(y).astype(np.int64)).astype(np.float32)
        xb, yb = x - np.float32(0.5), y - np.float32(0.5)
        x0, y0 = np.floor(xb).astype(np.int64), np.floor(yb).astype(np.int64)
        a, b = (xb - x0).astype(np.float32), (yb - y0).astype(np.float32)
        return ((1 - a) * (1 - b) * at(x0, y0) + a * (1 - b) * at(x0 + 1, y0) + (1 - a) * b * at(x0, y0 + 1)
                + a * b * at(x0 + 1, y0 + 1)).astype(np.float32)

    def fetch_1d(self, i: np.ndarray) -> np.ndarray:
        """tex1Dfetch<float> of linear memory: 0 outside it."""
        res = self.resource
        if res.type != RESOURCE_LINEAR:
            raise CudaError(Status.INVALID_VALUE, "tex1Dfetch reads linear memory")
        dtype = np.dtype(_DTYPES[res.format])
        count = res.size // (dtype.itemsize * res.channels)
        values = self._as_read(np.frombuffer(self.view(res.ptr, res.size), dtype)[:: res.channels][:count])
        inside = (i >= 0) & (i < count)
        return np.where(inside, values[np.clip(i, 0, count - 1)], np.float32(0)).astype(np.float32)

    def write_2d(self, values: np.ndarray, x_bytes: np.ndarray, y: np.ndarray) -> None:
        """surf2Dwrite of float32 values (the trap boundary mode: out of range faults)."""
        data = self.resource.array.rows()[0]
        if values.size and (x_bytes.min() < 0 or x_bytes.max() + 4 > data.shape[1] or y.min() < 0
                            or y.max() >= data.shape[0] or np.any(x_bytes % 4)):
            raise FakeArrayGone("surface write out of range")
        rows = data.view(np.float32)
        rows[y, x_bytes // 4] = values


class FakeArrays:
    """Mixed into FakeBackend (which provides `_rows`, `_view`, `_stream_wait`, and `_textures` and
    `_object_numbers` for the objects)."""

    def array_create(self, ctx, shape) -> FakeArray:
        ctx.check()
        return FakeArray(np.zeros((shape.slices, shape.rows, shape.row_bytes), np.uint8))

    def array_destroy(self, ctx, array: FakeArray) -> None:
        array.data = None

    def _slab(self, end: CopyEnd, width: int, height: int, rows) -> np.ndarray:
        if end.type == HOST:
            return np.frombuffer(rows, np.uint8).reshape(height, width)
        if end.type == DEVICE:
            return self._rows(end.obj, end.pitch, width, height)
        assert end.type == ARRAY
        return end.obj.rows()[end.z, end.y : end.y + height, end.x : end.x + width]

    def array_copy(self, ctx, src: CopyEnd, dst: CopyEnd, width: int, height: int, rows, stream, asynchronous):
        ctx.check()
        if not asynchronous:
            self._stream_wait(ctx, stream)
        source = self._slab(src, width, height, rows).copy()  # (the two ends may be one array)
        if dst.type == HOST:
            return bytearray(source.tobytes())
        self._slab(dst, width, height, None)[:] = source
        return None

    def _object(self, ctx, res: Resource, desc, view):
        ctx.check()
        if view is not None:
            raise CudaError(Status.NOT_SUPPORTED, "the fake backend has no resource views")
        number = next(self._object_numbers)
        self._textures[number] = FakeTexture(res, desc, self._view)
        return number, number

    def tex_object_create(self, ctx, res: Resource, desc: TextureDesc, view):
        return self._object(ctx, res, desc, view)

    def surf_object_create(self, ctx, res: Resource):
        return self._object(ctx, res, None, None)

    def tex_object_destroy(self, ctx, number: int) -> None:
        self._textures.pop(number, None)

    surf_object_destroy = tex_object_destroy

    def texture(self, number: int) -> FakeTexture:
        """What a kernel's texture or surface parameter names; an unknown number faults, as on a GPU."""
        found = self._textures.get(int(number))
        if found is None:
            raise FakeArrayGone(f"texture or surface object {number}")
        return found
