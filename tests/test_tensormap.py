"""TENSOR_MAP_ENCODE_TILED, TENSOR_MAP_ENCODE_IM2COL and TENSOR_MAP_REPLACE_ADDRESS on the fake backend: the map
comes back as 128 opaque bytes, and a map may only describe the session's own memory."""

from __future__ import annotations

import json
import subprocess
import sys

from rgpu import shims
from rgpu.backends.fake import _fake_tensor_map
from rgpu.cli import local_server
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


SHIM_SCRIPT = """
import cffi, json, sys
ffi = cffi.FFI()
ffi.cdef('''
    int cuInit(unsigned); int cuDeviceGet(int *, int); int cuDevicePrimaryCtxRetain(void **, int);
    int cuCtxSetCurrent(void *); int cuMemAlloc_v2(unsigned long long *, size_t);
    int cuTensorMapEncodeTiled(void *map, int type, unsigned rank, void *address, const uint64_t *dims,
                               const uint64_t *strides, const unsigned *box, const unsigned *element_strides,
                               int interleave, int swizzle, int l2, int oob);
    int cuTensorMapReplaceAddress(void *map, void *address);
''')
c = ffi.dlopen(sys.argv[1])
dev, ctx = ffi.new('int *'), ffi.new('void **')
ptr, small = ffi.new('unsigned long long *'), ffi.new('unsigned long long *')
assert c.cuInit(0) == 0 and c.cuDeviceGet(dev, 0) == 0 and c.cuDevicePrimaryCtxRetain(ctx, dev[0]) == 0
assert c.cuCtxSetCurrent(ctx[0]) == 0 and c.cuMemAlloc_v2(ptr, 8192) == 0 and c.cuMemAlloc_v2(small, 4096) == 0
buf = ffi.new('char[192]')
tmap = ffi.cast('void *', (int(ffi.cast('uintptr_t', buf)) + 63) // 64 * 64)  # CUtensorMap is 64-byte aligned
def encode(address, rows, rank=2):
    return c.cuTensorMapEncodeTiled(tmap, 7, rank, ffi.cast('void *', address), ffi.new('uint64_t[2]', [64, rows]),
                                    ffi.new('uint64_t[1]', [256]), ffi.new('unsigned[2]', [16, 16]),
                                    ffi.new('unsigned[2]', [1, 1]), 0, 0, 0, 0)
out = {'ptr': ptr[0], 'valid': encode(ptr[0], 32), 'map': bytes(ffi.buffer(tmap, 128)).hex(),
       'past_end': encode(ptr[0], 33), 'unowned': encode(ptr[0] + (1 << 30), 1), 'rank0': encode(ptr[0], 32, 0),
       'rank6': encode(ptr[0], 32, 6)}
assert encode(ptr[0], 32) == 0
out['too_small'] = c.cuTensorMapReplaceAddress(tmap, ffi.cast('void *', small[0]))
# NULL arguments crash NVIDIA's driver; rgpu's refuses them before any call.
out['null_map'] = c.cuTensorMapEncodeTiled(ffi.NULL, 7, 2, ffi.cast('void *', ptr[0]), ffi.new('uint64_t[2]', [64, 32]),
                                           ffi.new('uint64_t[1]', [256]), ffi.new('unsigned[2]', [16, 16]),
                                           ffi.new('unsigned[2]', [1, 1]), 0, 0, 0, 0)
out['null_strides'] = c.cuTensorMapEncodeTiled(tmap, 7, 2, ffi.cast('void *', ptr[0]), ffi.new('uint64_t[2]', [64, 32]),
                                               ffi.NULL, ffi.new('unsigned[2]', [16, 16]),
                                               ffi.new('unsigned[2]', [1, 1]), 0, 0, 0, 0)
out['null_replace'] = c.cuTensorMapReplaceAddress(ffi.NULL, ffi.cast('void *', ptr[0]))
out['kept'] = bytes(ffi.buffer(tmap, 128)).hex()
print(json.dumps(out))
"""


def test_the_shim_stores_the_servers_map_as_is_and_passes_on_its_refusals(shim_dir, tmp_path):
    script = tmp_path / "tensor_map.py"
    script.write_text(SHIM_SCRIPT)
    with local_server("fake", ["--log-level", "warning"]) as address:
        env = dict(shims.environment(shim_dir), RGPU_SERVER=address)
        proc = subprocess.run([sys.executable, str(script), str(shim_dir / "libcuda.so.1")], env=env,
                              capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    expected = _fake_tensor_map(b"rgputile", FLOAT32, out["ptr"], (64, 32), (256,), (16, 16), (1, 1), 0, 0, 0, 0)
    assert out["valid"] == 0 and bytes.fromhex(out["map"]) == expected
    invalid = int(Status.INVALID_VALUE)
    refused = ("past_end", "unowned", "rank0", "rank6", "too_small", "null_map", "null_strides", "null_replace")
    assert [out[k] for k in refused] == [invalid] * len(refused)
    assert out["kept"] == out["map"]  # a refused replacement leaves the map alone
