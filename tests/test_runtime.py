"""The runtime shim (libcudart.so.13 / .so.12): unmodified programs built with `nvcc -cudart shared` run against
a local rgpu-server on the fake backend, whose kernels are chosen by mangled name. Each program runs in its own
process (one connection per process, configured from the environment)."""

from __future__ import annotations

import concurrent.futures
import os
import pathlib
import shutil
import subprocess

import pytest

from rgpu import shims
from rgpu.cli import local_server

REPO = pathlib.Path(__file__).parents[1]
PROGRAMS = REPO / "tests" / "cuda"
PTX = REPO / "src" / "rgpu" / "kernels" / "demo.ptx"
NVCC_PROGRAMS = ("vector_add", "streams_events", "mixed_params", "memory_2d", "device_info", "big_params",
                 "launch_attributes", "graphs", "graph_api")


@pytest.fixture(scope="module")
def cuda_programs(tmp_path_factory):
    if shutil.which("nvcc") is None:
        pytest.skip("needs nvcc to build the CUDA test programs")
    out = tmp_path_factory.mktemp("cuda_programs")

    def build(name):
        subprocess.run(["nvcc", "-cudart", "shared", "-o", str(out / name), str(PROGRAMS / f"{name}.cu")],
                       check=True, capture_output=True)

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        list(pool.map(build, NVCC_PROGRAMS))
    return out


BACKEND = os.environ.get("RGPU_TEST_BACKEND", "fake")  # the GPU box runs this file with "cuda" too


@pytest.fixture(scope="module")
def server():
    with local_server(BACKEND, ["--log-level", "warning"]) as address:
        yield address


def run(shim_dir, exe, *args, env=None, timeout=120):
    e = shims.environment(shim_dir)
    e.update(env or {})
    return subprocess.run([str(exe), *map(str, args)], env=e, capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("name", NVCC_PROGRAMS)
def test_nvcc_program_runs_unchanged_through_rgpu(shim_dir, cuda_programs, server, name):
    proc = run(shim_dir, cuda_programs / name, env={"RGPU_SERVER": server})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"{name} OK" in proc.stdout
    assert "not supported" not in proc.stderr, proc.stderr  # every call these programs make is implemented


def test_programs_load_rgpus_runtime_and_driver(shim_dir, cuda_programs):
    env = shims.environment(shim_dir)
    assert env["LD_PRELOAD"].split()[:2] == [f"{shim_dir}/libcuda.so.1", f"{shim_dir}/libcudart.so.13"]
    assert f"{shim_dir}/libcublas.so.13" in env["LD_PRELOAD"].split()
    out = subprocess.run(["ldd", str(cuda_programs / "vector_add")], env=env, capture_output=True, text=True).stdout
    assert f"{shim_dir}/libcudart.so.13" in out and "libcudart.so.13 => /" not in out.replace(str(shim_dir), "")
    env.pop("LD_PRELOAD")  # found on LD_LIBRARY_PATH alone too
    out = subprocess.run(["ldd", str(cuda_programs / "vector_add")], env=env, capture_output=True, text=True).stdout
    assert f"libcudart.so.13 => {shim_dir}/libcudart.so.13" in out


def test_per_thread_default_stream_build(shim_dir, server, tmp_path):
    """nvcc --default-stream per-thread: the _ptsz/_ptds entry points. (The pre-13 launch stub, which calls
    cudaLaunchKernel with the host function, is what runtime_abi.c does.)"""
    if shutil.which("nvcc") is None:
        pytest.skip("needs nvcc")
    exe = tmp_path / "ptsz"
    subprocess.run(["nvcc", "-cudart", "shared", "--default-stream", "per-thread", "-o", str(exe),
                    str(PROGRAMS / "streams_events.cu")], check=True, capture_output=True)
    proc = run(shim_dir, exe, env={"RGPU_SERVER": server})
    assert proc.returncode == 0 and "streams_events OK" in proc.stdout, proc.stderr


@pytest.mark.parametrize("major", [12, 13])
def test_registration_abi_by_hand_against_both_sonames(shim_dir, server, tmp_path, major):
    exe = tmp_path / f"runtime_abi{major}"
    subprocess.run(["gcc", "-O1", "-Wall", "-Wno-deprecated-declarations", f"-I{shims.cuda_include(major)}",
                    f"-I{shims.crt_include()}", "-o", str(exe), str(PROGRAMS / "runtime_abi.c"), f"-L{shim_dir}",
                    f"-l:libcudart.so.{major}", f"-Wl,-rpath-link,{shim_dir}"], check=True)
    proc = run(shim_dir, exe, PTX, env={"RGPU_SERVER": server})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"runtime_abi OK runtime={major}" in proc.stdout
    assert BACKEND != "fake" or "rgpu fake GPU 0" in proc.stdout
    assert proc.stderr.count("cudaFreeMipmappedArray is not supported") == 1  # logged once, failed twice


def test_runtime_without_a_server_reports_no_device(shim_dir, cuda_programs):
    proc = run(shim_dir, cuda_programs / "device_info", env={"RGPU_SERVER": "127.0.0.1:9"}, timeout=30)
    assert proc.returncode == 1
    assert "cudaErrorNoDevice" in proc.stderr


def test_symbol_versions_match_cudas_runtime(shim_dir):
    for major in (12, 13):
        out = subprocess.run(["objdump", "-T", str(shim_dir / f"libcudart.so.{major}")], capture_output=True,
                             text=True).stdout
        assert f"libcudart.so.{major} cudaMalloc\n" in out
        assert f"libcudart.so.{major} __cudaRegisterFunction\n" in out
        assert " rt_" not in out  # internals stay private


def test_layouts_from_the_image_when_the_server_cannot_report_them(shim_dir, cuda_programs, tmp_path, monkeypatch):
    """A server whose driver predates cuFuncGetParamInfo (the fake emulates one): the runtime reads each
    kernel's EIATTR_KPARAM_INFO from the cubin in its fatbin -- also when nvcc compressed it -- and the fake
    checks the packed buffer against its own PTX-derived layout."""
    compressed = tmp_path / "mixed_params_compressed"
    subprocess.run(["nvcc", "-cudart", "shared", "-Xfatbin", "--compress-all", "-o", str(compressed),
                    str(PROGRAMS / "mixed_params.cu")], check=True, capture_output=True)
    monkeypatch.setenv("RGPU_FAKE_NO_PARAM_INFO", "1")
    with local_server("fake", ["--log-level", "warning"]) as address:
        for exe, name in ((cuda_programs / "mixed_params", "mixed_params"), (compressed, "mixed_params"),
                          (cuda_programs / "vector_add", "vector_add"), (cuda_programs / "big_params", "big_params")):
            proc = run(shim_dir, exe, env={"RGPU_SERVER": address, "RGPU_LOG": "info"})
            assert proc.returncode == 0, proc.stdout + proc.stderr
            assert f"{name} OK" in proc.stdout
            assert "parameters laid out from its image" in proc.stderr
        # The driver API alone cannot pack kernelParams without a layout: a clear refusal, not garbage.
        vec = run(shim_dir, shim_dir / "vecadd", PTX, 1000, env={"RGPU_SERVER": address})
        assert vec.returncode != 0 and "CU_LAUNCH_PARAM_BUFFER_POINTER" in vec.stderr
