"""cuBLAS's copy helpers and batched LU family on the fake backend: tests/cuda/blas_more_check.c against a CPU
reference (and its bad-input half); BLAS_LU_BATCHED / BLAS_TRSM_BATCHED confined to the session's memory."""

from __future__ import annotations

import struct
import subprocess

import numpy as np
import pytest

from rgpu.cli import local_server
from rgpu.errors import Status
from rgpu.protocol import ops

from .test_blas_batched import alloc, pointer_array, write
from .test_runtime import PROGRAMS, run
from .test_vmm import call, fails, read, session


@pytest.fixture(scope="module")
def blas_more_check(shim_dir, tmp_path_factory):
    exe = tmp_path_factory.mktemp("blas_more") / "blas_more_check"
    subprocess.run(["gcc", "-O1", "-Wall", "-o", str(exe), str(PROGRAMS / "blas_more_check.c"), f"-L{shim_dir}",
                    "-l:libcudart.so.13", "-l:libcublas.so.13", "-lm", f"-Wl,-rpath-link,{shim_dir}"], check=True)
    return exe


@pytest.mark.parametrize("mode", ["", "bad"])
def test_copies_and_batched_lu_match_a_cpu_reference(shim_dir, blas_more_check, mode):
    with local_server("fake", ["--log-level", "warning"]) as address:
        proc = run(shim_dir, blas_more_check, *([mode] if mode else []), env={"RGPU_SERVER": address})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "MISMATCH" not in proc.stdout and f"blas_more_check {mode + ' ' if mode else ''}OK" in proc.stdout
    assert "not supported" not in proc.stderr, proc.stderr


def _lu(blas, which, a, c, info, batch, n=4, pivots=0, type_=1, stream=0):
    return (blas, stream, which, type_, n, a, n, pivots, c, n, info, batch)


def test_lu_and_trsm_touch_only_the_sessions_memory():
    s = session()
    (blas,) = call(s, ops.BLAS_CREATE)
    mats = [alloc(s, 128) for _ in range(2)]
    spd = (np.eye(4) * 4 + 1).T.tobytes()  # column-major, symmetric
    for m in mats:
        write(s, m, spd)
    info, pivots, arr = alloc(s, 8), alloc(s, 32), pointer_array(s, mats)
    call(s, ops.BLAS_LU_BATCHED, *_lu(blas, 0, arr, 0, info, 2, pivots=pivots))
    assert struct.unpack("<2i", read(s, info, 8)) == (0, 0)
    out = [alloc(s, 128) for _ in range(2)]
    call(s, ops.BLAS_LU_BATCHED, *_lu(blas, 1, arr, pointer_array(s, out), info, 2, pivots=pivots))
    inverse = np.frombuffer(read(s, out[1], 128), np.float64).reshape(4, 4).T
    assert np.allclose(inverse @ (np.eye(4) * 4 + 1), np.eye(4))

    other = session(backend=s.backend)
    foreign = alloc(other, 128)
    fails(Status.INVALID_VALUE, s, ops.BLAS_LU_BATCHED, *_lu(blas, 0, pointer_array(s, [mats[0], foreign]), 0,
                                                             info, 2))
    fails(Status.INVALID_VALUE, s, ops.BLAS_LU_BATCHED, *_lu(blas, 0, arr, 0, info, 2, pivots=info))  # 32 > 8 bytes
    fails(Status.INVALID_VALUE, s, ops.BLAS_LU_BATCHED, *_lu(blas, 0, arr, 0, info, 3))  # the array overruns
    fails(Status.INVALID_VALUE, s, ops.BLAS_LU_BATCHED, *_lu(blas, 0, arr, 0, info, 2, n=5))  # 5x5 overruns
    fails(Status.INVALID_VALUE, s, ops.BLAS_LU_BATCHED, *_lu(blas, 1, arr, 0, info, 2))  # getri with no output
    fails(Status.INVALID_VALUE, s, ops.BLAS_LU_BATCHED, *_lu(blas, 2, arr, arr, info, 1, n=33))
    fails(Status.NOT_SUPPORTED, s, ops.BLAS_LU_BATCHED, *_lu(blas, 0, arr, 0, info, 2, type_=2))
    (other_blas,) = call(other, ops.BLAS_CREATE)
    fails(Status.INVALID_HANDLE, s, ops.BLAS_LU_BATCHED, *_lu(other_blas, 0, arr, 0, info, 2))

    alpha = struct.pack("<d", 1.0).ljust(16, b"\0")
    trsm = (blas, 0, 0, 0, 0, 0, 1, 4, 4, 0, alpha, arr, 4, pointer_array(s, out), 4, 2)
    call(s, ops.BLAS_TRSM_BATCHED, *trsm)
    fails(Status.INVALID_VALUE, s, ops.BLAS_TRSM_BATCHED, *trsm[:11], pointer_array(s, [mats[0], foreign]),
          *trsm[12:])
    device_alpha = struct.pack("<Q", foreign).ljust(16, b"\0")
    fails(Status.INVALID_VALUE, s, ops.BLAS_TRSM_BATCHED, *trsm[:9], 1, device_alpha, *trsm[11:])


def _l1(blas, func, n, x, incx, y=0, incy=0, alpha=0.0, mode=0, result=0, type_=1):
    raw = struct.pack("<Q", int(alpha)) if mode else struct.pack("<d", alpha)
    return (blas, 0, func, type_, n, x, incx, y, incy, mode, raw.ljust(16, b"\0"), result)


def test_level1_touches_only_the_sessions_memory():
    s = session()
    (blas,) = call(s, ops.BLAS_CREATE)
    x, y, r = alloc(s, 80), alloc(s, 80), alloc(s, 8)
    write(s, x, np.arange(10, dtype=np.float64).tobytes())
    write(s, y, np.ones(10, np.float64).tobytes())
    (raw,) = call(s, ops.BLAS_LEVEL1_RESULT, *_l1(blas, 4, 5, x, 2, y, -2))  # dot of x[0,2,..8] and y
    assert struct.unpack_from("<d", raw)[0] == 20.0
    call(s, ops.BLAS_LEVEL1, *_l1(blas, 0, 10, x, 1, y, 1, alpha=2.0))  # axpy
    assert np.array_equal(np.frombuffer(read(s, y, 80), np.float64), 1 + 2 * np.arange(10))
    call(s, ops.BLAS_LEVEL1, *_l1(blas, 4, 10, x, 1, y, 1, mode=1, result=r))  # dot, result on the device
    assert struct.unpack("<d", read(s, r, 8))[0] == float(np.arange(10) @ (1 + 2 * np.arange(10)))

    foreign = alloc(session(backend=s.backend), 80)
    fails(Status.INVALID_VALUE, s, ops.BLAS_LEVEL1, *_l1(blas, 0, 6, x, 1, y, -2, alpha=1.0))  # y spans 11
    fails(Status.INVALID_VALUE, s, ops.BLAS_LEVEL1, *_l1(blas, 2, 10, x, 1, foreign, 1))
    fails(Status.INVALID_VALUE, s, ops.BLAS_LEVEL1, *_l1(blas, 4, 10, x, 1, y, 1, mode=1, result=foreign))
    fails(Status.INVALID_VALUE, s, ops.BLAS_LEVEL1, *_l1(blas, 1, 10, x, 1, alpha=foreign, mode=1))  # scal
    fails(Status.INVALID_VALUE, s, ops.BLAS_LEVEL1, *_l1(blas, 5, 10, x, 1))  # a host-mode reduction, deferred
    fails(Status.INVALID_VALUE, s, ops.BLAS_LEVEL1_RESULT, *_l1(blas, 0, 10, x, 1, y, 1))  # no result to return
    fails(Status.INVALID_VALUE, s, ops.BLAS_LEVEL1, *_l1(blas, 11, 10, x, 1))
