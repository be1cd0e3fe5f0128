"""A launch's kernel-parameter buffer: how the client lays arguments out per the kernel's parameter layout
((offset, size) per parameter, as the driver reports it) and how a reader takes them back out. Both sides of
one format, so they live together."""

from __future__ import annotations

import re
import struct
from typing import Sequence

import numpy as np

_INT_CODES = {1: "b", 2: "h", 4: "i", 8: "q"}


def pack_params(layout: Sequence[tuple[int, int]], args: Sequence) -> bytes:
    """Lay kernel arguments out as the kernel expects them. ints and floats take the width of their
    parameter (a float in 4 bytes is an f32, in 8 an f64); bytes and numpy scalars are copied as-is."""
    if len(args) != len(layout):
        raise ValueError(f"kernel takes {len(layout)} parameters, {len(args)} given")
    buf = bytearray(max((o + n for o, n in layout), default=0))
    for i, ((offset, size), arg) in enumerate(zip(layout, args)):
        if isinstance(arg, (bytes, bytearray, memoryview, np.generic)):
            raw = arg.tobytes() if isinstance(arg, np.generic) else bytes(arg)
        elif isinstance(arg, float):
            if size not in (4, 8):
                raise ValueError(f"parameter {i}: a float cannot fill {size} bytes")
            raw = struct.pack("<f" if size == 4 else "<d", arg)
        elif isinstance(arg, int):
            code = _INT_CODES.get(size)
            if code is None:
                raise ValueError(f"parameter {i}: an int cannot fill {size} bytes")
            raw = struct.pack("<" + (code if arg < 0 else code.upper()), arg)
        else:
            raise TypeError(f"parameter {i}: cannot pass {type(arg).__name__} to a kernel")
        if len(raw) != size:
            raise ValueError(f"parameter {i}: {len(raw)} bytes given, the kernel expects {size}")
        buf[offset : offset + size] = raw
    return bytes(buf)


def decode_params(signature: str, layout: Sequence[tuple[int, int]], params: bytes) -> tuple | None:
    """Unpack a launch's parameter buffer per a signature of struct codes, one per parameter ("16s" is a
    16-byte struct by value); None if the layout does not fit it."""
    codes = re.findall(r"\d*[a-zA-Z?]", signature)
    if len(codes) != len(layout):
        return None
    values = []
    for code, (offset, size) in zip(codes, layout):
        if struct.calcsize("<" + code) != size or offset + size > len(params):
            return None
        values.append(struct.unpack_from("<" + code, params, offset)[0])
    return tuple(values)
