"""rgpu: run CUDA programs on a remote NVIDIA GPU."""

from rgpu.errors import AuthenticationError, CudaError, ProtocolError, RgpuError, Status
from rgpu.version import __version__
__all__ = ["__version__", "AsyncClient", "Client", "Function", "connect", "connect_async", "AuthenticationError", "CudaError",
           "ProtocolError", "RgpuError", "Status"]

_CLIENT_NAMES = {"AsyncClient", "Client", "Function", "connect", "connect_async"}


def __getattr__(name: str):
    # The client (and trio with it) loads on first use: a session's worker process imports rgpu but never the
    # client, and every worker start pays for what it imports.
    if name in _CLIENT_NAMES:
        from rgpu import client

        return getattr(client, name)
    raise AttributeError(f"module 'rgpu' has no attribute {name!r}")
