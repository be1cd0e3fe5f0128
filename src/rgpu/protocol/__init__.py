"""The rgpu wire protocol as a sans-IO codec (no sockets inside). Spec: docs/protocol.md."""

from rgpu.protocol.connection import Connection
from rgpu.protocol.frames import Flags, Frame, encode_frame, frame_bytes, parse_frame, split_batch
from rgpu.protocol.handshake import ClientHandshake, Hello, ServerHandshake

__all__ = ["Connection", "Flags", "Frame", "encode_frame", "frame_bytes", "parse_frame", "split_batch",
           "ClientHandshake", "Hello", "ServerHandshake"]
