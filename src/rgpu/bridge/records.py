"""Bridge record layouts, defined once (cffi, packed, little-endian hosts) and checked against
bridge/PROTOCOL.md by tests/test_bridge_layout.py. v2 (CUBB2/CBD2) is frozen."""

from __future__ import annotations

import enum
import sys
import zlib

import cffi

if sys.byteorder != "little":  # pragma: no cover - every host this runs on
    raise ImportError("bridge records are little-endian; this host is not")

CDEF = """
typedef struct {                /* CUBB2: job record, v2 (96 bytes) */
    char     magic[8];          /* "CUBB2\\0\\0\\0" */
    uint16_t version;           /* 2 */
    uint16_t header_size;       /* 96 */
    uint32_t flags;             /* bit 0: in_checksum is valid */
    uint64_t seq;               /* strictly increasing per producer */
    uint32_t op;                /* 1 MAIL, 2 VADD, 3 VADD_MUTATED */
    uint32_t n;                 /* MAIL: bytes; VADD*: float32 elements */
    uint64_t in_offset;         /* into the in file */
    uint64_t in_size;
    uint64_t out_offset;        /* into the out file */
    uint64_t out_size;          /* capacity the guest provides */
    uint32_t in_checksum;       /* CRC-32 (zlib / crc32_le) of the input bytes */
    uint32_t reserved0;
    uint64_t submit_ns;         /* producer's timestamp, echoed */
    uint8_t  reserved[16];
} cubb2_job;

typedef struct {                /* CBD2: done record, v2 (64 bytes) */
    char     magic[8];          /* "CBD2\\0\\0\\0\\0" */
    uint16_t version;           /* 2 */
    uint16_t header_size;       /* 64 */
    uint32_t status;
    uint64_t seq;               /* the job's seq */
    uint32_t op;
    uint32_t n;
    uint64_t kernel_ns;         /* GPU time of the kernel (CUDA events) */
    uint64_t out_bytes;         /* bytes written to the out file */
    uint32_t out_checksum;      /* CRC-32 of those bytes */
    uint32_t cuda_error;        /* CUresult when status is GPU_ERROR */
    uint64_t submit_ns;         /* echoed from the job */
} cbd2_done;

typedef struct {                /* CUBB: job record, v1 legacy (64 bytes), inside guest RAM */
    char     magic[4];          /* "CUBB" */
    uint16_t version;           /* 1 */
    uint16_t header_size;       /* 64 */
    uint64_t seq;
    uint32_t op;
    uint32_t n;
    uint64_t in_gpa;
    uint64_t in_size;
    uint64_t out_gpa;
    uint64_t out_size;
    uint64_t reserved;
} cubb_job;

typedef struct {                /* CUBD: done record, v1 legacy (48 bytes), inside guest RAM */
    char     magic[4];          /* "CUBD" */
    uint16_t version;           /* 1 */
    uint16_t header_size;       /* 48 */
    uint64_t seq;
    uint32_t status;
    uint32_t cuda_error;
    uint64_t kernel_ns;
    uint64_t out_bytes;
    uint32_t out_checksum;
    uint32_t reserved;
} cubd_done;
"""

ffi = cffi.FFI()
ffi.cdef(CDEF, packed=True)

MAGIC = {"cubb2_job": b"CUBB2\0\0\0", "cbd2_done": b"CBD2\0\0\0\0", "cubb_job": b"CUBB", "cubd_done": b"CUBD"}
VERSION = {"cubb2_job": 2, "cbd2_done": 2, "cubb_job": 1, "cubd_done": 1}
SIZE = {name: ffi.sizeof(name) for name in MAGIC}


class Op(enum.IntEnum):
    MAIL = 1
    VADD = 2
    VADD_MUTATED = 3


class DoneStatus(enum.IntEnum):
    OK = 0
    BAD_MAGIC = 1
    BAD_VERSION = 2
    BAD_OP = 3
    BOUNDS = 4  # a range outside the in/out file or the guest RAM windows, or a size that does not fit n
    CHECKSUM = 5  # input bytes do not match in_checksum
    GPU_ERROR = 6  # the device failed the job; cuda_error holds the CUresult
    TOO_LARGE = 7  # n above the bridge's limit
    TRUNCATED = 8  # the job record is shorter than its header


def crc32(data) -> int:
    return zlib.crc32(data) & 0xFFFFFFFF


def new(name: str, **fields):
    """A zeroed record with magic, version and header_size filled in, plus `fields`."""
    rec = ffi.new(f"{name} *")
    rec.magic = MAGIC[name]
    rec.version = VERSION[name]
    rec.header_size = SIZE[name]
    for key, value in fields.items():
        setattr(rec, key, value)
    return rec


def pack(rec) -> bytes:
    return bytes(ffi.buffer(rec))


def unpack(name: str, data: bytes):
    """Record from bytes (copied); raises ValueError if too short."""
    if len(data) < SIZE[name]:
        raise ValueError(f"{name}: {len(data)} bytes, needs {SIZE[name]}")
    rec = ffi.new(f"{name} *")
    ffi.memmove(rec, data[: SIZE[name]], SIZE[name])
    return rec


def magic_of(rec) -> bytes:
    return bytes(ffi.buffer(rec.magic))


def as_dict(rec) -> dict:
    name = ffi.typeof(rec).item.cname
    out = {}
    for field, _ in ffi.typeof(name).fields:
        value = getattr(rec, field)
        out[field] = bytes(ffi.buffer(value)) if isinstance(value, ffi.CData) else value
    return out
