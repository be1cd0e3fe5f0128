"""The operation spec: one entry per operation, the single source of truth for both sides of the wire.

Every operation names its request arguments and reply results as typed fields (`"dst:u64 value:u32"`), says
what travels as bulk, and carries the properties the layers above need: whether a client may defer it
(NO_REPLY, batched), whether it runs in the client's current context, and which session resources it makes or
names. From this table come:

- Python: `op.decode(args)` gives a named tuple of the request (`op.Request`), `op.decode_reply(args)` one of
  the reply (`op.Reply`); `op.pack_request(*values)` / `op.pack_reply(*values)` pack them;
- C (`python native/codegen/gen.py`, outputs GENERATED): native/gen/rgpu_ops.h (opcodes, sizes, per-operation
  pack functions for requests and bounds-checked unpack functions for replies), native/gen/rgpu_consts.h
  (protocol version, features, statuses, limits, the context-dependent set);
- docs/protocol.md's opcode and status tables (written into the document by the same command).

Opcodes are fixed numbers (never positions in a list): adding an operation never renumbers another.
Field types: u16 u32 i32 u64 i64 f32 f64, and bN for N raw bytes (b16: 16 bytes). All little-endian, packed.
"""

from __future__ import annotations

import struct
import sys
from collections import namedtuple

import attrs

from rgpu.errors import ProtocolError
from rgpu.protocol.frames import request_record_struct

# Field type -> (struct code, C type, size).
TYPES: dict[str, tuple[str, str, int]] = {
    "u16": ("H", "uint16_t", 2), "u32": ("I", "uint32_t", 4), "i32": ("i", "int32_t", 4),
    "u64": ("Q", "uint64_t", 8), "i64": ("q", "int64_t", 8), "f32": ("f", "float", 4), "f64": ("d", "double", 8),
}

# Limits both sides share (the C side gets them from native/gen/rgpu_consts.h).
# The driver's own limit on a launch's kernel parameters (CUDA 12.1+ on Volta and newer).
MAX_PARAM_BYTES = 32764
# Launch attributes travel as (u32 id, 4 pad, 64-byte value) records, CUlaunchAttribute's own layout.
LAUNCH_ATTRIBUTE_SIZE = 72
MAX_LAUNCH_ATTRIBUTES = 16
# A SWITCH conditional node's bodies (GRAPH_CONDITIONAL_NODE): CUDA sets no bound, the server keeps a handle each.
MAX_SWITCH_BODIES = 1024
# CUlaunchAttributeID values whose 64-byte value is plain data: forwarded untouched, the driver decides (the
# server's Python path and its fast lane both go by this set; the others need the server's translation).
PLAIN_LAUNCH_ATTRIBUTES = {
    0: "IGNORE", 1: "ACCESS_POLICY_WINDOW", 2: "COOPERATIVE", 3: "SYNCHRONIZATION_POLICY", 4: "CLUSTER_DIMENSION",
    5: "CLUSTER_SCHEDULING_POLICY_PREFERENCE", 6: "PROGRAMMATIC_STREAM_SERIALIZATION", 8: "PRIORITY",
    9: "MEM_SYNC_DOMAIN_MAP", 10: "MEM_SYNC_DOMAIN", 11: "PREFERRED_CLUSTER_DIMENSION",
    14: "PREFERRED_SHARED_MEMORY_CARVEOUT", 16: "NVLINK_UTIL_CENTRIC_SCHEDULING",
}


@attrs.frozen(slots=True)
class Field:
    name: str
    type: str  # a TYPES key or bN
    offset: int

    @property
    def size(self) -> int:
        return int(self.type[1:]) if self.type.startswith("b") else TYPES[self.type][2]

    @property
    def code(self) -> str:
        return f"{self.size}s" if self.type.startswith("b") else TYPES[self.type][0]


def parse_fields(spec: str) -> tuple[Field, ...]:
    fields, offset = [], 0
    for item in spec.split():
        name, _, type_ = item.partition(":")
        if not name.isidentifier() or not (type_ in TYPES or (type_[:1] == "b" and type_[1:].isdigit())):
            raise ValueError(f"bad field {item!r}")
        field = Field(name, type_, offset)
        fields.append(field)
        offset += field.size
    if len({f.name for f in fields}) != len(fields):
        raise ValueError(f"duplicate field name in {spec!r}")
    return tuple(fields)


@attrs.frozen(slots=True)
class Op:
    code: int
    name: str
    request_fields: tuple[Field, ...]
    reply_fields: tuple[Field, ...]
    request: struct.Struct
    reply: struct.Struct
    Request: type  # named tuple of the request's fields
    Reply: type  # named tuple of the reply's fields
    # Deferrable: CUDA defines the call as asynchronous, so a client may queue it (NO_REPLY) and batch it.
    deferrable: bool = False
    # Runs in the session's current context: a client must have told the server which one first.
    context: bool = False
    request_bulk: str = ""
    reply_bulk: str = ""
    # Session resources: what a successful call makes (its reply's first field is the handle) / which of its
    # request fields name existing ones, as "field:kind".
    creates: str = ""
    names: tuple[str, ...] = ()
    doc: str = ""
    # The reply bulk as an array of the reply's `count` items, each laid out as these fields (C gets an unpack
    # that refuses a count above what the caller asked for, or a bulk length that is not exactly count items).
    reply_items: tuple[Field, ...] = ()
    # A request without bulk as the whole record, prefix and header included (Connection.lone_request)
    request_record: struct.Struct = attrs.field(kw_only=True, eq=False, repr=False)
    # The request bulk as an array of the request's `count` items, each laid out as these fields (C gets a pack
    # function for one item), and their struct.
    request_items: tuple[Field, ...] = attrs.field(default=(), kw_only=True)
    request_item: struct.Struct | None = attrs.field(default=None, kw_only=True, eq=False, repr=False)

    @property
    def item_size(self) -> int:
        return sum(f.size for f in self.reply_items)

    def pack_request(self, *values) -> bytes:
        return self.request.pack(*values)

    def pack_reply(self, *values) -> bytes:
        return self.reply.pack(*values)

    def decode(self, args) -> tuple:
        """Request arguments -> `self.Request` (a named tuple); ProtocolError if the size is wrong."""
        if len(args) != self.request.size:
            raise ProtocolError(f"{self.name}: {len(args)} argument bytes, expected {self.request.size}")
        return self.Request._make(self.request.unpack(args))

    def decode_reply(self, args) -> tuple:
        return self.Reply._make(self.reply_values(args))

    def reply_values(self, args) -> tuple:
        """decode_reply's values as a plain tuple (making the named tuple is left to whoever needs it)."""
        if len(args) != self.reply.size:
            raise ProtocolError(f"{self.name} reply: {len(args)} result bytes, expected {self.reply.size}")
        return self.reply.unpack(args)

    # The names older code used; they return the same named tuples.
    unpack_request = decode
    unpack_reply = decode_reply


OPS: dict[int, Op] = {}
BY_NAME: dict[str, Op] = {}

def _op(code, name, request="", reply="", *, deferrable=False, context=True, request_bulk="", reply_bulk="",
        creates="", names=(), doc="", items="", request_items=""):
    req, rep, req_items = parse_fields(request), parse_fields(reply), parse_fields(request_items)
    request_format = "".join(f.code for f in req)
    if items and "count" not in {f.name for f in rep}:
        raise ValueError(f"{name}: reply items need a reply field named count")
    if request_items and "count" not in {f.name for f in req}:
        raise ValueError(f"{name}: request items need a request field named count")
    title = "".join(part.capitalize() for part in name.split("_"))
    op = Op(code, name, req, rep, struct.Struct("<" + request_format),
            struct.Struct("<" + "".join(f.code for f in rep)),
            namedtuple(f"{title}Request", [f.name for f in req]), namedtuple(f"{title}Reply", [f.name for f in rep]),
            deferrable, context, request_bulk, reply_bulk,
            creates, tuple(names.split()) if isinstance(names, str) else tuple(names), doc, parse_fields(items),
            request_record=request_record_struct(request_format), request_items=req_items,
            request_item=struct.Struct("<" + "".join(f.code for f in req_items)) if req_items else None)
    assert code not in OPS and name not in BY_NAME, (code, name)
    OPS[code] = op
    BY_NAME[name] = op
    return op

# Connection control (0x00xx): no context.
HELLO = _op(0x0001, "HELLO",
            "magic:b8 major:u16 minor:u16 features:u64 max_frame:u32 ciphers:u32 nonce:b32 flags:u32 session:u64",
            "magic:b8 major:u16 minor:u16 features:u64 max_frame:u32 ciphers:u32 nonce:b32 flags:u32 session:u64",
            context=False, request_bulk="agent string (UTF-8)", reply_bulk="agent string, or error message",
            doc="version/feature negotiation; always first")
AUTH = _op(0x0002, "AUTH", "proof:b32", "proof:b32", context=False,
           doc="PSK proof exchange (client proof / server proof)")
GOODBYE = _op(0x0003, "GOODBYE", context=False, doc="orderly close; the server frees the session, replies, closes")
BATCH = _op(0x0004, "BATCH", context=False, request_bulk="concatenated NO_REPLY frames",
            doc="deferred calls in one frame; no reply")
NOP = _op(0x0005, "NOP", context=False, doc="null call (latency probe)")
PROTOCOL_ERROR = _op(0x0006, "PROTOCOL_ERROR", context=False, reply_bulk="message (UTF-8)",
                     doc="sent by the server before it closes a connection it cannot continue")
SERVER_STATUS = _op(0x0007, "SERVER_STATUS", context=False, reply_bulk="JSON (UTF-8)",
                    doc="the server's sessions and limits; only on a connection whose HELLO has the STATUS flag, "
                        "answered by the server itself (no session), which then closes")
# Copy links (see docs/protocol.md, "Copy links"): extra TCP connections of a session that carry the bytes of
# big host-to-device copies in parallel, so that one copy's bytes cross several cores on each side.
LINKS_OPEN = _op(0x0008, "LINKS_OPEN", "", "token:b32 links:u32 part_max:u32", context=False,
                 doc="the session's copy-link token, how many links it takes and a part's most bytes; NOT_SUPPORTED "
                     "where the session has none (in-process sessions, the server's --copy-links 0)")
LINK_JOIN = _op(0x0009, "LINK_JOIN", "proof:b32 link:u32", context=False,
                doc="first and only request on a new connection that becomes link `link` of the session whose "
                    "token `proof` proves (HMAC-SHA256 of the link under it); the server replies, then that "
                    "connection carries LINK_PARTs only")
LINK_PART = _op(0x000A, "LINK_PART", "seq:u32 part:u32 offset:u64", context=False,
                request_bulk="the part's bytes",
                doc="on a copy link only, never replied to: part `part` of the linked copy `seq`, its bytes for "
                    "offset `offset` of the copy")

# Initialisation and devices (0x001x, 0x002x).
INIT = _op(0x0010, "INIT", "flags:u32", context=False, doc="cuInit(flags)")
DRIVER_GET_VERSION = _op(0x0011, "DRIVER_GET_VERSION", "", "version:i32", context=False, doc="cuDriverGetVersion")
DEVICE_GET_COUNT = _op(0x0020, "DEVICE_GET_COUNT", "", "count:i32", context=False, doc="cuDeviceGetCount")
DEVICE_GET = _op(0x0021, "DEVICE_GET", "ordinal:i32", "device:i32", context=False, doc="cuDeviceGet(ordinal)")
DEVICE_GET_NAME = _op(0x0022, "DEVICE_GET_NAME", "device:i32", context=False, reply_bulk="name (UTF-8)",
                      doc="cuDeviceGetName")
DEVICE_GET_ATTRIBUTE = _op(0x0023, "DEVICE_GET_ATTRIBUTE", "attrib:i32 device:i32", "value:i32", context=False,
                           doc="cuDeviceGetAttribute(attrib, dev)")
DEVICE_TOTAL_MEM = _op(0x0024, "DEVICE_TOTAL_MEM", "device:i32", "bytes:u64", context=False,
                       doc="cuDeviceTotalMem")
DEVICE_GET_UUID = _op(0x0025, "DEVICE_GET_UUID", "device:i32", "uuid:b16", context=False, doc="cuDeviceGetUuid")
DEVICE_GET_ATTRIBUTES = _op(0x0026, "DEVICE_GET_ATTRIBUTES", "device:i32 count:u32", "count:u32", context=False,
                            reply_bulk="count x i32, attributes 1..count (INT32_MIN: unsupported)", items="value:i32",
                            doc="all attributes in one call, for client-side caching")

# Contexts (0x003x). Every context is the session's own (see "Sessions").
PRIMARY_CTX_RETAIN = _op(0x0030, "PRIMARY_CTX_RETAIN", "device:i32", "ctx:u64", context=False,
                         creates="context", doc="session's per-device context")
PRIMARY_CTX_RELEASE = _op(0x0031, "PRIMARY_CTX_RELEASE", "device:i32", context=False,
                          doc="cuDevicePrimaryCtxRelease")
CTX_CREATE = _op(0x0032, "CTX_CREATE", "flags:u32 device:i32", "ctx:u64", context=False, creates="context",
                 doc="cuCtxCreate(flags, dev); becomes current")
CTX_DESTROY = _op(0x0033, "CTX_DESTROY", "ctx:u64", context=False, names="ctx:context",
                  doc="cuCtxDestroy; frees everything made in it")
CTX_SET_CURRENT = _op(0x0034, "CTX_SET_CURRENT", "ctx:u64", deferrable=True, context=False, names="ctx:context",
                      doc="context used by later calls (0: none)")
CTX_GET_CURRENT = _op(0x0035, "CTX_GET_CURRENT", "", "ctx:u64", context=False, doc="cuCtxGetCurrent")
CTX_SYNCHRONIZE = _op(0x0036, "CTX_SYNCHRONIZE", doc="cuCtxSynchronize")
CTX_GET_LIMIT = _op(0x0037, "CTX_GET_LIMIT", "limit:u32", "value:u64", doc="cuCtxGetLimit(limit) -> value")
CTX_SET_LIMIT = _op(0x0038, "CTX_SET_LIMIT", "limit:u32 value:u64", doc="cuCtxSetLimit(limit, value)")
CTX_GET_STREAM_PRIORITY_RANGE = _op(0x0039, "CTX_GET_STREAM_PRIORITY_RANGE", "", "least:i32 greatest:i32",
                                    doc="cuCtxGetStreamPriorityRange -> least, greatest")

# Memory (0x004x). Device pointers are real (backend) addresses, range-checked against the session's own.
MEM_ALLOC = _op(0x0040, "MEM_ALLOC", "size:u64", "dptr:u64", creates="memory", doc="cuMemAlloc(size) -> dptr")
MEM_FREE = _op(0x0041, "MEM_FREE", "dptr:u64", names="dptr:memory", doc="cuMemFree(dptr)")
MEM_GET_INFO = _op(0x0042, "MEM_GET_INFO", "", "free:u64 total:u64", doc="cuMemGetInfo -> free, total")
# cuMemcpyHtoD returns once the source is staged, before the DMA ends (CUDA's pageable-copy rule), so a client
# that knows the destination is valid may defer it like an asynchronous copy.
MEMCPY_HTOD = _op(0x0043, "MEMCPY_HTOD", "dst:u64", deferrable=True, request_bulk="bytes to copy",
                  doc="cuMemcpyHtoD(dst)")
MEMCPY_DTOH = _op(0x0044, "MEMCPY_DTOH", "src:u64 size:u64", reply_bulk="bytes copied",
                  doc="cuMemcpyDtoH(src, n)")
MEMCPY_DTOD = _op(0x0045, "MEMCPY_DTOD", "dst:u64 src:u64 size:u64", doc="cuMemcpyDtoD(dst, src, n)")
MEMCPY_HTOD_ASYNC = _op(0x0046, "MEMCPY_HTOD_ASYNC", "dst:u64 stream:u64", deferrable=True,
                        request_bulk="bytes to copy", names="stream:stream", doc="cuMemcpyHtoDAsync(dst, stream)")
MEMCPY_DTOH_ASYNC = _op(0x0047, "MEMCPY_DTOH_ASYNC", "src:u64 size:u64 stream:u64", reply_bulk="bytes copied",
                        names="stream:stream",
                        doc="cuMemcpyDtoHAsync(src, n, stream); replies once the bytes are read")
MEMCPY_DTOD_ASYNC = _op(0x0048, "MEMCPY_DTOD_ASYNC", "dst:u64 src:u64 size:u64 stream:u64", deferrable=True,
                        names="stream:stream", doc="cuMemcpyDtoDAsync(dst, src, n, stream)")
MEMSET_D8 = _op(0x0049, "MEMSET_D8", "dst:u64 value:u32 count:u64", doc="cuMemsetD8(dst, value, count)")
MEMSET_D32 = _op(0x004A, "MEMSET_D32", "dst:u64 value:u32 count:u64", doc="cuMemsetD32(dst, value, count)")
MEMSET_D8_ASYNC = _op(0x004B, "MEMSET_D8_ASYNC", "dst:u64 value:u32 count:u64 stream:u64", deferrable=True,
                      names="stream:stream", doc="cuMemsetD8Async(dst, value, count, stream)")
MEMSET_D32_ASYNC = _op(0x004C, "MEMSET_D32_ASYNC", "dst:u64 value:u32 count:u64 stream:u64", deferrable=True,
                       names="stream:stream", doc="cuMemsetD32Async(dst, value, count, stream)")
# A big host-to-device copy whose bytes come over the session's copy links as LINK_PARTs (part j on link j mod
# `links`, the first `links` of those joined), not as this frame's bulk; sync 1: cuMemcpyHtoD's (the NULL stream,
# then a synchronize), 0: an asynchronous copy on `stream`. seq counts the session's linked copies from 1.
MEMCPY_HTOD_LINKED = _op(0x004D, "MEMCPY_HTOD_LINKED",
                         "dst:u64 stream:u64 size:u64 seq:u32 parts:u32 links:u32 sync:u32",
                         deferrable=True, names="stream:stream",
                         doc="cuMemcpyHtoD(Async) of `size` bytes in `parts` parts sent over the copy links")
# An asynchronous host-to-device copy whose bulk is its `size` bytes coded as runs of 8-byte words
# (rgpu.protocol.runs; docs/protocol.md, "Coded copies"): llama.cpp's row indices and masks are a few KB so.
MEMCPY_HTOD_RUNS = _op(0x004E, "MEMCPY_HTOD_RUNS", "dst:u64 stream:u64 size:u64", deferrable=True,
                       request_bulk="the copy's bytes coded as runs", names="stream:stream",
                       doc="cuMemcpyHtoDAsync(dst, stream) of `size` bytes (at most runs.MAX_COPY_BYTES) sent coded")

# Modules and launches (0x005x).
MODULE_LOAD_DATA = _op(0x0050, "MODULE_LOAD_DATA", "", "module:u64", request_bulk="image: PTX, cubin or fatbin",
                       creates="module", doc="cuModuleLoadData")
MODULE_UNLOAD = _op(0x0051, "MODULE_UNLOAD", "module:u64", names="module:module", doc="cuModuleUnload")
MODULE_GET_FUNCTION = _op(0x0052, "MODULE_GET_FUNCTION", "module:u64", "function:u64 count:u32",
                          request_bulk="name (UTF-8)", reply_bulk="count x (u32 offset, u32 size)",
                          items="offset:u32 size:u32", creates="function", names="module:module",
                          doc="cuModuleGetFunction -> function, parameter count (+ layout: saves a round trip)")
MODULE_GET_GLOBAL = _op(0x0053, "MODULE_GET_GLOBAL", "module:u64", "dptr:u64 size:u64",
                        request_bulk="name (UTF-8)", names="module:module", doc="cuModuleGetGlobal -> dptr, size")
FUNC_GET_PARAM_INFO = _op(0x0054, "FUNC_GET_PARAM_INFO", "function:u64", "count:u32",
                          reply_bulk="count x (u32 offset, u32 size)", items="offset:u32 size:u32",
                          names="function:function",
                          doc="parameter layout (cuFuncGetParamInfo)")
LAUNCH_KERNEL = _op(0x0055, "LAUNCH_KERNEL",
                    "function:u64 grid_x:u32 grid_y:u32 grid_z:u32 block_x:u32 block_y:u32 block_z:u32 "
                    "shared_mem:u32 stream:u64", deferrable=True,
                    request_bulk="parameter buffer laid out per FUNC_GET_PARAM_INFO",
                    names="function:function stream:stream",
                    doc="cuLaunchKernel(f, grid xyz, block xyz, shmem, stream)")
FUNC_GET_ATTRIBUTES = _op(0x0056, "FUNC_GET_ATTRIBUTES", "function:u64 count:u32", "count:u32",
                          reply_bulk="count x i32, attributes 0..count-1 (INT32_MIN: unsupported)", items="value:i32",
                          names="function:function",
                          doc="all cuFuncGetAttribute values in one call, for client-side caching")
FUNC_SET_ATTRIBUTE = _op(0x0057, "FUNC_SET_ATTRIBUTE", "function:u64 attrib:u32 value:i32", deferrable=True,
                         names="function:function", doc="cuFuncSetAttribute(f, attribute, value)")
OCCUPANCY_MAX_BLOCKS = _op(0x0058, "OCCUPANCY_MAX_BLOCKS", "function:u64 block_size:i32 dynamic_smem:u64 flags:u32",
                           "blocks:i32", names="function:function",
                           doc="cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(f, block, dyn smem, flags)")
MODULE_LOAD_CACHED = _op(0x0059, "MODULE_LOAD_CACHED", "sha256:b32", "module:u64", creates="module",
                         doc="cuModuleLoadData of an image the server has cached, by SHA-256; NOT_FOUND: "
                             "send it with MODULE_LOAD_DATA")

LAUNCH_KERNEL_EX = _op(0x005A, "LAUNCH_KERNEL_EX",
                       "function:u64 grid_x:u32 grid_y:u32 grid_z:u32 block_x:u32 block_y:u32 block_z:u32 "
                       "shared_mem:u32 stream:u64 count:u32", deferrable=True,
                       request_bulk="count x CUlaunchAttribute (LAUNCH_ATTRIBUTE_SIZE bytes: u32 id, 4 pad, 64-byte "
                                    "value; event handles in the value are session handles), then the parameter "
                                    "buffer", names="function:function stream:stream",
                       doc="cuLaunchKernelEx(config with attributes, f); attributes forwarded as they are")

# JIT linking (1.8): a linker invocation lives on the server, as the driver's CUlinkState, from JIT_LINK_CREATE to
# JIT_LINK_DESTROY. Options travel as (u32 CUjit_option, 4 pad, u64 value) records; only these, whose value is a
# plain number, go to the server: the program's log buffers and wall-time slot stay on the client, which fills them
# from the logs the replies carry.
JIT_OPTION_SIZE = 16
FORWARDED_JIT_OPTIONS = {
    0: "MAX_REGISTERS", 1: "THREADS_PER_BLOCK", 7: "OPTIMIZATION_LEVEL", 8: "TARGET_FROM_CUCONTEXT", 9: "TARGET",
    10: "FALLBACK_STRATEGY", 11: "GENERATE_DEBUG_INFO", 12: "LOG_VERBOSE", 13: "GENERATE_LINE_INFO", 14: "CACHE_MODE",
    15: "NEW_SM3X_OPT", 16: "FAST_COMPILE", 20: "LTO", 21: "FTZ", 22: "PREC_DIV", 23: "PREC_SQRT", 24: "FMA",
    29: "OPTIMIZE_UNUSED_DEVICE_VARIABLES", 30: "POSITION_INDEPENDENT_CODE", 31: "MIN_CTA_PER_SM",
    32: "MAX_THREADS_PER_BLOCK", 33: "OVERRIDE_DIRECTIVE_VALUES", 34: "SPLIT_COMPILE",
}
MAX_JIT_OPTIONS = 64
MAX_JIT_LOG = 1 << 20  # the most bytes of each log a reply carries (the program's buffer may be smaller)
MAX_JIT_LINKS = 16  # open linker invocations per session
MAX_JIT_LINK_BYTES = 64 << 20  # the inputs of one invocation, in all (what one module image may be)
MAX_JIT_IMAGE = 256 << 20  # the most a linked image may be, which a client allocates before it reads it
JIT_INPUT_TYPES = {0: "CUBIN", 1: "PTX", 2: "FATBINARY", 3: "OBJECT", 4: "LIBRARY", 5: "NVVM"}
JIT_LINK_CREATE = _op(0x005B, "JIT_LINK_CREATE", "count:u32 info_size:u32 error_size:u32", "link:u64",
                      request_bulk="count x JIT option record", creates="jit_link",
                      doc="cuLinkCreate in the current context (1.8); info_size/error_size: how much of each log "
                          "the replies may carry (at most MAX_JIT_LOG)")
JIT_LINK_ADD = _op(0x005C, "JIT_LINK_ADD", "link:u64 type:u32 count:u32 name_size:u32",
                   "status:u32 info_size:u32 error_size:u32 wall_ms:f32", names="link:jit_link",
                   request_bulk="count x JIT option record, the input's name (name_size bytes, UTF-8), its bytes",
                   reply_bulk="the info log (info_size bytes), the error log (error_size bytes)",
                   doc="cuLinkAddData (1.8): `status` is the driver's answer, with the logs and the wall time as they "
                       "stand after it")
JIT_LINK_COMPLETE = _op(0x005D, "JIT_LINK_COMPLETE", "link:u64",
                        "status:u32 info_size:u32 error_size:u32 wall_ms:f32 image_size:u64 sha256:b32",
                        names="link:jit_link", reply_bulk="the info log, the error log",
                        doc="cuLinkComplete (1.8): the linked image's size and SHA-256 (the server caches it as a "
                            "module image, so MODULE_LOAD_CACHED loads it); its bytes come with JIT_LINK_READ")
JIT_LINK_READ = _op(0x005E, "JIT_LINK_READ", "link:u64 offset:u64 size:u32", names="link:jit_link",
                    reply_bulk="`size` bytes of the linked image from `offset`",
                    doc="part of a completed link's image (1.8)")
JIT_LINK_DESTROY = _op(0x005F, "JIT_LINK_DESTROY", "link:u64", names="link:jit_link", doc="cuLinkDestroy (1.8)")

# Streams (0x006x) and events (0x007x). Stream handle 0 is the current context's NULL stream.
STREAM_CREATE = _op(0x0060, "STREAM_CREATE", "flags:u32", "stream:u64", creates="stream",
                    doc="cuStreamCreate(flags)")
STREAM_DESTROY = _op(0x0061, "STREAM_DESTROY", "stream:u64", names="stream:stream", doc="cuStreamDestroy")
STREAM_SYNCHRONIZE = _op(0x0062, "STREAM_SYNCHRONIZE", "stream:u64", deferrable=True, names="stream:stream",
                         doc="cuStreamSynchronize; deferred (1.4): the server waits for the stream, in order, "
                             "before it runs the session's next request, and reports a failure later")
STREAM_QUERY = _op(0x0063, "STREAM_QUERY", "stream:u64", names="stream:stream",
                   doc="cuStreamQuery (status NOT_READY is an answer)")
STREAM_WAIT_EVENT = _op(0x0064, "STREAM_WAIT_EVENT", "stream:u64 event:u64 flags:u32", deferrable=True,
                        names="stream:stream event:event", doc="cuStreamWaitEvent")
STREAM_CREATE_WITH_PRIORITY = _op(0x0065, "STREAM_CREATE_WITH_PRIORITY", "flags:u32 priority:i32", "stream:u64",
                                  creates="stream", doc="cuStreamCreateWithPriority(flags, priority)")
STREAM_GET_INFO = _op(0x0066, "STREAM_GET_INFO", "stream:u64", "flags:u32 priority:i32 ctx:u64 id:u64",
                      names="stream:stream",
                      doc="cuStreamGetFlags, GetPriority, GetCtx, GetId in one answer (1.7): the stream's creation "
                          "flags and priority, its context's handle, the driver's stream id")
# A stream attribute's value is CUstreamAttrValue as it is (the 64-byte union launch attributes share; no handles).
STREAM_ATTRIBUTES = {1: "ACCESS_POLICY_WINDOW", 3: "SYNCHRONIZATION_POLICY", 8: "PRIORITY", 9: "MEM_SYNC_DOMAIN_MAP",
                     10: "MEM_SYNC_DOMAIN", 16: "NVLINK_UTIL_CENTRIC_SCHEDULING"}
STREAM_ATTRIBUTE_VALUE_SIZE = 64
STREAM_SET_ATTRIBUTE = _op(0x0067, "STREAM_SET_ATTRIBUTE", "stream:u64 id:u32",
                           request_bulk="the CUstreamAttrValue (STREAM_ATTRIBUTE_VALUE_SIZE bytes)",
                           names="stream:stream", doc="cuStreamSetAttribute(stream, id, value) (1.7)")
STREAM_GET_ATTRIBUTE = _op(0x0068, "STREAM_GET_ATTRIBUTE", "stream:u64 id:u32",
                           reply_bulk="the CUstreamAttrValue (STREAM_ATTRIBUTE_VALUE_SIZE bytes)",
                           names="stream:stream", doc="cuStreamGetAttribute(stream, id) (1.7)")
STREAM_COPY_ATTRIBUTES = _op(0x0069, "STREAM_COPY_ATTRIBUTES", "dst_stream:u64 src_stream:u64",
                             names="dst_stream:stream src_stream:stream",
                             doc="cuStreamCopyAttributes(dst, src) (1.7)")
# Stream memory operations (1.8; rgpu.protocol.memops): an operation is one record, numbered as
# CUstreamBatchMemOpType is, each on the stream in order as CUDA defines them (asynchronous: deferrable).
MEM_OP = "operation:u32 flags:u32 address:u64 value:u64"
STREAM_MEM_OP = _op(0x006A, "STREAM_MEM_OP", "stream:u64 " + MEM_OP, deferrable=True, names="stream:stream",
                    doc="cuStreamWaitValue32/64, cuStreamWriteValue32/64 (1.8): `operation` 1 WAIT_VALUE_32, "
                        "2 WRITE_VALUE_32, 4 WAIT_VALUE_64, 5 WRITE_VALUE_64, with the call's flags")
STREAM_BATCH_MEM_OP = _op(0x006B, "STREAM_BATCH_MEM_OP", "stream:u64 count:u32 flags:u32", deferrable=True,
                          request_bulk="count x (u32 operation, u32 flags, u64 address, u64 value)",
                          request_items=MEM_OP, names="stream:stream",
                          doc="cuStreamBatchMemOp(stream, count, operations, flags) (1.8): STREAM_MEM_OP's "
                              "operations and 3 FLUSH_REMOTE_WRITES, 6 BARRIER (address and value 0), in order")
EVENT_CREATE = _op(0x0070, "EVENT_CREATE", "flags:u32", "event:u64", creates="event", doc="cuEventCreate(flags)")
EVENT_DESTROY = _op(0x0071, "EVENT_DESTROY", "event:u64", names="event:event", doc="cuEventDestroy")
EVENT_RECORD = _op(0x0072, "EVENT_RECORD", "event:u64 stream:u64", deferrable=True,
                   names="event:event stream:stream", doc="cuEventRecord(event, stream)")
EVENT_SYNCHRONIZE = _op(0x0073, "EVENT_SYNCHRONIZE", "event:u64", names="event:event", doc="cuEventSynchronize")
EVENT_QUERY = _op(0x0074, "EVENT_QUERY", "event:u64", names="event:event",
                  doc="cuEventQuery (status NOT_READY is an answer)")
EVENT_ELAPSED_TIME = _op(0x0075, "EVENT_ELAPSED_TIME", "start:u64 end:u64", "ms:f32",
                         names="start:event end:event", doc="cuEventElapsedTime -> ms")

# 2D memory (0x008x).
# 2D copies: the host side of a copy travels packed (rows of `width` bytes, no pitch), so the wire carries
# exactly width x height bytes whatever the host pitch. kind: 1 host->device, 2 device->host, 3 device->device.
_COPY_2D = "kind:u32 dst:u64 dst_pitch:u64 src:u64 src_pitch:u64 width:u64 height:u64 stream:u64"
MEMCPY_2D = _op(0x0080, "MEMCPY_2D", _COPY_2D, request_bulk="packed rows (host->device)",
                reply_bulk="packed rows (device->host)", names="stream:stream",
                doc="cuMemcpy2D(kind, dst, dpitch, src, spitch, width, height, stream)")
MEMCPY_2D_ASYNC = _op(0x0081, "MEMCPY_2D_ASYNC", _COPY_2D, deferrable=True, request_bulk="packed rows",
                      names="stream:stream", doc="cuMemcpy2DAsync, host->device and device->device only")
_SET_2D = "dst:u64 pitch:u64 value:u32 element_size:u32 width:u64 height:u64 stream:u64"
MEMSET_2D = _op(0x0082, "MEMSET_2D", _SET_2D, names="stream:stream",
                doc="cuMemsetD2D8/16/32(dst, pitch, value, element size, width, height, stream)")
MEMSET_2D_ASYNC = _op(0x0083, "MEMSET_2D_ASYNC", _SET_2D, deferrable=True, names="stream:stream",
                      doc="cuMemsetD2D*Async")

# CUDA arrays, texture and surface objects (1.8). An array is a session handle; its elements' layout is the
# driver's own, so only copies reach them. An array copy is a 2D copy (rows of `width` bytes) whose ends are each
# the host (its rows packed in the bulk, as MEMCPY_2D's), device memory (`*_at` the first row's address, with its
# pitch) or an array (`*_at` its handle, `*_x` in bytes, `*_y` a row, `*_z` a slice); kind is the source's type |
# the destination's << 4, types 1 host, 2 device, 3 array, at least one an array. (`*_at`, not src/dst: a client
# of several servers must not route a copy by an array's handle as if it were an address.)
ARRAY_FORMATS = {0x01: 1, 0x02: 2, 0x03: 4, 0x08: 1, 0x09: 2, 0x0A: 4, 0x10: 2, 0x20: 4}  # CUarray_format: bytes
ARRAY_CREATE = _op(0x0084, "ARRAY_CREATE", "width:u64 height:u64 depth:u64 format:u32 channels:u32 flags:u32",
                   "array:u64", creates="array",
                   doc="cuArray3DCreate (1.8): formats of ARRAY_FORMATS, 1, 2 or 4 channels; height and depth 0 "
                       "for fewer dimensions")
ARRAY_DESTROY = _op(0x0085, "ARRAY_DESTROY", "array:u64", names="array:array", doc="cuArrayDestroy (1.8)")
_COPY_ARRAY = ("kind:u32 src_at:u64 src_x:u64 src_y:u64 src_z:u64 src_pitch:u64 dst_at:u64 dst_x:u64 dst_y:u64 "
               "dst_z:u64 dst_pitch:u64 width:u64 height:u64 stream:u64")
MEMCPY_ARRAY = _op(0x0086, "MEMCPY_ARRAY", _COPY_ARRAY, request_bulk="packed rows (from the host)",
                   reply_bulk="packed rows (to the host)", names="stream:stream",
                   doc="cuMemcpy2D/3D with an array end, one slice (1.8)")
MEMCPY_ARRAY_ASYNC = _op(0x0087, "MEMCPY_ARRAY_ASYNC", _COPY_ARRAY, deferrable=True, request_bulk="packed rows",
                         names="stream:stream", doc="the same, asynchronous; none to the host (1.8)")
# Texture and surface objects: the driver's structures as they are (CUDA_RESOURCE_DESC with an array's session
# handle in hArray, CUDA_TEXTURE_DESC, CUDA_RESOURCE_VIEW_DESC); the object is the driver's own number, which
# kernels take as a parameter.
RESOURCE_DESC_SIZE, TEXTURE_DESC_SIZE, RESOURCE_VIEW_DESC_SIZE = 144, 104, 112
TEX_OBJECT_CREATE = _op(0x0088, "TEX_OBJECT_CREATE", "view:u32", "object:u64",
                        request_bulk="CUDA_RESOURCE_DESC, CUDA_TEXTURE_DESC, CUDA_RESOURCE_VIEW_DESC if view",
                        doc="cuTexObjectCreate (1.8)")
TEX_OBJECT_DESTROY = _op(0x0089, "TEX_OBJECT_DESTROY", "object:u64", doc="cuTexObjectDestroy (1.8)")
SURF_OBJECT_CREATE = _op(0x008A, "SURF_OBJECT_CREATE", "", "object:u64", request_bulk="CUDA_RESOURCE_DESC",
                         doc="cuSurfObjectCreate (1.8): an array's")
SURF_OBJECT_DESTROY = _op(0x008B, "SURF_OBJECT_DESTROY", "object:u64", doc="cuSurfObjectDestroy (1.8)")

# cuBLAS (0x009x) and cuBLASLt (0x00Ax). Handles and descriptors live on the client until execution: only
# what needs the GPU travels (see docs/protocol.md, "Libraries").
BLAS_CREATE = _op(0x0090, "BLAS_CREATE", "", "handle:u64", creates="blas",
                  doc="cublasCreate in the current context -> handle")
BLAS_DESTROY = _op(0x0091, "BLAS_DESTROY", "handle:u64", names="handle:blas", doc="cublasDestroy")
_GEMM = ("handle:u64 stream:u64 transa:u32 transb:u32 m:i64 n:i64 k:i64 "
         "a:u64 a_type:u32 lda:i64 stride_a:i64 b:u64 b_type:u32 ldb:i64 stride_b:i64 "
         "c:u64 c_type:u32 ldc:i64 stride_c:i64 batch:i64 compute_type:u32 algo:i32 pointer_mode:u32 "
         "math_mode:u32 alpha:b16 beta:b16 workspace:u64 workspace_size:u64")
BLAS_GEMM = _op(0x0092, "BLAS_GEMM", _GEMM, deferrable=True,
                names="handle:blas stream:stream",
                doc="cublasGemmStridedBatchedEx(handle, stream, transa, transb, m, n, k, A, Atype, lda, strideA, "
                    "B..., C..., batch, compute type, algo, pointer mode, math mode, alpha, beta, workspace, size)")
LT_HEURISTIC = _op(0x00A0, "LT_HEURISTIC", "requested:i32", "count:u32",
                   request_bulk="descriptors (matmul, layouts A-D, preference)",
                   reply_bulk="count x cublasLtMatmulHeuristicResult_t (96 bytes)", items="result:b96",
                   doc="cublasLtMatmulAlgoGetHeuristic(requested count)")
LT_MATMUL = _op(0x00A1, "LT_MATMUL", "stream:u64 a:u64 b:u64 c:u64 d:u64 workspace:u64 workspace_size:u64 "
                "alpha:b16 beta:b16", deferrable=True, request_bulk="descriptors (matmul, layouts A-D, algo)",
                names="stream:stream", doc="cublasLtMatmul(stream, A, B, C, D, workspace, size, alpha, beta)")
# Arrays of pointers: a, b, c are device addresses of `batch` u64 matrix pointers each; strides are unused. The
# server reads the arrays once the stream has reached the call and checks every pointer (it may block).
BLAS_GEMM_BATCHED = _op(0x0093, "BLAS_GEMM_BATCHED", _GEMM, deferrable=True, names="handle:blas stream:stream",
                        doc="cublasGemmBatchedEx(handle, stream, ..., Aarray, ..., Barray, ..., Carray, ..., batch, "
                            "...), the same fields as BLAS_GEMM")
# cuDNN (0x00Bx): backend descriptors are built on the client and mirrored on the server when finalized.
DNN_CREATE = _op(0x00B0, "DNN_CREATE", "", "handle:u64", creates="dnn",
                 doc="cudnnCreate in the current context -> handle")
DNN_DESTROY = _op(0x00B1, "DNN_DESTROY", "handle:u64", names="handle:dnn", doc="cudnnDestroy")
DNN_FINALIZE = _op(0x00B2, "DNN_FINALIZE", "type:u32", "descriptor:u64 status:u32",
                   request_bulk="the descriptor's attributes", creates="dnn_descriptor",
                   doc="cudnnBackendCreateDescriptor(type) + SetAttribute... + Finalize -> descriptor, cuDNN status")
DNN_GET_ATTRIBUTE = _op(0x00B3, "DNN_GET_ATTRIBUTE", "descriptor:u64 name:u32 type:u32 requested:i64",
                        "status:u32 count:i64",
                        request_bulk="for descriptor-typed attributes: requested x u32 descriptor types",
                        reply_bulk="count elements (descriptors as u64 handles)", names="descriptor:dnn_descriptor",
                        doc="cudnnBackendGetAttribute(descriptor, name, type, requested) -> cuDNN status, count")
DNN_DESTROY_DESCRIPTOR = _op(0x00B4, "DNN_DESTROY_DESCRIPTOR", "descriptor:u64", deferrable=True,
                             names="descriptor:dnn_descriptor", doc="cudnnBackendDestroyDescriptor")
DNN_EXECUTE = _op(0x00B5, "DNN_EXECUTE", "handle:u64 plan:u64 stream:u64", deferrable=True,
                  request_bulk="the variant pack's attributes",
                  names="handle:dnn plan:dnn_descriptor stream:stream",
                  doc="cudnnBackendExecute(handle, plan, variant pack) on a stream")
DNN_BN_INFERENCE = _op(0x00B6, "DNN_BN_INFERENCE",
                       "handle:u64 stream:u64 mode:u32 alpha:f64 beta:f64 epsilon:f64 x:u64 y:u64 scale:u64 "
                       "bias:u64 mean:u64 var:u64", deferrable=True,
                       request_bulk="tensor descriptors of x, y and the scale/bias/mean/var tensor",
                       names="handle:dnn stream:stream",
                       doc="cudnnBatchNormalizationForwardInference(handle, stream, mode, alpha, beta, epsilon, x, "
                           "y, scale, bias, mean, var)")
DNN_BN_SIZES = _op(0x00B7, "DNN_BN_SIZES", "handle:u64 which:u32 mode:u32 ops:u32", "size:u64",
                   request_bulk="tensor descriptors of x and of the statistics", names="handle:dnn",
                   doc="batch-norm training workspace/reserve sizes (which: 0 forward workspace, 1 reserve, "
                       "2 backward workspace)")
DNN_BN_TRAINING = _op(0x00B8, "DNN_BN_TRAINING",
                      "handle:u64 stream:u64 mode:u32 ops:u32 alpha:f64 beta:f64 factor:f64 epsilon:f64 x:u64 y:u64 "
                      "scale:u64 bias:u64 running_mean:u64 running_var:u64 saved_mean:u64 saved_inv_var:u64 "
                      "workspace:u64 workspace_size:u64 reserve:u64 reserve_size:u64", deferrable=True,
                      request_bulk="tensor descriptors of x, y and the statistics", names="handle:dnn stream:stream",
                      doc="cudnnBatchNormalizationForwardTrainingEx(handle, stream, mode, ops, alpha, beta, factor, "
                          "epsilon, x, y, scale, bias, running mean/var, saved mean/inverse variance, workspace, "
                          "size, reserve, size)")
DNN_BN_BACKWARD = _op(0x00B9, "DNN_BN_BACKWARD",
                      "handle:u64 stream:u64 mode:u32 ops:u32 alpha_data:f64 beta_data:f64 alpha_params:f64 "
                      "beta_params:f64 epsilon:f64 x:u64 dy:u64 dx:u64 scale:u64 dscale:u64 dbias:u64 "
                      "saved_mean:u64 saved_inv_var:u64 workspace:u64 workspace_size:u64 reserve:u64 "
                      "reserve_size:u64", deferrable=True,
                      request_bulk="tensor descriptors of x, dy, dx and the statistics",
                      names="handle:dnn stream:stream",
                      doc="cudnnBatchNormalizationBackwardEx(handle, stream, mode, ops, alpha/beta data, alpha/beta "
                          "params, epsilon, x, dy, dx, scale, dscale, dbias, saved mean/inverse variance, "
                          "workspace, size, reserve, size)")

# Virtual memory management (0x00C0-0x00CF). Physical allocations are session handles; reservations and
# mappings are named by address. Shareable handle types never cross the network (see docs/protocol.md, "VMM").
_ALLOC_PROPS = "device:i32 handle_types:u32 compression:u32 usage:u32"
MEM_GET_GRANULARITY = _op(0x00C0, "MEM_GET_GRANULARITY", "device:i32 option:u32 handle_types:u32 compression:u32",
                          "granularity:u64", context=False,
                          doc="cuMemGetAllocationGranularity(device, option: 0 minimum / 1 recommended)")
MEM_CREATE = _op(0x00C1, "MEM_CREATE", "size:u64 " + _ALLOC_PROPS + " flags:u64", "handle:u64",
                 creates="vmm_allocation", doc="cuMemCreate(size, pinned device memory on device, flags) -> handle")
MEM_RELEASE = _op(0x00C2, "MEM_RELEASE", "handle:u64", names="handle:vmm_allocation",
                  doc="cuMemRelease (the memory goes when its last mapping does)")
MEM_ADDRESS_RESERVE = _op(0x00C3, "MEM_ADDRESS_RESERVE", "size:u64 alignment:u64 addr:u64 flags:u64", "ptr:u64",
                          doc="cuMemAddressReserve(size, alignment, hint, flags) -> ptr")
MEM_ADDRESS_FREE = _op(0x00C4, "MEM_ADDRESS_FREE", "ptr:u64 size:u64", doc="cuMemAddressFree(ptr, size)")
MEM_MAP = _op(0x00C5, "MEM_MAP", "ptr:u64 size:u64 offset:u64 handle:u64 flags:u64", names="handle:vmm_allocation",
              doc="cuMemMap(ptr, size, offset, handle, flags)")
MEM_UNMAP = _op(0x00C6, "MEM_UNMAP", "ptr:u64 size:u64", doc="cuMemUnmap(ptr, size): whole mappings only")
MEM_SET_ACCESS = _op(0x00C7, "MEM_SET_ACCESS", "ptr:u64 size:u64 count:u32",
                     request_bulk="count x (u32 location type, i32 location id, u32 flags)",
                     doc="cuMemSetAccess(ptr, size, descriptors)")
MEM_GET_ACCESS = _op(0x00C8, "MEM_GET_ACCESS", "ptr:u64 location_type:u32 location_id:i32", "flags:u64",
                     doc="cuMemGetAccess(location, ptr) -> flags")
MEM_GET_ALLOCATION_PROPERTIES = _op(0x00C9, "MEM_GET_ALLOCATION_PROPERTIES", "handle:u64", _ALLOC_PROPS,
                                    context=False, names="handle:vmm_allocation",
                                    doc="cuMemGetAllocationPropertiesFromHandle -> device, handle types, "
                                        "compression, usage")
MEM_RETAIN_ALLOCATION_HANDLE = _op(0x00CA, "MEM_RETAIN_ALLOCATION_HANDLE", "ptr:u64", "handle:u64 size:u64",
                                   context=False,
                                   doc="cuMemRetainAllocationHandle(address in a mapping) -> handle (one more "
                                       "reference), the allocation's size")

# Stream-ordered memory (0x00D0-0x00DF). Pools are session handles; pool 0 in MEM_ALLOC_ASYNC is the current
# pool of the stream's device. Every session has default pools of its own, never the device's shared one.
MEM_POOL_CREATE = _op(0x00D0, "MEM_POOL_CREATE", "device:i32 handle_types:u32 max_size:u64 usage:u32", "pool:u64",
                      creates="mem_pool", doc="cuMemPoolCreate(pinned device memory on device, handle types, "
                                              "max size, usage) -> pool")
MEM_POOL_DESTROY = _op(0x00D1, "MEM_POOL_DESTROY", "pool:u64", names="pool:mem_pool",
                       doc="cuMemPoolDestroy (its outstanding allocations go with it)")
MEM_POOL_GET_DEFAULT = _op(0x00D2, "MEM_POOL_GET_DEFAULT", "device:i32", "pool:u64",
                           doc="cuDeviceGetDefaultMemPool: the session's default pool of the device")
MEM_POOL_GET_CURRENT = _op(0x00D3, "MEM_POOL_GET_CURRENT", "device:i32", "pool:u64", doc="cuDeviceGetMemPool")
MEM_POOL_SET_CURRENT = _op(0x00D4, "MEM_POOL_SET_CURRENT", "device:i32 pool:u64", names="pool:mem_pool",
                           doc="cuDeviceSetMemPool")
MEM_ALLOC_ASYNC = _op(0x00D5, "MEM_ALLOC_ASYNC", "size:u64 pool:u64 stream:u64", "dptr:u64",
                      names="pool:mem_pool stream:stream",
                      doc="cuMemAllocFromPoolAsync(size, pool or 0 for the current one, stream) -> dptr")
MEM_FREE_ASYNC = _op(0x00D6, "MEM_FREE_ASYNC", "dptr:u64 stream:u64", deferrable=True, names="stream:stream",
                     doc="cuMemFreeAsync(dptr, stream)")
MEM_POOL_TRIM = _op(0x00D7, "MEM_POOL_TRIM", "pool:u64 keep:u64", names="pool:mem_pool",
                    doc="cuMemPoolTrimTo(pool, bytes to keep)")
MEM_POOL_SET_ATTRIBUTE = _op(0x00D8, "MEM_POOL_SET_ATTRIBUTE", "pool:u64 attrib:u32 value:u64",
                             names="pool:mem_pool", doc="cuMemPoolSetAttribute (int attributes as u64)")
MEM_POOL_GET_ATTRIBUTE = _op(0x00D9, "MEM_POOL_GET_ATTRIBUTE", "pool:u64 attrib:u32", "value:u64",
                             names="pool:mem_pool", doc="cuMemPoolGetAttribute (int attributes as u64)")
MEM_POOL_SET_ACCESS = _op(0x00DA, "MEM_POOL_SET_ACCESS", "pool:u64 count:u32",
                          request_bulk="count x (u32 location type, i32 location id, u32 flags)",
                          names="pool:mem_pool", doc="cuMemPoolSetAccess(pool, descriptors)")
MEM_POOL_GET_ACCESS = _op(0x00DB, "MEM_POOL_GET_ACCESS", "pool:u64 location_type:u32 location_id:i32",
                          "flags:u32", names="pool:mem_pool", doc="cuMemPoolGetAccess(pool, location) -> flags")

# Inter-process sharing (0x0100-0x010F, 1.8): memory and events one session exports for others of the server to
# open. A handle is 64 bytes the server minted at random (CUipcMemHandle's and CUipcEventHandle's size): holding it
# is the only way to name the export, as any process of a machine holding a CUDA IPC handle may open it.
IPC_HANDLE_SIZE = 64
IPC_GET_MEM_HANDLE = _op(0x0100, "IPC_GET_MEM_HANDLE", "dptr:u64", "handle:b64", names="dptr:memory",
                         doc="cuIpcGetMemHandle of an allocation's start (1.8)")
IPC_OPEN_MEM_HANDLE = _op(0x0101, "IPC_OPEN_MEM_HANDLE", "handle:b64 flags:u32", "dptr:u64 size:u64",
                          creates="memory", doc="cuIpcOpenMemHandle in the current context (1.8): another "
                                                "session's export; its memory is this session's to use, not to free")
IPC_CLOSE_MEM_HANDLE = _op(0x0102, "IPC_CLOSE_MEM_HANDLE", "dptr:u64", "opens:u32", names="dptr:memory",
                           doc="cuIpcCloseMemHandle (1.8): how many opens of that memory remain (one handle opened "
                               "twice is one mapping, gone with its last close)")
IPC_GET_EVENT_HANDLE = _op(0x0103, "IPC_GET_EVENT_HANDLE", "event:u64", "handle:b64", names="event:event",
                           doc="cuIpcGetEventHandle of an event made INTERPROCESS | DISABLE_TIMING (1.8)")
IPC_OPEN_EVENT_HANDLE = _op(0x0104, "IPC_OPEN_EVENT_HANDLE", "handle:b64", "event:u64", creates="event",
                            doc="cuIpcOpenEventHandle in the current context (1.8)")

# Occupancy (0x0110-0x011F): what cuOccupancyMaxPotentialBlockSize needs, in one round trip.
OCCUPANCY_TABLE = _op(0x0110, "OCCUPANCY_TABLE", "function:u64 flags:u32 count:u32", "count:u32",
                      request_bulk="count x (u32 block size, u64 dynamic shared memory)",
                      reply_bulk="count x i32 active blocks per multiprocessor", names="function:function",
                      doc="cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags for several block sizes (the client "
                          "runs the program's shared-memory callback)")
OCCUPANCY_AVAILABLE_SMEM = _op(0x0111, "OCCUPANCY_AVAILABLE_SMEM", "function:u64 blocks:i32 block_size:i32",
                               "bytes:u64", names="function:function",
                               doc="cuOccupancyAvailableDynamicSMemPerBlock(f, blocks per SM, block size)")
OCCUPANCY_CLUSTERS = _op(0x0112, "OCCUPANCY_CLUSTERS",
                         "function:u64 which:u32 grid_x:u32 grid_y:u32 grid_z:u32 block_x:u32 block_y:u32 block_z:u32 "
                         "shared_mem:u32 count:u32", "value:i32",
                         request_bulk="count x CUlaunchAttribute (as LAUNCH_KERNEL_EX's)", names="function:function",
                         doc="which 0: cuOccupancyMaxActiveClusters, 1: cuOccupancyMaxPotentialClusterSize, for a "
                             "launch of that shape with those attributes (1.7)")

# Tensor maps (0x0120-0x012F): TMA descriptors, which Triton's and XLA's Hopper kernels take as parameters. The
# map is the server driver's opaque 128 bytes, returned as-is; arrays travel as fixed fields, zero past `rank`.
def _array(name, type_, indices):
    return " ".join(f"{name}{i}:{type_}" for i in indices)


_TENSOR = f"data_type:u32 rank:u32 address:u64 {_array('dim', 'u64', range(5))} {_array('stride', 'u64', range(1, 5))}"
_TMA_MODES = f"{_array('element_stride', 'u32', range(5))} interleave:u32 swizzle:u32 l2_promotion:u32 oob_fill:u32"
TENSOR_MAP_ENCODE_TILED = _op(0x0120, "TENSOR_MAP_ENCODE_TILED",
                              f"{_TENSOR} {_array('box', 'u32', range(5))} {_TMA_MODES}", "tensor_map:b128",
                              context=False,
                              doc="cuTensorMapEncodeTiled: dims and box per dimension, byte strides of dimensions "
                                  "1..rank-1 -> CUtensorMap (the tensor must lie in the session's memory)")
TENSOR_MAP_ENCODE_IM2COL = _op(0x0121, "TENSOR_MAP_ENCODE_IM2COL",
                               f"{_TENSOR} {_array('lower', 'i32', range(3))} {_array('upper', 'i32', range(3))} "
                               f"channels_per_pixel:u32 pixels_per_column:u32 {_TMA_MODES}",
                               "tensor_map:b128", context=False,
                               doc="cuTensorMapEncodeIm2col: as TENSOR_MAP_ENCODE_TILED, with the pixel box's "
                                   "corners in dimensions 1..rank-2 instead of a box")
TENSOR_MAP_REPLACE_ADDRESS = _op(0x0122, "TENSOR_MAP_REPLACE_ADDRESS", "tensor_map:b128 address:u64",
                                 "tensor_map:b128", context=False,
                                 doc="cuTensorMapReplaceAddress(map, address) -> the map with the new address (only "
                                     "a map this session encoded, moved to memory it owns)")

# Stream capture and CUDA graphs (0x00Ex, 0x00Fx, 0x010x). Graphs, executable graphs and nodes are named by
# handles the client mints (CLIENT_HANDLE_BIT set, kind in bits 56..62, see rgpu.session.handles), so creating
# one needs no round trip: capture, instantiate and launch are all deferred, and replaying a captured graph is
# one GRAPH_LAUNCH however many nodes it has.
CLIENT_HANDLE_BIT = 1 << 63
STREAM_BEGIN_CAPTURE = _op(0x00E0, "STREAM_BEGIN_CAPTURE", "stream:u64 mode:u32 graph:u64", deferrable=True,
                           names="stream:stream",
                           doc="cuStreamBeginCapture(stream, mode); `graph`: the client-minted handle the capture's "
                               "graph will have (STREAM_END_CAPTURE names it again)")
STREAM_END_CAPTURE = _op(0x00E1, "STREAM_END_CAPTURE", "stream:u64 graph:u64", deferrable=True,
                         names="stream:stream",
                         doc="cuStreamEndCapture(stream) -> the captured graph, as client-minted handle `graph`")
GRAPH_INSTANTIATE = _op(0x00E2, "GRAPH_INSTANTIATE", "graph:u64 exec:u64 flags:u64", deferrable=True,
                        names="graph:graph", doc="cuGraphInstantiateWithFlags(graph, flags) -> client-minted `exec`")
GRAPH_LAUNCH = _op(0x00E3, "GRAPH_LAUNCH", "exec:u64 stream:u64", deferrable=True,
                   names="exec:graph_exec stream:stream", doc="cuGraphLaunch(exec, stream)")
GRAPH_EXEC_UPDATE = _op(0x00E4, "GRAPH_EXEC_UPDATE", "exec:u64 graph:u64", "result:u32 error_node:u64",
                        names="exec:graph_exec graph:graph",
                        doc="cuGraphExecUpdate(exec, graph) -> CUgraphExecUpdateResult (not 0: the client returns "
                            "GRAPH_EXEC_UPDATE_FAILURE), the node that failed (0: none, or none the client named)")
GRAPH_DESTROY = _op(0x00E5, "GRAPH_DESTROY", "graph:u64", deferrable=True, names="graph:graph",
                    doc="cuGraphDestroy (and its nodes)")
GRAPH_EXEC_DESTROY = _op(0x00E6, "GRAPH_EXEC_DESTROY", "exec:u64", deferrable=True, names="exec:graph_exec",
                         doc="cuGraphExecDestroy")
GRAPH_UPLOAD = _op(0x00E7, "GRAPH_UPLOAD", "exec:u64 stream:u64", deferrable=True,
                   names="exec:graph_exec stream:stream", doc="cuGraphUpload(exec, stream)")
# The explicit graph API. A node operation with `graph` set adds node `node` (client-minted) after `deps`
# dependencies (request bulk: deps x u64 node handles first); with `graph` 0 it sets the parameters of
# existing node `node`, in its graph (`exec` 0) or in executable graph `exec`.
STREAM_CAPTURE_DEPENDENCIES = _op(0x00E8, "STREAM_CAPTURE_DEPENDENCIES", "stream:u64 graph:u64", "count:u32",
                                  names="stream:stream", reply_bulk="count x u64 node handles",
                                  doc="cuStreamGetCaptureInfo's dependency set of a stream capturing into `graph` "
                                      "(node handles minted by the server)")
STREAM_UPDATE_CAPTURE_DEPENDENCIES = _op(0x00E9, "STREAM_UPDATE_CAPTURE_DEPENDENCIES", "stream:u64 flags:u32 count:u32",
                                         deferrable=True, request_bulk="count x u64 node handles",
                                         names="stream:stream",
                                         doc="cuStreamUpdateCaptureDependencies(stream, nodes, flags: 0 add, 1 set)")
STREAM_BEGIN_CAPTURE_TO_GRAPH = _op(0x00EA, "STREAM_BEGIN_CAPTURE_TO_GRAPH",
                                   "stream:u64 mode:u32 graph:u64 deps:u32 edge_data:u32", deferrable=True,
                                   request_bulk="deps x u64 node handles of `graph`; then, with edge_data 1, deps x "
                                                "CUgraphEdgeData (8 bytes each, as GRAPH_EDGES_DATA's)",
                                   names="stream:stream graph:graph",
                                   doc="cuStreamBeginCaptureToGraph(stream, graph, deps, edge data, mode): capture "
                                       "into an existing graph, after `deps` (a conditional node's body too); "
                                       "STREAM_END_CAPTURE names the same graph (1.9)")
GRAPH_MEM = _op(0x00EB, "GRAPH_MEM", "device:i32 which:u32", "value:u64", context=False,
                doc="graph memory of the session on `device`: which 0 cuDeviceGraphMemTrim (value 0), 1-4 "
                    "cuDeviceGetGraphMemAttribute(USED_MEM_CURRENT, USED_MEM_HIGH, RESERVED_MEM_CURRENT, "
                    "RESERVED_MEM_HIGH), 5 and 6 reset USED_MEM_HIGH / RESERVED_MEM_HIGH to the current value "
                    "(cuDeviceSetGraphMemAttribute with 0); the figures are the session's own (1.9)")
GRAPH_CREATE = _op(0x00F0, "GRAPH_CREATE", "graph:u64 flags:u32", deferrable=True,
                   doc="cuGraphCreate(flags) -> client-minted `graph`")
GRAPH_KERNEL_NODE = _op(0x00F1, "GRAPH_KERNEL_NODE",
                        "graph:u64 node:u64 exec:u64 deps:u32 function:u64 grid_x:u32 grid_y:u32 grid_z:u32 "
                        "block_x:u32 block_y:u32 block_z:u32 shared_mem:u32 count:u32", deferrable=True,
                        request_bulk="deps x u64 node handles, count x launch attribute (as LAUNCH_KERNEL_EX), "
                                     "the parameter buffer", names="function:function",
                        doc="cuGraphAddKernelNode / cuGraphKernelNodeSetParams (+ SetAttribute) / "
                            "cuGraphExecKernelNodeSetParams")
GRAPH_MEMSET_NODE = _op(0x00F2, "GRAPH_MEMSET_NODE",
                        "graph:u64 node:u64 exec:u64 deps:u32 dst:u64 pitch:u64 value:u32 element_size:u32 "
                        "width:u64 height:u64", deferrable=True, request_bulk="deps x u64 node handles",
                        doc="cuGraphAddMemsetNode / cuGraphMemsetNodeSetParams / cuGraphExecMemsetNodeSetParams")
GRAPH_MEMCPY_NODE = _op(0x00F3, "GRAPH_MEMCPY_NODE",
                        "graph:u64 node:u64 exec:u64 deps:u32 dst:u64 dst_pitch:u64 src:u64 src_pitch:u64 "
                        "width:u64 height:u64", deferrable=True, request_bulk="deps x u64 node handles",
                        doc="cuGraphAddMemcpyNode (device to device, 1D or 2D) / cuGraphMemcpyNodeSetParams / "
                            "cuGraphExecMemcpyNodeSetParams")
GRAPH_OTHER_NODE = _op(0x00F4, "GRAPH_OTHER_NODE", "graph:u64 node:u64 deps:u32 type:u32 object:u64",
                       deferrable=True, request_bulk="deps x u64 node handles",
                       doc="cuGraphAdd{Empty,EventRecord,EventWait,ChildGraph}Node: type is CUgraphNodeType, "
                           "object the event or child graph (0 for an empty node)")
GRAPH_EDGES = _op(0x00F5, "GRAPH_EDGES", "graph:u64 count:u32 remove:u32", deferrable=True,
                  request_bulk="count x (u64 from, u64 to) node handles", names="graph:graph",
                  doc="cuGraphAddDependencies / cuGraphRemoveDependencies (remove=1)")
GRAPH_EDGES_DATA = _op(0x00FA, "GRAPH_EDGES_DATA", "graph:u64 count:u32 remove:u32", deferrable=True,
                       request_bulk="count x (u64 from, u64 to, CUgraphEdgeData: u8 from_port, u8 to_port, u8 type, "
                                    "5 zero bytes) node handles", names="graph:graph",
                       doc="cuGraphAddDependencies_v2 / cuGraphRemoveDependencies_v2 with edge data "
                           "(programmatic edges), 1.4")
GRAPH_CLONE = _op(0x00F6, "GRAPH_CLONE", "graph:u64 clone:u64 count:u32", deferrable=True,
                  request_bulk="count x (u64 original node, u64 client-minted clone node)", names="graph:graph",
                  doc="cuGraphClone(graph) -> client-minted `clone`, and its nodes")
GRAPH_DESTROY_NODE = _op(0x00F7, "GRAPH_DESTROY_NODE", "node:u64", deferrable=True,
                         doc="cuGraphDestroyNode (and its edges)")
GRAPH_NODE_ENABLE = _op(0x00FB, "GRAPH_NODE_ENABLE", "exec:u64 node:u64 enabled:u32", deferrable=True,
                        names="exec:graph_exec",
                        doc="cuGraphNodeSetEnabled(exec, node, enabled): a kernel, memset or memcpy node of the "
                            "graph `exec` was made from (1.9)")
GRAPH_EVENT_NODE_SET = _op(0x00FC, "GRAPH_EVENT_NODE_SET", "exec:u64 node:u64 event:u64", deferrable=True,
                           names="event:event",
                           doc="cuGraph{EventRecord,EventWait}NodeSetEvent (exec 0: the node in its graph) and "
                               "cuGraphExec{EventRecord,EventWait}NodeSetEvent (1.9)")
GRAPH_EXEC_CHILD_SET = _op(0x00FD, "GRAPH_EXEC_CHILD_SET", "exec:u64 node:u64 graph:u64", deferrable=True,
                           names="exec:graph_exec graph:graph",
                           doc="cuGraphExecChildGraphNodeSetParams(exec, node, graph): the child graph node's copy "
                               "in `exec` takes graph's parameters (the same topology) (1.9)")
GRAPH_CONDITIONAL_HANDLE = _op(0x00FE, "GRAPH_CONDITIONAL_HANDLE", "graph:u64 default_value:u32 flags:u32",
                               "handle:u64", names="graph:graph",
                               doc="cuGraphConditionalHandleCreate(graph, the graph's context, default, flags) -> "
                                   "the driver's handle, which the program's kernels pass to "
                                   "cudaGraphSetConditional (1.9)")
GRAPH_CONDITIONAL_NODE = _op(0x00FF, "GRAPH_CONDITIONAL_NODE",
                             "graph:u64 node:u64 deps:u32 handle:u64 type:u32 size:u32", deferrable=True,
                             request_bulk="deps x u64 node handles, then size x u64 client-minted graph handles "
                                          "for the node's bodies", names="graph:graph",
                             doc="cuGraphAddNode of a conditional node (type 0 IF, 1 WHILE, 2 SWITCH) on `handle`, "
                                 "one of `graph`'s: the bodies the driver makes get the client's handles; they go "
                                 "with the node (1.9)")
_NODE_INFO = ("node:u64 type:u32 deps:u32 function:u64 grid_x:u32 grid_y:u32 grid_z:u32 block_x:u32 block_y:u32 "
              "block_z:u32 shared_mem:u32 params:u32 dst:u64 dst_pitch:u64 src:u64 src_pitch:u64 value:u32 "
              "element_size:u32 width:u64 height:u64 object:u64")
GRAPH_NODE_INFO = _op(0x00F8, "GRAPH_NODE_INFO", "node:u64", _NODE_INFO,
                      reply_bulk="deps x u64 node handles, then `params` bytes of kernel parameters",
                      doc="one node's type, dependencies and parameters (kernel: function, shape, parameter "
                          "buffer; memset/memcpy: dst..height; event or child graph: object; function 0: a kernel "
                          "the session did not load, such as a library's)")
GRAPH_GET_NODES = _op(0x00F9, "GRAPH_GET_NODES", "graph:u64", "count:u32", names="graph:graph",
                      reply_bulk="count x (GRAPH_NODE_INFO's reply record, its deps, its parameters)",
                      doc="every node of a graph -- a captured one too -- with handles the server mints for nodes "
                          "the client has not named, in a topological order")

# Several devices of one server (0x013x): peer access between the session's contexts, and copies between
# devices done on the server. Contexts are named by handle; `dst_ctx`/`src_ctx` must be the contexts (devices)
# the two ranges were allocated in.
DEVICE_CAN_ACCESS_PEER = _op(0x0130, "DEVICE_CAN_ACCESS_PEER", "device:i32 peer:i32", "can:i32", context=False,
                             doc="cuDeviceCanAccessPeer(device, peer)")
CTX_ENABLE_PEER_ACCESS = _op(0x0131, "CTX_ENABLE_PEER_ACCESS", "peer_ctx:u64 flags:u32",
                             doc="cuCtxEnablePeerAccess(peer_ctx, flags): the current context may access peer_ctx's "
                                 "memory")
CTX_DISABLE_PEER_ACCESS = _op(0x0132, "CTX_DISABLE_PEER_ACCESS", "peer_ctx:u64", doc="cuCtxDisablePeerAccess")
MEMCPY_PEER = _op(0x0133, "MEMCPY_PEER", "dst:u64 dst_ctx:u64 src:u64 src_ctx:u64 size:u64", context=False,
                  doc="cuMemcpyPeer(dst, dst_ctx, src, src_ctx, n), between devices of this server")
MEMCPY_PEER_ASYNC = _op(0x0134, "MEMCPY_PEER_ASYNC", "dst:u64 dst_ctx:u64 src:u64 src_ctx:u64 size:u64 stream:u64",
                        deferrable=True, names="stream:stream",
                        doc="cuMemcpyPeerAsync(dst, dst_ctx, src, src_ctx, n, stream); stream 0: the current "
                            "context's NULL stream")
# cuFFT (0x0200-0x021F). A plan is a description in the client library until it is made: FFT_PLAN makes the
# real plan on the server (one round trip, for its work size), executions are deferred, and the work area is
# memory the client owns. Plans are rank 1..3, so dimensions and embeddings travel as fixed fields (zero past
# `rank`); `plan_type` is the legacy cufftType (0: a cufftXt plan, described by the three cudaDataTypes only).
_FFT_LAYOUT = (f"plan_type:u32 input_type:u32 output_type:u32 exec_type:u32 rank:i32 {_array('n', 'i64', range(3))} "
               f"in_embed:u32 {_array('inembed', 'i64', range(3))} istride:i64 idist:i64 "
               f"out_embed:u32 {_array('onembed', 'i64', range(3))} ostride:i64 odist:i64 batch:i64")
FFT_PLAN = _op(0x0200, "FFT_PLAN", _FFT_LAYOUT, "plan:u64 work_size:u64 status:u32", creates="fft_plan",
               doc="cufftMakePlan* and cufftXtMakePlanMany(description) -> plan, work size, cuFFT status (a plan cuFFT "
                   "refuses is an answer, plan 0)")
FFT_ESTIMATE = _op(0x0201, "FFT_ESTIMATE", _FFT_LAYOUT, "work_size:u64 status:u32",
                   doc="cufftEstimate*, cufftGetSize* and cufftXtGetSizeMany(description) -> work size, cuFFT status")
FFT_EXEC = _op(0x0202, "FFT_EXEC", "plan:u64 stream:u64 input:u64 output:u64 work:u64 direction:i32 kind:u32",
               deferrable=True, names="plan:fft_plan stream:stream",
               doc="cufftExec{C2C,R2C,C2R,Z2Z,D2Z,Z2D} (kind: the cufftType the call implies) or cufftXtExec "
                   "(kind 0) on a stream, with the plan's work area")
FFT_DESTROY = _op(0x0203, "FFT_DESTROY", "plan:u64", deferrable=True, names="plan:fft_plan", doc="cufftDestroy")
# cuRAND host API (0x0220-0x023F). A generator's type, stream and quasirandom dimensions are also kept by the
# client (it answers the checks cuRAND makes before generating); the server holds the real generator. Setters
# are round trips carrying cuRAND's own status; generating into device memory is one deferred message.
RAND_CREATE = _op(0x0220, "RAND_CREATE", "rng_type:u32 host:u32", "handle:u64 status:u32", creates="rand",
                  doc="curandCreateGenerator(rng_type) / curandCreateGeneratorHost (host=1) in the current "
                      "context -> handle (0 unless status, a curandStatus_t, is 0)")
RAND_DESTROY = _op(0x0221, "RAND_DESTROY", "handle:u64", names="handle:rand", doc="curandDestroyGenerator")
RAND_SET = _op(0x0222, "RAND_SET", "handle:u64 what:u32 value:u64", "status:u32", names="handle:rand",
               doc="what: 1 curandSetPseudoRandomGeneratorSeed, 2 curandSetGeneratorOffset, 3 "
                   "curandSetGeneratorOrdering, 4 curandSetQuasiRandomGeneratorDimensions, 5 curandGenerateSeeds "
                   "(value unused) -> curandStatus_t")
_RAND_DRAW = "kind:u32 count:u64 a:f64 b:f64"
RAND_GENERATE = _op(0x0223, "RAND_GENERATE", "handle:u64 stream:u64 output:u64 " + _RAND_DRAW, deferrable=True,
                    names="handle:rand stream:stream",
                    doc="curandGenerate* into device memory at output: kind 0 u32, 1 u64 (LongLong), 2 uniform, "
                        "3 uniform double, 4 normal, 5 normal double, 6 log-normal, 7 log-normal double "
                        "(a, b: mean, stddev), 8 Poisson (a: lambda)")
RAND_GENERATE_HOST = _op(0x0224, "RAND_GENERATE_HOST", "handle:u64 " + _RAND_DRAW, "status:u32",
                         names="handle:rand", reply_bulk="the count results (when status is 0)",
                         doc="the same draws from a host generator: generated on the server, the results in the "
                             "reply -> curandStatus_t")

# cuBLAS additions (0x0240-0x025F): batched LU factorisation, inversion and triangular solves over arrays of
# device pointers, read and checked like BLAS_GEMM_BATCHED's (it may block on the stream).
BLAS_LU_BATCHED = _op(0x0240, "BLAS_LU_BATCHED",
                      "handle:u64 stream:u64 which:u32 type:u32 n:i64 a:u64 lda:i64 pivots:u64 c:u64 ldc:i64 "
                      "info:u64 batch:i64", deferrable=True, names="handle:blas stream:stream",
                      doc="which 0: cublas<t>getrfBatched(n, A[], lda, pivots or 0, info), 1: getriBatched(n, A[], "
                          "lda, pivots or 0, C[], ldc, info), 2: matinvBatched(n, A[], lda, C[], ldc, info); type "
                          "a cudaDataType (R_32F, R_64F, C_32F, C_64F); a, c: device arrays of batch u64 pointers")
BLAS_TRSM_BATCHED = _op(0x0241, "BLAS_TRSM_BATCHED",
                        "handle:u64 stream:u64 side:u32 uplo:u32 trans:u32 diag:u32 type:u32 m:i64 n:i64 "
                        "pointer_mode:u32 alpha:b16 a:u64 lda:i64 b:u64 ldb:i64 batch:i64", deferrable=True,
                        names="handle:blas stream:stream",
                        doc="cublas<t>trsmBatched(side, uplo, trans, diag, m, n, alpha, A[], lda, B[], ldb, batch); "
                            "alpha by value, or its device address in device pointer mode")
_LEVEL1 = ("handle:u64 stream:u64 func:u32 type:u32 n:i64 x:u64 incx:i64 y:u64 incy:i64 pointer_mode:u32 alpha:b16 "
           "result:u64")
BLAS_LEVEL1 = _op(0x0242, "BLAS_LEVEL1", _LEVEL1, deferrable=True, names="handle:blas stream:stream",
                  doc="cuBLAS Level-1 S/D: func 0 axpy, 1 scal, 2 copy, 3 swap; and, with the handle in device "
                      "pointer mode (result a device address), 4 dot, 5 nrm2, 6 asum, 7 iamax, 8 iamin (int result), "
                      "9 iamax, 10 iamin (int64 result); alpha by value, or its device address in device pointer mode")
BLAS_LEVEL1_RESULT = _op(0x0243, "BLAS_LEVEL1_RESULT", _LEVEL1, "result:b16", names="handle:blas stream:stream",
                         doc="a Level-1 reduction (func 4-10) in host pointer mode: the result in the reply, once the "
                             "stream has reached the call (result field unused)")
# cuSOLVER dense (0x0260-0x027F). Handles and cusolverDnParams live on the client; one request shape serves
# every routine (`function`: rgpu.protocol.solver_wire.Function, classic and 64-bit X API), a buffer-size query
# is one round trip answered by the server's library, an execution one deferred message whose every operand
# range the server checks (see docs/protocol.md, "Libraries").
SOLVER_CREATE = _op(0x0260, "SOLVER_CREATE", "", "handle:u64", creates="solver",
                    doc="cusolverDnCreate in the current context -> handle")
SOLVER_DESTROY = _op(0x0261, "SOLVER_DESTROY", "handle:u64", names="handle:solver", doc="cusolverDnDestroy")
_SOLVE = ("handle:u64 stream:u64 function:u32 data_type:u32 compute_type:u32 algo:u32 m:i64 n:i64 k:i64 nrhs:i64 "
          "uplo:u32 trans:u32 side:u32 jobz:u32 jobu:u32 jobvt:u32 econ:u32 sort:u32 max_sweeps:u32 tol:f64 "
          "a:u64 lda:i64 b:u64 ldb:i64 ipiv:u64 tau:u64 w:u64 u:u64 ldu:i64 v:u64 ldv:i64 rwork:u64 "
          "work:u64 work_size:u64 info:u64 batch:i64")
SOLVER_BUFFER_SIZE = _op(0x0262, "SOLVER_BUFFER_SIZE", _SOLVE, "status:u32 device_size:u64 host_size:u64",
                         names="handle:solver",
                         doc="cusolverDn<routine>_bufferSize -> cuSOLVER status, device workspace (classic API: "
                             "elements; X API: bytes), host workspace bytes")
SOLVER_RUN = _op(0x0263, "SOLVER_RUN", _SOLVE, deferrable=True, names="handle:solver stream:stream",
                 doc="cusolverDn<routine>(handle, stream, ...): the factorization or solve; info arrays written on "
                     "the device")

# cuSPARSE (0x0280-0x029F). Handles and the generic API's descriptors (sparse matrices in CSR/CSC/COO, dense
# matrices and vectors) live on the client; an operation carries its descriptors as fixed fields, a buffer-size
# query is one round trip, an execution one deferred message whose external buffer must hold what the server's
# library needs for it (the API passes no size) (rgpu.protocol.sparse_wire; docs/protocol.md).
SPARSE_CREATE = _op(0x0280, "SPARSE_CREATE", "", "handle:u64", creates="sparse",
                    doc="cusparseCreate in the current context -> handle")
SPARSE_DESTROY = _op(0x0281, "SPARSE_DESTROY", "handle:u64", names="handle:sparse", doc="cusparseDestroy")
_DENSE = "{p}_rows:i64 {p}_cols:i64 {p}_ld:i64 {p}_values:u64 {p}_type:u32 {p}_order:u32 {p}_batch:i32 {p}_stride:i64"
_SPMAT = ("{p}_format:u32 {p}_rows:i64 {p}_cols:i64 {p}_nnz:i64 {p}_offsets:u64 {p}_indices:u64 {p}_values:u64 "
          "{p}_offsets_type:u32 {p}_indices_type:u32 {p}_base:u32 {p}_value_type:u32 {p}_batch:i32 "
          "{p}_offsets_stride:i64 {p}_values_stride:i64")
_SPARSE = ("handle:u64 stream:u64 function:u32 op_a:u32 op_b:u32 compute_type:u32 alg:u32 pointer_mode:u32 "
           "alpha:b16 beta:b16 buffer:u64 " + _SPMAT.format(p="a") + " " + _DENSE.format(p="b") + " "
           + _DENSE.format(p="c"))
SPARSE_BUFFER_SIZE = _op(0x0282, "SPARSE_BUFFER_SIZE", _SPARSE, "status:u32 size:u64", names="handle:sparse",
                         doc="cusparseSpMV_bufferSize / cusparseSpMM_bufferSize -> cuSPARSE status, bytes")
SPARSE_RUN = _op(0x0283, "SPARSE_RUN", _SPARSE, deferrable=True, names="handle:sparse stream:stream",
                 doc="cusparseSpMV / cusparseSpMM / cusparseXcoo2csr (function) with A sparse, B and C dense")
# SpGEMM keeps state between its phases (the product's structure, the buffers cuSPARSE holds on to): a
# descriptor on the server. Each phase is a round trip (the sizes and C's non-zero count come back).
SPARSE_SPGEMM_CREATE = _op(0x0284, "SPARSE_SPGEMM_CREATE", "", "descriptor:u64", creates="sparse_spgemm",
                           doc="cusparseSpGEMM_createDescr in the current context -> descriptor")
SPARSE_SPGEMM_DESTROY = _op(0x0285, "SPARSE_SPGEMM_DESTROY", "descriptor:u64", names="descriptor:sparse_spgemm",
                            doc="cusparseSpGEMM_destroyDescr")
SPARSE_SPGEMM = _op(0x0286, "SPARSE_SPGEMM",
                    "handle:u64 stream:u64 descriptor:u64 phase:u32 op_a:u32 op_b:u32 compute_type:u32 alg:u32 "
                    "pointer_mode:u32 alpha:b16 beta:b16 buffer:u64 buffer_size:u64 " + _SPMAT.format(p="a") + " "
                    + _SPMAT.format(p="b") + " " + _SPMAT.format(p="c"),
                    "status:u32 size:u64 c_nnz:i64", names="handle:sparse stream:stream descriptor:sparse_spgemm",
                    doc="cusparseSpGEMM_workEstimation (phase 1), _compute (2: C's non-zero count back) or _copy "
                        "(3) of C = alpha op(A) op(B) (A, B, C CSR); buffer 0: the buffer size the phase needs")

# cuBLAS Level 2/3 (0x02A0-0x02BF): one request shape for the non-batched routines (`function`:
# rgpu.protocol.blas_routines.Function), deferred like BLAS_GEMM, every operand range checked on the server.
_ROUTINE = ("handle:u64 stream:u64 function:u32 type:u32 wide:u32 side:u32 uplo:u32 transa:u32 transb:u32 diag:u32 "
            "m:i64 n:i64 k:i64 pointer_mode:u32 math_mode:u32 alpha:b16 beta:b16 a:u64 lda:i64 b:u64 ldb:i64 c:u64 "
            "ldc:i64 workspace:u64 workspace_size:u64")
BLAS_ROUTINE = _op(0x02A0, "BLAS_ROUTINE", _ROUTINE, deferrable=True, names="handle:blas stream:stream",
                   doc="cublas<t>{gemm,gemm3m,gemv,ger,geru,gerc,trsv,trmv,trsm,trmm,syrk,herk,symm} (function) on "
                       "type S/D/C/Z (a cudaDataType), wide 1 for its _64 form (the server calls the form the "
                       "program called, whose results may differ in the last bits); vectors x and y in b and c with their increments as ldb and "
                       "ldc; alpha and beta by value, or their device addresses in device pointer mode")
BLAS_GETRS_BATCHED = _op(0x02A1, "BLAS_GETRS_BATCHED",
                         "handle:u64 stream:u64 trans:u32 type:u32 n:i64 nrhs:i64 a:u64 lda:i64 pivots:u64 b:u64 "
                         "ldb:i64 batch:i64", deferrable=True, names="handle:blas stream:stream",
                         doc="cublas<t>getrsBatched(trans, n, nrhs, A[], lda, pivots or 0, B[], ldb, batch): a and b "
                             "device arrays of batch u64 pointers, read and checked like BLAS_LU_BATCHED's; the "
                             "host info (parameter checks) is the client's")

# cuDNN batch norm fused with an addition and/or an activation (0x02D0-0x02DF): the plain frames (DNN_BN_*) plus
# the fused operands; the activation descriptor travels by value (mode, NaN propagation, coefficient).
_ACTIVATION = "activation_mode:u32 activation_nan:u32 activation_coef:f64"
DNN_BN_SIZES_EX = _op(0x02D0, "DNN_BN_SIZES_EX", "handle:u64 which:u32 mode:u32 ops:u32 " + _ACTIVATION, "size:u64",
                      request_bulk="tensor descriptors of x, y, z (dz for which 2), dy, dx and the statistics",
                      names="handle:dnn",
                      doc="DNN_BN_SIZES for bnOps BN_ACTIVATION / BN_ADD_ACTIVATION, with the activation")
DNN_BN_TRAINING_EX = _op(0x02D1, "DNN_BN_TRAINING_EX",
                         "handle:u64 stream:u64 mode:u32 ops:u32 alpha:f64 beta:f64 factor:f64 epsilon:f64 x:u64 "
                         "y:u64 scale:u64 bias:u64 running_mean:u64 running_var:u64 saved_mean:u64 "
                         "saved_inv_var:u64 workspace:u64 workspace_size:u64 reserve:u64 reserve_size:u64 z:u64 "
                         + _ACTIVATION, deferrable=True,
                         request_bulk="tensor descriptors of x, y, the statistics and z",
                         names="handle:dnn stream:stream",
                         doc="DNN_BN_TRAINING with bnOps BN_ACTIVATION / BN_ADD_ACTIVATION: y = act(bn(x) + z), z "
                             "0 unless ops adds")
DNN_BN_BACKWARD_EX = _op(0x02D2, "DNN_BN_BACKWARD_EX",
                         "handle:u64 stream:u64 mode:u32 ops:u32 alpha_data:f64 beta_data:f64 alpha_params:f64 "
                         "beta_params:f64 epsilon:f64 x:u64 dy:u64 dx:u64 scale:u64 dscale:u64 dbias:u64 "
                         "saved_mean:u64 saved_inv_var:u64 workspace:u64 workspace_size:u64 reserve:u64 "
                         "reserve_size:u64 y:u64 dz:u64 bias:u64 " + _ACTIVATION, deferrable=True,
                         request_bulk="tensor descriptors of x, dy, dx, the statistics, y and dz",
                         names="handle:dnn stream:stream",
                         doc="DNN_BN_BACKWARD with bnOps BN_ACTIVATION / BN_ADD_ACTIVATION: the forward's y and "
                             "bias, dz (the addend's gradient) 0 unless ops adds")

# Host nodes and host functions in graphs (0x02E0-0x02EF). A host function runs on the client (the GPU cannot call
# back across the wire): its node is an empty node on the server, and an executable graph with host nodes is
# instantiated as stages (each a subgraph between host nodes) that the client launches one after another, running
# the host functions in between (native/src/graph_stages.c).
GRAPH_INSTANTIATE_PART = _op(0x02E0, "GRAPH_INSTANTIATE_PART", "graph:u64 exec:u64 flags:u64 count:u32",
                             deferrable=True, request_bulk="count x u64 node handles of `graph`",
                             names="graph:graph",
                             doc="cuGraphInstantiateWithFlags of the subgraph of `graph` made of the `count` named "
                                 "nodes and the edges among them -> client-minted `exec`")
STREAM_CAPTURE_EMPTY_NODE = _op(0x02E1, "STREAM_CAPTURE_EMPTY_NODE", "stream:u64 graph:u64 node:u64",
                                deferrable=True, names="stream:stream",
                                doc="an empty node at the capturing stream's position (after its dependencies, "
                                    "then its only dependency): client-minted `node` of the capture's `graph`, where "
                                    "the client keeps a host function (cuLaunchHostFunc during capture)")
GRAPH_MEM_ALLOC_NODE = _op(0x02E2, "GRAPH_MEM_ALLOC_NODE", "graph:u64 node:u64 deps:u32 device:u32 size:u64",
                           "dptr:u64", request_bulk="deps x u64 node handles", names="graph:graph",
                           doc="cuGraphAddMemAllocNode: client-minted `node` of `graph` allocating `size` bytes on "
                               "`device` (the graph's context's) -> the address it will have; counts against the "
                               "session's memory limit until the graph and every exec made from it are destroyed. "
                               "Free nodes are GRAPH_OTHER_NODE of type 11 (CU_GRAPH_NODE_TYPE_MEM_FREE), object "
                               "the address")
GRAPH_MOVE_CHILD_NODE = _op(0x02E3, "GRAPH_MOVE_CHILD_NODE", "graph:u64 node:u64 deps:u32 child:u64",
                            deferrable=True, request_bulk="deps x u64 node handles", names="graph:graph",
                            doc="cuGraphAddNode of a child graph node with CU_GRAPH_CHILD_GRAPH_OWNERSHIP_MOVE: "
                                "`child` becomes the node's (its nodes stay named as they were, for an exec's "
                                "parameter setters) and goes with it (1.9)")
GRAPH_CHILD_GRAPH = _op(0x02E4, "GRAPH_CHILD_GRAPH", "node:u64 graph:u64", deferrable=True,
                        doc="cuGraphChildGraphNodeGetGraph(node) -> the child graph node's own graph as client-minted "
                            "`graph`: it belongs to the node (changing it changes the node; it goes with the node) "
                            "(1.9)")

CONTROL_OPS = frozenset({HELLO.code, AUTH.code, PROTOCOL_ERROR.code})
# Kernel output (0x0140-0x014F).
OUTPUT = _op(0x0140, "OUTPUT", context=False, reply_bulk="bytes the session's kernels printed (device printf)",
             doc="unsolicited, server to client, only with the OUTPUT feature: sent just before the reply that "
                 "follows the output; the client writes it to its stdout before it returns from that call")

CONTROL_OPS = frozenset({HELLO.code, AUTH.code, PROTOCOL_ERROR.code, OUTPUT.code, LINK_JOIN.code, LINK_PART.code})
CONTEXT_OPS = frozenset(op.code for op in OPS.values() if op.context)

# -- Device work, for the client's rule on when a synchronize may go without waiting (native/src/conn_work.c) --
# A stream synchronize is deferred, not waited for, while the client has no device work unfinished: nothing
# the stream holds can then take long, and since no stream writes the client's memory later than its call
# returns, nothing else but the time on the program's clock can tell. "Work" is what takes GPU time: kernels,
# graphs, library calls, device copies and memsets, on the stream in their `stream` field (0, the NULL
# stream, for those without one). Not work: host-to-device copies (they take their bytes when called, as
# pageable copies do natively), stream and event bookkeeping, capture, pool frees.
_NOT_WORK = frozenset(op.code for op in (
    MEMCPY_HTOD_ASYNC, MEMCPY_HTOD_LINKED, MEMCPY_HTOD_RUNS, MEMCPY_DTOH_ASYNC, STREAM_DESTROY, STREAM_SYNCHRONIZE,
    STREAM_QUERY, STREAM_WAIT_EVENT, STREAM_GET_INFO, STREAM_SET_ATTRIBUTE, STREAM_GET_ATTRIBUTE,
    EVENT_RECORD, MEM_ALLOC_ASYNC, MEM_FREE_ASYNC, STREAM_BEGIN_CAPTURE, STREAM_END_CAPTURE,
    STREAM_CAPTURE_DEPENDENCIES, STREAM_UPDATE_CAPTURE_DEPENDENCIES, SOLVER_BUFFER_SIZE, SPARSE_BUFFER_SIZE,
))
_NULL_STREAM_WORK = frozenset(op.code for op in (MEMCPY_DTOD, MEMSET_D8, MEMSET_D32, MEMCPY_PEER))
# A successful reply to these says the work of a stream (its `stream` field, else the NULL stream) is done;
# CTX_SYNCHRONIZE: all of it.
_COMPLETES_STREAM = frozenset(op.code for op in (STREAM_SYNCHRONIZE, MEMCPY_DTOH_ASYNC, MEMCPY_DTOH))


# A deferred synchronize of a stream is held by the client (native/src/conn_held.c) and sent just before the next
# request that is not one of these on the same stream: they are ordered on the stream after the synchronize and
# take no time worth waiting for, so a synchronize sent after them still makes every later request see at least
# what the program's call promised. llama.cpp's "copy an input, synchronize" six times per token so becomes one.
_PASSES_HELD_SYNC = frozenset(op.code for op in (MEMCPY_HTOD_ASYNC, MEMCPY_HTOD_RUNS, EVENT_RECORD,
                                                 STREAM_SYNCHRONIZE))


# Operations that name a stream without putting anything on it: they do not end its idleness (sync.c).
_LEAVES_STREAM_IDLE = frozenset(op.code for op in (STREAM_SYNCHRONIZE, STREAM_QUERY, STREAM_GET_INFO,
                                                   STREAM_SET_ATTRIBUTE, STREAM_GET_ATTRIBUTE))


def touches_stream_field(op: Op) -> Field | None:
    """The `stream` field of an operation that may put something on that stream (work, a copy, an event, a
    wait, a capture); None for the rest. A stream no such operation named since its last synchronize is idle."""
    if op.code in _LEAVES_STREAM_IDLE:
        return None
    return next((f for f in op.request_fields if f.name == "stream" and f.type == "u64"), None)


def passes_held_sync_field(op: Op) -> Field | None:
    """The `stream` field of an operation that may pass a held synchronize of that stream; None for the rest."""
    if op.code not in _PASSES_HELD_SYNC:
        return None
    return next(f for f in op.request_fields if f.name == "stream" and f.type == "u64")


def work_stream_field(op: Op) -> Field | None | bool:
    """For device work: its `stream` field, or None for the NULL stream; False when the op is not work."""
    stream = next((f for f in op.request_fields if f.name == "stream" and f.type == "u64"), None)
    if op.code in _NULL_STREAM_WORK:
        return None
    if stream is None or op.code in _NOT_WORK:
        return False
    return stream


def completes(op: Op) -> str:
    """"stream" (the request's stream field, else the NULL stream), "all", or "" (says nothing)."""
    if op is CTX_SYNCHRONIZE:
        return "all"
    return "stream" if op.code in _COMPLETES_STREAM else ""


def _fields_text(fields) -> str:
    return " ".join(f"{f.name}:{f.type}" for f in fields) or "-"


def markdown_table() -> str:
    rows = ["| code | name | request args | reply results | request bulk | reply bulk | deferrable | context | meaning |",
            "|---|---|---|---|---|---|---|---|---|"]
    for op in sorted(OPS.values(), key=lambda o: o.code):
        rows.append(
            f"| 0x{op.code:04X} | {op.name} | `{_fields_text(op.request_fields)}` | `{_fields_text(op.reply_fields)}` "
            f"| {op.request_bulk or '-'} | {op.reply_bulk or '-'} | {'yes' if op.deferrable else ''} "
            f"| {'yes' if op.context else ''} | {op.doc} |"
        )
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    sys.stdout.write(markdown_table())
