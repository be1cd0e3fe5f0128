"""TENSOR_MAP_ENCODE_TILED, TENSOR_MAP_ENCODE_IM2COL and TENSOR_MAP_REPLACE_ADDRESS on the fake backend: the map
comes back as 128 opaque bytes, and a map may only describe the session's own memory."""

from __future__ import annotations

from rgpu.dispatch import tensormap
from rgpu.errors import Status
from rgpu.protocol import ops

from .test_vmm import HANDLERS, call, fails, session

OP, IM2COL, REPLACE = ops.TENSOR_MAP_ENCODE_TILED, ops.TENSOR_MAP_ENCODE_IM2COL, ops.TENSOR_MAP_REPLACE_ADDRESS
FLOAT32, U4_ALIGN8B = 7, 13


def request(address, dims, strides, box, element_strides=None, *, data_type=FLOAT32, rank=None, swizzle=0):
    """The request's field values, arrays padded with zeros as the C client sends them."""
    pad = lambda values, n: list(values) + [0] * (n - len(values))  # noqa: E731
    fields = dict(data_type=data_type, rank=len(dims) if rank is None else rank, address=address,
                  interleave=0, swizzle=swizzle, l2_promotion=0, oob_fill=0)
    fields.update({f"dim{i}": v for i, v in enumerate(pad(dims, 5))})
    fields.update({f"stride{i + 1}": v for i, v in enumerate(pad(strides, 4))})
    fields.update({f"box{i}": v for i, v in enumerate(pad(box, 5))})
    fields.update({f"element_stride{i}": v for i, v in enumerate(pad(element_strides or [1] * len(dims), 5))})
    return tuple(OP.Request(**fields))


def im2col(address, dims, strides, lower, upper, channels=8, pixels=16, **kw):
    """An im2col request: the tiled one's fields without the box, with the pixel box's corners."""
    fields = OP.Request(*request(address, dims, strides, [], **kw))._asdict()
    fields.update({f"lower{i}": v for i, v in enumerate(list(lower) + [0] * (3 - len(lower)))})
    fields.update({f"upper{i}": v for i, v in enumerate(list(upper) + [0] * (3 - len(upper)))})
    fields.update(channels_per_pixel=channels, pixels_per_column=pixels)
    return tuple(IM2COL.Request(**{f.name: fields[f.name] for f in IM2COL.request_fields}))


def alloc(s, size):
    return call(s, ops.MEM_ALLOC, size)[0]


def test_a_map_of_the_sessions_memory_is_128_deterministic_bytes():
    s = session()
    ptr = alloc(s, 64 * 32 * 4)
    (tensor_map,) = call(s, OP, *request(ptr, [64, 32], [256], [16, 16]))
    assert len(tensor_map) == 128 and tensor_map[8:16] == ptr.to_bytes(8, "little")
    assert call(s, OP, *request(ptr, [64, 32], [256], [16, 16]))[0] == tensor_map
    assert call(s, OP, *request(ptr, [64, 32], [256], [32, 16]))[0] != tensor_map
    assert call(s, OP, *request(ptr, [64, 32], [256], [16, 16], swizzle=3))[0] != tensor_map
    # A 5-dimensional view and a 1-dimensional one of the same allocation.
    assert len(call(s, OP, *request(ptr, [8, 4, 4, 4, 4], [32, 128, 512, 2048], [8, 2, 2, 2, 2]))[0]) == 128
    assert len(call(s, OP, *request(ptr, [64 * 32], [], [256]))[0]) == 128


def test_the_extent_counts_strides_and_packed_types():
    assert tensormap.extent(FLOAT32, (64, 32), (256,)) == 64 * 4 + 31 * 256
    assert tensormap.extent(FLOAT32, (10,), ()) == 40
    assert tensormap.extent(U4_ALIGN8B, (128, 2), (64,)) == 64 + 64  # 16 four-bit values in 8 bytes
    s = session()
    ptr = alloc(s, 128)
    assert len(call(s, OP, *request(ptr, [128, 2], [64], [128, 1], data_type=U4_ALIGN8B))[0]) == 128


def test_bad_rank_type_or_dimensions_are_invalid_value():
    s = session()
    ptr = alloc(s, 1 << 16)
    for rank in (0, 6, 0xFFFFFFFF):
        fails(Status.INVALID_VALUE, s, OP, *request(ptr, [16], [], [16], rank=rank))
    fails(Status.INVALID_VALUE, s, OP, *request(ptr, [16], [], [16], data_type=16))
    fails(Status.INVALID_VALUE, s, OP, *request(ptr, [16, 0], [64], [16, 1]))


def test_a_map_reaching_outside_the_sessions_memory_is_invalid_value():
    s = session()
    other = session(backend=s.backend)
    ptr, theirs = alloc(s, 64 * 32 * 4), alloc(other, 64 * 32 * 4)
    assert theirs != ptr and len(call(other, OP, *request(theirs, [64, 32], [256], [16, 16]))[0]) == 128
    fails(Status.INVALID_VALUE, s, OP, *request(ptr, [64, 33], [256], [16, 16]))  # one row past the end
    fails(Status.INVALID_VALUE, s, OP, *request(ptr, [65, 32], [256], [16, 16]))  # one element past the end
    fails(Status.INVALID_VALUE, s, OP, *request(ptr, [64, 32], [1 << 40], [16, 16]))  # a stride far beyond
    fails(Status.INVALID_VALUE, s, OP, *request(ptr + 64 * 32 * 4, [1], [], [1]))  # just past the allocation
    fails(Status.INVALID_VALUE, s, OP, *request(theirs, [64, 32], [256], [16, 16]))  # another session's
    fails(Status.INVALID_VALUE, s, OP, *request(0, [16], [], [16]))
    fails(Status.INVALID_VALUE, s, OP, *request(2**64 - 16, [16, 2**32], [2**40], [16, 1]))


def test_im2col_maps_need_rank_3_and_the_sessions_memory():
    s = session()
    nhwc = [8, 4, 4, 2]  # channels, width, height, images of float32
    strides = [32, 128, 512]
    ptr = alloc(s, 1024)
    (tensor_map,) = call(s, IM2COL, *im2col(ptr, nhwc, strides, [0, 0], [-1, -1]))
    assert len(tensor_map) == 128 and tensor_map[8:16] == ptr.to_bytes(8, "little")
    assert call(s, IM2COL, *im2col(ptr, nhwc, strides, [-1, -1], [0, 0]))[0] != tensor_map
    assert call(s, OP, *request(ptr, nhwc, strides, [8, 4, 4, 1]))[0] != tensor_map
    fails(Status.INVALID_VALUE, s, IM2COL, *im2col(ptr, [8, 4], [32], [], []))  # rank 2
    fails(Status.INVALID_VALUE, s, IM2COL, *im2col(ptr, nhwc, strides, [0, 0], [-1, -1], rank=6))
    fails(Status.INVALID_VALUE, s, IM2COL, *im2col(ptr, [8, 4, 4, 3], strides, [0, 0], [-1, -1]))  # one image more
    fails(Status.INVALID_VALUE, s, IM2COL, *im2col(ptr + 1024, [1, 1, 1], [16, 16], [0], [0]))


def test_replace_address_moves_only_maps_the_session_encoded_and_only_into_its_memory(monkeypatch):
    s = session()
    other = session(backend=s.backend)
    a, b, small, theirs = alloc(s, 8192), alloc(s, 8192), alloc(s, 4096), alloc(other, 8192)
    (tensor_map,) = call(s, OP, *request(a, [64, 32], [256], [16, 16]))
    (moved,) = call(s, REPLACE, tensor_map, b)
    assert moved == call(s, OP, *request(b, [64, 32], [256], [16, 16]))[0]  # as if encoded there
    assert call(s, REPLACE, moved, a)[0] == tensor_map  # a moved map can move again
    fails(Status.INVALID_VALUE, s, REPLACE, tensor_map, small)  # too small for the map's extent
    fails(Status.INVALID_VALUE, s, REPLACE, tensor_map, theirs)
    fails(Status.INVALID_VALUE, s, REPLACE, tensor_map, b + 16)
    fails(Status.INVALID_VALUE, other, REPLACE, tensor_map, theirs)  # not a map `other` was given
    fails(Status.INVALID_VALUE, s, REPLACE, bytes(128), b)
    forged = bytearray(tensor_map)
    forged[100] ^= 1
    fails(Status.INVALID_VALUE, s, REPLACE, bytes(forged), b)
    # The session remembers a bounded number of maps, the least recently used going first.
    monkeypatch.setattr(tensormap, "MAX_REMEMBERED", 2)
    call(s, OP, *request(a, [16], [], [16]))
    call(s, OP, *request(a, [32], [], [16]))
    fails(Status.INVALID_VALUE, s, REPLACE, tensor_map, b)


def test_the_calls_need_no_context_and_are_not_deferrable():
    for op in (OP, IM2COL, REPLACE):
        assert not op.context and not op.deferrable
        assert HANDLERS[op.code].op is op
