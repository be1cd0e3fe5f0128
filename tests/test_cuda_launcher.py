"""The cuda backend's per-launch path without a GPU: the driver is replaced by a recorder, so what reaches
cuLaunchKernel (handles, shape, the packed parameter buffer behind CU_LAUNCH_PARAM_BUFFER_POINTER) is checked
exactly. The same path runs for real in tests/gpu and the benchmarks."""

from __future__ import annotations

import pytest

cuda = pytest.importorskip("rgpu.backends.cuda", exc_type=ImportError)

from rgpu.errors import CudaError, Status  # noqa: E402


class RecordingDriver:
    def __init__(self, fail_with: int = 0):
        self.calls = []
        self.fail_with = fail_with

    def cuCtxSetCurrent(self, ctx):
        self.calls.append(("ctx", ctx))
        return 0

    def cuLaunchKernel(self, func, gx, gy, gz, bx, by, bz, shmem, stream, params, extra):
        ffi = cuda._ffi
        tags = [int(ffi.cast("uintptr_t", extra[i])) for i in (0, 2, 4)]
        size = ffi.cast("size_t *", extra[3])[0]
        data = bytes(ffi.buffer(ffi.cast("char *", extra[1]), size))
        self.calls.append(("launch", func, (gx, gy, gz), (bx, by, bz), shmem, stream, params == ffi.NULL, tags, data))
        return self.fail_with


@pytest.fixture
def driver(monkeypatch):
    recorder = RecordingDriver()
    monkeypatch.setattr(cuda, "_driver", recorder)
    return recorder


def test_launcher_hands_the_packed_buffer_over_as_is(driver):
    launch = cuda.CudaBackend().launcher(0x1000, 0x2000, 0x3000)
    launch(2, 3, 4, 32, 2, 1, 128, b"abcd")
    launch(1, 1, 1, 64, 1, 1, 0, memoryview(b"0123456789")[1:9])  # grows its buffer
    launch(1, 1, 1, 64, 1, 1, 0, b"xy")  # shrinks the size, keeps the buffer
    launch(1, 1, 1, 64, 1, 1, 0, b"")
    assert [c for c in driver.calls if c[0] == "ctx"] == [("ctx", 0x1000)] * 4
    launches = [c for c in driver.calls if c[0] == "launch"]
    assert launches[0] == ("launch", 0x2000, (2, 3, 4), (32, 2, 1), 128, 0x3000, True, [1, 2, 0], b"abcd")
    assert [c[-1] for c in launches] == [b"abcd", b"12345678", b"xy", b""]


def test_null_stream_and_driver_errors(driver, monkeypatch):
    driver.fail_with = 400  # CUDA_ERROR_INVALID_HANDLE
    # Naming the error needs the driver library; CI hosts have none.
    monkeypatch.setattr(cuda.cu, "cuGetErrorName", lambda err: (0, b"CUDA_ERROR_INVALID_HANDLE"))
    monkeypatch.setattr(cuda.cu, "cuGetErrorString", lambda err: (0, b"invalid resource handle"))
    launch = cuda.CudaBackend().launcher(1, 2, None)
    with pytest.raises(CudaError) as e:
        launch(1, 1, 1, 1, 1, 1, 0, b"\0" * 8)
    assert e.value.code == Status.INVALID_HANDLE and "CUDA_ERROR_INVALID_HANDLE" in e.value.message
    assert driver.calls[-1][5] == 0  # the NULL stream


def test_oversized_parameter_buffer_is_refused_before_the_driver(driver):
    launch = cuda.CudaBackend().launcher(1, 2, None)
    with pytest.raises(CudaError) as e:
        launch(1, 1, 1, 1, 1, 1, 0, bytes(40_000))
    assert e.value.code == Status.INVALID_VALUE and not driver.calls
