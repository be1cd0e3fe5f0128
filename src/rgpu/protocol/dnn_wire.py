"""The server's view of cuDNN requests: backend-descriptor attributes decoded, with descriptor and handle
references resolved to this session's own objects and every device pointer checked (docs/protocol.md,
"Libraries")."""

from __future__ import annotations

import functools
import struct

import attrs

from rgpu.errors import CudaError, Status

TYPE_HANDLE, TYPE_INT64, TYPE_VOID_PTR, TYPE_DESCRIPTOR = 0, 3, 6, 15
_ONE_BYTE, _EIGHT_BYTES, _SIXTEEN = {2, 24}, {0, 3, 5, 6, 15}, {26}
VARIANT_PACK_UNIQUE_IDS, VARIANT_PACK_DATA_POINTERS, VARIANT_PACK_WORKSPACE = 1000, 1001, 1003
# rgpu's own variant-pack attribute (1.4, after cuDNN's names, never passed to cuDNN): the values of
# pass-by-value tensors (CUDNN_ATTR_TENSOR_IS_BY_VALUE), whose data pointers name the client's host memory.
# CHAR elements: entries of (u32 index into DATA_POINTERS, u32 size, size bytes).
VARIANT_PACK_BY_VALUE = 0x52470001
TYPE_CHAR = 24
MAX_BY_VALUE_BYTES = 16  # the widest cuDNN scalar (a complex double)
EXECUTION_PLAN_WORKSPACE_SIZE = 402
EXECUTION_PLAN = 5  # CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR
# cudnnDataType_t -> element size, for the legacy tensor descriptors' extents.
DATA_TYPE_SIZES = {0: 4, 1: 8, 2: 2, 3: 1, 4: 4, 6: 1, 9: 2, 10: 8, 11: 1, 12: 1, 13: 1}
MAX_ELEMENTS = 1 << 16


def element_size(attr_type: int) -> int:
    return 1 if attr_type in _ONE_BYTE else 8 if attr_type in _EIGHT_BYTES else 16 if attr_type in _SIXTEEN else 4


# A network's layers send the same few shapes and attribute lists with every call, and parsing them again cost
# more than cuDNN's own work for a small batch: parses are kept by their bytes (failures are not kept).
_PARSED_KEPT = 1024


@attrs.frozen(slots=True)
class Attribute:
    name: int
    type: int
    count: int
    raw: bytes  # elements as sent; descriptors and handles are u64 session handles

    def ids(self) -> list[int]:
        return list(_u64s(self.raw, self.count))


@functools.lru_cache(maxsize=_PARSED_KEPT)
def _u64s(raw: bytes, count: int) -> tuple[int, ...]:
    return struct.unpack(f"<{count}Q", raw)


@functools.lru_cache(maxsize=_PARSED_KEPT)
def parse_attributes(bulk: bytes) -> tuple[Attribute, ...]:
    view, pos = memoryview(bulk), 0
    if len(view) < 2:
        raise CudaError(Status.INVALID_VALUE, "truncated cuDNN attribute list")
    (n,) = struct.unpack_from("<H", view)
    pos = 2
    out = []
    for _ in range(n):
        if pos + 12 > len(view):
            raise CudaError(Status.INVALID_VALUE, "truncated cuDNN attribute")
        name, atype, count = struct.unpack_from("<III", view, pos)
        pos += 12
        size = element_size(atype) * count
        if count > MAX_ELEMENTS or pos + size > len(view):
            raise CudaError(Status.INVALID_VALUE, f"cuDNN attribute {name}: {count} elements do not fit")
        out.append(Attribute(name, atype, count, bytes(view[pos : pos + size])))
        pos += size
    if pos != len(view):
        raise CudaError(Status.INVALID_VALUE, "trailing bytes after the cuDNN attributes")
    return tuple(out)


@functools.lru_cache(maxsize=_PARSED_KEPT)
def split_by_value(attributes: tuple[Attribute, ...]) -> tuple[tuple[Attribute, ...], dict[int, bytes]]:
    """A variant pack's attributes without rgpu's by-value attribute, and its values by DATA_POINTERS index
    (kept with the parse: read them, do not change them)."""
    rest = tuple(a for a in attributes if a.name != VARIANT_PACK_BY_VALUE)
    mine = [a for a in attributes if a.name == VARIANT_PACK_BY_VALUE]
    if not mine:
        return rest, {}
    pointers = next((a.count for a in rest if a.name == VARIANT_PACK_DATA_POINTERS), 0)
    if len(mine) != 1 or mine[0].type != TYPE_CHAR:
        raise CudaError(Status.INVALID_VALUE, "one by-value attribute of CHAR elements per variant pack")
    raw, pos, values = mine[0].raw, 0, {}
    while pos < len(raw):
        if pos + 8 > len(raw):
            raise CudaError(Status.INVALID_VALUE, "truncated by-value entry")
        index, size = struct.unpack_from("<II", raw, pos)
        pos += 8
        if index >= pointers or index in values or not 1 <= size <= MAX_BY_VALUE_BYTES or pos + size > len(raw):
            raise CudaError(Status.INVALID_VALUE, f"by-value entry for data pointer {index} of {size} bytes")
        values[index] = raw[pos : pos + size]
        pos += size
    return rest, values


@attrs.frozen(slots=True, cache_hash=True)  # keys of the size and descriptor caches, looked up on every call
class Tensor:
    """A legacy cudnnTensorDescriptor_t by value: type, dims and strides (the first n of 8 each)."""

    type: int
    dims: tuple
    strides: tuple

    def nbytes(self) -> int:
        return _tensor_nbytes(self)


@functools.lru_cache(maxsize=_PARSED_KEPT)
def _tensor_nbytes(t: Tensor) -> int:
    size = DATA_TYPE_SIZES.get(t.type)
    if size is None:
        raise CudaError(Status.NOT_SUPPORTED, f"cuDNN data type {t.type}")
    if any(d <= 0 for d in t.dims) or any(s <= 0 for s in t.strides):
        raise CudaError(Status.INVALID_VALUE, "tensor with a non-positive dimension or stride")
    return (sum((d - 1) * s for d, s in zip(t.dims, t.strides)) + 1) * size



@attrs.frozen(slots=True)
class Activation:
    """A legacy cudnnActivationDescriptor_t by value, as the fused batch-norm calls carry it."""

    mode: int  # cudnnActivationMode_t
    nan: int  # cudnnNanPropagation_t
    coef: float


ACTIVATION_RELU = 1

@functools.lru_cache(maxsize=_PARSED_KEPT)
def parse_tensors(bulk: bytes, count: int) -> tuple[Tensor, ...]:
    if len(bulk) != 72 * count:
        raise CudaError(Status.INVALID_VALUE, f"{len(bulk)} bytes for {count} tensor descriptors")
    out = []
    for i in range(count):
        dtype, n, *rest = struct.unpack_from("<II8i8i", bulk, 72 * i)
        if not 1 <= n <= 8:
            raise CudaError(Status.INVALID_VALUE, f"tensor of {n} dimensions")
        out.append(Tensor(dtype, tuple(rest[:n]), tuple(rest[8 : 8 + n])))
    return tuple(out)
