"""Real-GPU backend on cuda-python's `cuda.bindings.driver`.

Each session gets contexts of its own (cuCtxCreate, never the shared primary context), so a kernel fault in
one session leaves every other session's context intact. Calls may arrive on any thread (the event loop's
or a worker's), so every call first makes its context current: cuCtxSetCurrent costs ~0.1 us.
"""

from __future__ import annotations

import ctypes
import functools
import threading

import cffi
import numpy as np

from rgpu.backends import lane
from rgpu.backends.base import ATTRIBUTE_UNSUPPORTED, MAX_PARAM_BYTES, Backend, BackendUnavailable
from rgpu.backends.cuda_blas import CudaBlasBatched
from rgpu.backends.cuda_solver import CudaSolver
from rgpu.backends.cuda_sparse import CudaSparse
from rgpu.backends.cuda_arrays import CudaArrays
from rgpu.backends.cuda_common import check as _check
from rgpu.backends.cuda_common import check_code as _check_code
from rgpu.backends.cuda_common import handle as _handle
from rgpu.backends.cuda_common import hot as _hot
from rgpu.backends.cuda_common import stream as _stream
from rgpu.backends.cuda_fft import CudaFft
from rgpu.backends.cuda_copyring import SLOT_BYTES as _RING_SLOT_BYTES
from rgpu.backends.cuda_copyring import CopyRing
from rgpu.backends.cuda_copyring import available as _rings_available
from rgpu.backends.cuda_graphs import CudaGraphs
from rgpu.backends.cuda_ipc import CudaIpc
from rgpu.backends.cuda_jit_link import CudaJitLink
from rgpu.backends.cuda_memops import CudaMemOps
from rgpu.backends.cuda_occupancy import CudaOccupancy
from rgpu.backends.cuda_pools import CudaPools
from rgpu.backends.cuda_rand import CudaRand
from rgpu.backends.cuda_vmm import CudaVmm
from rgpu.errors import CudaError, Status

try:
    from cuda.bindings import driver as cu
except ImportError as e:  # pragma: no cover - depends on the install
    raise BackendUnavailable(f"cuda-bindings is not installed ({e}); pip install 'rgpu[cuda]'") from e

_SUCCESS = cu.CUresult.CUDA_SUCCESS
_NOT_READY = cu.CUresult.CUDA_ERROR_NOT_READY
_BUFFER_POINTER = 1  # CU_LAUNCH_PARAM_BUFFER_POINTER
_BUFFER_SIZE = 2  # CU_LAUNCH_PARAM_BUFFER_SIZE
_END = 0


_STAGING_MIN = 4 << 20

# The per-launch path calls the driver through cffi: cuda-bindings' argument conversion costs more than the
# launch itself. Handles travel as uintptr_t, which the x86-64 and AArch64 ABIs pass exactly like pointers.
_ffi = cffi.FFI()
_ffi.cdef("""
    int cuCtxSetCurrent(uintptr_t ctx);
    int cuLaunchKernel(uintptr_t f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                       unsigned bz, unsigned shmem, uintptr_t stream, void **params, void **extra);
""")
_driver = None  # the libcuda.so.1 cuda-bindings loaded, opened again at init


def _param_buffer(size: int):
    """A parameter buffer and the cuLaunchKernel `extra` array that hands it over as-is
    (CU_LAUNCH_PARAM_BUFFER_POINTER): no per-parameter pointers."""
    buffer, nbytes = _ffi.new("char[]", max(size, 1)), _ffi.new("size_t *", size)
    extra = _ffi.new("void *[5]", [_ffi.cast("void *", _BUFFER_POINTER), buffer, _ffi.cast("void *", _BUFFER_SIZE),
                                   nbytes, _ffi.NULL])
    return buffer, nbytes, extra


def _address(buf) -> int:
    return np.frombuffer(buf, dtype=np.uint8).ctypes.data if len(buf) else 0


def _u64s(values):
    return [cu.cuuint64_t(v) for v in values]


def _u32s(values):
    return [cu.cuuint32_t(v) for v in values]


def _tensor_map_enums(data_type, interleave, swizzle, l2_promotion, oob_fill):
    """The bindings' enums of a tensor map request; a value they do not know is the program's mistake."""
    try:
        modes = (cu.CUtensorMapInterleave(interleave), cu.CUtensorMapSwizzle(swizzle),
                 cu.CUtensorMapL2promotion(l2_promotion), cu.CUtensorMapFloatOOBfill(oob_fill))
        return cu.CUtensorMapDataType(data_type), modes
    except ValueError as e:
        raise CudaError(Status.INVALID_VALUE, f"tensor map: {e}") from None


def _tensor_map_bytes(tensor_map) -> bytes:
    return ctypes.string_at(tensor_map.getPtr(), 128)


class CudaBackend(CudaGraphs, CudaJitLink, CudaArrays, CudaIpc, CudaMemOps, CudaVmm, CudaOccupancy, CudaPools,
                  CudaBlasBatched, CudaFft, CudaRand, CudaSolver, CudaSparse, Backend):
    name = "cuda"

    def __init__(self):
        # Device->host copies land in one pinned buffer per context, reused: a reply is always sent before the
        # session's next call runs, and pinned memory copies ~5x faster than a fresh pageable buffer.
        self._staging: dict[int, tuple[int, memoryview]] = {}
        self._staging_lock = threading.Lock()
        self._lt_handles: dict[int, object] = {}
        self._copy_rings: dict[int, CopyRing] = {}  # per context, made on its first small asynchronous copy
        # Stream captures begun and not yet ended in this process: while none is, no stream can be capturing
        # (a stream joins a capture only through one), and the ring's copies skip asking the driver.
        self._captures_begun = 0

    def init(self) -> None:
        global _driver
        try:
            _check(cu.cuInit(0))
        except CudaError:
            raise
        except Exception as e:  # DynamicLibNotFoundError and friends: no driver on this host
            raise BackendUnavailable(f"{type(e).__name__}: {e}") from None
        if _driver is None:
            _driver = _ffi.dlopen("libcuda.so.1")

    def driver_version(self) -> int:
        return int(_check(cu.cuDriverGetVersion()))

    def device_count(self) -> int:
        return int(_check(cu.cuDeviceGetCount()))

    def _device(self, dev: int):
        return _check(cu.cuDeviceGet(dev))

    def device_name(self, dev: int) -> str:
        raw = _check(cu.cuDeviceGetName(256, self._device(dev)))
        return raw.split(b"\0", 1)[0].decode("utf-8", "replace")

    def device_attribute(self, attrib: int, dev: int) -> int:
        try:
            attr = cu.CUdevice_attribute(attrib)
        except ValueError:
            raise CudaError(Status.INVALID_VALUE, f"unknown device attribute {attrib}") from None
        return int(_check(cu.cuDeviceGetAttribute(attr, self._device(dev))))

    def device_total_mem(self, dev: int) -> int:
        return int(_check(cu.cuDeviceTotalMem(self._device(dev))))

    def device_uuid(self, dev: int) -> bytes:
        uuid = _check(cu.cuDeviceGetUuid(self._device(dev)))
        return bytes(uuid.bytes)[:16]

    # -- contexts ----------------------------------------------------------------------------------
    def ctx_create(self, flags: int, dev: int):
        device = self._device(dev)
        try:
            ctx = _check(cu.cuCtxCreate(None, flags, device))  # 13.x: (params, flags, dev)
        except TypeError:
            ctx = _check(cu.cuCtxCreate(flags, device))  # 12.x
        # cuCtxCreate pushes the context on this thread; leave threads clean, calls set it explicitly.
        _check(cu.cuCtxPopCurrent())
        return ctx

    def _use(self, ctx) -> None:
        _check_code(_hot().cuCtxSetCurrent(int(ctx)))

    def ctx_destroy(self, ctx) -> None:
        with self._staging_lock:
            staging = self._staging.pop(int(ctx), None)
            lt_handle = self._lt_handles.pop(int(ctx), None)
            ring = self._copy_rings.pop(int(ctx), None)
        if ring is not None:
            self._use(ctx)
            ring.close()
        if lt_handle is not None:
            from rgpu.backends import cuda_blas

            self._use(ctx)
            cuda_blas.destroy("cublasLt", lt_handle)
        if staging is not None:
            self._use(ctx)
            cu.cuMemFreeHost(staging[0])
        _check(cu.cuCtxDestroy(ctx))

    def _staging_buffer(self, ctx, nbytes: int) -> tuple[int, memoryview]:
        """Pinned host memory for a reply's bulk, (address, view); valid until the next device->host copy in
        this context."""
        key = int(ctx)
        with self._staging_lock:
            ptr, view = self._staging.get(key, (0, memoryview(b"")))
            if len(view) < nbytes:
                if ptr:
                    cu.cuMemFreeHost(ptr)
                size = max(nbytes, _STAGING_MIN)
                ptr = int(_check(cu.cuMemHostAlloc(size, 0)))
                view = memoryview((ctypes.c_char * size).from_address(ptr)).cast("B")
                self._staging[key] = (ptr, view)
        return int(ptr), view[:nbytes]

    def ctx_synchronize(self, ctx) -> None:
        self._use(ctx)
        _check(cu.cuCtxSynchronize())

    def ctx_get_limit(self, ctx, limit: int) -> int:
        self._use(ctx)
        return int(_check(cu.cuCtxGetLimit(cu.CUlimit(limit))))

    def ctx_set_limit(self, ctx, limit: int, value: int) -> None:
        self._use(ctx)
        _check(cu.cuCtxSetLimit(cu.CUlimit(limit), value))

    # -- memory ------------------------------------------------------------------------------------
    def mem_alloc(self, ctx, size: int) -> int:
        self._use(ctx)
        return int(_check(cu.cuMemAlloc(size)))

    def mem_free(self, ctx, ptr: int) -> None:
        self._use(ctx)
        _check(cu.cuMemFree(ptr))

    def mem_get_info(self, ctx) -> tuple[int, int]:
        self._use(ctx)
        free, total = _check(cu.cuMemGetInfo())
        return int(free), int(total)

    def memcpy_htod(self, ctx, dst, data, stream=None, asynchronous=False) -> None:
        self._use(ctx)
        if asynchronous and len(data) <= _RING_SLOT_BYTES and _rings_available():
            self._copy_ring(ctx).copy(dst, data, _handle(stream), self._captures_begun > 0)
        elif stream is None:
            _check(cu.cuMemcpyHtoD(dst, _address(data), len(data)))
        else:
            # The source is a pageable receive buffer, which the driver may still be reading when the call
            # returns; wait for it so the buffer can be reused at once.
            _check(cu.cuMemcpyHtoDAsync(dst, _address(data), len(data), stream))
            _check(cu.cuStreamSynchronize(stream))

    def async_copier(self, ctx, stream):
        # Small copies (most of them: a decoding step's inputs) go straight to the ring with everything bound.
        if not _rings_available():
            return super().async_copier(ctx, stream)
        self._use(ctx)
        ring, ctx_ptr, stream_ptr, set_current = self._copy_ring(ctx), int(ctx), _handle(stream), \
            _hot().cuCtxSetCurrent

        def copy(dst, data):
            if len(data) > _RING_SLOT_BYTES:
                self.memcpy_htod(ctx, dst, data, stream, asynchronous=True)
                return
            _check_code(set_current(ctx_ptr))
            ring.copy(dst, data, stream_ptr, self._captures_begun > 0)

        return copy

    def _copy_ring(self, ctx) -> CopyRing:
        # (no module is loaded while a capture of the session's is under way: it would be captured beside it)
        return self._per_context(self._copy_rings, ctx, lambda: CopyRing(fill=self._captures_begun == 0))

    def make_lane(self):
        lib = lane.library()
        if lib is None or not lane.wanted():
            return None
        return lane.Lane(lib, lane.libcuda_driver(), MAX_PARAM_BYTES, self._lane_ring,
                         lambda: self._captures_begun > 0, batch_norm=_lane_batch_norm,
                         dnn_execute=_lane_dnn_execute)

    def _lane_ring(self, ctx):
        # A stream bound for the lane's memsets may never have copied: its context's ring is made here.
        try:
            self._use(ctx)
            return self._copy_ring(ctx).ring
        except CudaError:
            return lane.ffi().NULL  # the lane leaves this context's copies to Python, which reports why

    def _per_context(self, table: dict, ctx, make):
        """table's object for `ctx`, made by make() on first use (the context current); ctx_destroy frees it."""
        key = int(ctx)
        with self._staging_lock:
            obj = table.get(key)
        if obj is None:
            obj = make()
            with self._staging_lock:
                table[key] = obj
        return obj

    def memcpy_dtoh(self, ctx, src, nbytes, stream=None) -> memoryview:
        self._use(ctx)
        address, out = self._staging_buffer(ctx, nbytes)
        lib = _hot()
        if stream is None:
            _check_code(lib.cuMemcpyDtoH_v2(address, int(src), nbytes))
        else:
            strm = int(stream)
            _check_code(lib.cuMemcpyDtoHAsync_v2(address, int(src), nbytes, strm) or lib.cuStreamSynchronize(strm))
        return out

    def memcpy_dtod(self, ctx, dst, src, nbytes, stream=None, asynchronous=False) -> None:
        self._use(ctx)
        if asynchronous:
            _check_code(_hot().cuMemcpyDtoDAsync_v2(int(dst), int(src), nbytes, _handle(stream)))
        else:
            _check(cu.cuMemcpyDtoD(dst, src, nbytes))

    # -- several devices ------------------------------------------------------------------------------
    def device_can_access_peer(self, dev: int, peer: int) -> bool:
        return bool(_check(cu.cuDeviceCanAccessPeer(self._device(dev), self._device(peer))))

    def ctx_enable_peer_access(self, ctx, peer_ctx, flags: int) -> None:
        self._use(ctx)
        _check(cu.cuCtxEnablePeerAccess(peer_ctx, flags))

    def ctx_disable_peer_access(self, ctx, peer_ctx) -> None:
        self._use(ctx)
        _check(cu.cuCtxDisablePeerAccess(peer_ctx))

    def memcpy_peer(self, dst_ctx, dst, src_ctx, src, nbytes, stream_ctx=None, stream=None,
                    asynchronous=False) -> None:
        self._use(stream_ctx if stream_ctx is not None else dst_ctx)
        if asynchronous:
            _check(cu.cuMemcpyPeerAsync(dst, dst_ctx, src, src_ctx, nbytes, _stream(stream)))
        else:
            _check(cu.cuMemcpyPeer(dst, dst_ctx, src, src_ctx, nbytes))

    def memset(self, ctx, dst, value, count, width, stream=None, asynchronous=False) -> None:
        self._use(ctx)
        if width == 1:  # the driver takes an unsigned char: keep what C's conversion keeps of a wider value
            value &= 0xFF
        if asynchronous:
            lib = _hot()
            fn = lib.cuMemsetD8Async if width == 1 else lib.cuMemsetD32Async
            _check_code(fn(int(dst), value, count, _handle(stream)))
        else:
            fn = cu.cuMemsetD8 if width == 1 else cu.cuMemsetD32
            _check(fn(dst, value, count))

    def _copy_2d(self, kind, dst, dpitch, src, spitch, width, height, host: int):
        p = cu.CUDA_MEMCPY2D()
        p.WidthInBytes, p.Height = width, height
        if kind == 1:
            p.srcMemoryType, p.srcHost, p.srcPitch = cu.CUmemorytype.CU_MEMORYTYPE_HOST, host, width
        else:
            p.srcMemoryType, p.srcDevice, p.srcPitch = cu.CUmemorytype.CU_MEMORYTYPE_DEVICE, src, spitch
        if kind == 2:
            p.dstMemoryType, p.dstHost, p.dstPitch = cu.CUmemorytype.CU_MEMORYTYPE_HOST, host, width
        else:
            p.dstMemoryType, p.dstDevice, p.dstPitch = cu.CUmemorytype.CU_MEMORYTYPE_DEVICE, dst, dpitch
        return p

    def memcpy_2d(self, ctx, kind, dst, dpitch, src, spitch, width, height, rows, stream=None,
                  asynchronous=False):
        self._use(ctx)
        address, out = self._staging_buffer(ctx, width * height) if kind == 2 else (0, None)
        host = _address(rows) if kind == 1 else address
        params = self._copy_2d(kind, dst, dpitch, src, spitch, width, height, host)
        if asynchronous and kind == 3:
            _check(cu.cuMemcpy2DAsync(params, _stream(stream)))
        elif stream is not None:
            # Host rows live in a receive/staging buffer reused after this call: finish before returning.
            _check(cu.cuMemcpy2DAsync(params, stream))
            _check(cu.cuStreamSynchronize(stream))
        else:
            _check(cu.cuMemcpy2D(params))
        return out

    def memset_2d(self, ctx, dst, pitch, value, elem, width, height, stream=None, asynchronous=False) -> None:
        self._use(ctx)
        name = {1: "cuMemsetD2D8", 2: "cuMemsetD2D16", 4: "cuMemsetD2D32"}[elem]
        if asynchronous:
            _check(getattr(cu, name + "Async")(dst, pitch, value, width, height, _stream(stream)))
        else:
            _check(getattr(cu, name)(dst, pitch, value, width, height))

    # -- modules -----------------------------------------------------------------------------------
    def module_load(self, ctx, image: bytes):
        self._use(ctx)
        image = bytes(image)
        if not image.endswith(b"\0") and b"\0" not in image[:4096]:
            image += b"\0"  # PTX must be NUL-terminated; binary images carry their own length
        return _check(cu.cuModuleLoadData(image))

    def module_unload(self, ctx, module) -> None:
        self._use(ctx)
        _check(cu.cuModuleUnload(module))

    def module_get_function(self, ctx, module, name: str):
        self._use(ctx)
        return _check(cu.cuModuleGetFunction(module, name.encode()))

    def module_get_global(self, ctx, module, name: str) -> tuple[int, int]:
        self._use(ctx)
        ptr, size = _check(cu.cuModuleGetGlobal(module, name.encode()))
        return int(ptr), int(size)

    def func_param_info(self, ctx, func) -> list[tuple[int, int]]:
        self._use(ctx)
        layout = []
        while True:
            try:
                err, offset, size = cu.cuFuncGetParamInfo(func, len(layout))
            except (AttributeError, RuntimeError) as e:  # a driver before CUDA 12.4 has no such entry point
                raise CudaError(Status.NOT_SUPPORTED, f"cuFuncGetParamInfo unavailable: {e}") from None
            if err != _SUCCESS:
                if err == cu.CUresult.CUDA_ERROR_INVALID_VALUE:
                    return layout  # past the last parameter
                if not layout and err in (cu.CUresult.CUDA_ERROR_NOT_SUPPORTED, cu.CUresult.CUDA_ERROR_NOT_FOUND):
                    raise CudaError(Status.NOT_SUPPORTED, "the driver cannot report parameter layouts")
                _check((err,))
            layout.append((int(offset), int(size)))

    def func_attributes(self, ctx, func, count: int) -> list[int]:
        self._use(ctx)
        values = []
        for attrib in range(count):
            try:
                values.append(int(_check(cu.cuFuncGetAttribute(cu.CUfunction_attribute(attrib), func))))
            except (CudaError, ValueError):
                values.append(ATTRIBUTE_UNSUPPORTED)
        return values

    def func_set_attribute(self, ctx, func, attrib: int, value: int) -> None:
        self._use(ctx)
        try:
            attr = cu.CUfunction_attribute(attrib)
        except ValueError:
            raise CudaError(Status.INVALID_VALUE, f"unknown function attribute {attrib}") from None
        _check(cu.cuFuncSetAttribute(func, attr, value))

    def occupancy_max_blocks(self, ctx, func, block_size: int, dynamic_smem: int, flags: int) -> int:
        self._use(ctx)
        return int(_check(cu.cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(func, block_size,
                                                                                  dynamic_smem, flags)))

    def tensor_map_encode_tiled(self, ctx, data_type, address, dims, strides, box, element_strides, interleave,
                                swizzle, l2_promotion, oob_fill) -> bytes:
        if ctx is not None:
            self._use(ctx)
        dtype, modes = _tensor_map_enums(data_type, interleave, swizzle, l2_promotion, oob_fill)
        # A rank-1 map has no strides, but the driver refuses a NULL array (the bindings' empty list): pass one
        # entry it does not read.
        return _tensor_map_bytes(_check(cu.cuTensorMapEncodeTiled(
            dtype, cu.cuuint32_t(len(dims)), address, _u64s(dims), _u64s(strides or (0,)), _u32s(box),
            _u32s(element_strides), *modes)))

    def tensor_map_encode_im2col(self, ctx, data_type, address, dims, strides, corners, channels_per_pixel,
                                 pixels_per_column, element_strides, interleave, swizzle, l2_promotion,
                                 oob_fill) -> bytes:
        if ctx is not None:
            self._use(ctx)
        dtype, modes = _tensor_map_enums(data_type, interleave, swizzle, l2_promotion, oob_fill)
        return _tensor_map_bytes(_check(cu.cuTensorMapEncodeIm2col(
            dtype, cu.cuuint32_t(len(dims)), address, _u64s(dims), _u64s(strides), list(corners[0]),
            list(corners[1]), cu.cuuint32_t(channels_per_pixel), cu.cuuint32_t(pixels_per_column),
            _u32s(element_strides), *modes)))

    def tensor_map_replace_address(self, ctx, tensor_map, address) -> bytes:
        if ctx is not None:
            self._use(ctx)
        copy = cu.CUtensorMap()
        ctypes.memmove(copy.getPtr(), bytes(tensor_map), 128)
        _check(cu.cuTensorMapReplaceAddress(copy, address))
        return _tensor_map_bytes(copy)

    def launch(self, ctx, func, grid, block, shared_mem, stream, params) -> None:
        self.launcher(ctx, func, stream)(*grid, *block, shared_mem, params)

    def launcher(self, ctx, func, stream):
        # Everything per launch is bound here once. The parameter buffer belongs to this launcher: a session
        # runs one call at a time, and cuLaunchKernel copies the parameters before it returns.
        ctx_ptr, func_ptr, stream_ptr = int(ctx), int(func), int(stream) if stream else 0
        set_current, launch_kernel, memmove, null = _driver.cuCtxSetCurrent, _driver.cuLaunchKernel, _ffi.memmove, \
            _ffi.NULL
        buffer, nbytes, extra = _param_buffer(0)

        def launch(gx, gy, gz, bx, by, bz, shared_mem, params):
            nonlocal buffer, nbytes, extra
            size = len(params)
            if size != nbytes[0]:
                if size > MAX_PARAM_BYTES:
                    raise CudaError(Status.INVALID_VALUE,
                                    f"{size} bytes of kernel parameters (at most {MAX_PARAM_BYTES})")
                if size > len(buffer):
                    buffer, nbytes, extra = _param_buffer(size)
                nbytes[0] = size
            memmove(buffer, params, size)
            err = set_current(ctx_ptr) or launch_kernel(func_ptr, gx, gy, gz, bx, by, bz, shared_mem, stream_ptr,
                                                        null, extra)
            if err:
                _check((cu.CUresult(err),))

        return launch

    # -- cuBLAS / cuBLASLt (through cffi; see rgpu.backends.cuda_blas) ------------------------------
    def blas_create(self, ctx):
        from rgpu.backends import cuda_blas

        self._use(ctx)
        return cuda_blas.create("cublas")

    def blas_destroy(self, ctx, handle) -> None:
        from rgpu.backends import cuda_blas

        self._use(ctx)
        cuda_blas.destroy("cublas", handle)

    def blas_gemm(self, ctx, handle, stream, gemm) -> None:
        from rgpu.backends import cuda_blas

        self._use(ctx)
        cuda_blas.gemm(handle, int(_stream(stream)), gemm)

    def _lt_handle(self, ctx):
        """One cuBLASLt handle per context, made on first use and destroyed with the context."""
        from rgpu.backends import cuda_blas

        return self._per_context(self._lt_handles, ctx, lambda: cuda_blas.create("cublasLt"))

    def lt_heuristic(self, ctx, op, requested: int) -> list[bytes]:
        from rgpu.backends import cuda_blas

        self._use(ctx)
        return cuda_blas.heuristic(self._lt_handle(ctx), op, requested)

    def lt_matmul(self, ctx, op, pointers, alpha, beta, workspace, workspace_size, stream) -> None:
        from rgpu.backends import cuda_blas

        self._use(ctx)
        cuda_blas.matmul(self._lt_handle(ctx), op, pointers, alpha, beta, workspace, workspace_size,
                         int(_stream(stream)))

    # -- cuDNN (through cffi; see rgpu.backends.cuda_dnn) -------------------------------------------
    def dnn_create(self, ctx):
        from rgpu.backends import cuda_dnn

        self._use(ctx)
        return cuda_dnn.create()

    def dnn_destroy(self, ctx, handle) -> None:
        from rgpu.backends import cuda_dnn

        self._use(ctx)
        cuda_dnn.destroy(handle)

    def dnn_finalize(self, ctx, dtype, attributes, resolve):
        from rgpu.backends import cuda_dnn

        self._use(ctx)
        return cuda_dnn.finalize(dtype, attributes, resolve)

    def dnn_get_attribute(self, ctx, desc, name, atype, requested, out_types):
        from rgpu.backends import cuda_dnn

        self._use(ctx)
        return cuda_dnn.get_attribute(desc, name, atype, requested, out_types)

    def dnn_destroy_descriptor(self, ctx, desc) -> None:
        from rgpu.backends import cuda_dnn

        self._use(ctx)
        cuda_dnn.destroy_descriptor(desc)

    def dnn_execute(self, ctx, handle, plan, attributes, stream, by_value) -> None:
        from rgpu.backends import cuda_dnn

        self._use(ctx)
        cuda_dnn.execute(handle, plan, attributes, int(_stream(stream)), by_value)

    def dnn_bn_inference(self, ctx, handle, stream, mode, alpha, beta, epsilon, tensors, pointers) -> None:
        from rgpu.backends import cuda_dnn

        self._use(ctx)
        cuda_dnn.bn_inference(handle, int(_stream(stream)), mode, alpha, beta, epsilon, tensors, pointers)

    def dnn_bn_size(self, ctx, handle, mode, bn_ops, which, x, bn, fusion=None) -> int:
        from rgpu.backends import cuda_dnn

        self._use(ctx)
        return cuda_dnn.bn_size(handle, mode, bn_ops, which, (x, bn), fusion)

    def dnn_bn_training(self, ctx, handle, stream, mode, bn_ops, alpha, beta, factor, epsilon, tensors,
                        pointers, fusion=None) -> None:
        from rgpu.backends import cuda_dnn

        self._use(ctx)
        cuda_dnn.bn_training(handle, int(_stream(stream)), mode, bn_ops, alpha, beta, factor, epsilon, tensors,
                             pointers, fusion)

    def dnn_bn_backward(self, ctx, handle, stream, mode, bn_ops, scales, epsilon, tensors, pointers,
                        fusion=None) -> None:
        from rgpu.backends import cuda_dnn

        self._use(ctx)
        cuda_dnn.bn_backward(handle, int(_stream(stream)), mode, bn_ops, scales, epsilon, tensors, pointers, fusion)

    # -- streams and events ------------------------------------------------------------------------
    def stream_create(self, ctx, flags: int, priority: int = 0):
        self._use(ctx)
        if priority:
            return _check(cu.cuStreamCreateWithPriority(flags, priority))
        return _check(cu.cuStreamCreate(flags))

    def stream_priority_range(self, ctx) -> tuple[int, int]:
        self._use(ctx)
        least, greatest = _check(cu.cuCtxGetStreamPriorityRange())
        return int(least), int(greatest)

    def stream_info(self, ctx, stream) -> tuple[int, int, int]:
        self._use(ctx)
        handle = _stream(stream)
        flags = _check(cu.cuStreamGetFlags(handle))
        priority = _check(cu.cuStreamGetPriority(handle))
        return int(flags), int(priority), int(_check(cu.cuStreamGetId(handle)))

    def stream_destroy(self, ctx, stream) -> None:
        self._use(ctx)
        _check(cu.cuStreamDestroy(stream))

    def stream_synchronize(self, ctx, stream) -> None:
        self._use(ctx)
        _check_code(_hot().cuStreamSynchronize(_handle(stream)))

    def stream_query(self, ctx, stream) -> bool:
        self._use(ctx)
        err = cu.cuStreamQuery(_stream(stream))[0]
        if err == _NOT_READY:
            return False
        _check((err,))
        return True

    def stream_wait_event(self, ctx, stream, event, flags: int) -> None:
        self._use(ctx)
        _check_code(_hot().cuStreamWaitEvent(_handle(stream), int(event), flags))

    def event_create(self, ctx, flags: int):
        self._use(ctx)
        return _check(cu.cuEventCreate(flags))

    def event_destroy(self, ctx, event) -> None:
        self._use(ctx)
        _check(cu.cuEventDestroy(event))

    def event_record(self, ctx, event, stream) -> None:
        self._use(ctx)
        _check_code(_hot().cuEventRecord(int(event), _handle(stream)))

    def event_synchronize(self, ctx, event) -> None:
        self._use(ctx)
        _check(cu.cuEventSynchronize(event))

    def event_query(self, ctx, event) -> bool:
        self._use(ctx)
        err = cu.cuEventQuery(event)[0]
        if err == _NOT_READY:
            return False
        _check((err,))
        return True

    def event_elapsed(self, ctx, start, end) -> float:
        self._use(ctx)
        fn = getattr(cu, "cuEventElapsedTime_v2", None) or cu.cuEventElapsedTime
        return float(_check(fn(start, end)))


@functools.cache
def _lane_dnn_table():
    """libcudnn's calls the fast lane makes (rgpu_lane_dnn), made once; None where cuDNN cannot be loaded."""
    from rgpu.backends import cuda_dnn

    try:
        calls = cuda_dnn.lane_calls()
    except (OSError, CudaError):
        return None
    ffi = lane.ffi()
    table = ffi.new("rgpu_lane_dnn *")
    for field, address in zip(("set_stream", "bn_inference", "execute"), calls):
        setattr(table, field, ffi.cast(ffi.typeof(getattr(table, field)), address))
    return table


def _lane_batch_norm(handle, tensors):
    """A batch norm's shape for the fast lane (lane.Lane's batch_norm), with tensor descriptors of its own."""
    from rgpu.backends import cuda_dnn

    table = _lane_dnn_table()
    return None if table is None else (table, *cuda_dnn.lane_batch_norm(handle, tensors))


def _lane_dnn_execute(handle, plan, attributes):
    """A plan's execution for the fast lane (lane.Lane's dnn_execute), with a variant pack of its own."""
    from rgpu.backends import cuda_dnn

    table = _lane_dnn_table()
    return None if table is None else (table, *cuda_dnn.lane_execute(handle, plan, attributes))
