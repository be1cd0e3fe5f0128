"""The opcode table: one entry per operation, the single source of truth for both sides.

Opcodes are fixed numbers (never positions in a list): adding an operation never renumbers another. Each
entry names the little-endian layout of its request arguments and reply results (Python `struct` format
codes, all fixed size) and what travels as bulk. `python -m rgpu.protocol.ops` prints the table that
docs/protocol.md embeds; a test keeps the two identical.
"""

from __future__ import annotations

import struct
import sys

import attrs

from rgpu.errors import ProtocolError


@attrs.frozen(slots=True)
class Op:
    code: int
    name: str
    request: struct.Struct
    reply: struct.Struct
    # Deferrable: CUDA defines the call as asynchronous, so a client may queue it (NO_REPLY) and batch it.
    deferrable: bool = False
    request_bulk: str = ""
    reply_bulk: str = ""
    doc: str = ""

    def pack_request(self, *values) -> bytes:
        return self.request.pack(*values)

    def unpack_request(self, args: bytes) -> tuple:
        if len(args) != self.request.size:
            raise ProtocolError(f"{self.name}: {len(args)} argument bytes, expected {self.request.size}")
        return self.request.unpack(args)

    def unpack_reply(self, args: bytes) -> tuple:
        if len(args) != self.reply.size:
            raise ProtocolError(f"{self.name} reply: {len(args)} result bytes, expected {self.reply.size}")
        return self.reply.unpack(args)


OPS: dict[int, Op] = {}
BY_NAME: dict[str, Op] = {}


def _op(code, name, request="", reply="", *, deferrable=False, request_bulk="", reply_bulk="", doc=""):
    op = Op(code, name, struct.Struct("<" + request), struct.Struct("<" + reply), deferrable,
            request_bulk, reply_bulk, doc)
    assert code not in OPS and name not in BY_NAME, (code, name)
    OPS[code] = op
    BY_NAME[name] = op
    return op


# Connection control (0x00xx).
HELLO = _op(0x0001, "HELLO", "8sHHQII32sIQ", "8sHHQII32sIQ", request_bulk="agent string (UTF-8)",
            reply_bulk="agent string, or error message", doc="version/feature negotiation; always first")
AUTH = _op(0x0002, "AUTH", "32s", "32s", doc="PSK proof exchange (client proof / server proof)")
GOODBYE = _op(0x0003, "GOODBYE", doc="orderly close; the server frees the session, replies, closes")
BATCH = _op(0x0004, "BATCH", request_bulk="concatenated NO_REPLY frames",
            doc="deferred calls in one frame; no reply")
NOP = _op(0x0005, "NOP", doc="null call (latency probe)")
PROTOCOL_ERROR = _op(0x0006, "PROTOCOL_ERROR", reply_bulk="message (UTF-8)",
                     doc="sent by the server before it closes a connection it cannot continue")
SERVER_STATUS = _op(0x0007, "SERVER_STATUS", reply_bulk="JSON (UTF-8)",
                    doc="the server's sessions and limits; only on a connection whose HELLO has the STATUS flag, "
                        "answered by the server itself (no session), which then closes")

# Initialisation and devices (0x001x, 0x002x).
INIT = _op(0x0010, "INIT", "I", doc="cuInit(flags)")
DRIVER_GET_VERSION = _op(0x0011, "DRIVER_GET_VERSION", "", "i", doc="cuDriverGetVersion")
DEVICE_GET_COUNT = _op(0x0020, "DEVICE_GET_COUNT", "", "i", doc="cuDeviceGetCount")
DEVICE_GET = _op(0x0021, "DEVICE_GET", "i", "i", doc="cuDeviceGet(ordinal)")
DEVICE_GET_NAME = _op(0x0022, "DEVICE_GET_NAME", "i", reply_bulk="name (UTF-8)", doc="cuDeviceGetName")
DEVICE_GET_ATTRIBUTE = _op(0x0023, "DEVICE_GET_ATTRIBUTE", "ii", "i", doc="cuDeviceGetAttribute(attrib, dev)")
DEVICE_TOTAL_MEM = _op(0x0024, "DEVICE_TOTAL_MEM", "i", "Q", doc="cuDeviceTotalMem")
DEVICE_GET_UUID = _op(0x0025, "DEVICE_GET_UUID", "i", "16s", doc="cuDeviceGetUuid")
DEVICE_GET_ATTRIBUTES = _op(0x0026, "DEVICE_GET_ATTRIBUTES", "iI", "I",
                            reply_bulk="count x i32, attributes 1..count (INT32_MIN: unsupported)",
                            doc="all attributes in one call, for client-side caching")

# Contexts (0x003x). Every context is the session's own (see "Sessions").
PRIMARY_CTX_RETAIN = _op(0x0030, "PRIMARY_CTX_RETAIN", "i", "Q", doc="session's per-device context")
PRIMARY_CTX_RELEASE = _op(0x0031, "PRIMARY_CTX_RELEASE", "i", doc="cuDevicePrimaryCtxRelease")
CTX_CREATE = _op(0x0032, "CTX_CREATE", "Ii", "Q", doc="cuCtxCreate(flags, dev); becomes current")
CTX_DESTROY = _op(0x0033, "CTX_DESTROY", "Q", doc="cuCtxDestroy; frees everything made in it")
CTX_SET_CURRENT = _op(0x0034, "CTX_SET_CURRENT", "Q", deferrable=True,
                      doc="context used by later calls (0: none)")
CTX_GET_CURRENT = _op(0x0035, "CTX_GET_CURRENT", "", "Q", doc="cuCtxGetCurrent")
CTX_SYNCHRONIZE = _op(0x0036, "CTX_SYNCHRONIZE", doc="cuCtxSynchronize")
CTX_GET_LIMIT = _op(0x0037, "CTX_GET_LIMIT", "I", "Q", doc="cuCtxGetLimit(limit) -> value")
CTX_SET_LIMIT = _op(0x0038, "CTX_SET_LIMIT", "IQ", doc="cuCtxSetLimit(limit, value)")
CTX_GET_STREAM_PRIORITY_RANGE = _op(0x0039, "CTX_GET_STREAM_PRIORITY_RANGE", "", "ii",
                                    doc="cuCtxGetStreamPriorityRange -> least, greatest")

# Memory (0x004x). Device pointers are real (backend) addresses, range-checked against the session's own.
MEM_ALLOC = _op(0x0040, "MEM_ALLOC", "Q", "Q", doc="cuMemAlloc(size) -> dptr")
MEM_FREE = _op(0x0041, "MEM_FREE", "Q", doc="cuMemFree(dptr)")
MEM_GET_INFO = _op(0x0042, "MEM_GET_INFO", "", "QQ", doc="cuMemGetInfo -> free, total")
# cuMemcpyHtoD returns once the source is staged, before the DMA ends (CUDA's pageable-copy rule), so a client
# that knows the destination is valid may defer it like an asynchronous copy.
MEMCPY_HTOD = _op(0x0043, "MEMCPY_HTOD", "Q", deferrable=True, request_bulk="bytes to copy",
                  doc="cuMemcpyHtoD(dst)")
MEMCPY_DTOH = _op(0x0044, "MEMCPY_DTOH", "QQ", reply_bulk="bytes copied", doc="cuMemcpyDtoH(src, n)")
MEMCPY_DTOD = _op(0x0045, "MEMCPY_DTOD", "QQQ", doc="cuMemcpyDtoD(dst, src, n)")
MEMCPY_HTOD_ASYNC = _op(0x0046, "MEMCPY_HTOD_ASYNC", "QQ", deferrable=True, request_bulk="bytes to copy",
                        doc="cuMemcpyHtoDAsync(dst, stream)")
MEMCPY_DTOH_ASYNC = _op(0x0047, "MEMCPY_DTOH_ASYNC", "QQQ", reply_bulk="bytes copied",
                        doc="cuMemcpyDtoHAsync(src, n, stream); replies once the bytes are read")
MEMCPY_DTOD_ASYNC = _op(0x0048, "MEMCPY_DTOD_ASYNC", "QQQQ", deferrable=True,
                        doc="cuMemcpyDtoDAsync(dst, src, n, stream)")
MEMSET_D8 = _op(0x0049, "MEMSET_D8", "QIQ", doc="cuMemsetD8(dst, value, count)")
MEMSET_D32 = _op(0x004A, "MEMSET_D32", "QIQ", doc="cuMemsetD32(dst, value, count)")
MEMSET_D8_ASYNC = _op(0x004B, "MEMSET_D8_ASYNC", "QIQQ", deferrable=True,
                      doc="cuMemsetD8Async(dst, value, count, stream)")
MEMSET_D32_ASYNC = _op(0x004C, "MEMSET_D32_ASYNC", "QIQQ", deferrable=True,
                       doc="cuMemsetD32Async(dst, value, count, stream)")

# Modules and launches (0x005x).
MODULE_LOAD_DATA = _op(0x0050, "MODULE_LOAD_DATA", "", "Q", request_bulk="image: PTX, cubin or fatbin",
                       doc="cuModuleLoadData")
MODULE_UNLOAD = _op(0x0051, "MODULE_UNLOAD", "Q", doc="cuModuleUnload")
MODULE_GET_FUNCTION = _op(0x0052, "MODULE_GET_FUNCTION", "Q", "QI", request_bulk="name (UTF-8)",
                          reply_bulk="count x (u32 offset, u32 size)",
                          doc="cuModuleGetFunction -> function, parameter count (+ layout: saves a round trip)")
MODULE_GET_GLOBAL = _op(0x0053, "MODULE_GET_GLOBAL", "Q", "QQ", request_bulk="name (UTF-8)",
                        doc="cuModuleGetGlobal -> dptr, size")
FUNC_GET_PARAM_INFO = _op(0x0054, "FUNC_GET_PARAM_INFO", "Q", "I", reply_bulk="count x (u32 offset, u32 size)",
                          doc="parameter layout (cuFuncGetParamInfo)")
LAUNCH_KERNEL = _op(0x0055, "LAUNCH_KERNEL", "QIIIIIIIQ", deferrable=True,
                    request_bulk="parameter buffer laid out per FUNC_GET_PARAM_INFO",
                    doc="cuLaunchKernel(f, grid xyz, block xyz, shmem, stream)")
FUNC_GET_ATTRIBUTES = _op(0x0056, "FUNC_GET_ATTRIBUTES", "QI", "I",
                          reply_bulk="count x i32, attributes 0..count-1 (INT32_MIN: unsupported)",
                          doc="all cuFuncGetAttribute values in one call, for client-side caching")
FUNC_SET_ATTRIBUTE = _op(0x0057, "FUNC_SET_ATTRIBUTE", "QIi", deferrable=True,
                         doc="cuFuncSetAttribute(f, attribute, value)")
OCCUPANCY_MAX_BLOCKS = _op(0x0058, "OCCUPANCY_MAX_BLOCKS", "QiQI", "i",
                           doc="cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(f, block, dyn smem, flags)")
MODULE_LOAD_CACHED = _op(0x0059, "MODULE_LOAD_CACHED", "32s", "Q",
                         doc="cuModuleLoadData of an image the server has cached, by SHA-256; NOT_FOUND: "
                             "send it with MODULE_LOAD_DATA")

# Streams (0x006x) and events (0x007x). Stream handle 0 is the current context's NULL stream.
STREAM_CREATE = _op(0x0060, "STREAM_CREATE", "I", "Q", doc="cuStreamCreate(flags)")
STREAM_DESTROY = _op(0x0061, "STREAM_DESTROY", "Q", doc="cuStreamDestroy")
STREAM_SYNCHRONIZE = _op(0x0062, "STREAM_SYNCHRONIZE", "Q", doc="cuStreamSynchronize")
STREAM_QUERY = _op(0x0063, "STREAM_QUERY", "Q", doc="cuStreamQuery (status NOT_READY is an answer)")
STREAM_WAIT_EVENT = _op(0x0064, "STREAM_WAIT_EVENT", "QQI", deferrable=True, doc="cuStreamWaitEvent")
STREAM_CREATE_WITH_PRIORITY = _op(0x0065, "STREAM_CREATE_WITH_PRIORITY", "Ii", "Q",
                                  doc="cuStreamCreateWithPriority(flags, priority)")
EVENT_CREATE = _op(0x0070, "EVENT_CREATE", "I", "Q", doc="cuEventCreate(flags)")
EVENT_DESTROY = _op(0x0071, "EVENT_DESTROY", "Q", doc="cuEventDestroy")
EVENT_RECORD = _op(0x0072, "EVENT_RECORD", "QQ", deferrable=True, doc="cuEventRecord(event, stream)")
EVENT_SYNCHRONIZE = _op(0x0073, "EVENT_SYNCHRONIZE", "Q", doc="cuEventSynchronize")
EVENT_QUERY = _op(0x0074, "EVENT_QUERY", "Q", doc="cuEventQuery (status NOT_READY is an answer)")
EVENT_ELAPSED_TIME = _op(0x0075, "EVENT_ELAPSED_TIME", "QQ", "f", doc="cuEventElapsedTime -> ms")

# 2D memory (0x008x).
# 2D copies: the host side of a copy travels packed (rows of `width` bytes, no pitch), so the wire carries
# exactly width x height bytes whatever the host pitch. kind: 1 host->device, 2 device->host, 3 device->device.
MEMCPY_2D = _op(0x0080, "MEMCPY_2D", "IQQQQQQQ", request_bulk="packed rows (host->device)",
                reply_bulk="packed rows (device->host)",
                doc="cuMemcpy2D(kind, dst, dpitch, src, spitch, width, height, stream)")
MEMCPY_2D_ASYNC = _op(0x0081, "MEMCPY_2D_ASYNC", "IQQQQQQQ", deferrable=True, request_bulk="packed rows",
                      doc="cuMemcpy2DAsync, host->device and device->device only")
MEMSET_2D = _op(0x0082, "MEMSET_2D", "QQIIQQQ",
                doc="cuMemsetD2D8/16/32(dst, pitch, value, element size, width, height, stream)")
MEMSET_2D_ASYNC = _op(0x0083, "MEMSET_2D_ASYNC", "QQIIQQQ", deferrable=True, doc="cuMemsetD2D*Async")

# cuBLAS (0x009x) and cuBLASLt (0x00Ax). Handles and descriptors live on the client until execution: only
# what needs the GPU travels (see docs/protocol.md, "Libraries").
BLAS_CREATE = _op(0x0090, "BLAS_CREATE", "", "Q", doc="cublasCreate in the current context -> handle")
BLAS_DESTROY = _op(0x0091, "BLAS_DESTROY", "Q", doc="cublasDestroy")
BLAS_GEMM = _op(0x0092, "BLAS_GEMM", "QQIIqqqQIqqQIqqQIqqqIiII16s16sQQ", deferrable=True,
                doc="cublasGemmStridedBatchedEx(handle, stream, transa, transb, m, n, k, A, Atype, lda, strideA, "
                    "B..., C..., batch, compute type, algo, pointer mode, math mode, alpha, beta, workspace, size)")
LT_HEURISTIC = _op(0x00A0, "LT_HEURISTIC", "i", "I", request_bulk="descriptors (matmul, layouts A-D, preference)",
                   reply_bulk="count x cublasLtMatmulHeuristicResult_t (96 bytes)",
                   doc="cublasLtMatmulAlgoGetHeuristic(requested count)")
LT_MATMUL = _op(0x00A1, "LT_MATMUL", "QQQQQQQ16s16s", deferrable=True,
                request_bulk="descriptors (matmul, layouts A-D, algo)",
                doc="cublasLtMatmul(stream, A, B, C, D, workspace, size, alpha, beta)")
# cuDNN (0x00Bx): backend descriptors are built on the client and mirrored on the server when finalized.
DNN_CREATE = _op(0x00B0, "DNN_CREATE", "", "Q", doc="cudnnCreate in the current context -> handle")
DNN_DESTROY = _op(0x00B1, "DNN_DESTROY", "Q", doc="cudnnDestroy")
DNN_FINALIZE = _op(0x00B2, "DNN_FINALIZE", "I", "QI", request_bulk="the descriptor's attributes",
                   doc="cudnnBackendCreateDescriptor(type) + SetAttribute... + Finalize -> descriptor, cuDNN status")
DNN_GET_ATTRIBUTE = _op(0x00B3, "DNN_GET_ATTRIBUTE", "QIIq", "Iq",
                        request_bulk="for descriptor-typed attributes: requested x u32 descriptor types",
                        reply_bulk="count elements (descriptors as u64 handles)",
                        doc="cudnnBackendGetAttribute(descriptor, name, type, requested) -> cuDNN status, count")
DNN_DESTROY_DESCRIPTOR = _op(0x00B4, "DNN_DESTROY_DESCRIPTOR", "Q", deferrable=True,
                             doc="cudnnBackendDestroyDescriptor")
DNN_EXECUTE = _op(0x00B5, "DNN_EXECUTE", "QQQ", deferrable=True, request_bulk="the variant pack's attributes",
                  doc="cudnnBackendExecute(handle, plan, variant pack) on a stream")
DNN_BN_INFERENCE = _op(0x00B6, "DNN_BN_INFERENCE", "QQIdddQQQQQQ", deferrable=True,
                       request_bulk="tensor descriptors of x, y and the scale/bias/mean/var tensor",
                       doc="cudnnBatchNormalizationForwardInference(handle, stream, mode, alpha, beta, epsilon, x, "
                           "y, scale, bias, mean, var)")
DNN_BN_SIZES = _op(0x00B7, "DNN_BN_SIZES", "QIII", "Q", request_bulk="tensor descriptors of x and of the statistics",
                   doc="batch-norm training workspace/reserve sizes (which: 0 forward workspace, 1 reserve, "
                       "2 backward workspace)")
DNN_BN_TRAINING = _op(0x00B8, "DNN_BN_TRAINING", "QQIIddddQQQQQQQQQQQQ", deferrable=True,
                      request_bulk="tensor descriptors of x, y and the statistics",
                      doc="cudnnBatchNormalizationForwardTrainingEx(handle, stream, mode, ops, alpha, beta, factor, "
                          "epsilon, x, y, scale, bias, running mean/var, saved mean/inverse variance, workspace, "
                          "size, reserve, size)")
DNN_BN_BACKWARD = _op(0x00B9, "DNN_BN_BACKWARD", "QQIIdddddQQQQQQQQQQQQ", deferrable=True,
                      request_bulk="tensor descriptors of x, dy, dx and the statistics",
                      doc="cudnnBatchNormalizationBackwardEx(handle, stream, mode, ops, alpha/beta data, alpha/beta "
                          "params, epsilon, x, dy, dx, scale, dscale, dbias, saved mean/inverse variance, "
                          "workspace, size, reserve, size)")

CONTROL_OPS = frozenset({HELLO.code, AUTH.code, PROTOCOL_ERROR.code})


def markdown_table() -> str:
    rows = ["| code | name | request args | reply results | request bulk | reply bulk | deferrable | meaning |",
            "|---|---|---|---|---|---|---|---|"]
    for op in sorted(OPS.values(), key=lambda o: o.code):
        rows.append(
            f"| 0x{op.code:04X} | {op.name} | `{op.request.format[1:] or '-'}` | `{op.reply.format[1:] or '-'}` "
            f"| {op.request_bulk or '-'} | {op.reply_bulk or '-'} | {'yes' if op.deferrable else ''} | {op.doc} |"
        )
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    sys.stdout.write(markdown_table())
