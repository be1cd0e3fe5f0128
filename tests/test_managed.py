"""Managed memory from several threads of one program (native/src/managed.c): a chunk faulted back while another
thread writes into it, a reader without a context, concurrent readers. tests/cuda/managed.cu covers the
single-threaded uses natively and through rgpu (test_cuda_programs, and the GPU box's run_on_gpu.sh)."""

from __future__ import annotations

import os
import pathlib
import subprocess

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
