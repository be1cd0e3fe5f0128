"""What rgpu.dispatch.arrays hands the backends for CUDA arrays, texture and surface objects, checked."""

from __future__ import annotations

import attrs

from rgpu.protocol import ops

HOST, DEVICE, ARRAY = 1, 2, 3  # the ends of an array copy
ARRAY_LAYERED, ARRAY_SURFACE_LDST = 0x01, 0x02  # CUDA_ARRAY3D_* flags rgpu takes
RESOURCE_ARRAY, RESOURCE_MIPMAPPED, RESOURCE_LINEAR, RESOURCE_PITCH2D = 0, 1, 2, 3  # CUresourcetype


@attrs.frozen(slots=True)
class ArrayShape:
    width: int
    height: int  # 0: a 1D array
    depth: int  # 0: no third dimension
    format: int
    channels: int
    flags: int

    @property
    def element(self) -> int:
        return ops.ARRAY_FORMATS[self.format] * self.channels

    @property
    def row_bytes(self) -> int:
        return self.width * self.element

    @property
    def rows(self) -> int:
        return max(self.height, 1)

    @property
    def slices(self) -> int:
        return max(self.depth, 1)

    @property
    def nbytes(self) -> int:
        return self.row_bytes * self.rows * self.slices


@attrs.frozen(slots=True)
class CopyEnd:
    """One end of an array copy: the host (its rows packed), device memory at `obj` with `pitch`, or the array
    `obj` (the backend's) from byte `x` of row `y` of slice `z`."""

    type: int
    obj: object = None
    x: int = 0
    y: int = 0
    z: int = 0
    pitch: int = 0


@attrs.frozen(slots=True)
class Resource:
    """A CUDA_RESOURCE_DESC, checked: an array (the backend's, with its shape), or device memory (`ptr`), linear
    (`size` bytes) or pitched 2D (`width` x `height` elements, rows `pitch` bytes apart)."""

    type: int
    array: object = None
    shape: ArrayShape | None = None
    ptr: int = 0
    format: int = 0
    channels: int = 0
    size: int = 0
    width: int = 0
    height: int = 0
    pitch: int = 0


@attrs.frozen(slots=True)
class TextureDesc:
    address: tuple[int, int, int]  # CUaddress_mode: 0 wrap, 1 clamp, 2 mirror, 3 border
    filter: int  # 0 point, 1 linear
    flags: int
    border: tuple[float, float, float, float]
    raw: bytes  # the CUDA_TEXTURE_DESC as it came

    @property
    def normalized(self) -> bool:
        return bool(self.flags & 0x02)

    @property
    def read_as_integer(self) -> bool:
        return bool(self.flags & 0x01)
