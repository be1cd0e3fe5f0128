"""cuDNN for the fake backend: backend descriptors kept as Python objects, one engine that runs forward
convolutions in numpy, and batch-norm inference -- enough to check the stand-in's serialization end to end."""

from __future__ import annotations

import struct

import attrs
import numpy as np

from rgpu.protocol import dnn_wire
from rgpu.errors import CudaError, Status

BAD_PARAM, NOT_SUPPORTED = 2000, 3000
ENGINE, ENGINECFG, ENGINEHEUR, PLAN, GRAPH, CONV_FWD = 2, 3, 4, 5, 15, 10
HEUR_RESULTS, HEUR_GRAPH, CFG_ENGINE, ENGINE_GRAPH, PLAN_CONFIG, PLAN_WORKSPACE, GRAPH_OPS = (
    202, 201, 300, 1300, 401, 402, 801)
_DTYPES = {0: np.float32, 1: np.float64, 2: np.float16}


@attrs.define(eq=False)
class FakeDescriptor:
    type: int
    attrs: dict  # name -> (attribute type, raw bytes | list of FakeDescriptor)

    def refs(self, name: int) -> list:
        return self.attrs[name][1] if name in self.attrs else []

    def ints(self, name: int, fmt: str = "q") -> list[int]:
        raw = self.attrs.get(name, (0, b""))[1]
        return list(struct.unpack(f"<{len(raw) // struct.calcsize(fmt)}{fmt}", raw))


def finalize(dtype: int, attributes, resolve) -> tuple[FakeDescriptor | None, int]:
    values = {}
    for a in attributes:
        if a.type in (dnn_wire.TYPE_DESCRIPTOR, dnn_wire.TYPE_HANDLE):
            values[a.name] = (a.type, [resolve(a.type, i) for i in a.ids()])
        else:
            values[a.name] = (a.type, a.raw)
    d = FakeDescriptor(dtype, values)
    if dtype == GRAPH and any(op.type != CONV_FWD for op in d.refs(GRAPH_OPS)):
        return None, NOT_SUPPORTED  # the fake's only engine runs forward convolutions
    if (dtype == ENGINEHEUR and not d.refs(HEUR_GRAPH)) or (dtype == PLAN and not d.refs(PLAN_CONFIG)):
        return None, BAD_PARAM
    return d, 0


def get_attribute(desc: FakeDescriptor, name: int, atype: int, requested: int, out_types):
    if desc.type == ENGINEHEUR and name == HEUR_RESULTS:
        engine = FakeDescriptor(ENGINE, {ENGINE_GRAPH: (dnn_wire.TYPE_DESCRIPTOR, desc.refs(HEUR_GRAPH))})
        config = FakeDescriptor(ENGINECFG, {CFG_ENGINE: (dnn_wire.TYPE_DESCRIPTOR, [engine])})
        return 0, 1, [config][: min(requested, len(out_types))]
    if desc.type == PLAN and name == PLAN_WORKSPACE:
        return 0, 1, struct.pack("<q", 0)[: 8 * requested]
    if name not in desc.attrs:
        return BAD_PARAM, 0, [] if atype == dnn_wire.TYPE_DESCRIPTOR else b""
    stored_type, value = desc.attrs[name]
    if stored_type != atype:
        return BAD_PARAM, 0, b""
    if atype == dnn_wire.TYPE_DESCRIPTOR:
        return 0, len(value), list(value[:requested])
    size = dnn_wire.element_size(atype)
    return 0, len(value) // size, value[: requested * size]


def _tensor(view, t: FakeDescriptor, pointers: dict) -> np.ndarray:
    dims, strides = t.ints(902), t.ints(903)
    (uid,) = t.ints(906)
    (dtype,) = t.ints(901, "i")
    if dtype not in _DTYPES or uid not in pointers:
        raise CudaError(Status.NOT_SUPPORTED, f"fake cuDNN: tensor {uid} of data type {dtype}")
    item = np.dtype(_DTYPES[dtype]).itemsize
    nbytes = (sum((d - 1) * s for d, s in zip(dims, strides)) + 1) * item
    flat = view(pointers[uid], nbytes).view(_DTYPES[dtype])
    return np.lib.stride_tricks.as_strided(flat, dims, [s * item for s in strides])


def _with_values(view, values: dict[int, bytes]):
    def read(ptr, nbytes):
        data = values.get(ptr)
        if data is None:
            return view(ptr, nbytes)
        if nbytes > len(data):
            raise CudaError(Status.INVALID_VALUE, f"fake cuDNN: a by-value tensor of {nbytes} bytes got {len(data)}")
        return np.frombuffer(bytearray(data[:nbytes]), np.uint8)

    return read


def _scalar(op: FakeDescriptor, name: int, default: float) -> float:
    if name not in op.attrs:
        return default
    atype, raw = op.attrs[name]
    return struct.unpack("<d" if atype == 5 else "<f", raw)[0]


def execute(view, plan: FakeDescriptor, attributes, by_value: dict[int, bytes]) -> None:
    pack = {a.name: a for a in attributes}
    uids = list(struct.unpack(f"<{pack[1000].count}q", pack[1000].raw))
    pointers = dict(zip(uids, pack[1001].ids()))
    values = {uids[i]: data for i, data in by_value.items()}
    if values:  # a pass-by-value tensor reads its bytes, not memory
        view = _with_values(view, {pointers[uid]: data for uid, data in values.items()})
    graph = plan.refs(PLAN_CONFIG)[0].refs(CFG_ENGINE)[0].refs(ENGINE_GRAPH)[0]
    for op in graph.refs(GRAPH_OPS):
        x = _tensor(view, op.refs(704)[0], pointers).astype(np.float64)
        w = _tensor(view, op.refs(703)[0], pointers).astype(np.float64)
        y = _tensor(view, op.refs(705)[0], pointers)
        conv = op.refs(702)[0]
        pad, post, dil, stride = conv.ints(105), conv.ints(104), conv.ints(102), conv.ints(103)
        if x.ndim != 4 or w.shape[1] != x.shape[1]:
            raise CudaError(Status.NOT_SUPPORTED, "fake cuDNN: 2D convolutions without groups only")
        if conv.ints(101, "i") == [0]:  # CUDNN_CONVOLUTION flips the filter; CROSS_CORRELATION does not
            w = w[:, :, ::-1, ::-1]
        xp = np.pad(x, ((0, 0), (0, 0), (pad[0], post[0]), (pad[1], post[1])))
        out = np.zeros(y.shape)
        for r in range(w.shape[2]):
            for c in range(w.shape[3]):
                patch = xp[:, :, r * dil[0] :: stride[0], c * dil[1] :: stride[1]][:, :, : y.shape[2], : y.shape[3]]
                out += np.einsum("nchw,kc->nkhw", patch, w[:, :, r, c])
        alpha, beta = _scalar(op, 700, 1.0), _scalar(op, 701, 0.0)
        y[...] = alpha * out + (beta * y.astype(np.float64) if beta else 0)


def _array(view, t, ptr) -> np.ndarray:
    dtype = _DTYPES.get(t.type)
    if dtype is None:
        raise CudaError(Status.NOT_SUPPORTED, f"fake cuDNN: data type {t.type}")
    item = np.dtype(dtype).itemsize
    flat = view(ptr, t.nbytes()).view(dtype)
    return np.lib.stride_tricks.as_strided(flat, t.dims, [s * item for s in t.strides])


def _blend(target: np.ndarray, value: np.ndarray, alpha: float, beta: float) -> None:
    target[...] = alpha * value + (beta * target.astype(np.float64) if beta else 0)


def check_activation(activation) -> None:
    if activation.mode != dnn_wire.ACTIVATION_RELU:
        raise CudaError(Status.NOT_SUPPORTED, f"fake cuDNN: batch norm fused with activation {activation.mode}")


def _relu(value: np.ndarray, activation) -> np.ndarray:
    check_activation(activation)
    # NaN > 0 is false: without propagation a NaN comes out 0; np.maximum keeps it.
    return np.maximum(value, 0) if activation.nan else np.where(value > 0, value, 0.0)


def bn_training(view, alpha, beta, factor, epsilon, tensors, pointers, fusion=None) -> None:
    """Spatial batch norm over N, H, W per channel; running variance unbiased, as cuDNN keeps it. Fused: y =
    relu(bn(x) + z), z only with an addition."""
    x_t, y_t, bn_t = tensors
    x_p, y_p, scale_p, bias_p, rmean_p, rvar_p, smean_p, sinv_p = pointers[:8]
    x = _array(view, x_t, x_p).astype(np.float64)
    axes = tuple(i for i in range(x.ndim) if i != 1)
    count = x.size // x.shape[1]
    mean, var = x.mean(axis=axes, keepdims=True), x.var(axis=axes, keepdims=True)
    scale, bias = (_array(view, bn_t, p).astype(np.float64) for p in (scale_p, bias_p))
    out = scale * (x - mean) / np.sqrt(var + epsilon) + bias
    if fusion is not None:
        activation, z_t, z_p = fusion
        if z_p:
            out = out + _array(view, z_t, z_p).astype(np.float64)
        out = _relu(out, activation)
    _blend(_array(view, y_t, y_p), out, alpha, beta)
    if rmean_p and rvar_p:
        rmean, rvar = _array(view, bn_t, rmean_p), _array(view, bn_t, rvar_p)
        rmean[...] = (1 - factor) * rmean + factor * mean.reshape(rmean.shape)
        rvar[...] = (1 - factor) * rvar + factor * (var * count / max(count - 1, 1)).reshape(rvar.shape)
    if smean_p and sinv_p:
        _array(view, bn_t, smean_p)[...] = mean.reshape(bn_t.dims)
        _array(view, bn_t, sinv_p)[...] = (1 / np.sqrt(var + epsilon)).reshape(bn_t.dims)


def bn_backward(view, scales, epsilon, tensors, pointers, fusion=None) -> None:
    """Fused: dy is the gradient of relu's output y; through relu (y > 0) it is z's gradient, dz, and bn's."""
    alpha_d, beta_d, alpha_p, beta_p = scales
    x_t, dy_t, dx_t, bn_t = tensors
    x_p, dy_p, dx_p, scale_p, dscale_p, dbias_p, smean_p, sinv_p = pointers[:8]
    x = _array(view, x_t, x_p).astype(np.float64)
    dy = _array(view, dy_t, dy_p).astype(np.float64)
    if fusion is not None:
        activation, y_t, y_p, dz_t, dz_p, _ = fusion
        check_activation(activation)
        dy = np.where(_array(view, y_t, y_p) > 0, dy, 0.0)
        if dz_p:
            _blend(_array(view, dz_t, dz_p), dy, alpha_d, beta_d)
    axes = tuple(i for i in range(x.ndim) if i != 1)
    count = x.size // x.shape[1]
    if smean_p and sinv_p:
        mean, inv = (_array(view, bn_t, p).astype(np.float64) for p in (smean_p, sinv_p))
    else:
        mean = x.mean(axis=axes, keepdims=True)
        inv = 1 / np.sqrt(x.var(axis=axes, keepdims=True) + epsilon)
    scale = _array(view, bn_t, scale_p).astype(np.float64)
    xhat = (x - mean) * inv
    dbias = dy.sum(axis=axes, keepdims=True)
    dscale = (dy * xhat).sum(axis=axes, keepdims=True)
    dx = scale * inv / count * (count * dy - dbias - xhat * dscale)
    _blend(_array(view, dx_t, dx_p), dx, alpha_d, beta_d)
    _blend(_array(view, bn_t, dscale_p), dscale.reshape(bn_t.dims), alpha_p, beta_p)
    _blend(_array(view, bn_t, dbias_p), dbias.reshape(bn_t.dims), alpha_p, beta_p)


def bn_inference(view, mode, alpha, beta, epsilon, tensors, pointers) -> None:
    x_t, y_t, bn_t = tensors
    x, y = _array(view, x_t, pointers[0]), _array(view, y_t, pointers[1])
    scale, bias, mean, var = (_array(view, bn_t, p).astype(np.float64) for p in pointers[2:])
    _blend(y, scale * (x.astype(np.float64) - mean) / np.sqrt(var + epsilon) + bias, alpha, beta)
