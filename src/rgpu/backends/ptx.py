"""Just enough PTX reading for the fake backend: entry points with their parameter layout, module globals,
the ISA version, and PTX text embedded (uncompressed) in cubin/fatbin images."""

from __future__ import annotations

import re
import struct

import attrs

from rgpu.errors import CudaError, Status

_SCALAR_SIZES = {"8": 1, "16": 2, "32": 4, "64": 8}
# Every pattern does work linear in its input, whatever the input (a session's module image is hostile):
# patterns anchored at a line start match only within that line ([ \t], never \s, which would let each line's
# attempt run on through all the lines after it), and a parameter list is searched for its ")" once, not once
# per ".entry" (see _entries).
_ENTRY_HEAD = re.compile(rb"\.entry\s+([\w$.]+)\s*\(")
_PARAM = re.compile(
    rb"\.param\s+(?:\.align\s+(\d+)\s+)?\.([a-z]+)(\d+)((?:\s+\.ptr)?(?:\s+\.(?:global|shared|const|local))?"
    rb"(?:\s+\.align\s+\d+)?)\s+([\w$]+)(?:\[(\d+)\])?"
)
_GLOBAL = re.compile(
    rb"^[ \t]*((?:\.(?:visible|extern|weak)[ \t]+)*)\.(?:global|const)[ \t]+"
    rb"(?:\.attribute\([ \t]*\.managed[ \t]*\)[ \t]+)?(?:\.align[ \t]+(\d+)[ \t]+)?"
    rb"\.([a-z]+)(\d+)[ \t]+([\w$]+)(?:\[(\d+)\])?(?:[ \t]*=[ \t]*(\{[^}\n]*\}|[^;\n]*))?", re.M
)
_VERSION = re.compile(rb"^[ \t]*\.version[ \t]+(\d+)\.(\d+)", re.M)


@attrs.frozen(slots=True)
class PtxModule:
    version: tuple[int, int]
    entries: dict[str, tuple[tuple[int, int], ...]]  # name -> ((offset, size), ...)
    globals: dict[str, int]  # name -> size in bytes
    initial: dict[str, bytes] = attrs.field(factory=dict)  # name -> the bytes its initializer gives


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
            if flags & _FLAG_ZSTD:
                try:
                    import zstandard
                except ImportError:
                    raise UnsupportedImage("compressed fatbin: pip install zstandard") from None
                payload = _decompress_bounded(zstandard, payload[:compressed_size])
            elif flags & _FLAG_LEGACY_COMPRESSED:
                raise UnsupportedImage("fatbin PTX uses the pre-CUDA-13 compression, which the fake backend "
                                       "cannot read (build with -Xfatbin --compress=false)")
            return payload.split(b"\0", 1)[0]
        pos += entry_header + payload_size
    return None


# The most PTX text a compressed fatbin entry may unpack to: as much as a plain image can carry in one frame.
MAX_PTX_TEXT = 64 * 1024 * 1024


def _decompress_bounded(zstandard, data: bytes, limit: int = MAX_PTX_TEXT) -> bytes:
    """Decompress a stream, stopping past `limit` bytes: memory follows what is really produced, never what
    the frame header claims (a 32 KB zstd frame can unpack to gigabytes, and may claim any size)."""
    import io

    try:
        with zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data)) as reader:
            out = reader.read(limit + 1)
    except zstandard.ZstdError as e:
        raise UnsupportedImage(f"compressed fatbin entry does not decompress: {e}") from None
    if len(out) > limit:
        raise UnsupportedImage(f"compressed fatbin entry unpacks to more than {limit} bytes")
    return out


_ENTRY_ELF = 2
_ELF64 = struct.Struct("<40xQ10xHHH")  # e_shoff; e_shentsize, e_shnum, e_shstrndx
_SECTION = struct.Struct("<IIQQQQ")  # sh_name, sh_type, sh_flags, sh_addr, sh_offset, sh_size


def image_device_bytes(image: bytes) -> int:
    """Device memory a module made from `image` holds for its own variables (__device__ and __constant__
    data), known before the image is loaded: the sizes its PTX declares or its cubin's .nv.global* and
    .nv.constant* sections take (uninitialised globals occupy no bytes in the file, so the file's size says
    nothing about them). A fatbin counts as its largest entry (the driver loads one). An image whose layout is
    not readable here counts as its own size; the driver refuses what it cannot read anyway."""
    image = bytes(image)
    try:
        if image.startswith(b"\x7fELF"):
            return _elf_data_bytes(image)
        sizes = _fatbin_entry_bytes(image)
        if sizes is not None:
            return max(sizes, default=len(image))
        if looks_like_ptx(image):
            return sum(parse_ptx(image.split(b"\0", 1)[0]).globals.values())
    except (ValueError, struct.error, ImportError):
        pass
    return len(image)


def elf_sections(image: bytes) -> tuple[bytes, list[tuple]]:
    """A 64-bit ELF file's section-name table and its section headers (sh_name, sh_type, sh_flags, sh_addr,
    sh_offset, sh_size); ValueError or struct.error where they are not readable."""
    shoff, entsize, count, names_index = _ELF64.unpack_from(image)
    if entsize < _SECTION.size or names_index >= count:
        raise ValueError("malformed ELF section table")
    sections = [_SECTION.unpack_from(image, shoff + i * entsize) for i in range(count)]
    names = sections[names_index]
    return image[names[4] : names[4] + names[5]], sections


def _elf_data_bytes(image: bytes) -> int:
    table, sections = elf_sections(image)
    total = 0
    for name_at, _type, _flags, _addr, _offset, size in sections:
        # Prefixes compared in place: finding each name's end could scan the whole table once per section.
        if table.startswith(b".nv.global", name_at) or table.startswith(b".nv.constant", name_at):
            total += size
    return total


def _fatbin_entry_bytes(image: bytes) -> list[int] | None:
    """image_device_bytes of each PTX or cubin entry of a fatbin; None if `image` is not a fatbin."""
    if len(image) < _FATBIN_HEADER.size:
        return None
    magic, _version, header_size, size = _FATBIN_HEADER.unpack_from(image)
    if magic != FATBIN_MAGIC:
        return None
    sizes = []
    unpacked = 0  # one budget for all entries: a thousand small bombs must not unpack 64 MiB each
    pos, end = header_size, min(len(image), header_size + size)
    while pos + 64 <= end:
        kind, _ver, entry_header, payload_size = _ENTRY_HEADER.unpack_from(image, pos)
        if entry_header < 64 or payload_size > end:
            raise ValueError("malformed fatbin entry")
        payload = image[pos + entry_header : pos + entry_header + payload_size]
        (compressed_size,) = struct.unpack_from("<I", image, pos + 16)
        (flags,) = struct.unpack_from("<Q", image, pos + 40)
        if flags & _FLAG_ZSTD:
            import zstandard

            payload = _decompress_bounded(zstandard, payload[:compressed_size], MAX_PTX_TEXT - unpacked)
            unpacked += len(payload)
        if flags & _FLAG_LEGACY_COMPRESSED:
            sizes.append(len(image))
        elif kind == _ENTRY_PTX:
            sizes.append(sum(parse_ptx(payload.split(b"\0", 1)[0]).globals.values()))
        elif kind == _ENTRY_ELF:
            sizes.append(_elf_data_bytes(payload))
        pos += entry_header + payload_size
    return sizes


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
    for name, params in _entries(text):
        layout, offset = [], 0
        for pm in _PARAM.finditer(params):
            align_s, _kind, bits, _qual, _name, count_s = pm.groups()
            elem = _SCALAR_SIZES.get(bits.decode())
            if elem is None:
                raise ValueError(f"unsupported parameter width .{bits.decode()}")
            size = elem * (int(count_s) if count_s else 1)
            align = int(align_s) if align_s else elem
            offset = (offset + align - 1) // align * align
            layout.append((offset, size))
            offset += size
        entries[name.decode()] = tuple(layout)
    globals_, initial = {}, {}
    for gm in _GLOBAL.finditer(text):
        qualifiers, _align, kind, bits, name, count_s, init = gm.groups()
        if b"extern" in qualifiers:
            continue
        elem = _SCALAR_SIZES.get(bits.decode(), 1)
        size = globals_[name.decode()] = elem * (int(count_s) if count_s else 1)
        data = _initializer(init, kind, elem, size) if init else None
        if data:
            initial[name.decode()] = data
    # (a name declared twice keeps its last size: an initializer longer than that is not the variable's)
    initial = {name: data for name, data in initial.items() if len(data) <= globals_[name]}
    return PtxModule((int(m.group(1)), int(m.group(2))), entries, globals_, initial)


def _initializer(init: bytes, kind: bytes, elem: int, size: int) -> bytes | None:
    """A global's initial bytes from its PTX initializer (integers, 0f/0d float bits, a list of them), or None for
    one this cannot read (addresses of other globals): the variable then starts zeroed."""
    init = init.strip()
    if init.startswith(b"{") != init.endswith(b"}"):  # (a list spread over lines: not read here)
        return None
    values = init.strip(b"{}").split(b",")
    out = bytearray()
    for v in (v.strip() for v in values):
        try:
            if v[:2] in (b"0f", b"0F", b"0d", b"0D"):
                word = int(v[2:], 16)
            elif kind == b"f":
                fmt = {2: "e", 4: "f", 8: "d"}[elem]
                word = int.from_bytes(struct.pack("<" + fmt, float(v)), "little")
            else:
                word = int(v.rstrip(b"Uu"), 0)
        except (ValueError, KeyError, OverflowError, struct.error):
            return None
        out += (word & ((1 << (8 * elem)) - 1)).to_bytes(elem, "little")
    return bytes(out[:size]) if len(out) <= size else None


def _entries(text: bytes):
    """(name, parameter list) of each `.entry name (...)`. The next entry is looked for after this one's ")",
    so no byte is scanned for a ")" twice; without any ")" left, no later entry can be complete either."""
    pos = 0
    while (m := _ENTRY_HEAD.search(text, pos)) is not None:
        close = text.find(b")", m.end())
        if close < 0:
            return
        yield m.group(1), text[m.end() : close]
        pos = close + 1


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


MAX_PTX_ISA = (9, 0)  # what a 13.0 driver JITs; newer PTX gets UNSUPPORTED_PTX_VERSION, as on a GPU


# Comments, and what is left to check: braces, parentheses, statement ends and line ends. A block comment left open
# runs to the end (\Z), so no comment is scanned twice.
_COMMENT = re.compile(rb"//[^\n]*|/\*.*?(?:\*/|\Z)", re.S)
_PUNCTUATION = re.compile(rb"[{}();\n]")
_NAME = re.compile(rb"[ \t]*[\w$]+[ \t]*")


def check_syntax(text: bytes) -> None:
    """What a PTX assembler would refuse first, checked without assembling: brackets must balance, no body may open
    inside a parameter list, and outside functions every statement is a directive (`.version`, `.visible .entry`,
    ...) or, right after a declaration's return parameter, the declared name. ValueError says where."""
    text = _COMMENT.sub(b" ", text)
    braces = parens = 0
    start, after_paren = 0, False
    for m in _PUNCTUATION.finditer(text):
        if braces == parens == 0:
            piece = text[start : m.start()].strip()
            if piece and not piece.startswith(b".") and not (after_paren and _NAME.fullmatch(piece)):
                raise ValueError(f"syntax error near {piece[:40].decode(errors='replace')!r}")
            if piece:
                after_paren = False
        c = m.group()
        if c == b"{":
            if parens:
                raise ValueError("a body opens inside a parameter list")
            braces += 1
        elif c == b"}":
            braces -= 1
        elif c == b"(":
            parens += 1
        elif c == b")":
            parens -= 1
            after_paren = braces == parens == 0
        if braces < 0 or parens < 0:
            raise ValueError(f"unbalanced {c.decode()!r}")
        start = m.end()
    if braces or parens:
        raise ValueError("unbalanced brackets at the end of the PTX")


def runnable_ptx(image: bytes) -> tuple[bytes, PtxModule]:
    """The PTX text of a module image and what it declares, or the CudaError a driver would give for it."""
    try:
        text = extract_ptx(bytes(image))
    except UnsupportedImage as e:
        raise CudaError(Status.INVALID_IMAGE, str(e)) from None
    if text is None:
        raise CudaError(Status.INVALID_IMAGE, "fake backend runs PTX only (plain, in a fatbin, or "
                                              "uncompressed in a cubin); this image has none")
    try:
        mod = parse_ptx(text)
        check_syntax(text)
    except ValueError as e:
        raise CudaError(Status.INVALID_PTX, str(e)) from None
    if mod.version > MAX_PTX_ISA:
        raise CudaError(Status.UNSUPPORTED_PTX_VERSION, f"PTX ISA {mod.version[0]}.{mod.version[1]} is newer than "
                                                        f"this driver's {MAX_PTX_ISA[0]}.{MAX_PTX_ISA[1]}")
    return text, mod


def fatbin_of_ptx(text: bytes) -> bytes:
    """A fatbin holding `text` as its one, uncompressed, PTX entry (what fatbin_ptx reads back)."""
    payload = text + b"\0"
    payload += bytes(-len(payload) % 8)
    entry = bytearray(64)
    _ENTRY_HEADER.pack_into(entry, 0, _ENTRY_PTX, 0x0101, len(entry), len(payload))
    struct.pack_into("<I", entry, 16, len(payload))  # the uncompressed size (flags at 40 stay 0)
    body = bytes(entry) + payload
    return _FATBIN_HEADER.pack(FATBIN_MAGIC, 1, _FATBIN_HEADER.size, len(body)) + body
