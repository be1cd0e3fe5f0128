"""rgpu.dispatch.cuda's helpers for the CudaBackend mixins (cuda_vmm, cuda_pools, cuda_occupancy). cuda.py
imports the mixins to build CudaBackend, so they reach its helpers through here, at call time: importing a
mixin module first, on its own, then works too."""

from __future__ import annotations


def check(result):
    from rgpu.dispatch.cuda import _check

    return _check(result)


def stream(s):
    from rgpu.dispatch.cuda import _stream

    return _stream(s)
