"""cuBLAS Level 2/3 routines and getrsBatched on the fake backend: tests/cuda/blas_level3_check.c against a CPU
reference (and its bad-input half); BLAS_ROUTINE / BLAS_GETRS_BATCHED confined to the session's memory."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from rgpu.errors import Status
from rgpu.protocol import ops
from rgpu.protocol.blas_routines import Function

from .math_programs import build_check, fake_server  # noqa: F401 (a fixture)
from .test_blas_batched import alloc, pointer_array, write
from .test_runtime import run
from .test_vmm import call, fails, read, session


@pytest.fixture(scope="module")
def blas_level3_check(shim_dir, tmp_path_factory):
    return build_check(shim_dir, tmp_path_factory.mktemp("blas_level3"), "blas_level3_check", "libcublas.so.13")


@pytest.mark.parametrize("mode", ["", "bad"])
def test_level3_routines_match_a_cpu_reference(shim_dir, blas_level3_check, fake_server, mode):
    proc = run(shim_dir, blas_level3_check, *([mode] if mode else []), env={"RGPU_SERVER": fake_server})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "MISMATCH" not in proc.stdout and f"blas_level3_check {mode + ' ' if mode else ''}OK" in proc.stdout
    assert "not supported" not in proc.stderr, proc.stderr
    if not mode:  # cuBLAS's own line for each refused argument, as NVIDIA's prints it (measured on the H200)
        refused = [line for line in proc.stdout.splitlines() if line.startswith(" ** ")]
        assert refused == [f" ** On entry to {name:<6} parameter number {number} had an illegal value"
                           for name, number in (("DTRSM", 9), ("DTRSM", 1), ("ZTRMV", 8), ("DSYRK", 10),
                                                ("ZGEMM", 8), ("DGER", 7))], proc.stdout


def _scalar(value: float, mode: int = 0) -> bytes:
    return (struct.pack("<Q", int(value)) if mode else struct.pack("<d", value)).ljust(16, b"\0")


def _routine(blas, function, *, m=0, n=0, k=0, a=0, lda=1, b=0, ldb=1, c=0, ldc=1, alpha=1.0, beta=0.0, mode=0,
             side=0, uplo=0, transa=0, transb=0, diag=0, type_=1, workspace=0, workspace_size=0, stream=0, wide=1):
    return (blas, stream, function, type_, wide, side, uplo, transa, transb, diag, m, n, k, mode, 0,
            _scalar(alpha, mode), _scalar(beta, mode), a, lda, b, ldb, c, ldc, workspace, workspace_size)


def test_routines_touch_only_the_sessions_memory():
    s = session()
    (blas,) = call(s, ops.BLAS_CREATE)
    a, b = alloc(s, 128), alloc(s, 128)  # 4x4 doubles each
    write(s, a, (np.eye(4) * 2).T.tobytes())
    write(s, b, np.arange(16.0).reshape(4, 4).T.tobytes())
    trsm = dict(m=4, n=4, a=a, lda=4, b=b, ldb=4, alpha=1.0)
    call(s, ops.BLAS_ROUTINE, *_routine(blas, Function.TRSM, **trsm))
    assert np.allclose(np.frombuffer(read(s, b, 128), np.float64).reshape(4, 4).T, np.arange(16.0).reshape(4, 4) / 2)

    # A zero on the diagonal: infinities and NaNs, as BLAS gives, not an error
    write(s, a, bytes(128))
    call(s, ops.BLAS_ROUTINE, *_routine(blas, Function.TRSM, **trsm))
    assert not np.isfinite(np.frombuffer(read(s, b, 128), np.float64)).any()

    other = session(backend=s.backend)
    foreign = alloc(other, 128)
    fails(Status.INVALID_VALUE, s, ops.BLAS_ROUTINE, *_routine(blas, Function.TRSM, **{**trsm, "b": foreign}))
    fails(Status.INVALID_VALUE, s, ops.BLAS_ROUTINE, *_routine(blas, Function.TRSM, **{**trsm, "n": 5}))  # overruns
    fails(Status.INVALID_VALUE, s, ops.BLAS_ROUTINE, *_routine(blas, Function.TRSM, **{**trsm, "lda": 3}))
    fails(Status.INVALID_VALUE, s, ops.BLAS_ROUTINE, *_routine(blas, Function.TRSM, **{**trsm, "ldb": 1 << 31},
                                                               wide=0))  # past the 32-bit form's range
    fails(Status.INVALID_VALUE, s, ops.BLAS_ROUTINE, *_routine(blas, Function.TRSM, **trsm, mode=1))  # alpha at 1
    fails(Status.INVALID_VALUE, s, ops.BLAS_ROUTINE, *_routine(blas, Function.TRSM, **trsm, workspace=foreign,
                                                               workspace_size=64))
    # A vector's span follows its increment, backwards too; an increment of 0 is refused, but for a real gemv's x
    # (NVIDIA's cuBLAS takes that one), whose range is then checked as n elements side by side.
    gemv = dict(m=4, n=4, a=a, lda=4, b=b, c=b, type_=1)
    call(s, ops.BLAS_ROUTINE, *_routine(blas, Function.GEMV, **gemv, ldb=-4, ldc=4))
    fails(Status.INVALID_VALUE, s, ops.BLAS_ROUTINE, *_routine(blas, Function.GEMV, **gemv, ldb=6, ldc=1))  # 19 x 8
    call(s, ops.BLAS_ROUTINE, *_routine(blas, Function.GEMV, **gemv, ldb=0, ldc=1))
    fails(Status.INVALID_VALUE, s, ops.BLAS_ROUTINE, *_routine(blas, Function.GEMV, **{**gemv, "b": b + 120},
                                                               ldb=0, ldc=1))  # x[0] fits, 4 elements do not
    fails(Status.INVALID_VALUE, s, ops.BLAS_ROUTINE, *_routine(blas, Function.GEMV, **gemv, ldb=1, ldc=0))
    fails(Status.INVALID_VALUE, s, ops.BLAS_ROUTINE, *_routine(blas, Function.GEMV, **{**gemv, "m": 2, "n": 2,
                                                               "lda": 2, "type_": 5}, ldb=0, ldc=1))
    # herk's scalars are real: in device pointer mode, 8 bytes each for Z
    herk = dict(n=2, k=2, a=a, lda=2, c=b, ldc=2, type_=5, mode=1, transa=2)
    call(s, ops.BLAS_ROUTINE, *_routine(blas, Function.HERK, **herk, alpha=a + 120, beta=a + 120))
    fails(Status.INVALID_VALUE, s, ops.BLAS_ROUTINE, *_routine(blas, Function.HERK, **herk, alpha=a + 121,
                                                               beta=a))
    fails(Status.NOT_SUPPORTED, s, ops.BLAS_ROUTINE, *_routine(blas, Function.HERK, **{**herk, "type_": 1}))
    # Operations NVIDIA accepts beyond the documented ones: every reading of them stays in the ranges checked.
    # gemv 1x4 with x as the last element of b: T reads 1 element of x; any other operation may read 4.
    odd = dict(m=1, n=4, a=a, lda=1, b=b + 112, ldb=1, c=a + 64, ldc=1, type_=5)
    call(s, ops.BLAS_ROUTINE, *_routine(blas, Function.GEMV, **odd, transa=1))
    fails(Status.INVALID_VALUE, s, ops.BLAS_ROUTINE, *_routine(blas, Function.GEMV, **odd, transa=7))
    call(s, ops.BLAS_ROUTINE, *_routine(blas, Function.GEMV, **{**odd, "b": b}, transa=0xFFFFFFFF))
    # herk's T (n 1, k 4, lda 4) at the last 4 elements of b: read as C, 4 elements; as N, 13
    herk_t = dict(n=1, k=4, a=b + 64, lda=4, c=a, ldc=1, type_=5)
    call(s, ops.BLAS_ROUTINE, *_routine(blas, Function.HERK, **herk_t, transa=2))
    fails(Status.INVALID_VALUE, s, ops.BLAS_ROUTINE, *_routine(blas, Function.HERK, **herk_t, transa=1))
    call(s, ops.BLAS_ROUTINE, *_routine(blas, Function.HERK, **{**herk_t, "n": 2, "k": 2, "lda": 2, "ldc": 2},
                                        transa=1))
    fails(Status.NOT_SUPPORTED, s, ops.BLAS_ROUTINE, *_routine(blas, 99, **trsm))
    fails(Status.INVALID_VALUE, s, ops.BLAS_ROUTINE, *_routine(blas, Function.TRSM, **trsm, side=2))
    (other_blas,) = call(other, ops.BLAS_CREATE)
    fails(Status.INVALID_HANDLE, s, ops.BLAS_ROUTINE, *_routine(other_blas, Function.TRSM, **trsm))


def test_getrs_batched_checks_every_matrix():
    s = session()
    (blas,) = call(s, ops.BLAS_CREATE)
    mats = [alloc(s, 128) for _ in range(2)]
    rhs = [alloc(s, 64) for _ in range(2)]
    for m in mats:
        write(s, m, (np.eye(4) * 4).T.tobytes())  # its own LU factors, no interchanges
    for r in rhs:
        write(s, r, np.arange(8.0).tobytes())
    pivots = alloc(s, 32)
    write(s, pivots, struct.pack("<8i", 1, 2, 3, 4, 1, 2, 3, 4))
    getrs = (blas, 0, 0, 1, 4, 2, pointer_array(s, mats), 4, pivots, pointer_array(s, rhs), 4, 2)
    call(s, ops.BLAS_GETRS_BATCHED, *getrs)
    assert np.allclose(np.frombuffer(read(s, rhs[1], 64), np.float64), np.arange(8.0) / 4)
    foreign = alloc(session(backend=s.backend), 128)
    fails(Status.INVALID_VALUE, s, ops.BLAS_GETRS_BATCHED, *getrs[:6], pointer_array(s, [mats[0], foreign]),
          *getrs[7:])
    fails(Status.INVALID_VALUE, s, ops.BLAS_GETRS_BATCHED, *getrs[:9], pointer_array(s, [rhs[0], foreign]),
          *getrs[10:])
    fails(Status.INVALID_VALUE, s, ops.BLAS_GETRS_BATCHED, *getrs[:5], 3, *getrs[6:])  # 2 x 3 rhs overrun 64 bytes
    fails(Status.INVALID_VALUE, s, ops.BLAS_GETRS_BATCHED, *getrs[:8], alloc(s, 16), *getrs[9:])  # pivots too short
    fails(Status.INVALID_VALUE, s, ops.BLAS_GETRS_BATCHED, *getrs[:4], 1 << 31, *getrs[5:])  # the 32-bit API
    fails(Status.NOT_SUPPORTED, s, ops.BLAS_GETRS_BATCHED, *getrs[:3], 2, *getrs[4:])
