"""Launch attributes, stream capture and CUDA graphs on a real GPU (a mixin of CudaBackend).

Capture is NVIDIA's own: cuStreamBeginCapture on the session's real stream, and the deferred launches,
memsets and device-to-device copies that follow are captured by the driver; cuStreamEndCapture yields the
real CUgraph. Host<->device copies of the program's memory cannot be captured faithfully (the server's
staging buffer is not the program's memory): the client refuses them during capture, and on the server the
driver's own rule (no synchronisation of a capturing stream) fails them and invalidates the capture.
"""

from __future__ import annotations

import cffi

from rgpu.dispatch.backend import MAX_PARAM_BYTES
from rgpu.errors import CudaError, Status

try:
    from cuda.bindings import driver as cu
except ImportError:  # pragma: no cover - the cuda backend is unavailable then
    cu = None

_ffi = cffi.FFI()
_ffi.cdef("""
    typedef struct {
        unsigned gx, gy, gz, bx, by, bz, shmem;
        uintptr_t stream;
        void *attrs;
        unsigned count;
    } rgpu_launch_config;
    int cuCtxSetCurrent(uintptr_t ctx);
    int cuLaunchKernelEx(const rgpu_launch_config *config, uintptr_t f, void **params, void **extra);
""")
_driver = None
_ATTRIBUTE_SIZE = 72


def _lib():
    global _driver
    if _driver is None:
        _driver = _ffi.dlopen("libcuda.so.1")
    return _driver


def _check(result):
    from rgpu.dispatch.cuda import _check as check

    return check(result)


def _stream(stream):
    return cu.CUstream(0) if stream is None else stream


class CudaGraphs:
    """Mixed into CudaBackend."""

    # -- launches with attributes ------------------------------------------------------------------
    def launcher_ex(self, ctx, func, stream):
        # As CudaBackend.launcher: bound once per (function, stream); the buffers belong to this launcher.
        lib = _lib()
        ctx_ptr, func_ptr = int(ctx), int(func)
        config = _ffi.new("rgpu_launch_config *")
        config.stream = int(stream) if stream else 0
        records = _ffi.new("char[]", 16 * _ATTRIBUTE_SIZE)
        config.attrs = records
        buffer = _ffi.new("char[]", MAX_PARAM_BYTES)
        nbytes = _ffi.new("size_t *")
        extra = _ffi.new("void *[5]", [_ffi.cast("void *", 1), buffer, _ffi.cast("void *", 2), nbytes, _ffi.NULL])

        def launch(gx, gy, gz, bx, by, bz, shared_mem, attributes, params):
            size = len(params)
            if size > MAX_PARAM_BYTES:
                raise CudaError(Status.INVALID_VALUE, f"{size} bytes of kernel parameters (at most {MAX_PARAM_BYTES})")
            _ffi.memmove(buffer, params, size)
            nbytes[0] = size
            for i, a in enumerate(attributes):
                value = a.value
                if a.event is not None:  # the driver's own CUevent replaces the session handle
                    value = int(a.event).to_bytes(8, "little") + value[8:]
                _ffi.memmove(records + i * _ATTRIBUTE_SIZE, a.id.to_bytes(4, "little") + bytes(4) + value,
                             _ATTRIBUTE_SIZE)
            config.gx, config.gy, config.gz, config.bx, config.by, config.bz = gx, gy, gz, bx, by, bz
            config.shmem, config.count = shared_mem, len(attributes)
            err = lib.cuCtxSetCurrent(ctx_ptr) or lib.cuLaunchKernelEx(config, func_ptr, _ffi.NULL, extra)
            if err:
                _check((cu.CUresult(err),))

        return launch

    # -- capture ------------------------------------------------------------------------------------
    def stream_begin_capture(self, ctx, stream, mode: int) -> None:
        # Always relaxed here: capture modes restrict *other calls of the program's threads*, which the client
        # enforces (native/src/graph.c); on the server a stricter mode would instead refuse the session's own
        # allocations made after the program relaxed its thread, and, with in-process sessions, other sessions.
        del mode
        self._use(ctx)
        _check(cu.cuStreamBeginCapture(_stream(stream), cu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED))

    def stream_end_capture(self, ctx, stream):
        self._use(ctx)
        return _check(cu.cuStreamEndCapture(_stream(stream)))

    # -- executable graphs --------------------------------------------------------------------------
    def graph_instantiate(self, ctx, graph, flags: int):
        self._use(ctx)
        return _check(cu.cuGraphInstantiateWithFlags(graph, flags))

    def graph_launch(self, ctx, exe, stream) -> None:
        self._use(ctx)
        _check(cu.cuGraphLaunch(exe, _stream(stream)))

    def graph_upload(self, ctx, exe, stream) -> None:
        self._use(ctx)
        _check(cu.cuGraphUpload(exe, _stream(stream)))

    def graph_exec_update(self, ctx, exe, graph) -> int:
        self._use(ctx)
        err, info = cu.cuGraphExecUpdate(exe, graph)
        if err == cu.CUresult.CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE:
            return int(info.result) or 1
        _check((err,))
        return 0

    def graph_destroy(self, ctx, graph) -> None:
        _check(cu.cuGraphDestroy(graph))

    def graph_exec_destroy(self, ctx, exe) -> None:
        self._use(ctx)
        _check(cu.cuGraphExecDestroy(exe))
