"""cuDNN on the GPU through cffi (ABI mode). $RGPU_CUDNN names the library; otherwise the nvidia-cudnn wheel on
sys.path (as PyTorch installs it), then the loader's search for libcudnn.so.9."""

from __future__ import annotations

import struct

import attrs
import cffi

from rgpu.protocol import dnn_wire
from rgpu.backends.libcache import PerHandle
from rgpu.backends.nvlibs import LazyLibrary
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
    int cudnnCreateActivationDescriptor(void **desc);
    int cudnnSetActivationDescriptor(void *desc, int mode, int nan, double coef);
    int cudnnDestroyActivationDescriptor(void *desc);
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
library = LazyLibrary(_ffi, "RGPU_CUDNN", ("cudnn", "libcudnn.so.9"))


def check(status: int, what: str) -> None:
    if status:
        message = _ffi.string(library().cudnnGetErrorString(status)).decode()
        raise CudaError(Status.NOT_SUPPORTED if status // 1000 == 3 else Status.INVALID_VALUE
                        if status // 1000 == 2 else Status.LAUNCH_FAILED, f"{what}: {message}")


def create():
    out = _ffi.new("void **")
    check(library().cudnnCreate(out), "cudnnCreate")
    return out[0]


def _key(handle) -> int:
    return int(_ffi.cast("uintptr_t", handle))


def destroy(handle) -> None:
    key = _key(handle)
    _packs.drop(key)
    _tensors.drop(key)
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


def _variant_pack(attributes):
    pack, status = finalize(16, attributes, lambda t, i: _ffi.NULL)  # CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR
    if pack is None:
        check(status, "variant pack")
    return pack


def execute(handle, plan, attributes, stream: int, by_value: dict[int, bytes]) -> None:
    _on_stream(handle, stream)
    if by_value:
        _execute_with_values(handle, plan, attributes, by_value)
        return
    key = tuple(attributes)  # frozen Attributes: equal, and hashed, by value
    pack = _packs.of(_key(handle)).get(key, lambda: _variant_pack(attributes))
    check(library().cudnnBackendExecute(handle, plan, pack), "cudnnBackendExecute")


def _execute_with_values(handle, plan, attributes, by_value: dict[int, bytes]) -> None:
    """A pack whose pass-by-value pointers name host buffers here, holding the client's values. cuDNN reads
    them during the call (they become kernel arguments), so the buffers and the pack live only as long; such
    packs are not cached, since the values (a dropout offset, say) may change every time."""
    buffers = {i: _ffi.new("char[]", data) for i, data in by_value.items()}
    swapped = []
    for a in attributes:
        if a.name == dnn_wire.VARIANT_PACK_DATA_POINTERS:
            ids = a.ids()
            for i, buf in buffers.items():
                ids[i] = int(_ffi.cast("uintptr_t", buf))
            a = attrs.evolve(a, raw=struct.pack(f"<{len(ids)}Q", *ids))
        swapped.append(a)
    pack = _variant_pack(swapped)
    try:
        check(library().cudnnBackendExecute(handle, plan, pack), "cudnnBackendExecute")
    finally:
        library().cudnnBackendDestroyDescriptor(pack)


def _tensor_descriptor(t):
    lib, out = library(), _ffi.new("void **")
    check(lib.cudnnCreateTensorDescriptor(out), "cudnnCreateTensorDescriptor")
    status = lib.cudnnSetTensorNdDescriptor(out[0], t.type, len(t.dims), list(t.dims), list(t.strides))
    if status:
        lib.cudnnDestroyTensorDescriptor(out[0])
        check(status, "cudnnSetTensorNdDescriptor")
    return out[0]


def _described(handle, tensors) -> list:
    """Real legacy tensor descriptors for `tensors`, kept per handle by shape."""
    cache = _tensors.of(_key(handle))
    return [cache.get(t, lambda t=t: _tensor_descriptor(t)) for t in tensors]  # frozen Tensors: keyed by value


# Per cuDNN handle: variant packs by content, tensor descriptors by shape.
_packs = PerHandle(lambda pack: library().cudnnBackendDestroyDescriptor(pack))
_tensors = PerHandle(lambda desc: library().cudnnDestroyTensorDescriptor(desc))


# Types resolved once: by name, each cast or new parses its type string again, several times a call.
_VOID_P, _FLOAT_P, _DOUBLE_P = (_ffi.typeof(t) for t in ("void *", "float *", "double *"))


def _scalars(tensor, *values):
    kind = _DOUBLE_P if tensor.type == 1 else _FLOAT_P  # cuDNN's scaling factors follow the data type
    return [_ffi.new(kind, v) for v in values]


def _ptrs(values):
    return [_ffi.cast(_VOID_P, v) for v in values]


def _on_stream(handle, stream: int) -> None:
    # Set on every call, not only when it changed: the fast lane sets it too, for the batch norms it runs.
    check(library().cudnnSetStream(handle, _ffi.cast(_VOID_P, stream)), "cudnnSetStream")


def lane_calls() -> tuple[int, int, int]:
    """(cudnnSetStream, cudnnBatchNormalizationForwardInference, cudnnBackendExecute) as addresses, for the fast
    lane's table."""
    lib = library()
    return tuple(int(_ffi.cast("uintptr_t", f)) for f in (lib.cudnnSetStream,
                                                           lib.cudnnBatchNormalizationForwardInference,
                                                           lib.cudnnBackendExecute))


def lane_execute(handle, plan, attributes) -> tuple:
    """An execution for the fast lane: (handle, plan, a variant pack of these attributes) as addresses and
    release() for the pack, the lane's own (the cache's could be evicted while the lane names it)."""
    pack = _variant_pack(attributes)
    return (_key(handle), int(_ffi.cast("uintptr_t", plan)), int(_ffi.cast("uintptr_t", pack)),
            lambda: library().cudnnBackendDestroyDescriptor(pack))


def lane_batch_norm(handle, tensors) -> tuple:
    """A batch norm's shape for the fast lane: (handle, x, y and statistics descriptors) as addresses, whether
    the scaling factors are doubles, and release() for the descriptors. They are the lane's own, not the cache's,
    whose eviction would destroy them while the lane still names them."""
    lib, descriptors = library(), []

    def release() -> None:
        for d in descriptors:
            lib.cudnnDestroyTensorDescriptor(d)

    try:
        for t in tensors:
            descriptors.append(_tensor_descriptor(t))
    except CudaError:
        release()
        raise

    return (_key(handle), *(int(_ffi.cast("uintptr_t", d)) for d in descriptors), tensors[0].type == 1, release)


def bn_inference(handle, stream: int, mode: int, alpha: float, beta: float, epsilon: float, tensors, pointers):
    _on_stream(handle, stream)
    xd, yd, bnd = _described(handle, tensors)
    x, y, scale, bias, mean, var = _ptrs(pointers)
    check(library().cudnnBatchNormalizationForwardInference(
        handle, mode, *_scalars(tensors[0], alpha, beta), xd, x, yd, y, bnd, scale, bias, mean, var, epsilon),
        "cudnnBatchNormalizationForwardInference")


class _Activation:
    """A real activation descriptor for the length of one call (None: no fusion, NULL)."""

    def __init__(self, activation):
        self.activation, self.desc = activation, _ffi.NULL

    def __enter__(self):
        if self.activation is not None:
            lib, out = library(), _ffi.new("void **")
            check(lib.cudnnCreateActivationDescriptor(out), "cudnnCreateActivationDescriptor")
            self.desc = out[0]
            a = self.activation
            status = lib.cudnnSetActivationDescriptor(self.desc, a.mode, a.nan, a.coef)
            if status:
                self.__exit__()
                check(status, "cudnnSetActivationDescriptor")
        return self.desc

    def __exit__(self, *exc):
        if self.desc != _ffi.NULL:
            library().cudnnDestroyActivationDescriptor(self.desc)
            self.desc = _ffi.NULL


def bn_size(handle, mode: int, ops: int, which: int, tensors, fusion=None) -> int:
    lib, size = library(), _ffi.new("size_t *")
    xd, bnd = _described(handle, tensors)
    # Plain: cuDNN reads no y / z / dy / dx shape of its own here -- x's stands for them, as PyTorch passes it.
    yd, zd, dyd, dxd = _described(handle, fusion[1]) if fusion else (xd, _ffi.NULL, xd, xd)
    zd = zd if ops == 2 else _ffi.NULL  # BN_ADD_ACTIVATION alone has a z
    with _Activation(fusion[0] if fusion else None) as act:
        if which == 0:
            status = lib.cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(handle, mode, ops, xd, zd, yd,
                                                                                bnd, act, size)
        elif which == 1:
            status = lib.cudnnGetBatchNormalizationTrainingExReserveSpaceSize(handle, mode, ops, act, xd, size)
        else:
            status = lib.cudnnGetBatchNormalizationBackwardExWorkspaceSize(handle, mode, ops, xd, yd, dyd, zd, dxd,
                                                                         bnd, act, size)
    check(status, "batch-norm size query")
    return int(size[0])


def bn_training(handle, stream: int, mode: int, ops: int, alpha, beta, factor, epsilon, tensors, pointers,
                fusion=None):
    _on_stream(handle, stream)
    x, y, scale, bias, rmean, rvar, smean, sinv, ws, ws_size, reserve, reserve_size = pointers
    xd, yd, bnd = _described(handle, tensors)
    activation, z_t, z = fusion if fusion else (None, None, 0)
    zd = _described(handle, [z_t])[0] if z else _ffi.NULL
    with _Activation(activation) as act:
        check(library().cudnnBatchNormalizationForwardTrainingEx(
            handle, mode, ops, *_scalars(tensors[0], alpha, beta), xd, _ffi.cast("void *", x), zd,
            _ffi.cast("void *", z), yd, *_ptrs([y]), bnd, *_ptrs([scale, bias]), factor, *_ptrs([rmean, rvar]),
            epsilon, *_ptrs([smean, sinv]), act, _ffi.cast("void *", ws), ws_size, _ffi.cast("void *", reserve),
            reserve_size), "cudnnBatchNormalizationForwardTrainingEx")


def bn_backward(handle, stream: int, mode: int, ops: int, scales, epsilon, tensors, pointers, fusion=None):
    _on_stream(handle, stream)
    x, dy, dx, scale, dscale, dbias, smean, sinv, ws, ws_size, reserve, reserve_size = pointers
    xd, dyd, dxd, bnd = _described(handle, tensors)
    activation, y_t, y, dz_t, dz, bias = fusion if fusion else (None, None, 0, None, 0, 0)
    yd = _described(handle, [y_t])[0] if y else _ffi.NULL
    dzd = _described(handle, [dz_t])[0] if dz else _ffi.NULL
    with _Activation(activation) as act:
        check(library().cudnnBatchNormalizationBackwardEx(
            handle, mode, ops, *_scalars(tensors[0], *scales), xd, _ffi.cast("void *", x), yd,
            _ffi.cast("void *", y), dyd, _ffi.cast("void *", dy), dzd, _ffi.cast("void *", dz), dxd,
            _ffi.cast("void *", dx), bnd, *_ptrs([scale, bias, dscale, dbias]), epsilon, *_ptrs([smean, sinv]),
            act, _ffi.cast("void *", ws), ws_size, _ffi.cast("void *", reserve), reserve_size),
            "cudnnBatchNormalizationBackwardEx")
