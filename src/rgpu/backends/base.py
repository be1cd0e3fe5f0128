"""The interface both backends implement. Objects (contexts, streams...) are the backend's own; sessions wrap
them in handles. `stream=None` means the context's NULL stream. Every method raises CudaError on failure.

Which calls may block on the GPU is declared with their handlers (`handles(blocking=True)`), not here.
"""

from __future__ import annotations

import abc
import logging

log = logging.getLogger("rgpu.backend")

# Value DEVICE_GET_ATTRIBUTES reports for an attribute the device does not know.
ATTRIBUTE_UNSUPPORTED = -(2**31)
MAX_PARAM_BYTES = 32764  # the driver's limit on a kernel's parameter buffer


class Backend(abc.ABC):
    name: str = "?"

    @abc.abstractmethod
    def init(self) -> None: ...
    @abc.abstractmethod
    def driver_version(self) -> int: ...
    @abc.abstractmethod
    def device_count(self) -> int: ...
    @abc.abstractmethod
    def device_name(self, dev: int) -> str: ...
    @abc.abstractmethod
    def device_attribute(self, attrib: int, dev: int) -> int: ...
    @abc.abstractmethod
    def device_total_mem(self, dev: int) -> int: ...
    @abc.abstractmethod
    def device_uuid(self, dev: int) -> bytes: ...

    @abc.abstractmethod
    def ctx_create(self, flags: int, dev: int): ...
    @abc.abstractmethod
    def ctx_destroy(self, ctx) -> None: ...
    @abc.abstractmethod
    def ctx_synchronize(self, ctx) -> None: ...
    @abc.abstractmethod
    def ctx_get_limit(self, ctx, limit: int) -> int: ...
    @abc.abstractmethod
    def ctx_set_limit(self, ctx, limit: int, value: int) -> None: ...

    # -- several devices: peer access and copies between them --------------------------------------
    @abc.abstractmethod
    def device_can_access_peer(self, dev: int, peer: int) -> bool: ...
    @abc.abstractmethod
    def ctx_enable_peer_access(self, ctx, peer_ctx, flags: int) -> None: ...
    @abc.abstractmethod
    def ctx_disable_peer_access(self, ctx, peer_ctx) -> None: ...
    @abc.abstractmethod
    def memcpy_peer(self, dst_ctx, dst: int, src_ctx, src: int, nbytes: int, stream_ctx=None, stream=None,
                    asynchronous=False) -> None:
        """cuMemcpyPeer(Async): `stream` (in `stream_ctx`; None: that context's NULL stream) orders an
        asynchronous copy; a synchronous one waits for both devices' NULL streams, as the driver's does."""

    @abc.abstractmethod
    def mem_alloc(self, ctx, size: int) -> int: ...
    @abc.abstractmethod
    def mem_free(self, ctx, ptr: int) -> None: ...
    @abc.abstractmethod
    def mem_get_info(self, ctx) -> tuple[int, int]: ...
    @abc.abstractmethod
    def memcpy_htod(self, ctx, dst: int, data: memoryview, stream=None, asynchronous=False) -> None: ...
    @abc.abstractmethod
    def memcpy_dtoh(self, ctx, src: int, nbytes: int, stream=None) -> bytes | bytearray | memoryview:
        """The bytes, possibly in a buffer the backend reuses at the next device->host copy in `ctx`."""
    @abc.abstractmethod
    def memcpy_dtod(self, ctx, dst: int, src: int, nbytes: int, stream=None, asynchronous=False) -> None: ...
    @abc.abstractmethod
    def memset(self, ctx, dst: int, value: int, count: int, width: int, stream=None,
               asynchronous=False) -> None: ...

    @abc.abstractmethod
    def memcpy_2d(self, ctx, kind: int, dst: int, dpitch: int, src: int, spitch: int, width: int, height: int,
                  rows, stream=None, asynchronous=False):
        """kind 1 host->device (`rows` packed), 2 device->host (returns packed rows), 3 device->device."""
    @abc.abstractmethod
    def memset_2d(self, ctx, dst: int, pitch: int, value: int, elem: int, width: int, height: int, stream=None,
                  asynchronous=False) -> None: ...

    @abc.abstractmethod
    def module_load(self, ctx, image: bytes): ...
    @abc.abstractmethod
    def module_unload(self, ctx, module) -> None: ...
    @abc.abstractmethod
    def module_get_function(self, ctx, module, name: str): ...
    @abc.abstractmethod
    def module_get_global(self, ctx, module, name: str) -> tuple[int, int]: ...
    @abc.abstractmethod
    def func_param_info(self, ctx, func) -> list[tuple[int, int]]: ...
    # JIT linking (rgpu.dispatch.jit_link checks the requests): `options` are (CUjit_option, value) pairs of
    # ops.FORWARDED_JIT_OPTIONS; a refusal raises CudaError, and the logs say why.
    @abc.abstractmethod
    def jit_link_create(self, ctx, options, info_size: int, error_size: int): ...
    @abc.abstractmethod
    def jit_link_add(self, ctx, link, input_type: int, data: bytes, name: str, options) -> None: ...
    @abc.abstractmethod
    def jit_link_complete(self, ctx, link) -> bytes:
        """The linked image."""
    @abc.abstractmethod
    def jit_link_outputs(self, link) -> tuple[bytes, bytes, float]:
        """The info and error logs as they stand, each at most the size asked for at creation, and the
        milliseconds the linker has taken so far (CU_JIT_WALL_TIME)."""
    @abc.abstractmethod
    def jit_link_destroy(self, ctx, link) -> None: ...
    # CUDA arrays, texture and surface objects (rgpu.dispatch.arrays checks the requests; the types: array_types).
    @abc.abstractmethod
    def array_create(self, ctx, shape): ...
    @abc.abstractmethod
    def array_destroy(self, ctx, array) -> None: ...
    @abc.abstractmethod
    def array_copy(self, ctx, src, dst, width: int, height: int, rows, stream, asynchronous: bool):
        """`height` rows of `width` bytes between two CopyEnds; the rows when the destination is the host."""
    @abc.abstractmethod
    def tex_object_create(self, ctx, resource, desc, view: bytes | None) -> tuple[int, object]:
        """(the number kernels take, what tex_object_destroy takes)"""
    @abc.abstractmethod
    def tex_object_destroy(self, ctx, obj) -> None: ...
    @abc.abstractmethod
    def surf_object_create(self, ctx, resource) -> tuple[int, object]: ...
    @abc.abstractmethod
    def surf_object_destroy(self, ctx, obj) -> None: ...
    # IPC (rgpu.dispatch.ipc checks the requests): an export's payload is what another worker's backend opens it by.
    @abc.abstractmethod
    def ipc_export_memory(self, ctx, ptr: int, place) -> bytes:
        """What another worker's backend opens the allocation by; `place` a path the backend may share it through
        (the registry removes it with the export)."""
    @abc.abstractmethod
    def ipc_withdraw_memory(self, ctx, ptr: int) -> None:
        """The allocation is about to be freed: its export stops opening."""
    @abc.abstractmethod
    def ipc_open_memory(self, ctx, payload: bytes, flags: int) -> tuple[int, int]:
        """(address, size) of another session's exported memory, in `ctx`"""
    @abc.abstractmethod
    def ipc_close_memory(self, ctx, ptr: int) -> None: ...
    @abc.abstractmethod
    def ipc_export_event(self, ctx, event) -> bytes: ...
    @abc.abstractmethod
    def ipc_open_event(self, ctx, payload: bytes): ...
    @abc.abstractmethod
    def func_attributes(self, ctx, func, count: int) -> list[int]:
        """cuFuncGetAttribute 0..count-1; ATTRIBUTE_UNSUPPORTED where the driver has none."""
    @abc.abstractmethod
    def func_set_attribute(self, ctx, func, attrib: int, value: int) -> None: ...
    @abc.abstractmethod
    def occupancy_max_blocks(self, ctx, func, block_size: int, dynamic_smem: int, flags: int) -> int: ...
    @abc.abstractmethod
    def launch(self, ctx, func, grid: tuple[int, int, int], block: tuple[int, int, int], shared_mem: int,
               stream, params: bytes) -> None: ...

    def launcher(self, ctx, func, stream):
        """`launch` with its context, function and stream bound once: a callable (gx, gy, gz, bx, by, bz,
        shared_mem, params). Sessions cache it per (function, stream); backends override it to do per-launch
        work (handle conversion, argument marshalling) once, here."""

        def launch(gx, gy, gz, bx, by, bz, shared_mem, params):
            self.launch(ctx, func, (gx, gy, gz), (bx, by, bz), shared_mem, stream, params)

        return launch

    def make_lane(self):
        """A session's fast lane (rgpu.backends.lane.Lane) for this backend's driver, or None: the dispatcher
        then runs every record in Python."""
        return None

    def async_copier(self, ctx, stream):
        """`memcpy_htod(..., asynchronous=True)` with its context and stream bound once: a callable (dst, data).
        Sessions cache it per stream; backends override it to do per-copy work once, here."""

        def copy(dst, data):
            self.memcpy_htod(ctx, dst, data, stream, asynchronous=True)

        return copy

    @abc.abstractmethod
    def tensor_map_encode_tiled(self, ctx, data_type: int, address: int, dims: tuple[int, ...],
                                strides: tuple[int, ...], box: tuple[int, ...], element_strides: tuple[int, ...],
                                interleave: int, swizzle: int, l2_promotion: int, oob_fill: int) -> bytes:
        """cuTensorMapEncodeTiled -> the 128-byte CUtensorMap (`ctx` None: no context needed). `strides` has one
        entry fewer than `dims`: dimension 0 is contiguous."""

    @abc.abstractmethod
    def tensor_map_encode_im2col(self, ctx, data_type: int, address: int, dims: tuple[int, ...],
                                 strides: tuple[int, ...], corners: tuple[tuple[int, ...], tuple[int, ...]],
                                 channels_per_pixel: int, pixels_per_column: int, element_strides: tuple[int, ...],
                                 interleave: int, swizzle: int, l2_promotion: int, oob_fill: int) -> bytes:
        """cuTensorMapEncodeIm2col -> the 128-byte CUtensorMap; `corners`: the pixel box's lower and upper
        corners, rank - 2 entries each."""

    @abc.abstractmethod
    def tensor_map_replace_address(self, ctx, tensor_map: bytes, address: int) -> bytes:
        """cuTensorMapReplaceAddress on a copy of `tensor_map` -> the new 128 bytes."""

    @abc.abstractmethod
    def stream_create(self, ctx, flags: int, priority: int = 0): ...
    @abc.abstractmethod
    def stream_priority_range(self, ctx) -> tuple[int, int]: ...
    @abc.abstractmethod
    def occupancy_clusters(self, ctx, func, which: int, grid, block, shared_mem: int, attributes) -> int:
        """which 0: the most clusters of a launch of this shape and attributes resident at once; 1: the largest
        cluster size it could take (cuOccupancyMaxActiveClusters, cuOccupancyMaxPotentialClusterSize)."""
    @abc.abstractmethod
    def stream_set_attribute(self, ctx, stream, ident: int, value: bytes) -> None:
        """cuStreamSetAttribute: `value` is the 64-byte CUstreamAttrValue (stream None: the NULL stream)."""
    @abc.abstractmethod
    def stream_get_attribute(self, ctx, stream, ident: int) -> bytes: ...
    @abc.abstractmethod
    def stream_copy_attributes(self, ctx, dst, src) -> None: ...
    @abc.abstractmethod
    def stream_info(self, ctx, stream) -> tuple[int, int, int]:
        """(creation flags, priority, the driver's stream id) of `stream` (None: the context's NULL stream)."""
    @abc.abstractmethod
    def stream_destroy(self, ctx, stream) -> None: ...
    @abc.abstractmethod
    def stream_synchronize(self, ctx, stream) -> None: ...
    @abc.abstractmethod
    def stream_query(self, ctx, stream) -> bool: ...
    @abc.abstractmethod
    def stream_wait_event(self, ctx, stream, event, flags: int) -> None: ...
    @abc.abstractmethod
    def stream_mem_ops(self, ctx, stream, operations: list, batch: bool) -> None:
        """Stream memory operations (rgpu.protocol.memops.MemOp, checked), queued on `stream` in order: the one
        call cuStreamWaitValue32/64 or cuStreamWriteValue32/64 (batch False), or cuStreamBatchMemOp."""
    @abc.abstractmethod
    def event_create(self, ctx, flags: int): ...
    @abc.abstractmethod
    def event_destroy(self, ctx, event) -> None: ...
    @abc.abstractmethod
    def event_record(self, ctx, event, stream) -> None: ...
    @abc.abstractmethod
    def event_synchronize(self, ctx, event) -> None: ...
    @abc.abstractmethod
    def event_query(self, ctx, event) -> bool: ...
    @abc.abstractmethod
    def event_elapsed(self, ctx, start, end) -> float: ...

    # -- cuBLAS / cuBLASLt (requests decoded and range-checked by rgpu.protocol.blas_wire) ------------------
    @abc.abstractmethod
    def blas_create(self, ctx): ...
    @abc.abstractmethod
    def blas_destroy(self, ctx, handle) -> None: ...
    @abc.abstractmethod
    def blas_gemm(self, ctx, handle, stream, gemm) -> None: ...
    @abc.abstractmethod
    def lt_heuristic(self, ctx, op, requested: int) -> list[bytes]:
        """cublasLtMatmulHeuristicResult_t records (96 bytes each), best first."""
    @abc.abstractmethod
    def lt_matmul(self, ctx, op, pointers: tuple[int, int, int, int], alpha: bytes, beta: bytes, workspace: int,
                  workspace_size: int, stream) -> None: ...

    # -- cuSOLVER dense (requests decoded and range-checked by rgpu.protocol.solver_wire) ----------------
    @abc.abstractmethod
    def solver_create(self, ctx): ...
    @abc.abstractmethod
    def solver_destroy(self, ctx, handle) -> None: ...
    @abc.abstractmethod
    def solver_buffer_size(self, ctx, handle, solve) -> tuple[int, int, int]:
        """(cuSOLVER status, device workspace -- elements for the classic API, bytes for X --, host bytes)."""
    @abc.abstractmethod
    def solver_run(self, ctx, handle, stream, solve, arrays=None) -> None:
        """`arrays`: for a batch of pointer arrays, the pointers the server read and checked (None: on a capturing
        stream, to be read when the work runs)."""

    # -- cuSPARSE generic API (requests decoded and range-checked by rgpu.protocol.sparse_wire) ---------------
    @abc.abstractmethod
    def sparse_create(self, ctx): ...
    @abc.abstractmethod
    def sparse_destroy(self, ctx, handle) -> None: ...
    @abc.abstractmethod
    def sparse_buffer_size(self, ctx, handle, op) -> tuple[int, int]:
        """(cuSPARSE status, external buffer bytes)."""
    @abc.abstractmethod
    def sparse_run(self, ctx, handle, stream, op) -> None: ...
    @abc.abstractmethod
    def spgemm_create(self, ctx): ...
    @abc.abstractmethod
    def spgemm_destroy(self, ctx, descriptor) -> None: ...
    @abc.abstractmethod
    def spgemm_need(self, ctx, handle, descriptor, g) -> tuple[int, int, int]:
        """(cuSPARSE status, the buffer bytes phase g needs -- 0 for the copy --, C's non-zeros known so far)."""
    @abc.abstractmethod
    def spgemm_run(self, ctx, handle, stream, descriptor, g) -> tuple[int, int]:
        """Phase g with its buffer: (cuSPARSE status, C's non-zeros)."""

    # -- cuDNN (requests decoded and checked by rgpu.protocol.dnn_wire) ---------------------------------
    @abc.abstractmethod
    def dnn_create(self, ctx): ...
    @abc.abstractmethod
    def dnn_destroy(self, ctx, handle) -> None: ...
    @abc.abstractmethod
    def dnn_finalize(self, ctx, dtype: int, attributes, resolve) -> tuple[object | None, int]:
        """A finalized backend descriptor, or (None, the cuDNN status that refused it). `resolve(type, id)`
        turns a session handle in a descriptor- or handle-typed attribute into the backend's object."""
    @abc.abstractmethod
    def dnn_get_attribute(self, ctx, desc, name: int, atype: int, requested: int, out_types: list[int]):
        """(cuDNN status, count, raw element bytes -- or new backend descriptors for descriptor types)."""
    @abc.abstractmethod
    def dnn_destroy_descriptor(self, ctx, desc) -> None: ...
    @abc.abstractmethod
    def dnn_execute(self, ctx, handle, plan, attributes, stream, by_value: dict[int, bytes]) -> None:
        """`by_value`: the bytes of pass-by-value tensors, by their index in the pack's data pointers."""
    @abc.abstractmethod
    def dnn_bn_inference(self, ctx, handle, stream, mode: int, alpha: float, beta: float, epsilon: float,
                         tensors, pointers) -> None: ...

    # `fusion`, for bnOps BN_ACTIVATION / BN_ADD_ACTIVATION (None: plain batch norm), an Activation first:
    # sizes (activation, (y, z or dz, dy, dx tensors)); training (activation, z tensor, z pointer or 0);
    # backward (activation, y tensor, y pointer, dz tensor, dz pointer or 0, bias pointer).
    @abc.abstractmethod
    def dnn_bn_size(self, ctx, handle, mode: int, bn_ops: int, which: int, x, bn, fusion=None) -> int: ...
    @abc.abstractmethod
    def dnn_bn_training(self, ctx, handle, stream, mode: int, bn_ops: int, alpha: float, beta: float, factor: float,
                        epsilon: float, tensors, pointers, fusion=None) -> None: ...
    @abc.abstractmethod
    def dnn_bn_backward(self, ctx, handle, stream, mode: int, bn_ops: int, scales, epsilon: float, tensors,
                        pointers, fusion=None) -> None: ...

    # -- cuFFT (plans decoded and checked by rgpu.protocol.fft_wire) ------------------------------------
    @abc.abstractmethod
    def fft_plan(self, ctx, plan) -> tuple[object | None, int, int]:
        """(the backend's plan, its work size in bytes, 0), or (None, 0, the cufftResult cuFFT refused it with)."""
    @abc.abstractmethod
    def fft_estimate(self, ctx, plan) -> tuple[int, int]:
        """(work size in bytes, cufftResult) of a plan that is not made."""
    @abc.abstractmethod
    def fft_exec(self, ctx, obj, stream, kind: int, input_ptr: int, output_ptr: int, work: int,
                 direction: int) -> None:
        """`kind`: the cufftType of the exec function the program called, 0 for cufftXtExec."""
    @abc.abstractmethod
    def fft_destroy(self, ctx, obj) -> None: ...

    def close(self) -> None:
        """Release process-wide backend state at server shutdown."""


class BackendUnavailable(Exception):
    """The backend cannot run here (no driver, no GPU)."""

