"""Tensor maps (TMA descriptors): cuTensorMapEncodeTiled / cuTensorMapEncodeIm2col / cuTensorMapReplaceAddress on
the server's driver, whose opaque 128 bytes go back to the client as they are. The driver only encodes, it touches
no memory; the program then hands the map to a kernel. Still, a session may only describe its own memory: the
whole extent the map can reach must lie inside one of its regions, the same rule as for every other pointer it
sends. A map's bytes cannot be read back into an extent, so the session remembers the extent of each map it was
given, and moves only those."""

from __future__ import annotations

from collections import OrderedDict

from rgpu.dispatch.registry import handles
from rgpu.errors import CudaError, Status
from rgpu.protocol import ops
from rgpu.session.state import Session

MAX_RANK = 5
MIN_IM2COL_RANK = 3  # the driver's: im2col needs a channel, a pixel and a batch dimension at least
# CUtensorMapDataType -> bytes per 16 elements (the packed 4- and 6-bit types store 16 values in 8 or 16 bytes).
_BYTES_PER_16 = {0: 16, 1: 32, 2: 64, 3: 64, 4: 128, 5: 128, 6: 32, 7: 64, 8: 128, 9: 32, 10: 64, 11: 64, 12: 64,
                 13: 8, 14: 16, 15: 16}


# Maps whose extent a session remembers for TENSOR_MAP_REPLACE_ADDRESS; beyond that the least recently used go.
MAX_REMEMBERED = 4096


class TensorMapState:
    """The extent of each map the session was given (map bytes -> bytes it reaches); held by no context."""

    def __init__(self) -> None:
        self.extents: OrderedDict[bytes, int] = OrderedDict()

    def remember(self, tensor_map: bytes, nbytes: int) -> None:
        self.extents[tensor_map] = nbytes
        self.extents.move_to_end(tensor_map)
        while len(self.extents) > MAX_REMEMBERED:
            self.extents.popitem(last=False)

    def release_context(self, s: Session, ctx: int) -> None:
        pass


def _state(s: Session) -> TensorMapState:
    state = s.extensions.get("tensor_maps")
    if state is None:
        state = s.extensions["tensor_maps"] = TensorMapState()
    return state


def _context(s: Session):
    """The call needs no context, but the session's current one (if any) is made current, so the driver never
    sees whatever context another session left on the thread."""
    return s.context().obj if s.current_ctx else None


def extent(data_type: int, dims: tuple[int, ...], strides: tuple[int, ...]) -> int:
    """Bytes from the tensor's start to the end of its last element: dimension 0 is contiguous, dimension i
    (i >= 1) steps by strides[i - 1] bytes."""
    per16 = _BYTES_PER_16.get(data_type)
    if per16 is None:
        raise CudaError(Status.INVALID_VALUE, f"tensor map data type {data_type}")
    if any(d == 0 for d in dims):
        raise CudaError(Status.INVALID_VALUE, f"tensor map dimensions {dims} include 0")
    return (dims[0] * per16 + 15) // 16 + sum((d - 1) * stride for d, stride in zip(dims[1:], strides))


def _tensor(s: Session, a, min_rank: int):
    """(extent, dims, strides, element strides) of the request, checked."""
    if not min_rank <= a.rank <= MAX_RANK:
        raise CudaError(Status.INVALID_VALUE, f"tensor map rank {a.rank}")
    dims = (a.dim0, a.dim1, a.dim2, a.dim3, a.dim4)[: a.rank]
    strides = (a.stride1, a.stride2, a.stride3, a.stride4)[: a.rank - 1]
    nbytes = extent(a.data_type, dims, strides)
    s.memory.check(a.address, nbytes)
    element_strides = (a.element_stride0, a.element_stride1, a.element_stride2, a.element_stride3,
                       a.element_stride4)[: a.rank]
    return nbytes, dims, strides, element_strides


def _encoded(s: Session, a, encode):
    """The driver's map; when it refuses, the request's fields go to the debug log: the driver names no field."""
    try:
        return encode()
    except CudaError as e:
        s.log.debug("tensor map refused by the driver (%s): %s", e, a)
        raise


def _map(s: Session, tensor_map: bytes, nbytes: int) -> tuple[bytes]:
    if len(tensor_map) != 128:
        raise CudaError(Status.UNKNOWN, f"backend returned a {len(tensor_map)}-byte tensor map")
    _state(s).remember(bytes(tensor_map), nbytes)
    return (tensor_map,)


@handles(ops.TENSOR_MAP_ENCODE_TILED)
def _encode_tiled(s: Session, a, bulk):
    nbytes, dims, strides, element_strides = _tensor(s, a, 1)
    box = (a.box0, a.box1, a.box2, a.box3, a.box4)[: a.rank]
    return _map(s, _encoded(s, a, lambda: s.backend.tensor_map_encode_tiled(
        _context(s), a.data_type, a.address, dims, strides, box, element_strides, a.interleave, a.swizzle,
        a.l2_promotion, a.oob_fill)), nbytes)


@handles(ops.TENSOR_MAP_ENCODE_IM2COL)
def _encode_im2col(s: Session, a, bulk):
    nbytes, dims, strides, element_strides = _tensor(s, a, MIN_IM2COL_RANK)
    corners = ((a.lower0, a.lower1, a.lower2)[: a.rank - 2], (a.upper0, a.upper1, a.upper2)[: a.rank - 2])
    return _map(s, _encoded(s, a, lambda: s.backend.tensor_map_encode_im2col(
        _context(s), a.data_type, a.address, dims, strides, corners, a.channels_per_pixel, a.pixels_per_column,
        element_strides, a.interleave, a.swizzle, a.l2_promotion, a.oob_fill)), nbytes)


@handles(ops.TENSOR_MAP_REPLACE_ADDRESS)
def _replace_address(s: Session, a, bulk):
    nbytes = _state(s).extents.get(a.tensor_map)
    if nbytes is None:
        raise CudaError(Status.INVALID_VALUE, "not a tensor map this session encoded (or one long forgotten)")
    s.memory.check(a.address, nbytes)
    return _map(s, s.backend.tensor_map_replace_address(_context(s), a.tensor_map, a.address), nbytes)
