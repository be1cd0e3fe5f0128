"""Where the server finds NVIDIA's libraries for the library calls it runs (cuBLAS, cuBLASLt, cuDNN)."""

from __future__ import annotations

import os
import sys
import threading

from rgpu.errors import CudaError, Status


def open_library(ffi, env: str, subdir: str, soname: str):
    """`ffi.dlopen` of $env if set, else the nvidia wheel on sys.path (nvidia/<subdir>/lib, as PyTorch installs
    them), else the loader's own search for the soname. Missing: NOT_SUPPORTED, naming the variable to set."""
    path = os.environ.get(env) or next(
        (p for p in (os.path.join(e, "nvidia", subdir, "lib", soname) for e in sys.path if e) if os.path.exists(p)),
        soname)
    try:
        return ffi.dlopen(path)
    except OSError as e:
        raise CudaError(Status.NOT_SUPPORTED, f"{soname} not available on the server ({e}); set {env}") from None


class LazyLibrary:
    """`open_library` on the first call, once per process (the server may never need the library), trying each
    (subdir, soname) in turn -- a library whose soname changed between CUDA 12 and 13 names both."""

    def __init__(self, ffi, env: str, *places: tuple[str, str]):
        self._ffi, self._env, self._places = ffi, env, places
        self._lock = threading.Lock()
        self._lib = None

    def __call__(self):
        with self._lock:
            for i, (subdir, soname) in enumerate(self._places):
                if self._lib is not None:
                    break
                try:
                    self._lib = open_library(self._ffi, self._env, subdir, soname)
                except CudaError:
                    if i == len(self._places) - 1:
                        raise
            return self._lib
