"""Opcode -> backend dispatch, and the backends (`cuda`, `fake`)."""

from rgpu.dispatch.backend import Backend, BackendUnavailable, make_backend

__all__ = ["Backend", "BackendUnavailable", "make_backend"]
