"""BLAS_GEMM_BATCHED on the fake backend: the pointer arrays are read from device memory and every matrix they
name must be the session's own."""

from __future__ import annotations

import struct

import numpy as np

from rgpu.dispatch.handlers import HANDLERS
from rgpu.errors import Status
from rgpu.protocol import ops

from .test_vmm import call, fails, read, session


def alloc(s, n):
    return call(s, ops.MEM_ALLOC, n)[0]


def write(s, ptr, data: bytes):
    op = ops.MEMCPY_HTOD
    HANDLERS[op.code].fn(s, op.decode(op.pack_request(ptr)), data)


def args(blas, arrays, batch, m=4, n=4, k=4):
    alpha = struct.pack("<f", 2.0).ljust(16, b"\0")
    a, b, c = arrays
    return (blas, 0, 0, 0, m, n, k, a, 0, m, 0, b, 0, k, 0, c, 0, m, 0, batch, 68, -1, 0, 0, alpha, bytes(16), 0, 0)


def pointer_array(s, pointers):
    p = alloc(s, 8 * len(pointers))
    write(s, p, struct.pack(f"<{len(pointers)}Q", *pointers))
    return p


def setup(s, batch=3):
    (blas,) = call(s, ops.BLAS_CREATE)
    mats = {name: [alloc(s, 64) for _ in range(batch)] for name in "abc"}
    for i in range(batch):
        write(s, mats["a"][i], np.full(16, i + 1, np.float32).tobytes())
        write(s, mats["b"][i], np.eye(4, dtype=np.float32).tobytes())
    return blas, mats


def test_each_entry_is_multiplied():
    s = session()
    blas, mats = setup(s)
    arrays = [pointer_array(s, mats[x]) for x in "abc"]
    call(s, ops.BLAS_GEMM_BATCHED, *args(blas, arrays, 3))
    for i, c in enumerate(mats["c"]):
        assert (np.frombuffer(read(s, c, 64), np.float32) == 2 * (i + 1)).all()


def test_pointers_outside_the_session_are_refused_before_anything_runs():
    s = session()
    blas, mats = setup(s)
    other = session(backend=s.backend)
    foreign = alloc(other, 64)
    a, b = pointer_array(s, mats["a"]), pointer_array(s, mats["b"])
    bad_c = pointer_array(s, [mats["c"][0], foreign, mats["c"][2]])
    fails(Status.INVALID_VALUE, s, ops.BLAS_GEMM_BATCHED, *args(blas, (a, b, bad_c), 3))
    assert read(s, mats["c"][0], 64) == bytes(64)  # nothing ran
    short = pointer_array(s, [mats["c"][0]] * 3)
    fails(Status.INVALID_VALUE, s, ops.BLAS_GEMM_BATCHED, *args(blas, (a, b, short), 3, m=8))  # 8x4 overruns
    fails(Status.INVALID_VALUE, s, ops.BLAS_GEMM_BATCHED, *args(blas, (a, b, a), 4))  # the array itself overruns
    fails(Status.INVALID_VALUE, s, ops.BLAS_GEMM_BATCHED, *args(blas, (a, b, 0x1000), 3))
    fails(Status.INVALID_VALUE, s, ops.BLAS_GEMM_BATCHED, *args(blas, (a, b, a), 1 << 21))
    fails(Status.INVALID_HANDLE, s, ops.BLAS_GEMM_BATCHED, *args(0x77, (a, b, a), 3))
