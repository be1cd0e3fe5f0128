"""Just enough PTX reading for the fake backend: entry points with their parameter layout, module globals,
the ISA version, and PTX text embedded (uncompressed) in cubin/fatbin images."""

from __future__ import annotations

import re

import attrs

_SCALAR_SIZES = {"8": 1, "16": 2, "32": 4, "64": 8}
_ENTRY = re.compile(rb"\.entry\s+([\w$.]+)\s*\(([^)]*)\)", re.S)
_PARAM = re.compile(
    rb"\.param\s+(?:\.align\s+(\d+)\s+)?\.([a-z]+)(\d+)((?:\s+\.ptr)?(?:\s+\.(?:global|shared|const|local))?"
    rb"(?:\s+\.align\s+\d+)?)\s+([\w$]+)(?:\[(\d+)\])?"
)
_GLOBAL = re.compile(
    rb"^\s*((?:\.(?:visible|extern|weak)\s+)*)\.global\s+(?:\.align\s+(\d+)\s+)?\.([a-z]+)(\d+)\s+([\w$]+)"
    rb"(?:\[(\d+)\])?", re.M
)
_VERSION = re.compile(rb"^\s*\.version\s+(\d+)\.(\d+)", re.M)


@attrs.frozen(slots=True)
class PtxModule:
    version: tuple[int, int]
    entries: dict[str, tuple[tuple[int, int], ...]]  # name -> ((offset, size), ...)
    globals: dict[str, int]  # name -> size in bytes


def looks_like_ptx(image: bytes) -> bool:
    return _VERSION.search(image[:4096]) is not None and b".target" in image[:8192]


def extract_ptx(image: bytes) -> bytes | None:
    """PTX text inside a fatbin/cubin/ELF, if it is stored uncompressed; None otherwise."""
    if looks_like_ptx(image):
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
