"""Runs one bridge job on a backend: copy in, time the kernel with events, copy out, check against the CPU.

Synchronous: the daemon calls it from a worker thread, never from the event loop.
"""

from __future__ import annotations

import attrs
import numpy as np

from rgpu.backends.base import Backend
from rgpu.bridge.records import DoneStatus, Op
from rgpu.errors import CudaError
from rgpu.kernels import load
from rgpu.protocol.params import pack_params

KERNELS = {Op.MAIL: "mail_kernel", Op.VADD: "vadd", Op.VADD_MUTATED: "vadd_mutated"}
DEFAULT_MAX_N = 1 << 26
BLOCK = 256


def input_bytes(op: Op, n: int) -> int:
    """Input a job needs: MAIL n bytes; VADD* two float32 vectors, a then b."""
    return n if op == Op.MAIL else 8 * n


def output_bytes(op: Op, n: int) -> int:
    return n if op == Op.MAIL else 4 * n


def reference(op: Op, n: int, data: bytes) -> np.ndarray:
    """What a correct kernel writes, computed on the CPU."""
    if op == Op.MAIL:
        return np.frombuffer(data, np.uint8, n)
    a = np.frombuffer(data, np.float32, n)
    b = np.frombuffer(data, np.float32, n, offset=4 * n)
    return a + b + np.float32(1) if op == Op.VADD_MUTATED else a + b


@attrs.frozen(slots=True)
class JobResult:
    status: DoneStatus
    out: bytes = b""
    kernel_ns: int = 0
    cuda_error: int = 0
    bad: int = 0  # output elements that differ from the CPU reference


class Engine:
    def __init__(self, backend: Backend, max_n: int = DEFAULT_MAX_N):
        self.backend = backend
        self.max_n = max_n
        backend.init()
        self.device = backend.device_name(0)
        self.ctx = backend.ctx_create(0, 0)
        self.module = backend.module_load(self.ctx, load("bridge.ptx"))
        self.functions = {op: backend.module_get_function(self.ctx, self.module, name)
                          for op, name in KERNELS.items()}
        self.layouts = {op: backend.func_param_info(self.ctx, f) for op, f in self.functions.items()}
        self._buffers: dict[str, tuple[int, int]] = {}
        self._events = (backend.event_create(self.ctx, 0), backend.event_create(self.ctx, 0))

    def _buffer(self, role: str, size: int) -> int:
        """Device buffers are kept between jobs and only grow, so steady-state jobs allocate nothing."""
        ptr, have = self._buffers.get(role, (0, 0))
        if have < size:
            if ptr:
                self.backend.mem_free(self.ctx, ptr)
                self._buffers.pop(role)
            ptr = self.backend.mem_alloc(self.ctx, size)
            self._buffers[role] = (ptr, size)
        return ptr

    def run(self, op: Op, n: int, data: bytes) -> JobResult:
        be, ctx = self.backend, self.ctx
        try:
            src = self._buffer("in", len(data))
            dst = self._buffer("out", output_bytes(op, n))
            be.memcpy_htod(ctx, src, memoryview(data))
            if op == Op.MAIL:
                args = (src, dst, n)
            else:
                args = (src, src + 4 * n, dst, n)
            params = pack_params(self.layouts[op], args)
            start, end = self._events
            be.event_record(ctx, start, None)
            be.launch(ctx, self.functions[op], ((n + BLOCK - 1) // BLOCK, 1, 1), (BLOCK, 1, 1), 0, None, params)
            be.event_record(ctx, end, None)
            be.event_synchronize(ctx, end)
            kernel_ns = int(round(be.event_elapsed(ctx, start, end) * 1e6))
            out = bytes(be.memcpy_dtoh(ctx, dst, output_bytes(op, n)))
        except CudaError as e:
            return JobResult(DoneStatus.GPU_ERROR, cuda_error=e.code)
        got = np.frombuffer(out, np.uint8 if op == Op.MAIL else np.float32, n)
        bad = int(np.count_nonzero(got != reference(op, n, data)))
        return JobResult(DoneStatus.OK, out, kernel_ns, 0, bad)

    def close(self) -> None:
        try:
            self.backend.ctx_destroy(self.ctx)
        except CudaError:
            pass
