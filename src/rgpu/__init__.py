"""rgpu: run CUDA programs on a remote NVIDIA GPU."""

from rgpu.client import AsyncClient, Client, Function, connect, connect_async
from rgpu.errors import AuthenticationError, CudaError, ProtocolError, RgpuError, Status

__version__ = "0.2.0"
__all__ = ["AsyncClient", "Client", "Function", "connect", "connect_async", "AuthenticationError", "CudaError",
           "ProtocolError", "RgpuError", "Status"]
