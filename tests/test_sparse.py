"""The cuSPARSE stand-in against the fake backend (numpy): SpMM, SpMV and Xcoo2csr over CSR, CSC and COO checked
against a CPU reference by tests/cuda/sparse_check.c, its refusals of bad input (`sparse_check hostile`), a
handle of another session, and the fake's own index checks (the GPU's cuSPARSE does not check indices)."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from rgpu.errors import CudaError, Status
from rgpu.protocol import ops, sparse_wire

from .math_programs import build_check, build_unsupported_probe, fake_server  # noqa: F401 (a fixture)
from .test_runtime import run


@pytest.fixture(scope="module")
def sparse_check(shim_dir, tmp_path_factory):
    return build_check(shim_dir, tmp_path_factory.mktemp("sparse"), "sparse_check", "libcusparse.so.12")


def test_spmm_spmv_and_coo2csr_match_a_cpu_reference(shim_dir, sparse_check, fake_server):
    proc = run(shim_dir, sparse_check, env={"RGPU_SERVER": fake_server})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for check in ("SpMM CSR double", "SpMM CSR A^T B", "SpMM CSR float, row-major", "SpMM CSR strided batch",
                  "SpMM COO", "SpMM CSC", "SpMV CSR double", "SpMV device-side", "Xcoo2csr", "SpGEMM CSR",
                  "SpGEMM non-zeros"):
        assert any(line.startswith(check) and " OK" in line for line in proc.stdout.splitlines()), (check, proc.stdout)
    assert "sparse_check OK" in proc.stdout
    assert "not supported" not in proc.stderr, proc.stderr


def test_bad_input_is_refused_and_the_session_goes_on(shim_dir, sparse_check, fake_server):
    proc = run(shim_dir, sparse_check, "hostile", env={"RGPU_SERVER": fake_server})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for check in ("no handle", "ld < rows", "buffer one byte short", "C left untouched", "foreign values pointer",
                  "nnz beyond the arrays", "mismatched shapes", "SpGEMM buffer too small",
                  "a clean call afterwards"):
        assert any(check in line and " OK " in line for line in proc.stdout.splitlines()), (check, proc.stdout)


def test_unsupported_sparse_call_logs_once(shim_dir, tmp_path, fake_server):
    exe = build_unsupported_probe(shim_dir, tmp_path, "libcusparse.so.12", """
        #include <stdio.h>
        int cusparseCreate(void **h);
        int cusparseSpSV_createDescr(void **d);
        int main(void) {
            void *h, *d;
            if (cusparseCreate(&h)) return 2;
            int a = cusparseSpSV_createDescr(&d), b = cusparseSpSV_createDescr(&d);
            printf("%d %d\\n", a, b);
            return 0;
        }""")
    proc = run(shim_dir, exe, env={"RGPU_SERVER": fake_server})
    assert proc.stdout.strip() == "10 10"  # CUSPARSE_STATUS_NOT_SUPPORTED, both times
    assert proc.stderr.count("cusparseSpSV_createDescr is not supported") == 1


def _spmv(handle, offsets, indices, values, x, y, rows=2, cols=2, nnz=2, **fields):
    """SPARSE_RUN/BUFFER_SIZE arguments for y = A x, A a rows x cols CSR matrix of doubles."""
    v = {f.name: 0 for f in ops.SPARSE_RUN.request_fields}
    v.update({"handle": handle, "function": sparse_wire.Function.SPMV, "compute_type": 1,
              "alpha": struct.pack("<d", 1.0).ljust(16, b"\0"), "beta": bytes(16),
              "a_format": sparse_wire.FORMAT_CSR, "a_rows": rows, "a_cols": cols, "a_nnz": nnz, "a_offsets": offsets,
              "a_indices": indices, "a_values": values, "a_offsets_type": 2, "a_indices_type": 2, "a_value_type": 1,
              "a_batch": 1, "b_rows": cols, "b_cols": 1, "b_ld": cols, "b_values": x, "b_type": 1, "b_order": 1,
              "b_batch": 1, "c_rows": rows, "c_cols": 1, "c_ld": rows, "c_values": y, "c_type": 1, "c_order": 1,
              "c_batch": 1, **fields})
    return tuple(ops.SPARSE_RUN.Request(**v))


async def _operands(client, offsets, indices):
    ptrs = [await client.mem_alloc(n) for n in (12, 8, 16, 16, 16, 4096)]
    for ptr, data in zip(ptrs, (np.array(offsets, np.int32), np.array(indices, np.int32), np.array([2.0, 3.0]),
                                np.array([1.0, 10.0]))):
        await client.memcpy_htod(ptr, data)
    return ptrs


async def test_a_handle_of_another_session_is_refused(srv, client):
    from rgpu.client import _Request

    handle = await client._call(_Request(ops.SPARSE_CREATE))
    off, ind, val, x, y, buf = await _operands(client, [0, 1, 2], [1, 0])
    args = _spmv(handle, off, ind, val, x, y, buffer=buf)
    other = await srv.connect()
    try:
        with pytest.raises(CudaError) as e:
            await other._call(_Request(ops.SPARSE_BUFFER_SIZE, args))
        assert e.value.code == Status.INVALID_HANDLE
    finally:
        await other.aclose()
    status, size = await client._call(_Request(ops.SPARSE_BUFFER_SIZE, args))
    assert status == 0 and size <= 4096
    await client._defer(_Request(ops.SPARSE_RUN, args))
    # A = [[0, 2], [3, 0]], x = [1, 10]
    assert np.array_equal(np.frombuffer(await client.memcpy_dtoh(y, 16), np.float64), [20.0, 3.0])
    await client._call(_Request(ops.SPARSE_DESTROY, (handle,)))


@pytest.mark.parametrize("offsets, indices", [([0, 1, 2], [1, 2]),    # a column index past the last column
                                              ([0, 2, 1], [1, 0]),    # offsets not non-decreasing
                                              ([1, 1, 2], [1, 0])])   # offsets not starting at the base
async def test_fake_refuses_indices_the_gpu_would_follow_out_of_bounds(client, offsets, indices):
    from rgpu.client import _Request

    handle = await client._call(_Request(ops.SPARSE_CREATE))
    off, ind, val, x, y, buf = await _operands(client, offsets, indices)
    await client._defer(_Request(ops.SPARSE_RUN, _spmv(handle, off, ind, val, x, y, buffer=buf)))
    with pytest.raises(CudaError) as e:
        await client.nop()
    assert e.value.deferred and e.value.code == Status.INVALID_VALUE


async def test_malformed_requests_are_refused(client):
    from rgpu.client import _Request

    handle = await client._call(_Request(ops.SPARSE_CREATE))
    off, ind, val, x, y, buf = await _operands(client, [0, 1, 2], [1, 0])
    for fields, code in (({"function": 9}, Status.NOT_SUPPORTED), ({"a_format": 6}, Status.NOT_SUPPORTED),
                         ({"a_nnz": -1}, Status.INVALID_VALUE), ({"b_rows": 3, "b_ld": 3}, Status.INVALID_VALUE),
                         ({"c_ld": 1}, Status.INVALID_VALUE), ({"a_offsets_type": 7}, Status.INVALID_VALUE),
                         ({"op_a": 5}, Status.INVALID_VALUE), ({"a_nnz": 1 << 41}, Status.INVALID_VALUE)):
        with pytest.raises(CudaError) as e:
            await client._call(_Request(ops.SPARSE_BUFFER_SIZE, _spmv(handle, off, ind, val, x, y, **fields)))
        assert e.value.code == code, fields


async def test_an_spgemm_descriptor_is_its_sessions_own(srv, client):
    from rgpu.client import _Request

    descriptor = await client._call(_Request(ops.SPARSE_SPGEMM_CREATE))
    other = await srv.connect()
    try:
        with pytest.raises(CudaError) as e:
            await other._call(_Request(ops.SPARSE_SPGEMM_DESTROY, (descriptor,)))
        assert e.value.code == Status.INVALID_HANDLE
    finally:
        await other.aclose()
    await client._call(_Request(ops.SPARSE_SPGEMM_DESTROY, (descriptor,)))
    with pytest.raises(CudaError) as e:  # destroyed: no longer a descriptor of this session either
        await client._call(_Request(ops.SPARSE_SPGEMM_DESTROY, (descriptor,)))
    assert e.value.code == Status.INVALID_HANDLE


def test_the_cuda_backend_asks_for_a_buffer_size_once_per_description(monkeypatch):
    """SPARSE_RUN needs the buffer size cuSPARSE asks for; the cuda backend asks its library once per operation
    description and handle (addresses apart from their alignment do not count), and forgets with the handle."""
    from rgpu.backends import cuda_sparse

    asked = []

    class Library:
        def __getattr__(self, name):
            def call(*args):
                if name.endswith("_bufferSize"):
                    asked.append(name)
                    args[-1][0] = 4096 + len(asked)
                elif name.startswith("cusparseCreate"):
                    args[0][0] = cuda_sparse._ffi.cast("void *", 0x1000 + len(asked))
                return 0
            return call

    monkeypatch.setattr(cuda_sparse, "library", Library)
    handle, other = (cuda_sparse._ffi.cast("void *", h) for h in (0xA000, 0xB000))

    def op(**fields):
        return sparse_wire.SparseOp.from_request(ops.SPARSE_RUN.decode(ops.SPARSE_RUN.pack_request(
            *_spmv(1, 0x10000, 0x20000, 0x30000, 0x40000, 0x50000, **fields))))

    assert cuda_sparse.buffer_size(handle, op()) == (0, 4097)
    # other addresses of the same alignment, another buffer: the same description
    assert cuda_sparse.buffer_size(handle, op(a_values=0x90000, b_values=0x70000, buffer=0x1234)) == (0, 4097)
    assert len(asked) == 1
    for changed in ({"alg": 2}, {"a_nnz": 1}, {"b_values": 0x40008}, {"compute_type": 0}, {"pointer_mode": 1},
                    {"alpha": struct.pack("<d", 2.0).ljust(16, b"\0")}):
        cuda_sparse.buffer_size(handle, op(**changed))
    assert len(asked) == 7
    cuda_sparse.buffer_size(other, op())  # another handle asks for itself
    assert len(asked) == 8
    cuda_sparse.destroy(handle)
    assert cuda_sparse.buffer_size(handle, op()) == (0, 4096 + 9)  # forgotten with the handle
    cuda_sparse.destroy(handle)
    cuda_sparse.destroy(other)
