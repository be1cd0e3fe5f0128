"""The cuSOLVER dense stand-in against the fake backend (numpy, LAPACK's conventions): every routine checked
against a CPU reference by tests/cuda/solver_check.c, its refusals of bad input (`solver_check hostile`), a
handle of another session, and the fake's factorizations against numpy's own LAPACK."""

from __future__ import annotations

import numpy as np
import pytest

from rgpu.backends import fake_solver
from rgpu.errors import CudaError, Status
from rgpu.protocol import ops, solver_wire

from .math_programs import build_check, build_unsupported_probe, fake_server  # noqa: F401 (a fixture)
from .test_runtime import run


@pytest.fixture(scope="module")
def solver_check(shim_dir, tmp_path_factory):
    return build_check(shim_dir, tmp_path_factory.mktemp("solver"), "solver_check", "libcusolver.so.12")


def test_factorizations_match_a_cpu_reference(shim_dir, solver_check, fake_server):
    proc = run(shim_dir, solver_check, env={"RGPU_SERVER": fake_server})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    for check in ("Dgetrf+Dgetrs", "Xgetrf+Xgetrs", "Dgetrf info of a singular", "Dpotrf+Dpotrs", "Xpotrf+Xpotrs",
                  "Dpotrf info of an indefinite", "Dgeqrf+Dorgqr", "Dormqr", "Xgeqrf", "Dsyevd A V", "Xsyevd",
                  "Dgesvd U S", "Xgesvd economy", "Dgesvdj economy", "SgesvdjBatched", "Ssyevj", "DsyevjBatched",
                  "XsyevBatched", "DpotrfBatched infos", "DpotrfBatched+DpotrsBatched"):
        assert any(line.startswith(check) and " OK " in line for line in lines), (check, proc.stdout)
    assert "solver_check OK" in proc.stdout
    assert "not supported" not in proc.stderr, proc.stderr


def test_bad_input_is_refused_and_the_session_goes_on(shim_dir, solver_check, fake_server):
    proc = run(shim_dir, solver_check, "hostile", env={"RGPU_SERVER": fake_server})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for check in ("no handle", "lda < n", "workspace one element short", "and A left untouched",
                  "workspace larger than its allocation", "foreign matrix pointer", "foreign info pointer",
                  "no info array", "foreign pointer in a pointer array", "a clean call afterwards"):
        assert any(check in line and " OK " in line for line in proc.stdout.splitlines()), (check, proc.stdout)


def test_unsupported_solver_call_logs_once(shim_dir, tmp_path, fake_server):
    exe = build_unsupported_probe(shim_dir, tmp_path, "libcusolver.so.12", """
        #include <stdio.h>
        int cusolverDnCreate(void **h);
        int cusolverDnSsytrf_bufferSize(void *h, int n, float *a, int lda, int *lwork);
        int main(void) {
            void *h;
            int lwork;
            if (cusolverDnCreate(&h)) return 2;
            int a = cusolverDnSsytrf_bufferSize(h, 4, 0, 4, &lwork);
            int b = cusolverDnSsytrf_bufferSize(h, 4, 0, 4, &lwork);
            printf("%d %d\\n", a, b);
            return 0;
        }""")
    proc = run(shim_dir, exe, env={"RGPU_SERVER": fake_server})
    assert proc.stdout.strip() == "9 9"  # CUSOLVER_STATUS_NOT_SUPPORTED, both times
    assert proc.stderr.count("cusolverDnSsytrf_bufferSize is not supported") == 1


def _request(**fields):
    values = {f.name: 0 for f in ops.SOLVER_RUN.request_fields}
    values.update({"batch": 1, "data_type": 1, "compute_type": 1, **fields})
    return tuple(ops.SOLVER_RUN.Request(**values))


async def test_a_handle_of_another_session_is_refused(srv, client):
    from rgpu.client import _Request

    handle = await client._call(_Request(ops.SOLVER_CREATE))
    a, info = await client.mem_alloc(8 * 16), await client.mem_alloc(4)
    await client.memcpy_htod(a, (4 * np.eye(4)).T.copy())
    query = _request(handle=handle, function=solver_wire.Function.XPOTRF, n=4, a=a, lda=4)
    status, device_size, host_size = await client._call(_Request(ops.SOLVER_BUFFER_SIZE, query))
    assert status == 0 and device_size > 0
    work = await client.mem_alloc(device_size)
    other = await srv.connect()
    try:
        with pytest.raises(CudaError) as e:
            await other._call(_Request(ops.SOLVER_BUFFER_SIZE, query))
        assert e.value.code == Status.INVALID_HANDLE
        run_args = _request(handle=handle, function=solver_wire.Function.XPOTRF, n=4, a=a, lda=4, work=work,
                            work_size=device_size, info=info)
        await other._defer(_Request(ops.SOLVER_RUN, run_args))
        with pytest.raises(CudaError) as e:
            await other.nop()
        assert e.value.deferred and e.value.code == Status.INVALID_HANDLE
    finally:
        await other.aclose()
    # The owner's call runs: the Cholesky factor of 4 I is 2 I.
    await client._defer(_Request(ops.SOLVER_RUN, run_args))
    factor = np.frombuffer(await client.memcpy_dtoh(a, 8 * 16), np.float64).reshape(4, 4)
    assert np.array_equal(np.diag(factor), [2.0] * 4)
    await client._call(_Request(ops.SOLVER_DESTROY, (handle,)))


async def test_malformed_requests_are_refused(client):
    from rgpu.client import _Request

    handle = await client._call(_Request(ops.SOLVER_CREATE))
    for fields, code in (({"function": 77}, Status.NOT_SUPPORTED), ({"data_type": 2}, Status.NOT_SUPPORTED),
                         ({"n": -1}, Status.INVALID_VALUE), ({"n": 8, "lda": 4}, Status.INVALID_VALUE),
                         ({"uplo": 9, "n": 1, "lda": 1}, Status.INVALID_VALUE),
                         ({"n": 1 << 41, "lda": 1 << 41}, Status.INVALID_VALUE)):
        args = _request(handle=handle, **{"function": solver_wire.Function.POTRF, **fields})
        with pytest.raises(CudaError) as e:
            await client._call(_Request(ops.SOLVER_BUFFER_SIZE, args))
        assert e.value.code == code, fields


# -- the fake's factorizations, LAPACK's conventions ----------------------------------------------------------
def test_fake_getrf_pivots_and_factors_like_lapack():
    rng = np.random.default_rng(3)
    a = rng.standard_normal((6, 6))
    lu, ipiv, info = fake_solver.getrf(a, pivot=True)
    assert info == 0 and ipiv.min() >= 1
    p = np.eye(6)
    for i, piv in enumerate(ipiv):
        p[[i, piv - 1]] = p[[piv - 1, i]]
    lower, upper = np.tril(lu, -1) + np.eye(6), np.triu(lu)
    assert np.allclose(p @ a, lower @ upper)
    assert np.all(np.abs(np.tril(lu, -1)) <= 1 + 1e-12)  # partial pivoting: multipliers at most 1
    b = rng.standard_normal((6, 2))
    assert np.allclose(a @ fake_solver.getrs(lu, ipiv, b, solver_wire.OP_N), b)
    assert np.allclose(a.T @ fake_solver.getrs(lu, ipiv, b, solver_wire.OP_T), b)


def test_fake_geqrf_is_lapacks():
    a = np.random.default_rng(4).standard_normal((7, 4))
    qr, tau = fake_solver.geqrf(a)
    h, tau_lapack = np.linalg.qr(a, mode="raw")  # numpy's LAPACK dgeqrf; h is the Fortran array transposed
    assert np.allclose(qr, h.T) and np.allclose(tau, tau_lapack)
    q = fake_solver.orgqr(qr, tau, 4)
    assert np.allclose(q @ np.triu(qr[:4]), a)


def test_workspace_shorter_than_the_library_needs_is_refused():
    args = ops.SOLVER_RUN.Request(**dict(zip(ops.SOLVER_RUN.Request._fields, _request(
        function=solver_wire.Function.POTRF, n=4, lda=4, a=0x1000, work=0x2000, work_size=3, info=0x3000))))
    solve = solver_wire.Solve.from_request(args)
    with pytest.raises(CudaError) as e:
        solve.ranges(required_work=4)
    assert e.value.code == Status.INVALID_VALUE
    ranges = dict(solve.ranges(required_work=3))
    assert ranges == {0x1000: 8 * 16, 0x2000: 8 * 3, 0x3000: 4}

