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


def test_captured_batched_gemm_reads_its_arrays_at_each_replay():
    # llama.cpp captures its attention GEMMs: reading the arrays during capture would wait on the capturing
    # stream (ending the capture), and the pointers they hold at replay are the ones cuBLAS uses.
    from rgpu.session.handles import Kind

    s = session()
    blas, mats = setup(s)
    (stream,) = call(s, ops.STREAM_CREATE, 1)  # non-blocking: reading results on the NULL stream is allowed
    arrays = [pointer_array(s, mats[x]) for x in "abc"]
    graph, exe = (1 << 63) | (int(Kind.GRAPH) << 56) | 1, (1 << 63) | (int(Kind.GRAPH_EXEC) << 56) | 2
    call(s, ops.STREAM_BEGIN_CAPTURE, stream, 2, graph)
    a = args(blas, arrays, 3)
    call(s, ops.BLAS_GEMM_BATCHED, a[0], stream, *a[2:])
    assert read(s, mats["c"][0], 64) == bytes(64)  # recorded, not run
    call(s, ops.STREAM_END_CAPTURE, stream, graph)
    call(s, ops.GRAPH_INSTANTIATE, graph, exe, 0)
    call(s, ops.GRAPH_LAUNCH, exe, stream)
    call(s, ops.STREAM_SYNCHRONIZE, stream)
    for i, c in enumerate(mats["c"]):
        assert (np.frombuffer(read(s, c, 64), np.float32) == 2 * (i + 1)).all()
    write(s, arrays[0], struct.pack("<3Q", *reversed(mats["a"])))  # new pointers, same graph
    call(s, ops.GRAPH_LAUNCH, exe, stream)
    call(s, ops.STREAM_SYNCHRONIZE, stream)
    for i, c in enumerate(mats["c"]):
        assert (np.frombuffer(read(s, c, 64), np.float32) == 2 * (3 - i)).all()
    # The arrays themselves must still be the session's.
    call(s, ops.STREAM_BEGIN_CAPTURE, stream, 2, graph + 16)
    fails(Status.INVALID_VALUE, s, ops.BLAS_GEMM_BATCHED, a[0], stream, *a[2:7], 0x1000, *a[8:])
