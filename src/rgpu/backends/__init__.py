"""Backends that run a session's calls: `cuda` (the driver through cuda-python) and `fake` (emulated memory and
kernels, what CI runs), with their library parts (cuBLAS, cuDNN). They know nothing of sessions or handlers."""

from rgpu.backends.base import Backend, BackendUnavailable
from rgpu.backends.factory import make_backend

__all__ = ["Backend", "BackendUnavailable", "make_backend"]
