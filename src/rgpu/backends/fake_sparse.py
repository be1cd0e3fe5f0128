"""cuSPARSE's generic API for the fake backend, in numpy: the sparse operand expanded to a dense float64 matrix
(every index checked: out-of-range, unsorted CSR offsets and the like are INVALID_VALUE, where the GPU would
read or write past the operands), dense operands as strided views of emulated device memory. Real float and
double only. The fake asks for an external buffer of its own size, checked like the GPU's."""

from __future__ import annotations

import numpy as np

from rgpu.errors import CudaError, Status
from rgpu.protocol.sparse_wire import FORMAT_COO, FORMAT_CSR, ORDER_COL, OP_N, POINTER_MODE_DEVICE, Dense, \
    Function, Phase, Sparse, SparseOp, SpGemm

_VALUES = {0: np.float32, 1: np.float64}
_INDICES = {1: np.uint16, 2: np.int32, 3: np.int64}


def _dtype(t: int):
    if t not in _VALUES:
        raise CudaError(Status.NOT_SUPPORTED, f"fake cuSPARSE: data type {t} (float and double only)")
    return _VALUES[t]


def _array(view, ptr: int, dtype, count: int) -> np.ndarray:
    if count <= 0:
        return np.zeros(0, dtype)
    return view(ptr, count * np.dtype(dtype).itemsize).view(dtype)


def _bad(what: str) -> CudaError:
    return CudaError(Status.INVALID_VALUE, f"fake cuSPARSE: {what}")


def _positions(offsets: np.ndarray, count: int, nnz: int, base: int) -> np.ndarray:
    """The major index (row for CSR, column for CSC) of each stored element, from the compressed offsets."""
    offsets = offsets.astype(np.int64) - base
    if offsets[0] != 0 or offsets[-1] != nnz or np.any(np.diff(offsets) < 0):
        raise _bad("compressed offsets are not 0..nnz and non-decreasing")
    return np.repeat(np.arange(count), np.diff(offsets))


def _entries(view, a: Sparse, i: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Row indices, column indices and float64 values of batch member i's stored elements, every index checked."""
    vdt, idt, odt = _dtype(a.value_type), _INDICES[a.indices_type], _INDICES[a.offsets_type]
    shift = i * a.values_stride
    values = _array(view, a.values + shift * np.dtype(vdt).itemsize, vdt, a.nnz).astype(np.float64)
    minor = _array(view, a.indices + shift * np.dtype(idt).itemsize, idt, a.nnz).astype(np.int64) - a.base
    if a.format == FORMAT_COO:
        major = _array(view, a.offsets + shift * np.dtype(idt).itemsize, idt, a.nnz).astype(np.int64) - a.base
        rows, cols = major, minor
    else:
        count = a.rows if a.format == FORMAT_CSR else a.cols
        offsets = _array(view, a.offsets + i * a.offsets_stride * np.dtype(odt).itemsize, odt, count + 1)
        major = _positions(offsets, count, a.nnz, a.base)
        rows, cols = (major, minor) if a.format == FORMAT_CSR else (minor, major)
    if a.nnz and (rows.min() < 0 or rows.max() >= a.rows or cols.min() < 0 or cols.max() >= a.cols):
        raise _bad(f"an index outside the {a.rows} x {a.cols} matrix")
    return rows, cols, values


def sparse_to_dense(view, a: Sparse) -> np.ndarray:
    """(batch, rows, cols) float64."""
    out = np.zeros((a.batch, a.rows, a.cols))
    for i in range(a.batch):
        rows, cols, values = _entries(view, a, i)
        np.add.at(out[i], (rows, cols), values)
    return out


def _structure(view, a: Sparse) -> np.ndarray:
    """A's stored positions (an explicitly stored zero counts, as it does for cuSPARSE's SpGEMM)."""
    rows, cols, _ = _entries(view, a, 0)
    out = np.zeros((a.rows, a.cols), np.int64)
    out[rows, cols] = 1
    return out


def _view(view, d: Dense, writeable: bool = False) -> np.ndarray:
    """(batch, rows, cols) strided view of a dense operand."""
    dtype = _dtype(d.type)
    item = np.dtype(dtype).itemsize
    flat = view(d.values, d.nbytes()).view(dtype)
    inner = (item, d.ld * item) if d.order == ORDER_COL else (d.ld * item, item)
    return np.lib.stride_tricks.as_strided(flat, (d.batch, d.rows, d.cols), (d.stride * item, *inner),
                                           writeable=writeable)


def _scalar(view, op: SparseOp | SpGemm, which: int) -> float:
    """alpha (0) or beta (1)."""
    dtype = _dtype(op.compute_type)
    if op.pointer_mode == POINTER_MODE_DEVICE:
        return float(_array(view, op.scalars()[which], dtype, 1)[0])
    return float(np.frombuffer((op.alpha, op.beta)[which][: np.dtype(dtype).itemsize], dtype)[0])


def _op(m: np.ndarray, trans: int) -> np.ndarray:
    return m if trans == OP_N else np.swapaxes(m, 1, 2)


def buffer_size(op: SparseOp) -> tuple[int, int]:
    return 0, 256 + 4 * op.a.nnz


def run(view, op: SparseOp) -> None:
    if op.function == Function.XCOO2CSR:
        return _coo2csr(view, op)
    alpha, beta = _scalar(view, op, 0), _scalar(view, op, 1)
    a = _op(sparse_to_dense(view, op.a), op.op_a)
    b = _view(view, op.b).astype(np.float64)
    if op.function == Function.SPMM:
        b = _op(b, op.op_b)
    c = _view(view, op.c, writeable=True)
    result = alpha * (a @ b)
    if beta:
        result = result + beta * c.astype(np.float64)
    c[...] = np.broadcast_to(result, c.shape).astype(c.dtype)


def _coo2csr(view, op: SparseOp) -> None:
    a = op.a
    rows = _array(view, a.offsets, np.int32, a.nnz).astype(np.int64) - a.base
    if a.nnz and (rows.min() < 0 or rows.max() >= a.rows or np.any(np.diff(rows) < 0)):
        raise _bad("coo2csr: row indices out of range or not sorted")
    offsets = np.searchsorted(rows, np.arange(a.rows + 1), side="left") + a.base
    _array(view, op.c.values, np.int32, a.rows + 1)[...] = offsets.astype(np.int32)


class _SpGemmState:
    """What a fake SpGEMM descriptor holds between the phases: the product, once computed (CSR, 0-based)."""

    def __init__(self):
        self.product: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None


def spgemm_need(g: SpGemm, state: _SpGemmState) -> tuple[int, int, int]:
    nnz = len(state.product[1]) if state.product else 0
    if g.phase == Phase.WORK_ESTIMATION:
        return 0, 64 + 8 * (g.a.nnz + g.b.nnz), nnz
    if g.phase == Phase.COMPUTE:
        return 0, 64 + 8 * (g.a.rows + 1), nnz
    if state.product is None:
        raise _bad("SpGEMM copy before compute")
    return 0, 0, nnz


def spgemm_run(view, g: SpGemm, state: _SpGemmState) -> int:
    if g.phase == Phase.WORK_ESTIMATION:
        return 0
    if g.phase == Phase.COMPUTE:
        if _scalar(view, g, 1):
            raise CudaError(Status.NOT_SUPPORTED, "fake cuSPARSE: SpGEMM with beta != 0")
        a, b = sparse_to_dense(view, g.a)[0], sparse_to_dense(view, g.b)[0]
        structure = (_structure(view, g.a) @ _structure(view, g.b)) != 0
        product = _scalar(view, g, 0) * (a @ b)
        rows, cols = np.nonzero(structure)
        offsets = np.searchsorted(rows, np.arange(g.c.rows + 1))
        state.product = (offsets, cols, product[rows, cols])
        return len(cols)
    offsets, cols, values = state.product
    c = g.c
    _array(view, c.offsets, _INDICES[c.offsets_type], c.rows + 1)[...] = offsets + c.base
    _array(view, c.indices, _INDICES[c.indices_type], len(cols))[...] = cols + c.base
    _array(view, c.values, _dtype(c.value_type), len(cols))[...] = values
    return len(cols)


class FakeSparse:
    """Mixed into FakeBackend (which provides `_blas_view`)."""

    def sparse_create(self, ctx):
        ctx.check()
        return object()

    def sparse_destroy(self, ctx, handle) -> None:
        pass

    def sparse_buffer_size(self, ctx, handle, op: SparseOp) -> tuple[int, int]:
        ctx.check()
        return buffer_size(op)

    def sparse_run(self, ctx, handle, stream, op: SparseOp) -> None:
        ctx.check()
        run(self._blas_view, op)

    def spgemm_create(self, ctx):
        ctx.check()
        return _SpGemmState()

    def spgemm_destroy(self, ctx, descriptor) -> None:
        pass

    def spgemm_need(self, ctx, handle, descriptor, g: SpGemm) -> tuple[int, int, int]:
        ctx.check()
        return spgemm_need(g, descriptor)

    def spgemm_run(self, ctx, handle, stream, descriptor, g: SpGemm) -> tuple[int, int]:
        ctx.check()
        return 0, spgemm_run(self._blas_view, g, descriptor)

