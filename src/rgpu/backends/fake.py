"""Pure-Python backend: emulated device memory, PTX modules and the kernels in fake_kernels.

It mirrors the driver where tests can see the difference: one address space shared by every context (as
UVA is), memory accounting that sessions draw from, asynchronous streams (a long kernel makes its stream
busy; synchronising waits), events with timestamps, and sticky context errors after a kernel faults.
"""

from __future__ import annotations

import bisect
import hashlib
import itertools
import os
import threading
import time

import attrs
import numpy as np

from rgpu.backends import fake_blas, fake_dnn, fake_lane, ptx
from rgpu.backends.fake_blas_routines import FakeBlasRoutines
from rgpu.backends.fake_solver import FakeSolver
from rgpu.backends.fake_sparse import FakeSparse
from rgpu.backends.base import ATTRIBUTE_UNSUPPORTED, MAX_PARAM_BYTES, Backend
from rgpu.backends.fake_fft import FakeFft
from rgpu.backends.fake_arrays import FakeArrayGone, FakeArrays
from rgpu.backends.fake_graphs import FakeGraphs
from rgpu.backends.fake_ipc import FakeIpc
from rgpu.backends.fake_jit_link import FakeJitLink
from rgpu.backends.fake_kernels import KERNELS, KernelExec
from rgpu.backends.fake_memops import FakeMemOps
from rgpu.backends.fake_pools import FakePools
from rgpu.backends.fake_rand import FakeRand
from rgpu.backends.fake_vmm import FakeVmm
from rgpu.errors import CudaError, Status
from rgpu.protocol.params import decode_params

DRIVER_VERSION = 13000
ALIGNMENT = 512
BASE_ADDRESS = 0x7F00_0000_0000

ATTRIBUTES = {
    1: 1024, 2: 1024, 3: 1024, 4: 64, 5: 2**31 - 1, 6: 65535, 7: 65535, 8: 49152, 9: 65536, 10: 32,
    11: 2**31 - 1, 12: 65536, 13: 1_980_000, 14: 512, 15: 1, 16: 4, 17: 0, 18: 0, 19: 1, 20: 0, 31: 1,
    33: 0, 34: 0, 35: 0, 36: 3_201_000, 37: 5120, 38: 60 * 1024 * 1024, 39: 2048, 40: 2, 41: 1,
    50: 0, 75: 9, 76: 0, 78: 1, 79: 1, 80: 1, 81: 233472, 82: 65536, 83: 0, 84: 0, 95: 1, 97: 232448, 102: 1,
    106: 32, 108: 39_321_600, 109: 134_217_728, 111: 1024, 115: 1,
    # stream memory operations (fake_memops): 32- and 64-bit, the NOR wait; no remote-write flushes
    92: 1, 93: 1, 94: 1, 98: 0, 122: 1, 123: 1,
}


class IllegalAddress(Exception):
    pass


@attrs.define(eq=False)
class FakeContext:
    dev: int
    flags: int
    sticky: int = 0
    busy_until: float = 0.0  # NULL stream
    allocations: set = attrs.Factory(set)
    streams: list = attrs.Factory(list)
    limits: dict = attrs.Factory(lambda: dict(DEFAULT_LIMITS))
    peers: set = attrs.Factory(set)  # contexts whose memory kernels of this one may access

    def check(self) -> None:
        if self.sticky:
            raise CudaError(self.sticky, "context is in an unrecoverable error state after a kernel fault")


_STREAM_IDS = itertools.count(2)  # (1: the NULL stream's)


@attrs.define(eq=False)
class FakeStream:
    ctx: FakeContext
    flags: int
    busy_until: float = 0.0
    priority: int = 0
    capture: object = None  # a FakeCapture while the stream is capturing (rgpu.dispatch.fake_graphs)
    ident: int = attrs.Factory(lambda: next(_STREAM_IDS))  # cuStreamGetId's: unique in the process
    attributes: dict = attrs.Factory(dict)  # attribute id -> the 64-byte value set (cuStreamSetAttribute)


@attrs.define(eq=False)
class FakeEvent:
    flags: int
    timestamp: float | None = None


@attrs.define(eq=False)
class FakeModule:
    ptx: ptx.PtxModule
    globals: dict  # name -> (ptr, size)


@attrs.define(eq=False)
class FakeFunction:
    name: str
    layout: tuple
    ptx_version: int = 0
    attributes: dict = attrs.Factory(dict)  # set by cuFuncSetAttribute
    globals: dict = attrs.Factory(dict)  # its module's: name -> (ptr, size)


def _symbol_of(func: FakeFunction):
    def symbol(name: str) -> int:
        """A global of the kernel's module, as its code names it (a GPU's loader resolves the reference)."""
        if name not in func.globals:
            raise IllegalAddress(f"no global {name!r} in the module of {func.name!r}")
        return func.globals[name][0]

    return symbol


# cuFuncGetAttribute defaults, by attribute id (registers and sizes as a small kernel has them).
FUNC_ATTRIBUTES = {0: 1024, 1: 0, 2: 0, 3: 0, 4: 16, 6: 75, 7: 0, 8: 48 * 1024, 9: -1, 10: 0, 11: 0, 12: 0,
                   13: 0, 14: 0, 15: 0}
_SETTABLE_FUNC_ATTRIBUTES = {8, 9, 10, 11, 12, 13, 14, 15}
MAX_SHARED_PER_BLOCK_OPTIN = ATTRIBUTES[97]
DEFAULT_LIMITS = {0: 1024, 1: 1 << 20, 2: 8 << 20, 3: 2, 4: 2048, 5: 64, 6: 0}
STREAM_PRIORITIES = (0, -5)  # least, greatest, as on Hopper


def _fake_tensor_map(tag: bytes, data_type: int, address: int, dims, *rest) -> bytes:
    """No fake kernel reads a tensor map (there is no TMA here), so a map only has to be deterministic and differ
    with its arguments: a tag, the address, type and rank, then a digest of everything but the address (so that
    replacing the address gives what encoding at the new one gives, as on the driver)."""
    digest = hashlib.blake2b(repr((data_type, dims, *rest)).encode(), digest_size=64).digest()
    head = tag + address.to_bytes(8, "little") + data_type.to_bytes(4, "little") + len(dims).to_bytes(4, "little")
    return (head + digest).ljust(128, b"\0")


class FakeBackend(FakeGraphs, FakeJitLink, FakeArrays, FakeIpc, FakeMemOps, FakeVmm, FakePools,
                  fake_blas.FakeBlasBatched, FakeBlasRoutines, FakeFft, FakeRand, FakeSolver, FakeSparse, Backend):
    name = "fake"


    def occupancy_available_smem(self, ctx, func, blocks: int, block_size: int) -> int:
        """The dynamic shared memory left per block when `blocks` share a multiprocessor (requests are checked
        in rgpu.dispatch.occupancy)."""
        ctx.check()
        if block_size > ATTRIBUTES[1] or blocks * ((block_size + 31) // 32) > 64:
            return 0
        static = func.attributes.get(1, FUNC_ATTRIBUTES[1])
        return max(0, min(MAX_SHARED_PER_BLOCK_OPTIN, ATTRIBUTES[81] // blocks) - static)

    def __init__(self, total_mem: int = 16 * 1024**3, device_count: int = 1, param_info: bool | None = None,
                 visible: tuple[int, ...] | None = None, base_address: int = BASE_ADDRESS):
        """`device_count` emulated devices, of which `visible` (default all) are shown, renumbered from 0 as
        CUDA_VISIBLE_DEVICES does; every device has `total_mem` of its own."""
        self.total_mem = total_mem
        # param_info=False (or RGPU_FAKE_NO_PARAM_INFO=1) emulates a driver before CUDA 12.4, which cannot
        # report kernel parameter layouts, so clients must fall back to the image's own records.
        if param_info is None:
            param_info = os.environ.get("RGPU_FAKE_NO_PARAM_INFO", "") != "1"
        self.param_info = param_info
        if visible is None:
            visible = tuple(range(device_count))
        bad = [d for d in visible if not 0 <= d < device_count]
        if bad or len(set(visible)) != len(visible) or not visible:
            raise ValueError(f"devices {','.join(map(str, visible))}: the fake backend emulates {device_count} "
                             f"(0 to {device_count - 1}), each at most once")
        self._physical = tuple(visible)
        self._device_count = len(visible)
        self._lock = threading.Lock()
        self._textures: dict = {}  # texture and surface objects by number (fake_arrays)
        self._exported: dict[int, str] = {}  # allocation -> the file it moved into (fake_ipc)
        self._opened: dict[int, FakeContext] = {}  # another worker's export mapped here -> the context
        self._object_numbers = itertools.count(1)
        self._starts: list[int] = []
        self._memory: dict[int, np.ndarray] = {}
        self._owner: dict[int, FakeContext] = {}
        self._next = base_address
        self.used = 0
        self.used_by_device = [0] * self._device_count
        self.contexts_alive = 0
        self.wait_until = _wait_until  # replaceable per instance (the fuzzer must never sleep)

    # -- devices -----------------------------------------------------------------------------------
    def init(self) -> None:
        pass

    def driver_version(self) -> int:
        return DRIVER_VERSION

    def device_count(self) -> int:
        return self._device_count

    def _dev(self, dev: int) -> int:
        if not 0 <= dev < self._device_count:
            raise CudaError(Status.INVALID_DEVICE, f"device {dev} does not exist")
        return dev

    def device_name(self, dev: int) -> str:
        return f"rgpu fake GPU {self._physical[self._dev(dev)]}"

    def device_attribute(self, attrib: int, dev: int) -> int:
        self._dev(dev)
        if attrib not in ATTRIBUTES:
            raise CudaError(Status.INVALID_VALUE, f"device attribute {attrib} is not emulated")
        return ATTRIBUTES[attrib]

    def device_total_mem(self, dev: int) -> int:
        self._dev(dev)
        return self.total_mem

    def device_uuid(self, dev: int) -> bytes:
        return hashlib.sha256(b"rgpu-fake-device-%d" % self._physical[self._dev(dev)]).digest()[:16]

    # -- contexts ----------------------------------------------------------------------------------
    def ctx_create(self, flags: int, dev: int) -> FakeContext:
        self._dev(dev)
        with self._lock:
            self.contexts_alive += 1
        return FakeContext(dev, flags)

    def ctx_destroy(self, ctx: FakeContext) -> None:
        # Like cuCtxDestroy: everything allocated in the context goes, whatever its error state.
        with self._lock:
            for ptr in list(ctx.allocations):
                self._release(ptr)
            self.contexts_alive -= 1
        ctx.peers.clear()

    def ctx_synchronize(self, ctx: FakeContext) -> None:
        ctx.check()
        self.wait_until(max([ctx.busy_until] + [s.busy_until for s in ctx.streams]))
        ctx.check()

    def ctx_get_limit(self, ctx: FakeContext, limit: int) -> int:
        ctx.check()
        return ctx.limits[limit]

    def ctx_set_limit(self, ctx: FakeContext, limit: int, value: int) -> None:
        ctx.check()
        if limit == 5 and value not in (0, 32, 64, 128):  # L2 fetch granularity
            raise CudaError(Status.INVALID_VALUE, f"L2 fetch granularity {value}")
        ctx.limits[limit] = value

    # -- memory ------------------------------------------------------------------------------------
    def mem_alloc(self, ctx: FakeContext, size: int) -> int:
        ctx.check()
        if size == 0:
            raise CudaError(Status.INVALID_VALUE, "cuMemAlloc of 0 bytes")
        with self._lock:
            self._take(ctx.dev, size)
            ptr = self._next
            # Addresses are never reused, so a stale pointer faults instead of hitting new data.
            self._next += (size + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT + ALIGNMENT
            self._memory[ptr] = np.zeros(size, dtype=np.uint8)
            bisect.insort(self._starts, ptr)
            self._owner[ptr] = ctx
            ctx.allocations.add(ptr)
        return ptr

    def _take(self, dev: int, size: int) -> None:
        """Count `size` bytes of device `dev`'s memory as used, or raise OUT_OF_MEMORY (hold `_lock`)."""
        used = self.used_by_device[dev]
        if used + size > self.total_mem:
            raise CudaError(Status.OUT_OF_MEMORY, f"{size} bytes requested on device {dev}, "
                                                  f"{self.total_mem - used} free")
        self.used += size
        self.used_by_device[dev] += size

    def _give_back(self, dev: int, size: int) -> None:
        self.used -= size
        self.used_by_device[dev] -= size

    def mem_free(self, ctx: FakeContext, ptr: int) -> None:
        ctx.check()
        with self._lock:
            if ptr not in self._owner:  # (mapped VMM ranges are in _memory too, owned by no context)
                raise CudaError(Status.INVALID_VALUE, f"0x{ptr:x} is not an allocation")
            self._release(ptr)

    def _release(self, ptr: int) -> None:
        buf = self._memory.pop(ptr)
        del self._starts[bisect.bisect_left(self._starts, ptr)]
        owner = self._owner.pop(ptr)
        owner.allocations.discard(ptr)
        self._give_back(owner.dev, buf.size)

    def mem_get_info(self, ctx: FakeContext) -> tuple[int, int]:
        ctx.check()
        return self.total_mem - self.used_by_device[ctx.dev], self.total_mem

    # -- several devices ------------------------------------------------------------------------------
    # Every pair of distinct emulated devices can reach each other (as NVLink-connected GPUs do). Kernels are
    # not stopped from touching a peer's memory without peer access: the emulation has one address space.
    def device_can_access_peer(self, dev: int, peer: int) -> bool:
        return self._dev(dev) != self._dev(peer)

    def ctx_enable_peer_access(self, ctx: FakeContext, peer_ctx: FakeContext, flags: int) -> None:
        ctx.check()
        if flags:
            raise CudaError(Status.INVALID_VALUE, "cuCtxEnablePeerAccess flags must be 0")
        if not self.device_can_access_peer(ctx.dev, peer_ctx.dev):
            raise CudaError(Status.PEER_ACCESS_UNSUPPORTED, f"device {ctx.dev} cannot access device {peer_ctx.dev}")
        if peer_ctx in ctx.peers:
            raise CudaError(Status.PEER_ACCESS_ALREADY_ENABLED, "peer access is already enabled")
        ctx.peers.add(peer_ctx)

    def ctx_disable_peer_access(self, ctx: FakeContext, peer_ctx: FakeContext) -> None:
        ctx.check()
        if peer_ctx not in ctx.peers:
            raise CudaError(Status.PEER_ACCESS_NOT_ENABLED, "peer access was not enabled")
        ctx.peers.discard(peer_ctx)

    def memcpy_peer(self, dst_ctx: FakeContext, dst, src_ctx: FakeContext, src, nbytes, stream_ctx=None, stream=None,
                    asynchronous=False) -> None:
        dst_ctx.check()
        src_ctx.check()
        if not asynchronous:  # (kernels compute their results at launch: an asynchronous copy may run now)
            self.wait_until(max(dst_ctx.busy_until, src_ctx.busy_until))
        self._checked_view(dst, nbytes)[:] = self._checked_view(src, nbytes)

    def _view(self, ptr: int, nbytes: int) -> np.ndarray:
        with self._lock:
            i = bisect.bisect_right(self._starts, ptr) - 1
            if i >= 0:
                start = self._starts[i]
                buf = self._memory[start]
                if ptr + nbytes <= start + buf.size:
                    return buf[ptr - start : ptr - start + nbytes]
        raise IllegalAddress(f"0x{ptr:x}+{nbytes}")

    def _checked_view(self, ptr: int, nbytes: int) -> np.ndarray:
        try:
            return self._view(ptr, nbytes)
        except IllegalAddress as e:
            raise CudaError(Status.INVALID_VALUE, f"device range {e} is not allocated") from None

    def _stream_wait(self, ctx: FakeContext, stream: FakeStream | None) -> None:
        self.wait_until(stream.busy_until if stream is not None else ctx.busy_until)

    def memcpy_htod(self, ctx, dst, data, stream=None, asynchronous=False) -> None:
        ctx.check()
        self._stream_wait(ctx, stream)
        self._checked_view(dst, len(data))[:] = np.frombuffer(data, dtype=np.uint8)

    def memcpy_dtoh(self, ctx, src, nbytes, stream=None) -> bytearray:
        ctx.check()
        self._stream_wait(ctx, stream)
        return bytearray(self._checked_view(src, nbytes))

    def memcpy_dtod(self, ctx, dst, src, nbytes, stream=None, asynchronous=False) -> None:
        ctx.check()
        if not asynchronous:
            self._stream_wait(ctx, stream)
        self._checked_view(dst, nbytes)[:] = self._checked_view(src, nbytes)

    def memset(self, ctx, dst, value, count, width, stream=None, asynchronous=False) -> None:
        ctx.check()
        if not asynchronous:
            self._stream_wait(ctx, stream)
        dtype = np.uint8 if width == 1 else np.uint32
        self._checked_view(dst, count * width).view(dtype)[:] = value & (0xFF if width == 1 else 0xFFFFFFFF)

    def _rows(self, ptr: int, pitch: int, width: int, height: int) -> np.ndarray:
        """A (height, width) view of rows `pitch` bytes apart, checked once over its whole extent: the work is
        the bytes moved, never a step per row (a width-0 copy of 2**32 rows is free, as on a GPU)."""
        if width == 0 or height == 0:
            return np.empty((0, 0), dtype=np.uint8)
        if height > 1 and pitch < width:
            raise CudaError(Status.INVALID_VALUE, f"width {width} exceeds pitch {pitch}")
        base = self._checked_view(ptr, pitch * (height - 1) + width)
        return np.lib.stride_tricks.as_strided(base, shape=(height, width), strides=(pitch, 1), writeable=True)

    def memcpy_2d(self, ctx, kind, dst, dpitch, src, spitch, width, height, rows, stream=None,
                  asynchronous=False):
        ctx.check()
        if not asynchronous:
            self._stream_wait(ctx, stream)
        if kind == 2:
            return bytearray(self._rows(src, spitch, width, height).tobytes())
        if width == 0 or height == 0:
            return None
        # Copied out first: source and destination rows may overlap.
        source = (np.frombuffer(rows, dtype=np.uint8).reshape(height, width) if kind == 1
                  else self._rows(src, spitch, width, height).copy())
        self._rows(dst, dpitch, width, height)[:] = source
        return None

    def memset_2d(self, ctx, dst, pitch, value, elem, width, height, stream=None, asynchronous=False) -> None:
        ctx.check()
        if not asynchronous:
            self._stream_wait(ctx, stream)
        dtype = {1: np.uint8, 2: np.uint16, 4: np.uint32}[elem]
        row = np.full(width, value & ((1 << (8 * elem)) - 1), dtype=dtype).view(np.uint8)
        rows = self._rows(dst, pitch, width * elem, height)
        if rows.size:
            rows[:] = row

    # -- modules -----------------------------------------------------------------------------------
    def module_load(self, ctx: FakeContext, image: bytes) -> FakeModule:
        ctx.check()
        _, mod = ptx.runnable_ptx(image)
        globals_ = {name: (self.mem_alloc(ctx, size), size) for name, size in mod.globals.items()}
        for name, data in mod.initial.items():
            ptr, _ = globals_[name]
            self._view(ptr, len(data))[:] = np.frombuffer(data, dtype=np.uint8)
        return FakeModule(mod, globals_)

    def module_unload(self, ctx, module: FakeModule) -> None:
        for ptr, _ in module.globals.values():
            with self._lock:
                if ptr in self._memory:
                    self._release(ptr)

    def module_get_function(self, ctx, module: FakeModule, name: str) -> FakeFunction:
        ctx.check()
        layout = module.ptx.entries.get(name)
        if layout is None:
            raise CudaError(Status.NOT_FOUND, f"no kernel named {name!r} in the module")
        return FakeFunction(name, layout, module.ptx.version[0] * 10 + module.ptx.version[1], globals=module.globals)

    def func_attributes(self, ctx, func: FakeFunction, count: int) -> list[int]:
        values = {**FUNC_ATTRIBUTES, 5: func.ptx_version, **func.attributes}
        return [values.get(i, ATTRIBUTE_UNSUPPORTED) for i in range(count)]

    def func_set_attribute(self, ctx, func: FakeFunction, attrib: int, value: int) -> None:
        ctx.check()
        if attrib not in _SETTABLE_FUNC_ATTRIBUTES:
            raise CudaError(Status.INVALID_VALUE, f"function attribute {attrib} cannot be set")
        if attrib == 8 and not 0 <= value <= MAX_SHARED_PER_BLOCK_OPTIN:
            raise CudaError(Status.INVALID_VALUE, f"dynamic shared memory {value} exceeds the opt-in maximum")
        func.attributes[attrib] = value

    def occupancy_max_blocks(self, ctx, func: FakeFunction, block_size, dynamic_smem, flags) -> int:
        ctx.check()
        if block_size > ATTRIBUTES[1]:
            return 0
        warps = (block_size + 31) // 32
        blocks = min(32, 64 // warps)  # 64 warps and 32 blocks per SM
        if dynamic_smem:
            blocks = min(blocks, ATTRIBUTES[81] // dynamic_smem)
        return blocks

    def resident_blocks(self, ctx, func: FakeFunction, block, shared_mem) -> int:
        """How many blocks of this shape fit on the device at once (cooperative launches and clusters)."""
        threads = block[0] * block[1] * block[2]
        return self.occupancy_max_blocks(ctx, func, threads, shared_mem, 0) * self.device_attribute(16, ctx.dev)

    def occupancy_clusters(self, ctx, func: FakeFunction, which, grid, block, shared_mem, attributes) -> int:
        ctx.check()
        portable = 8  # (the driver's portable cluster size limit; a kernel may ask for more, on some GPUs)
        if which == 1:
            return portable
        clusters = [a for a in attributes if a.id == 4]  # CLUSTER_DIMENSION
        size = 1  # none given: clusters of one block, as CUDA 13's driver counts them (measured on the H200)
        for i in (0, 4, 8) if clusters else ():
            size *= int.from_bytes(clusters[-1].value[i:i + 4], "little")
        if not 0 < size <= portable:
            raise CudaError(Status.INVALID_CLUSTER_SIZE, f"clusters of {size} blocks")
        return self.resident_blocks(ctx, func, block, shared_mem) // size

    def tensor_map_encode_tiled(self, ctx, data_type, address, dims, strides, box, element_strides, interleave,
                                swizzle, l2_promotion, oob_fill) -> bytes:
        return _fake_tensor_map(b"rgputile", data_type, address, dims, strides, box, element_strides, interleave,
                                swizzle, l2_promotion, oob_fill)

    def tensor_map_encode_im2col(self, ctx, data_type, address, dims, strides, corners, channels_per_pixel,
                                 pixels_per_column, element_strides, interleave, swizzle, l2_promotion,
                                 oob_fill) -> bytes:
        return _fake_tensor_map(b"rgpuimcl", data_type, address, dims, strides, corners, channels_per_pixel,
                                pixels_per_column, element_strides, interleave, swizzle, l2_promotion, oob_fill)

    def tensor_map_replace_address(self, ctx, tensor_map, address) -> bytes:
        if tensor_map[:4] != b"rgpu":
            raise CudaError(Status.INVALID_VALUE, "not a tensor map of the fake backend")
        return bytes(tensor_map[:8]) + address.to_bytes(8, "little") + bytes(tensor_map[16:])

    def module_get_global(self, ctx, module: FakeModule, name: str) -> tuple[int, int]:
        ctx.check()
        if name not in module.globals:
            raise CudaError(Status.NOT_FOUND, f"no global named {name!r} in the module")
        return module.globals[name]

    def func_param_info(self, ctx, func: FakeFunction) -> list[tuple[int, int]]:
        if not self.param_info:
            raise CudaError(Status.NOT_SUPPORTED, "emulating a driver without cuFuncGetParamInfo")
        return list(func.layout)

    def make_lane(self):
        return fake_lane.make_lane(self, MAX_PARAM_BYTES)

    def launch(self, ctx: FakeContext, func: FakeFunction, grid, block, shared_mem, stream, params) -> None:
        ctx.check()
        kern = KERNELS.get(ptx.base_name(func.name))
        if kern is None:
            raise CudaError(Status.NOT_SUPPORTED,
                            f"fake backend cannot execute kernel {func.name!r} (known: {', '.join(sorted(KERNELS))})")
        values = decode_params(kern.signature, func.layout, params)
        if values is None:
            raise CudaError(Status.INVALID_VALUE,
                            f"kernel {func.name!r}: parameter layout {func.layout} does not match the fake "
                            f"{kern.name}({kern.signature})")
        if min(grid) < 1 or min(block) < 1 or block[0] * block[1] * block[2] > ATTRIBUTES[1]:
            raise CudaError(Status.INVALID_VALUE, f"invalid launch shape grid={grid} block={block}")
        target = stream if stream is not None else ctx

        def delay(seconds: float) -> None:
            target.busy_until = max(time.monotonic(), target.busy_until) + seconds

        try:
            kern.run(KernelExec(grid[0] * block[0], self._view, delay, tuple(grid), tuple(block),
                                texture=self.texture, symbol=_symbol_of(func), conditional=self._set_conditional),
                     *values)
        except (IllegalAddress, FakeArrayGone):
            # As on a GPU: the launch itself succeeded; the context is now broken for good.
            ctx.sticky = Status.ILLEGAL_ADDRESS

    def _set_conditional(self, handle: int, value: int) -> None:
        if not self.set_conditional(handle, value):
            raise IllegalAddress(f"0x{int(handle):x} is not a conditional handle")

    # -- cuBLAS / cuBLASLt (numpy) ------------------------------------------------------------------
    def blas_create(self, ctx: FakeContext):
        ctx.check()
        return object()

    def blas_destroy(self, ctx, handle) -> None:
        pass

    def _blas_view(self, ptr: int, nbytes: int) -> np.ndarray:
        try:
            return self._view(ptr, nbytes)
        except IllegalAddress:
            raise CudaError(Status.ILLEGAL_ADDRESS, f"GEMM operand 0x{ptr:x}+{nbytes} is not allocated") from None

    def blas_gemm(self, ctx: FakeContext, handle, stream, gemm) -> None:
        ctx.check()
        fake_blas.gemm(self._blas_view, gemm)

    def lt_heuristic(self, ctx: FakeContext, op, requested: int) -> list[bytes]:
        ctx.check()
        return fake_blas.heuristic(requested)

    def lt_matmul(self, ctx: FakeContext, op, pointers, alpha, beta, workspace, workspace_size, stream) -> None:
        ctx.check()
        fake_blas.lt_matmul(self._blas_view, op, pointers, alpha, beta)

    # -- cuDNN (Python descriptors, numpy convolution) ---------------------------------------------------
    def dnn_create(self, ctx: FakeContext):
        ctx.check()
        return object()

    def dnn_destroy(self, ctx, handle) -> None:
        pass

    def dnn_finalize(self, ctx: FakeContext, dtype, attributes, resolve):
        ctx.check()
        return fake_dnn.finalize(dtype, attributes, resolve)

    def dnn_get_attribute(self, ctx: FakeContext, desc, name, atype, requested, out_types):
        ctx.check()
        return fake_dnn.get_attribute(desc, name, atype, requested, out_types)

    def dnn_destroy_descriptor(self, ctx, desc) -> None:
        pass

    def dnn_execute(self, ctx: FakeContext, handle, plan, attributes, stream, by_value) -> None:
        ctx.check()
        fake_dnn.execute(self._blas_view, plan, attributes, by_value)

    def dnn_bn_inference(self, ctx: FakeContext, handle, stream, mode, alpha, beta, epsilon, tensors,
                         pointers) -> None:
        ctx.check()
        fake_dnn.bn_inference(self._blas_view, mode, alpha, beta, epsilon, tensors, pointers)

    def dnn_bn_size(self, ctx, handle, mode, bn_ops, which, x, bn, fusion=None) -> int:
        if fusion is not None:
            fake_dnn.check_activation(fusion[0])
        return 0  # the numpy batch norm needs no scratch space

    def dnn_bn_training(self, ctx: FakeContext, handle, stream, mode, bn_ops, alpha, beta, factor, epsilon, tensors,
                        pointers, fusion=None) -> None:
        ctx.check()
        fake_dnn.bn_training(self._blas_view, alpha, beta, factor, epsilon, tensors, pointers, fusion)

    def dnn_bn_backward(self, ctx: FakeContext, handle, stream, mode, bn_ops, scales, epsilon, tensors,
                        pointers, fusion=None) -> None:
        ctx.check()
        fake_dnn.bn_backward(self._blas_view, scales, epsilon, tensors, pointers, fusion)

    # -- streams and events ------------------------------------------------------------------------
    def stream_create(self, ctx: FakeContext, flags: int, priority: int = 0) -> FakeStream:
        ctx.check()
        least, greatest = STREAM_PRIORITIES
        stream = FakeStream(ctx, flags, priority=min(least, max(greatest, priority)))
        ctx.streams.append(stream)
        return stream

    def stream_priority_range(self, ctx) -> tuple[int, int]:
        return STREAM_PRIORITIES

    # Stream attributes: what was set, else the driver's defaults (no access policy window, the automatic
    # synchronization policy, the stream's priority, the default memory synchronization domain).
    def _stream_attributes(self, ctx, stream: FakeStream | None) -> dict:
        ctx.check()
        if stream is None:
            raise CudaError(Status.INVALID_HANDLE, "the NULL stream has no attributes of its own here")
        return stream.attributes

    def stream_set_attribute(self, ctx, stream, ident: int, value: bytes) -> None:
        attributes = self._stream_attributes(ctx, stream)
        if ident == 8:  # PRIORITY
            least, greatest = STREAM_PRIORITIES
            stream.priority = min(least, max(greatest, int.from_bytes(value[:4], "little", signed=True)))
            return
        attributes[ident] = value

    def stream_get_attribute(self, ctx, stream, ident: int) -> bytes:
        attributes = self._stream_attributes(ctx, stream)
        if ident == 8:
            return stream.priority.to_bytes(4, "little", signed=True).ljust(64, b"\0")
        default = (1).to_bytes(4, "little").ljust(64, b"\0") if ident == 3 else bytes(64)  # (CU_SYNC_POLICY_AUTO)
        return attributes.get(ident, default)

    def stream_copy_attributes(self, ctx, dst, src) -> None:
        self._stream_attributes(ctx, dst)
        dst.attributes = dict(self._stream_attributes(ctx, src))  # (what dst had set is replaced)

    def stream_info(self, ctx, stream: FakeStream | None) -> tuple[int, int, int]:
        ctx.check()
        if stream is None:  # (the legacy NULL stream: blocking, default priority; the driver numbers it too)
            return 0, 0, 1
        return stream.flags, stream.priority, stream.ident

    def stream_destroy(self, ctx, stream: FakeStream) -> None:
        stream.ctx.streams.remove(stream)

    def stream_synchronize(self, ctx, stream) -> None:
        ctx.check()
        self._stream_wait(ctx, stream)
        ctx.check()

    def stream_query(self, ctx, stream) -> bool:
        ctx.check()
        target = stream if stream is not None else ctx
        return time.monotonic() >= target.busy_until

    def stream_wait_event(self, ctx, stream, event: FakeEvent, flags) -> None:
        ctx.check()
        if event.timestamp is not None:
            target = stream if stream is not None else ctx
            target.busy_until = max(target.busy_until, event.timestamp)

    def event_create(self, ctx, flags) -> FakeEvent:
        ctx.check()
        return FakeEvent(flags)

    def event_destroy(self, ctx, event) -> None:
        pass

    def event_record(self, ctx, event: FakeEvent, stream) -> None:
        ctx.check()
        target = stream if stream is not None else ctx
        event.timestamp = max(time.monotonic(), target.busy_until)

    def event_synchronize(self, ctx, event: FakeEvent) -> None:
        ctx.check()
        if event.timestamp is not None:
            self.wait_until(event.timestamp)

    def event_query(self, ctx, event: FakeEvent) -> bool:
        ctx.check()
        return event.timestamp is None or time.monotonic() >= event.timestamp

    def event_elapsed(self, ctx, start: FakeEvent, end: FakeEvent) -> float:
        ctx.check()
        if (start.flags | end.flags) & 0x2:  # CU_EVENT_DISABLE_TIMING
            raise CudaError(Status.INVALID_HANDLE, "event created with CU_EVENT_DISABLE_TIMING")
        if start.timestamp is None or end.timestamp is None:
            raise CudaError(Status.INVALID_HANDLE, "event was never recorded")
        now = time.monotonic()
        if now < start.timestamp or now < end.timestamp:
            raise CudaError(Status.NOT_READY, "event has not completed")
        return (end.timestamp - start.timestamp) * 1000.0


def _wait_until(deadline: float) -> None:
    # Only ever called from the session's worker thread (the dispatcher marks these calls blocking).
    delay = deadline - time.monotonic()
    if delay > 0:
        time.sleep(delay)
