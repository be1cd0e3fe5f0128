"""The cuBLAS/cuBLASLt stand-ins against the fake backend (numpy GEMMs): serialization of every GEMM variant and
of cuBLASLt descriptors, checked against a CPU reference by tests/cuda/blas_check.c; and the server's checks
on what a GEMM may touch."""

from __future__ import annotations

import json
import struct
import subprocess

import numpy as np
import pytest

from rgpu.cli import local_server
from rgpu.errors import CudaError, Status
from rgpu.protocol import ops

from .conftest import wait_for_stats_record
from .test_runtime import PROGRAMS, run


@pytest.fixture(scope="module")
def blas_check(shim_dir, tmp_path_factory):
    exe = tmp_path_factory.mktemp("blas") / "blas_check"
    subprocess.run(["gcc", "-O1", "-Wall", "-o", str(exe), str(PROGRAMS / "blas_check.c"), f"-L{shim_dir}",
                    "-l:libcudart.so.13", "-l:libcublas.so.13", "-l:libcublasLt.so.13", "-lm",
                    f"-Wl,-rpath-link,{shim_dir}"], check=True)
    return exe


def test_gemms_and_lt_matmul_match_a_cpu_reference(shim_dir, blas_check, tmp_path):
    stats = tmp_path / "stats.jsonl"
    with local_server("fake", ["--log-level", "warning", "--stats-file", str(stats)]) as address:
        proc = run(shim_dir, blas_check, env={"RGPU_SERVER": address})
        wait_for_stats_record(stats, timeout=5)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # Three heuristic questions, two of them the same, then 200 distinct ones asked twice: every repeat is answered
    # by the client from memory.
    record = json.loads(stats.read_text().splitlines()[-1])
    assert record["blocking_by_op"]["LT_HEURISTIC"] == 2 + 200
    # Every operation counts by name, the ones waited for among them; the counts add up to the session's calls.
    assert record["calls_by_op"]["LT_HEURISTIC"] == 2 + 200 and record["calls_by_op"]["LT_MATMUL"] >= 1
    assert sum(record["calls_by_op"].values()) == record["calls"]
    for check in ("cublasSgemm", "cublasDgemm", "cublasGemmEx", "cublasSgemmStridedBatched", "cublasLtMatmul"):
        assert any(line.startswith(check + " ") and " OK " in line for line in proc.stdout.splitlines()), proc.stdout
    assert "blas_check OK" in proc.stdout


def test_unsupported_blas_call_logs_once(shim_dir, tmp_path):
    src = tmp_path / "unsupported.c"
    src.write_text("""
        #include <stdio.h>
        int cublasCreate_v2(void **h);
        int cublasSrot_v2(void *h, int n, float *x, int incx, float *y, int incy, const float *c, const float *s);
        int main(void) {
            void *h;
            if (cublasCreate_v2(&h)) return 2;
            int a = cublasSrot_v2(h, 0, 0, 1, 0, 1, 0, 0), b = cublasSrot_v2(h, 0, 0, 1, 0, 1, 0, 0);
            printf("%d %d\\n", a, b);
            return 0;
        }""")
    exe = tmp_path / "unsupported"
    subprocess.run(["gcc", "-o", str(exe), str(src), f"-L{shim_dir}", "-l:libcublas.so.13",
                    f"-Wl,-rpath-link,{shim_dir}"], check=True)
    with local_server("fake", ["--log-level", "warning"]) as address:
        proc = run(shim_dir, exe, env={"RGPU_SERVER": address})
    assert proc.stdout.strip() == "15 15"  # CUBLAS_STATUS_NOT_SUPPORTED, both times
    assert proc.stderr.count("cublasSrot_v2 is not supported") == 1


def _gemm_args(handle, a, b, c, m=4, n=4, k=4, lda=4, ldb=4, ldc=4):
    alpha = struct.pack("<f", 1.0).ljust(16, b"\0")
    beta = bytes(16)
    return (handle, 0, 0, 0, m, n, k, a, 0, lda, 0, b, 0, ldb, 0, c, 0, ldc, 0, 1, 68, -1, 0, 0, alpha, beta, 0, 0)


async def test_gemm_runs_and_is_confined_to_the_sessions_memory(client):
    from rgpu.client import _Request

    handle = await client._call(_Request(ops.BLAS_CREATE))
    a, b, c = [await client.mem_alloc(64) for _ in range(3)]
    x = np.arange(16, dtype=np.float32)
    await client.memcpy_htod(a, x)
    await client.memcpy_htod(b, np.eye(4, dtype=np.float32))
    await client._defer(_Request(ops.BLAS_GEMM, _gemm_args(handle, a, b, c)))
    assert np.array_equal(np.frombuffer(await client.memcpy_dtoh(c, 64), np.float32), x)
    # A C matrix one column longer than its allocation: refused, and nothing written.
    await client._defer(_Request(ops.BLAS_GEMM, _gemm_args(handle, a, b, c, n=5)))
    with pytest.raises(CudaError) as e:
        await client.nop()
    assert e.value.deferred and e.value.code == Status.INVALID_VALUE
    # Another session's handle is not this session's.
    with pytest.raises(CudaError) as e:
        await client._call(_Request(ops.BLAS_DESTROY, (handle + 1,)))
    assert e.value.code == Status.INVALID_HANDLE
    await client._call(_Request(ops.BLAS_DESTROY, (handle,)))


async def test_lt_refuses_attributes_it_cannot_check(client):
    from rgpu.client import _Request

    def desc(tag, fixed, attrs):
        out = struct.pack("<B", tag) + fixed + struct.pack("<H", len(attrs))
        return out + b"".join(struct.pack("<II", i, len(v)) + v for i, v in attrs.items())

    layout = struct.pack("<IQQq", 0, 4, 4, 4)
    bulk = (desc(1, struct.pack("<II", 68, 0), {11: struct.pack("<Q", 0x1000)})  # EPILOGUE_AUX_POINTER
            + b"".join(desc(t, layout, {}) for t in (2, 3, 4, 5)) + desc(6, b"", {}))
    with pytest.raises(CudaError) as e:
        await client._call(_Request(ops.LT_HEURISTIC, (1,), bulk))
    assert e.value.code == Status.NOT_SUPPORTED
    with pytest.raises(CudaError) as e:
        await client._call(_Request(ops.LT_HEURISTIC, (1,), bulk[:7]))
    assert e.value.code == Status.INVALID_VALUE


async def test_lt_heuristic_asked_for_more_than_64_returns_at_most_64(client):
    # XLA asks cuBLASLt for 128 candidates; cuBLASLt may return fewer than asked, never an error for asking.
    from rgpu.client import _Request

    def desc(tag, fixed):
        return struct.pack("<B", tag) + fixed + struct.pack("<H", 0)

    layout = struct.pack("<IQQq", 0, 4, 4, 4)
    bulk = desc(1, struct.pack("<II", 68, 0)) + b"".join(desc(t, layout) for t in (2, 3, 4, 5)) + desc(6, b"")
    returned = await client._call(_Request(ops.LT_HEURISTIC, (128,), bulk))
    assert 1 <= returned <= 64
    with pytest.raises(CudaError) as e:
        await client._call(_Request(ops.LT_HEURISTIC, (0,), bulk))
    assert e.value.code == Status.INVALID_VALUE


def test_lt_scale_pointers_are_checked_scalars_and_block_scaling_is_refused():
    # XLA's autotuner sets A/B/C/D scale and amax pointers (FP8 GEMMs): each names one fp32 in the session's
    # memory, so each becomes a 4-byte range the server checks; block-scaling modes size tensors rgpu cannot.
    from rgpu.protocol import blas_wire

    def desc(tag, fixed, attrs):
        out = struct.pack("<B", tag) + fixed + struct.pack("<H", len(attrs))
        return out + b"".join(struct.pack("<II", i, len(v)) + v for i, v in attrs.items())

    def operation(attrs):
        layout = struct.pack("<IQQq", 0, 4, 4, 4)
        return blas_wire.parse_operation(desc(1, struct.pack("<II", 68, 0), attrs)
                                         + b"".join(desc(t, layout, {}) for t in (2, 3, 4, 5)))

    op = operation({17: struct.pack("<Q", 0x5000), 21: struct.pack("<Q", 0x6000), 18: struct.pack("<Q", 0)})
    ranges = op.ranges(0x1000, 0x2000, 0x3000, 0x4000)
    assert (0x5000, 4) in ranges and (0x6000, 4) in ranges and not any(p == 0 for p, _ in ranges)
    with pytest.raises(CudaError) as e:
        operation({31: struct.pack("<i", 1)})
    assert e.value.code == Status.NOT_SUPPORTED


async def test_lt_matmul_with_row_major_layouts(client):
    # XLA describes its cuBLASLt operands row-major (CUBLASLT_MATRIX_LAYOUT_ORDER = ROW): extents are checked
    # over rows of `ld` elements, and the product is the same as NumPy's.
    from rgpu.client import _Request

    def desc(tag, fixed, attrs):
        out = struct.pack("<B", tag) + fixed + struct.pack("<H", len(attrs))
        return out + b"".join(struct.pack("<II", i, len(v)) + v for i, v in attrs.items())

    m, k, n = 3, 5, 4
    row = {1: struct.pack("<i", 1)}
    layouts = [struct.pack("<IQQq", 0, r, c, c) for r, c in ((m, k), (k, n), (m, n), (m, n))]
    bulk = (desc(1, struct.pack("<II", 68, 0), {}) + b"".join(desc(t, lay, row) for t, lay in zip((2, 3, 4, 5),
                                                                                                     layouts))
            + struct.pack("<B", 7) + bytes(64))
    a = np.arange(m * k, dtype=np.float32).reshape(m, k)
    b = (np.arange(k * n, dtype=np.float32) - 7).reshape(k, n)
    pa, pb, pd = [await client.mem_alloc(x) for x in (a.nbytes, b.nbytes, 4 * m * n)]
    await client.memcpy_htod(pa, a)
    await client.memcpy_htod(pb, b)
    alpha, beta = struct.pack("<f", 1.0).ljust(16, b"\0"), bytes(16)
    await client._defer(_Request(ops.LT_MATMUL, (0, pa, pb, pd, pd, 0, 0, alpha, beta), bulk))
    got = np.frombuffer(await client.memcpy_dtoh(pd, 4 * m * n), np.float32).reshape(m, n)
    assert np.array_equal(got, a @ b)
    # A scale pointer (FP8 GEMMs) outside the session's memory: refused before the backend sees the call.
    scaled = (desc(1, struct.pack("<II", 68, 0), {17: struct.pack("<Q", 0x10)})
              + b"".join(desc(t, lay, row) for t, lay in zip((2, 3, 4, 5), layouts)) + struct.pack("<B", 7) + bytes(64))
    await client._defer(_Request(ops.LT_MATMUL, (0, pa, pb, pd, pd, 0, 0, alpha, beta), scaled))
    with pytest.raises(CudaError) as e:
        await client.nop()
    assert e.value.deferred and e.value.code == Status.INVALID_VALUE
    # The same D one row longer than its allocation: refused.
    layouts[3] = struct.pack("<IQQq", 0, m + 1, n, n)
    bad = (desc(1, struct.pack("<II", 68, 0), {}) + b"".join(desc(t, lay, row) for t, lay in zip((2, 3, 4, 5),
                                                                                                    layouts))
           + struct.pack("<B", 7) + bytes(64))
    await client._defer(_Request(ops.LT_MATMUL, (0, pa, pb, pd, pd, 0, 0, alpha, beta), bad))
    with pytest.raises(CudaError) as e:
        await client.nop()
    assert e.value.deferred and e.value.code == Status.INVALID_VALUE
