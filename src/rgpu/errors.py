"""Status codes carried in reply frames, and the exceptions that carry them.

CUDA's own CUresult values travel unchanged so a shim can hand them straight to the program. Failures that
belong to rgpu itself (protocol, version, authentication, limits) use codes at and above 0x10000, a range
CUDA does not use; a shim maps those to CUDA_ERROR_NOT_INITIALIZED / _UNKNOWN for the program and logs the
real cause.
"""

from __future__ import annotations

import enum


class Status(enum.IntEnum):
    SUCCESS = 0
    INVALID_VALUE = 1
    OUT_OF_MEMORY = 2
    NOT_INITIALIZED = 3
    DEINITIALIZED = 4
    NO_DEVICE = 100
    INVALID_DEVICE = 101
    INVALID_IMAGE = 200
    INVALID_CONTEXT = 201
    NO_BINARY_FOR_GPU = 209
    INVALID_PTX = 218
    UNSUPPORTED_PTX_VERSION = 222
    PEER_ACCESS_UNSUPPORTED = 217
    INVALID_SOURCE = 300
    INVALID_HANDLE = 400
    ILLEGAL_STATE = 401
    NOT_FOUND = 500
    NOT_READY = 600
    ILLEGAL_ADDRESS = 700
    LAUNCH_OUT_OF_RESOURCES = 701
    LAUNCH_TIMEOUT = 702
    PEER_ACCESS_ALREADY_ENABLED = 704
    PEER_ACCESS_NOT_ENABLED = 705
    LAUNCH_FAILED = 719
    COOPERATIVE_LAUNCH_TOO_LARGE = 720
    NOT_PERMITTED = 800
    NOT_SUPPORTED = 801
    STREAM_CAPTURE_UNSUPPORTED = 900
    STREAM_CAPTURE_INVALIDATED = 901
    STREAM_CAPTURE_UNMATCHED = 903
    STREAM_CAPTURE_IMPLICIT = 906
    STREAM_CAPTURE_WRONG_THREAD = 908
    GRAPH_EXEC_UPDATE_FAILURE = 910
    INVALID_CLUSTER_SIZE = 912
    UNKNOWN = 999

    # rgpu's own range.
    PROTOCOL_ERROR = 0x10001
    VERSION_MISMATCH = 0x10002
    AUTH_FAILED = 0x10003
    FRAME_TOO_LARGE = 0x10004
    SESSION_LIMIT = 0x10005
    HANDSHAKE_TIMEOUT = 0x10006
    SHUTTING_DOWN = 0x10007
    CONNECTION_LOST = 0x10008


# What rgpu's own statuses mean (docs/protocol.md's table is written from this).
RGPU_STATUS_MEANING = {
    Status.PROTOCOL_ERROR: "malformed frame or arguments",
    Status.VERSION_MISMATCH: "incompatible major versions",
    Status.AUTH_FAILED: "PSK authentication failed",
    Status.FRAME_TOO_LARGE: "record over the receiver's limit",
    Status.SESSION_LIMIT: "server at `--max-sessions`",
    Status.HANDSHAKE_TIMEOUT: "no complete handshake in time (server just closes)",
    Status.SHUTTING_DOWN: "server is stopping; sent as PROTOCOL_ERROR before closing",
    Status.CONNECTION_LOST: "client-side only: the connection ended",
}


def status_name(code: int) -> str:
    try:
        return Status(code).name
    except ValueError:
        return f"status {code}"


class RgpuError(Exception):
    """Base of every error rgpu raises on purpose."""


class CudaError(RgpuError):
    """A call failed with a status code (a CUresult, or one of rgpu's own codes).

    `deferred` is true when the code belongs to an earlier deferred call (launch, async copy...) and only
    surfaced now, at the next synchronising call, as CUDA's own asynchronous errors do.
    """

    def __init__(self, code: int, message: str = "", *, deferred: bool = False):
        self.code = int(code)
        self.message = message
        self.deferred = deferred
        text = status_name(self.code)
        if message:
            text += f": {message}"
        if deferred:
            text += " (from an earlier deferred call)"
        super().__init__(text)


class ProtocolError(RgpuError):
    """The peer sent bytes that are not a valid frame sequence; the connection cannot continue."""

    def __init__(self, message: str, status: int = Status.PROTOCOL_ERROR):
        self.status = int(status)
        super().__init__(message)


class AuthenticationError(RgpuError):
    """PSK authentication failed (wrong key, missing key, or a peer that skips authentication)."""
