"""Managed memory from several threads of one program (native/src/managed.c): a chunk faulted back while another
thread writes into it, a reader without a context, concurrent readers. tests/cuda/managed.cu covers the
single-threaded uses natively and through rgpu (test_cuda_programs, and the GPU box's run_on_gpu.sh)."""

from __future__ import annotations

import os
import pathlib
import subprocess

import pytest

from rgpu import shims
from rgpu.cli import local_server

PROGRAM = pathlib.Path(__file__).parent / "cuda" / "managed_threads.c"
BACKEND = os.environ.get("RGPU_TEST_BACKEND", "fake")

def test_managed_memory_from_several_threads(shim_dir, tmp_path):
    exe = tmp_path / "managed_threads"
    subprocess.run(["gcc", "-O1", "-Wall", f"-I{shims.cuda_include(13)}", "-o", str(exe), str(PROGRAM),
                    f"-L{shim_dir}", "-l:libcuda.so.1", "-lpthread", f"-Wl,-rpath-link,{shim_dir}"], check=True)
    with local_server(BACKEND, ["--log-level", "warning"]) as address:
        env = shims.environment(shim_dir)
        env["RGPU_SERVER"] = address
        proc = subprocess.run([str(exe)], env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "writes lost while a chunk came back: 0 of 2000" in proc.stdout
    assert "managed_threads OK" in proc.stdout
    assert "error" not in proc.stderr, proc.stderr


# Two images (two .cu files), each with __managed__ variables: the fake backend packs module globals, so their
# variables share a host page, and one region holds both; the first file's array may also run into the second's page.
IMAGE_A = """
__managed__ float a[%d] = {1, 2, 3, 4};
__global__ void managed_scale(int n, float *v, float by) { int i = threadIdx.x; if (i < n) v[i] *= by; }
float *a_values() { return a; }
"""
IMAGE_B = r"""
#include <cstdio>
__managed__ float b[4] = {10, 20, 30, 40};
__global__ void managed_scale(int n, float *v, float by);
float *a_values();
int main() {
    float *pa = a_values();
    std::printf("first: a[0] %g, b[0] %g, a[0] %g\n", pa[0], b[0], pa[0]);
    pa[1] = 5;
    b[2] = 7;
    int n = 4;
    float by = 2;
    void *args[] = {&n, &pa, &by};
    cudaError_t e = cudaLaunchKernel((const void *)managed_scale, dim3(1), dim3(4), args, 0, 0);
    cudaError_t s = cudaDeviceSynchronize();
    std::printf("launch %d sync %d: a %g %g %g %g, b %g %g %g\n", e, s, pa[0], pa[1], pa[2], pa[3], b[0], b[1], b[2]);
    a_values()[0] = 9;
    std::printf("reset %d\n", cudaDeviceReset());  // (the images load again, their variables' values kept)
    float *again = a_values();
    void *args2[] = {&n, &again, &by};
    e = cudaLaunchKernel((const void *)managed_scale, dim3(1), dim3(4), args2, 0, 0);
    s = cudaDeviceSynchronize();
    std::printf("after the reset: launch %d sync %d: a %g %g, b %g\n", e, s, again[0], again[1], b[2]);
    return 0;
}
"""


def test_managed_variables_of_two_images_sharing_pages(shim_dir, tmp_path):
    if subprocess.run(["which", "nvcc"], capture_output=True).returncode:
        pytest.skip("needs nvcc")
    (tmp_path / "b.cu").write_text(IMAGE_B)
    with local_server(BACKEND, ["--log-level", "warning"]) as address:
        env = shims.environment(shim_dir)
        env["RGPU_SERVER"] = address
        for count in (4, 1100):  # (1100 floats: a's own pages reach b's)
            (tmp_path / "a.cu").write_text(IMAGE_A % count)
            exe = tmp_path / f"two_images_{count}"
            subprocess.run(["nvcc", "-cudart", "shared", "-o", str(exe), str(tmp_path / "a.cu"), str(tmp_path / "b.cu"),
                            f"-L{shim_dir}", "-Xlinker", f"-rpath-link={shim_dir}"], check=True, capture_output=True)
            proc = subprocess.run([str(exe)], env=env, capture_output=True, text=True, timeout=120)
            assert proc.returncode == 0, proc.stdout + proc.stderr
            assert "first: a[0] 1, b[0] 10, a[0] 1\n" in proc.stdout
            assert "launch 0 sync 0: a 2 10 6 8, b 10 20 7\n" in proc.stdout, proc.stdout + proc.stderr
            # (the variables keep their values across the reset, as natively: a[0] was 9, b[2] 7)
            assert "reset 0\nafter the reset: launch 0 sync 0: a 18 20, b 7\n" in proc.stdout, proc.stdout
            assert "error" not in proc.stderr, proc.stderr
