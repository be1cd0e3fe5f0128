"""cuDNN on the GPU through cffi (ABI mode). $RGPU_CUDNN names the library; otherwise the nvidia-cudnn wheel on
sys.path (as PyTorch installs it), then the loader's search for libcudnn.so.9."""

from __future__ import annotations

import threading

import cffi

from rgpu.protocol import dnn_wire
from rgpu.backends.nvlibs import open_library
from rgpu.errors import CudaError, Status

_ffi = cffi.FFI()
_ffi.cdef("""
    int cudnnCreate(void **handle);
    int cudnnDestroy(void *handle);
    int cudnnSetStream(void *handle, void *stream);
    int cudnnBackendCreateDescriptor(int type, void **desc);
    int cudnnBackendDestroyDescriptor(void *desc);
    int cudnnBackendSetAttribute(void *desc, int name, int type, int64_t count, const void *array);
    int cudnnBackendGetAttribute(void *desc, int name, int type, int64_t requested, int64_t *count, void *array);
    int cudnnBackendFinalize(void *desc);
    int cudnnBackendExecute(void *handle, void *plan, void *pack);
    const char *cudnnGetErrorString(int status);
    int cudnnCreateTensorDescriptor(void **desc);
    int cudnnDestroyTensorDescriptor(void *desc);
    int cudnnSetTensorNdDescriptor(void *desc, int type, int n, const int *dims, const int *strides);
    int cudnnBatchNormalizationForwardInference(void *handle, int mode, const void *alpha, const void *beta,
        void *xd, const void *x, void *yd, void *y, void *bnd, const void *scale, const void *bias,
        const void *mean, const void *var, double epsilon);
    int cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(void *handle, int mode, int ops, void *xd, void *zd,
        void *yd, void *bnd, void *activation, size_t *size);
    int cudnnGetBatchNormalizationTrainingExReserveSpaceSize(void *handle, int mode, int ops, void *activation,
        void *xd, size_t *size);
    int cudnnGetBatchNormalizationBackwardExWorkspaceSize(void *handle, int mode, int ops, void *xd, void *yd,
        void *dyd, void *dzd, void *dxd, void *dbnd, void *activation, size_t *size);
    int cudnnBatchNormalizationForwardTrainingEx(void *handle, int mode, int ops, const void *alpha,
        const void *beta, void *xd, const void *x, void *zd, const void *z, void *yd, void *y, void *bnd,
        const void *scale, const void *bias, double factor, void *rmean, void *rvar, double epsilon, void *smean,
        void *sinv, void *activation, void *ws, size_t ws_size, void *reserve, size_t reserve_size);
    int cudnnBatchNormalizationBackwardEx(void *handle, int mode, int ops, const void *alpha_d, const void *beta_d,
        const void *alpha_p, const void *beta_p, void *xd, const void *x, void *yd, const void *y, void *dyd,
        const void *dy, void *dzd, void *dz, void *dxd, void *dx, void *dbnd, const void *scale, const void *bias,
        void *dscale, void *dbias, double epsilon, const void *smean, const void *sinv, void *activation, void *ws,
        size_t ws_size, void *reserve, size_t reserve_size);
""")
_lock = threading.Lock()
_lib = None


def library():
    global _lib
    with _lock:
        if _lib is None:
            _lib = open_library(_ffi, "RGPU_CUDNN", "cudnn", "libcudnn.so.9")
        return _lib


def check(status: int, what: str) -> None:
    if status:
        message = _ffi.string(library().cudnnGetErrorString(status)).decode()
        raise CudaError(Status.NOT_SUPPORTED if status // 1000 == 3 else Status.INVALID_VALUE
                        if status // 1000 == 2 else Status.LAUNCH_FAILED, f"{what}: {message}")


def create():
    out = _ffi.new("void **")
    check(library().cudnnCreate(out), "cudnnCreate")
    return out[0]


def destroy(handle) -> None:
    check(library().cudnnDestroy(handle), "cudnnDestroy")


def _array(attr: dnn_wire.Attribute, resolve):
    """The C array for one attribute: resolved objects for descriptors and handles, raw bytes otherwise."""
    if attr.type in (dnn_wire.TYPE_DESCRIPTOR, dnn_wire.TYPE_HANDLE):
        return _ffi.new("void *[]", [resolve(attr.type, i) for i in attr.ids()] or [_ffi.NULL])
    return _ffi.from_buffer(attr.raw) if attr.raw else _ffi.NULL


def finalize(dtype: int, attributes, resolve) -> tuple[object | None, int]:
    """A real descriptor with the attributes set and finalized: (descriptor, 0), or (None, cuDNN status)."""
    lib = library()
    out = _ffi.new("void **")
    check(lib.cudnnBackendCreateDescriptor(dtype, out), f"cudnnBackendCreateDescriptor({dtype})")
    desc = out[0]
    for attr in attributes:
        status = lib.cudnnBackendSetAttribute(desc, attr.name, attr.type, attr.count, _array(attr, resolve))
        if status:
            lib.cudnnBackendDestroyDescriptor(desc)
            return None, status
    status = lib.cudnnBackendFinalize(desc)
    if status:
        lib.cudnnBackendDestroyDescriptor(desc)
        return None, status
    return desc, 0


def get_attribute(desc, name: int, atype: int, requested: int, out_types: list[int]):
    """(status, count, raw bytes or new descriptors)."""
    lib = library()
    count = _ffi.new("int64_t *")
    if atype == dnn_wire.TYPE_DESCRIPTOR:
        made = []
        for t in out_types:
            out = _ffi.new("void **")
            check(lib.cudnnBackendCreateDescriptor(t, out), f"cudnnBackendCreateDescriptor({t})")
            made.append(out[0])
        array = _ffi.new("void *[]", made or [_ffi.NULL])
        status = lib.cudnnBackendGetAttribute(desc, name, atype, requested, count, array if made else _ffi.NULL)
        filled = min(count[0], requested) if not status else 0
        for extra in made[filled:]:
            lib.cudnnBackendDestroyDescriptor(extra)
        return status, count[0], made[:filled]
    buf = _ffi.new("char[]", max(1, requested * dnn_wire.element_size(atype)))
    status = lib.cudnnBackendGetAttribute(desc, name, atype, requested, count, buf if requested else _ffi.NULL)
    filled = min(count[0], requested) if not status else 0
    return status, count[0], _ffi.buffer(buf)[: filled * dnn_wire.element_size(atype)]


def destroy_descriptor(desc) -> None:
    library().cudnnBackendDestroyDescriptor(desc)


def execute(handle, plan, attributes, stream: int) -> None:
    lib = library()
    check(lib.cudnnSetStream(handle, _ffi.cast("void *", stream)), "cudnnSetStream")
    pack, status = finalize(16, attributes, lambda t, i: _ffi.NULL)  # CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR
    if pack is None:
        check(status, "variant pack")
    try:
        check(lib.cudnnBackendExecute(handle, plan, pack), "cudnnBackendExecute")
    finally:
        lib.cudnnBackendDestroyDescriptor(pack)


class _Tensors:
    """Real legacy tensor descriptors for the duration of one call."""

    def __init__(self, tensors):
        self.tensors, self.descs = tensors, []

    def __enter__(self):
        lib = library()
        for t in self.tensors:
            out = _ffi.new("void **")
            check(lib.cudnnCreateTensorDescriptor(out), "cudnnCreateTensorDescriptor")
            self.descs.append(out[0])
            check(lib.cudnnSetTensorNdDescriptor(out[0], t.type, len(t.dims), list(t.dims), list(t.strides)),
                  "cudnnSetTensorNdDescriptor")
        return self.descs

    def __exit__(self, *exc):
        for d in self.descs:
            library().cudnnDestroyTensorDescriptor(d)


def _scalars(tensor, *values):
    kind = "double *" if tensor.type == 1 else "float *"  # cuDNN's scaling factors follow the data type
    return [_ffi.new(kind, v) for v in values]


def _ptrs(values):
    return [_ffi.cast("void *", v) for v in values]


def _on_stream(handle, stream: int) -> None:
    check(library().cudnnSetStream(handle, _ffi.cast("void *", stream)), "cudnnSetStream")


def bn_inference(handle, stream: int, mode: int, alpha: float, beta: float, epsilon: float, tensors, pointers):
    _on_stream(handle, stream)
    with _Tensors(tensors) as (xd, yd, bnd):
        x, y, scale, bias, mean, var = _ptrs(pointers)
        check(library().cudnnBatchNormalizationForwardInference(
            handle, mode, *_scalars(tensors[0], alpha, beta), xd, x, yd, y, bnd, scale, bias, mean, var, epsilon),
            "cudnnBatchNormalizationForwardInference")


def bn_size(handle, mode: int, ops: int, which: int, tensors) -> int:
    lib, size = library(), _ffi.new("size_t *")
    with _Tensors(tensors) as (xd, bnd):
        if which == 0:
            status = lib.cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(handle, mode, ops, xd, _ffi.NULL,
                                                                                xd, bnd, _ffi.NULL, size)
        elif which == 1:
            status = lib.cudnnGetBatchNormalizationTrainingExReserveSpaceSize(handle, mode, ops, _ffi.NULL, xd, size)
        else:
            status = lib.cudnnGetBatchNormalizationBackwardExWorkspaceSize(handle, mode, ops, xd, xd, xd, _ffi.NULL,
                                                                         xd, bnd, _ffi.NULL, size)
        check(status, "batch-norm size query")
    return int(size[0])


def bn_training(handle, stream: int, mode: int, ops: int, alpha, beta, factor, epsilon, tensors, pointers):
    _on_stream(handle, stream)
    x, y, scale, bias, rmean, rvar, smean, sinv, ws, ws_size, reserve, reserve_size = pointers
    with _Tensors(tensors) as (xd, yd, bnd):
        check(library().cudnnBatchNormalizationForwardTrainingEx(
            handle, mode, ops, *_scalars(tensors[0], alpha, beta), xd, _ffi.cast("void *", x), _ffi.NULL, _ffi.NULL,
            yd, *_ptrs([y]), bnd, *_ptrs([scale, bias]), factor, *_ptrs([rmean, rvar]), epsilon,
            *_ptrs([smean, sinv]), _ffi.NULL, _ffi.cast("void *", ws), ws_size, _ffi.cast("void *", reserve),
            reserve_size), "cudnnBatchNormalizationForwardTrainingEx")


def bn_backward(handle, stream: int, mode: int, ops: int, scales, epsilon, tensors, pointers):
    _on_stream(handle, stream)
    x, dy, dx, scale, dscale, dbias, smean, sinv, ws, ws_size, reserve, reserve_size = pointers
    with _Tensors(tensors) as (xd, dyd, dxd, bnd):
        check(library().cudnnBatchNormalizationBackwardEx(
            handle, mode, ops, *_scalars(tensors[0], *scales), xd, _ffi.cast("void *", x), _ffi.NULL, _ffi.NULL,
            dyd, _ffi.cast("void *", dy), _ffi.NULL, _ffi.NULL, dxd, _ffi.cast("void *", dx), bnd,
            _ffi.cast("void *", scale), _ffi.NULL, *_ptrs([dscale, dbias]), epsilon, *_ptrs([smean, sinv]),
            _ffi.NULL, _ffi.cast("void *", ws), ws_size, _ffi.cast("void *", reserve), reserve_size),
            "cudnnBatchNormalizationBackwardEx")
