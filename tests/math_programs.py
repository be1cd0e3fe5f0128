"""What the tests of the math-library stand-ins share: their C check programs (tests/cuda/<name>.c) built against
the stand-ins, and one fake-backend server per test module."""

from __future__ import annotations

import pathlib
import subprocess

import pytest

from rgpu.cli import local_server

from .test_runtime import PROGRAMS


def build_check(shim_dir, directory: pathlib.Path, name: str, library: str) -> pathlib.Path:
    exe = directory / name
    subprocess.run(["gcc", "-O1", "-Wall", "-o", str(exe), str(PROGRAMS / f"{name}.c"), f"-L{shim_dir}",
                    "-l:libcudart.so.13", f"-l:{library}", "-lm", f"-Wl,-rpath-link,{shim_dir}"], check=True)
    return exe


def build_unsupported_probe(shim_dir, directory: pathlib.Path, library: str, source: str) -> pathlib.Path:
    """A small program calling a function the stand-in does not serve."""
    src, exe = directory / "unsupported.c", directory / "unsupported"
    src.write_text(source)
    subprocess.run(["gcc", "-o", str(exe), str(src), f"-L{shim_dir}", f"-l:{library}", f"-Wl,-rpath-link,{shim_dir}"],
                   check=True)
    return exe


@pytest.fixture(scope="module")
def fake_server():
    with local_server("fake", ["--log-level", "warning"]) as address:
        yield address
