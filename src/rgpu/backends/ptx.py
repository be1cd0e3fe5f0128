"""Just enough PTX reading for the fake backend: entry points with their parameter layout, module globals,
the ISA version, and PTX text embedded (uncompressed) in cubin/fatbin images."""

from __future__ import annotations

import re
import struct

import attrs

_SCALAR_SIZES = {"8": 1, "16": 2, "32": 4, "64": 8}
_ENTRY = re.compile(rb"\.entry\s+([\w$.]+)\s*\(([^)]*)\)", re.S)
_PARAM = re.compile(
    rb"\.param\s+(?:\.align\s+(\d+)\s+)?\.([a-z]+)(\d+)((?:\s+\.ptr)?(?:\s+\.(?:global|shared|const|local))?"
    rb"(?:\s+\.align\s+\d+)?)\s+([\w$]+)(?:\[(\d+)\])?"
)
_GLOBAL = re.compile(
    rb"^\s*((?:\.(?:visible|extern|weak)\s+)*)\.(?:global|const)\s+(?:\.align\s+(\d+)\s+)?\.([a-z]+)(\d+)\s+([\w$]+)"
    rb"(?:\[(\d+)\])?", re.M
)
_VERSION = re.compile(rb"^\s*\.version\s+(\d+)\.(\d+)", re.M)


@attrs.frozen(slots=True)
class PtxModule:
    version: tuple[int, int]
    entries: dict[str, tuple[tuple[int, int], ...]]  # name -> ((offset, size), ...)
    globals: dict[str, int]  # name -> size in bytes


FATBIN_MAGIC = 0xBA55ED50
_FATBIN_HEADER = struct.Struct("<IHHQ")  # magic, version, header size, size of the entries
_ENTRY_HEADER = struct.Struct("<HHIQ")  # kind, version, header size, payload size (padded)
_ENTRY_PTX = 1
_FLAG_ZSTD = 0x8000  # nvcc 13's default compression (an older, LZ4-like scheme used 0x2000)
_FLAG_LEGACY_COMPRESSED = 0x2000


class UnsupportedImage(ValueError):
    pass


def fatbin_ptx(image: bytes) -> bytes | None:
    """The first PTX entry of a fatbin (decompressing zstd entries); None if the fatbin holds no PTX."""
    if len(image) < _FATBIN_HEADER.size:
        return None
    magic, _version, header_size, size = _FATBIN_HEADER.unpack_from(image)
    if magic != FATBIN_MAGIC:
        return None
    pos, end = header_size, min(len(image), header_size + size)
    while pos + 64 <= end:
        kind, _ver, entry_header, payload_size = _ENTRY_HEADER.unpack_from(image, pos)
        if entry_header < 64 or payload_size > end:
            raise UnsupportedImage("malformed fatbin entry")
        payload = image[pos + entry_header : pos + entry_header + payload_size]
        if kind == _ENTRY_PTX:
            (compressed_size,) = struct.unpack_from("<I", image, pos + 16)
            (flags,) = struct.unpack_from("<Q", image, pos + 40)
            (plain_size,) = struct.unpack_from("<Q", image, pos + 56)
            if flags & _FLAG_ZSTD:
                try:
                    import zstandard
                except ImportError:
                    raise UnsupportedImage("compressed fatbin: pip install zstandard") from None
                payload = zstandard.ZstdDecompressor().decompress(payload[:compressed_size],
                                                                  max_output_size=plain_size)
            elif flags & _FLAG_LEGACY_COMPRESSED:
                raise UnsupportedImage("fatbin PTX uses the pre-CUDA-13 compression, which the fake backend "
                                       "cannot read (build with -Xfatbin --compress=false)")
            return payload.split(b"\0", 1)[0]
        pos += entry_header + payload_size
    return None


def looks_like_ptx(image: bytes) -> bool:
    return _VERSION.search(image[:4096]) is not None and b".target" in image[:8192]


def extract_ptx(image: bytes) -> bytes | None:
    """PTX text inside a fatbin/cubin/ELF, if it is stored uncompressed; None otherwise."""
    text = fatbin_ptx(image)
    if text is not None:
        return text
    if looks_like_ptx(image) and not image.startswith(b"\x7fELF"):
        return image.split(b"\0", 1)[0]
    m = _VERSION.search(image)
    if m is None:
        return None
    start = image.rfind(b"\0", 0, m.start()) + 1
    end = image.find(b"\0", m.start())
    text = image[start : end if end >= 0 else len(image)]
    return text if b".entry" in text or b".global" in text else None


def parse_ptx(text: bytes) -> PtxModule:
    m = _VERSION.search(text)
    if m is None:
        raise ValueError("no .version directive")
    entries = {}
    for em in _ENTRY.finditer(text):
        layout, offset = [], 0
        for pm in _PARAM.finditer(em.group(2)):
            align_s, _kind, bits, _qual, _name, count_s = pm.groups()
            elem = _SCALAR_SIZES.get(bits.decode())
            if elem is None:
                raise ValueError(f"unsupported parameter width .{bits.decode()}")
            size = elem * (int(count_s) if count_s else 1)
            align = int(align_s) if align_s else elem
            offset = (offset + align - 1) // align * align
            layout.append((offset, size))
            offset += size
        entries[em.group(1).decode()] = tuple(layout)
    globals_ = {}
    for gm in _GLOBAL.finditer(text):
        qualifiers, _align, _kind, bits, name, count_s = gm.groups()
        if b"extern" in qualifiers:
            continue
        globals_[name.decode()] = _SCALAR_SIZES.get(bits.decode(), 1) * (int(count_s) if count_s else 1)
    return PtxModule((int(m.group(1)), int(m.group(2))), entries, globals_)


def base_name(symbol: str) -> str:
    """The source-level name of a (possibly Itanium-mangled) kernel symbol: `_Z4vaddPKfS0_Pfi` -> `vadd`,
    `_ZN2ns6kernelEv` -> `kernel`."""
    if not symbol.startswith("_Z"):
        return symbol
    s = symbol[2:]
    if s.startswith("L"):
        s = s[1:]
    nested = s.startswith("N")
    if nested:
        s = s[1:]
    last = symbol
    while s and s[0].isdigit():
        digits = len(s) - len(s.lstrip("0123456789"))
        n = int(s[:digits])
        last = s[digits : digits + n]
        s = s[digits + n :]
        if not nested:
            break
        if s.startswith("I"):  # template args on a nested component: stop at the name
            break
    return last
