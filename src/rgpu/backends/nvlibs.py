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
    """`open_library(...)` on the first call, the same library object after that (from any thread)."""

    def __init__(self, ffi, env: str, subdir: str, soname: str):
        self._args, self._lib, self._lock = (ffi, env, subdir, soname), None, threading.Lock()

    def __call__(self):
        with self._lock:
            if self._lib is None:
                self._lib = open_library(*self._args)
            return self._lib
