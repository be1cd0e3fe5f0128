"""Choosing a backend. Apart from base.py because it names both implementations: the base class must not
import its own subclasses."""

from __future__ import annotations

import logging

from rgpu.backends.base import Backend, BackendUnavailable
from rgpu.errors import CudaError

log = logging.getLogger("rgpu.backend")


def make_backend(kind: str) -> Backend:
    """`cuda`, `fake`, or `auto` (cuda when a driver and a GPU answer, else fake with a loud warning)."""
    if kind == "fake":
        from rgpu.backends.fake import FakeBackend

        return FakeBackend()
    if kind in ("cuda", "auto"):
        try:
            from rgpu.backends.cuda import CudaBackend

            backend = CudaBackend()
            backend.init()
            if backend.device_count() == 0:
                raise BackendUnavailable("the driver reports no CUDA device")
            return backend
        except (BackendUnavailable, ImportError, CudaError) as e:
            if kind == "cuda":
                raise BackendUnavailable(f"cuda backend unavailable: {e}") from e
            from rgpu.backends.fake import FakeBackend

            log.warning("NO GPU: %s -- falling back to the FAKE backend (emulated memory and kernels; "
                        "nothing runs on a GPU)", e)
            return FakeBackend()
    raise ValueError(f"unknown backend {kind!r} (cuda, fake, auto)")

