"""CUDA programs that mix the driver API and libraries with the runtime (tests/cuda/*.cu built with
`nvcc -cudart shared` plus the libraries they name), unmodified, through rgpu on the fake backend. The GPU box
runs the same programs natively and through rgpu (tests/cuda/run_on_gpu.sh) and compares their output."""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess

import pytest

from rgpu import shims
from rgpu.cli import local_server

PROGRAMS = pathlib.Path(__file__).parents[1] / "tests" / "cuda"
# program -> the libraries it links besides the runtime (rgpu's stand-ins here)
LINKS = {
    "vmm": ["-lcuda"],
    "mixed_contexts": ["-lcuda"],
    "occupancy": ["-lcuda"],
    "blas_batched": ["-l:libcublas.so.13"],
    "pools": [],
    "library": ["-lcuda"],
    "tensor_map": ["-lcuda"],
    "pinned_uva": ["-lcuda"],
    "graph_generic": ["-lcuda"],
    "graph_host": ["-lcuda"],
    "graph_memory": [],
    "cooperative": ["-lcuda"],
    "stream_info": ["-lcuda"],
    "memory_3d": [],
    "clusters": ["-lcuda"],
    "stream_attributes": ["-lcuda"],
    "stream_memops": ["-lcuda"],
    "jit_link": ["-lcuda"],
    "textures": ["-lcuda"],
    "ipc": [],
    "memcpy_batch": [],
    "legacy_launch": ["-lcuda"],
    "managed": [],
    "managed_vars": [],
    "managed_reset": [],
    "graph_control": [],
}


BACKEND = os.environ.get("RGPU_TEST_BACKEND", "fake")  # tests/gpu/run_on_gpu.sh runs this file with "cuda" too


@pytest.fixture(scope="module")
def server():
    with local_server(BACKEND, ["--log-level", "warning"]) as address:
        yield address


def build_program(shim_dir, tmp_path, name: str, links=()) -> pathlib.Path:
    """tests/cuda/<name>.cu built as a CUDA user would (nvcc -cudart shared), against rgpu's stand-ins."""
    if shutil.which("nvcc") is None:
        pytest.skip("needs nvcc to build the CUDA test programs")
    exe = tmp_path / name
    subprocess.run(["nvcc", "-cudart", "shared", "-o", str(exe), str(PROGRAMS / f"{name}.cu"), f"-L{shim_dir}",
                    *links, "-Xlinker", f"-rpath-link={shim_dir}"], check=True, capture_output=True)
    return exe


@pytest.mark.parametrize("name", sorted(LINKS))
def test_program_runs_unchanged_through_rgpu(shim_dir, server, tmp_path, name):
    exe = build_program(shim_dir, tmp_path, name, LINKS[name])
    env = shims.environment(shim_dir)
    env["RGPU_SERVER"] = server
    proc = subprocess.run([str(exe)], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"{name} OK" in proc.stdout
    assert "not supported" not in proc.stderr, proc.stderr
