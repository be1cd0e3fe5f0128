"""Python client: `rgpu.connect()` (blocking) and `await rgpu.connect_async()` (trio).

Every operation is written once in `_Operations`; the two client classes differ only in how frames move.
Calls CUDA defines as asynchronous (launches, async copies/memsets, event records, stream waits) are
queued and sent together in one BATCH frame with the next synchronising call; their errors come back with
that call (raised as CudaError with deferred=True), as CUDA's own asynchronous errors do.
"""

from __future__ import annotations

import itertools
import socket
import struct
import sys
from typing import Any, Callable, Sequence

import attrs
import trio

from rgpu.errors import CudaError, ProtocolError, RgpuError, Status
from rgpu.protocol import ops
from rgpu.protocol.connection import Connection
from rgpu.protocol.frames import Flags, Frame, frame_bytes
from rgpu import config
from rgpu.config import parse_address
from rgpu.protocol.handshake import ClientHandshake, Feature
from rgpu.protocol.params import pack_params
from rgpu.transport import SocketFrameStream, TrioFrameStream

MAX_BATCH_CALLS = 256
MAX_BATCH_BYTES = 1 << 20
_CHUNK_HEADROOM = 4096  # frame header + AEAD tag + args, kept out of each copy chunk
# Copies move in chunks this size (or the server's frame limit, if smaller): small enough that the server
# copies one chunk while the next is on the wire and that receive buffers come from reused heap memory
# rather than fresh pages, large enough that per-frame costs vanish.
COPY_CHUNK = 4 << 20


@attrs.frozen(slots=True)
class Function:
    handle: int
    name: str
    layout: tuple  # ((offset, size), ...)


@attrs.frozen(slots=True)
class _Request:
    op: ops.Op
    values: tuple = ()
    bulk: Any = b""
    decode: Callable | None = None  # (values, bulk) -> result
    sink: memoryview | None = None  # where the reply's bulk should land (no copy), if the transport can


def write_stdout(data: bytes) -> None:
    """Kernel printf output to this program's stdout, after what Python has already buffered there."""
    out = sys.stdout
    if out is None:
        return
    out.flush()
    if hasattr(out, "buffer"):
        out.buffer.write(data)
        out.buffer.flush()
    else:  # replaced by a text-only stream (a test's capture, an IDE's console)
        out.write(data.decode("utf-8", "replace"))


def _layout(count: int, bulk) -> tuple | None:
    if count == 0xFFFF_FFFF:
        return None  # the server's driver cannot report layouts (before CUDA 12.4)
    raw = bytes(bulk)
    if len(raw) != 8 * count:
        raise ProtocolError(f"parameter layout of {len(raw)} bytes for {count} parameters")
    return tuple(struct.iter_unpack("<II", raw))


class _Operations:
    """The client API, independent of how frames are carried. `_call` returns the result (blocking) or an
    awaitable of it (trio); `_defer` queues an asynchronous call."""

    max_frame: int
    batching: bool

    def _call(self, req: _Request): ...
    def _call_many(self, reqs: list[_Request]): ...
    def _defer(self, req: _Request): ...

    # -- basics ------------------------------------------------------------------------------------
    def nop(self):
        return self._call(_Request(ops.NOP))

    def init(self):
        return self._call(_Request(ops.INIT, (0,)))

    def driver_version(self):
        return self._call(_Request(ops.DRIVER_GET_VERSION))

    def device_count(self):
        return self._call(_Request(ops.DEVICE_GET_COUNT))

    def device_get(self, ordinal: int):
        return self._call(_Request(ops.DEVICE_GET, (ordinal,)))

    def device_name(self, dev: int = 0):
        return self._call(_Request(ops.DEVICE_GET_NAME, (dev,), decode=lambda v, b: bytes(b).decode()))

    def device_attribute(self, attrib: int, dev: int = 0):
        return self._call(_Request(ops.DEVICE_GET_ATTRIBUTE, (attrib, dev)))

    def device_attributes(self, dev: int = 0, count: int = 140):
        """{attribute id: value} for every attribute the device knows, in one round trip."""
        def decode(values, bulk):
            return {i + 1: v for i, (v,) in enumerate(struct.iter_unpack("<i", bytes(bulk))) if v != -(2**31)}

        return self._call(_Request(ops.DEVICE_GET_ATTRIBUTES, (dev, count), decode=decode))

    def device_total_mem(self, dev: int = 0):
        return self._call(_Request(ops.DEVICE_TOTAL_MEM, (dev,)))

    def device_uuid(self, dev: int = 0):
        return self._call(_Request(ops.DEVICE_GET_UUID, (dev,)))

    # -- contexts ----------------------------------------------------------------------------------
    def primary_ctx_retain(self, dev: int = 0):
        return self._call(_Request(ops.PRIMARY_CTX_RETAIN, (dev,)))

    def primary_ctx_release(self, dev: int = 0):
        return self._call(_Request(ops.PRIMARY_CTX_RELEASE, (dev,)))

    def ctx_create(self, dev: int = 0, flags: int = 0):
        return self._call(_Request(ops.CTX_CREATE, (flags, dev)))

    def ctx_destroy(self, ctx: int):
        return self._call(_Request(ops.CTX_DESTROY, (ctx,)))

    def ctx_set_current(self, ctx: int):
        return self._defer(_Request(ops.CTX_SET_CURRENT, (ctx,)))

    def ctx_get_current(self):
        return self._call(_Request(ops.CTX_GET_CURRENT))

    def synchronize(self):
        return self._call(_Request(ops.CTX_SYNCHRONIZE))

    # -- memory ------------------------------------------------------------------------------------
    def mem_alloc(self, size: int):
        return self._call(_Request(ops.MEM_ALLOC, (size,)))

    def mem_free(self, ptr: int):
        return self._call(_Request(ops.MEM_FREE, (ptr,)))

    def mem_get_info(self):
        return self._call(_Request(ops.MEM_GET_INFO))

    def _chunks(self, nbytes: int):
        step = min(COPY_CHUNK, self.max_frame - _CHUNK_HEADROOM)
        return [(off, min(step, nbytes - off)) for off in range(0, nbytes, step)] or [(0, 0)]

    def memcpy_htod(self, dst: int, data):
        """Copy bytes (any buffer: bytes, numpy array...) to device memory. Large copies go as several
        frames written back to back, so the server copies one chunk while the next is on the wire."""
        view = memoryview(data).cast("B")
        reqs = [_Request(ops.MEMCPY_HTOD, (dst + off,), view[off : off + n], decode=_none)
                for off, n in self._chunks(len(view))]
        return self._call_many(reqs)

    def memcpy_dtoh(self, src: int, nbytes: int, out=None):
        """Device -> host. Fills `out` (a writable buffer) if given, else returns a new bytearray."""
        target = memoryview(out).cast("B") if out is not None else memoryview(bytearray(nbytes))
        if len(target) < nbytes:
            raise ValueError(f"output buffer of {len(target)} bytes is smaller than {nbytes}")

        def landing(off, n):
            sink = target[off : off + n]

            def decode(values, bulk):
                if bulk is not sink:  # landed elsewhere (sealed records, small replies): copy it over
                    sink[: len(bulk)] = bulk

            return sink, decode

        reqs = []
        for off, n in self._chunks(nbytes):
            sink, decode = landing(off, n)
            reqs.append(_Request(ops.MEMCPY_DTOH, (src + off, n), decode=decode, sink=sink))
        return self._then(self._call_many(reqs), lambda _: out if out is not None else target.obj)

    def memcpy_dtod(self, dst: int, src: int, nbytes: int):
        return self._call(_Request(ops.MEMCPY_DTOD, (dst, src, nbytes)))

    def memcpy_htod_async(self, dst: int, data, stream: int = 0):
        return self._defer(_Request(ops.MEMCPY_HTOD_ASYNC, (dst, stream), bytes(memoryview(data).cast("B"))))

    def memcpy_htod_runs(self, dst: int, coded, size: int, stream: int = 0):
        """memcpy_htod_async of the `size` bytes `coded` stands for (rgpu.protocol.runs: its encode makes it)."""
        return self._defer(_Request(ops.MEMCPY_HTOD_RUNS, (dst, stream, size), bytes(memoryview(coded).cast("B"))))

    def memcpy_dtoh_async(self, src: int, nbytes: int, stream: int = 0):
        return self._call(_Request(ops.MEMCPY_DTOH_ASYNC, (src, nbytes, stream),
                                   decode=lambda v, b: bytearray(b)))

    def memcpy_dtod_async(self, dst: int, src: int, nbytes: int, stream: int = 0):
        return self._defer(_Request(ops.MEMCPY_DTOD_ASYNC, (dst, src, nbytes, stream)))

    def memset_d8(self, dst: int, value: int, count: int):
        return self._call(_Request(ops.MEMSET_D8, (dst, value & 0xFF, count)))

    def memset_d32(self, dst: int, value: int, count: int):
        return self._call(_Request(ops.MEMSET_D32, (dst, value & 0xFFFFFFFF, count)))

    def memset_d8_async(self, dst: int, value: int, count: int, stream: int = 0):
        return self._defer(_Request(ops.MEMSET_D8_ASYNC, (dst, value & 0xFF, count, stream)))

    def memset_d32_async(self, dst: int, value: int, count: int, stream: int = 0):
        return self._defer(_Request(ops.MEMSET_D32_ASYNC, (dst, value & 0xFFFFFFFF, count, stream)))

    # -- 2D memory: host rows travel packed (width bytes each) --------------------------------------
    def memcpy_2d_htod(self, dst: int, dpitch: int, rows, width: int, height: int, stream: int = 0):
        data = bytes(rows)
        return self._call(_Request(ops.MEMCPY_2D, (1, dst, dpitch, 0, 0, width, height, stream), data))

    def memcpy_2d_dtoh(self, src: int, spitch: int, width: int, height: int, stream: int = 0):
        return self._call(_Request(ops.MEMCPY_2D, (2, 0, 0, src, spitch, width, height, stream),
                                   decode=lambda v, b: bytes(b)))

    def memcpy_2d_dtod(self, dst: int, dpitch: int, src: int, spitch: int, width: int, height: int,
                       stream: int = 0):
        return self._call(_Request(ops.MEMCPY_2D, (3, dst, dpitch, src, spitch, width, height, stream)))

    def memset_2d(self, dst: int, pitch: int, value: int, elem: int, width: int, height: int, stream: int = 0):
        return self._call(_Request(ops.MEMSET_2D, (dst, pitch, value, elem, width, height, stream)))

    # -- modules and launches ----------------------------------------------------------------------
    def module_load(self, image: bytes | str):
        data = image.encode() if isinstance(image, str) else bytes(image)
        return self._call(_Request(ops.MODULE_LOAD_DATA, (), data))

    def module_load_cached(self, digest: bytes):
        """Load an image the server cached earlier (from any session) by its SHA-256; NOT_FOUND if it has none."""
        return self._call(_Request(ops.MODULE_LOAD_CACHED, (bytes(digest),)))

    def module_unload(self, module: int):
        return self._call(_Request(ops.MODULE_UNLOAD, (module,)))

    def get_function(self, module: int, name: str):
        return self._call(_Request(ops.MODULE_GET_FUNCTION, (module,), name.encode(),
                                   decode=lambda v, b: Function(v[0], name, _layout(v[1], b))))

    def get_global(self, module: int, name: str):
        return self._call(_Request(ops.MODULE_GET_GLOBAL, (module,), name.encode()))

    def func_param_info(self, func: Function | int):
        handle = func.handle if isinstance(func, Function) else func
        return self._call(_Request(ops.FUNC_GET_PARAM_INFO, (handle,), decode=lambda v, b: _layout(v[0], b)))

    def func_attributes(self, func: Function | int, count: int = 16):
        handle = func.handle if isinstance(func, Function) else func
        return self._call(_Request(ops.FUNC_GET_ATTRIBUTES, (handle, count),
                                   decode=lambda v, b: list(struct.unpack(f"<{v[0]}i", bytes(b)))))

    def func_set_attribute(self, func: Function | int, attrib: int, value: int):
        handle = func.handle if isinstance(func, Function) else func
        return self._defer(_Request(ops.FUNC_SET_ATTRIBUTE, (handle, attrib, value)))

    def occupancy_max_blocks(self, func: Function | int, block_size: int, dynamic_smem: int = 0, flags: int = 0):
        handle = func.handle if isinstance(func, Function) else func
        return self._call(_Request(ops.OCCUPANCY_MAX_BLOCKS, (handle, block_size, dynamic_smem, flags)))

    def launch(self, func: Function, grid, block, args: Sequence = (), *, shared_mem: int = 0, stream: int = 0):
        grid = tuple(grid) + (1,) * (3 - len(grid)) if not isinstance(grid, int) else (grid, 1, 1)
        block = tuple(block) + (1,) * (3 - len(block)) if not isinstance(block, int) else (block, 1, 1)
        if func.layout is None:
            raise CudaError(Status.NOT_SUPPORTED, f"{func.name}: the server cannot report this kernel's parameter "
                                                  "layout; the Python client needs it to pack arguments")
        params = pack_params(func.layout, args)
        return self._defer(_Request(ops.LAUNCH_KERNEL, (func.handle, *grid, *block, shared_mem, stream), params))

    # -- streams and events ------------------------------------------------------------------------
    def stream_create(self, flags: int = 0):
        return self._call(_Request(ops.STREAM_CREATE, (flags,)))

    def stream_create_with_priority(self, flags: int = 0, priority: int = 0):
        return self._call(_Request(ops.STREAM_CREATE_WITH_PRIORITY, (flags, priority)))

    def stream_priority_range(self):
        return self._call(_Request(ops.CTX_GET_STREAM_PRIORITY_RANGE))

    def stream_info(self, stream: int = 0):
        """(flags, priority, context handle, the driver's stream id) of `stream` (0: the current context's NULL
        stream)."""
        return self._call(_Request(ops.STREAM_GET_INFO, (stream,)))

    def ctx_get_limit(self, limit: int):
        return self._call(_Request(ops.CTX_GET_LIMIT, (limit,), decode=lambda v, b: v[0]))

    def ctx_set_limit(self, limit: int, value: int):
        return self._call(_Request(ops.CTX_SET_LIMIT, (limit, value)))

    def stream_destroy(self, stream: int):
        return self._call(_Request(ops.STREAM_DESTROY, (stream,)))

    def stream_synchronize(self, stream: int = 0):
        return self._call(_Request(ops.STREAM_SYNCHRONIZE, (stream,)))

    def stream_query(self, stream: int = 0):
        """True when the stream is idle."""
        return self._call(_Request(ops.STREAM_QUERY, (stream,), decode=_true))

    def stream_wait_event(self, stream: int, event: int, flags: int = 0):
        return self._defer(_Request(ops.STREAM_WAIT_EVENT, (stream, event, flags)))

    def stream_mem_op(self, operation: int, address: int, value: int, flags: int = 0, stream: int = 0):
        """cuStreamWaitValue32/64 or cuStreamWriteValue32/64 (`operation`: rgpu.protocol.memops' numbers), queued."""
        return self._defer(_Request(ops.STREAM_MEM_OP, (stream, operation, flags, address, value)))

    def stream_batch_mem_op(self, operations: Sequence[tuple[int, int, int, int]], stream: int = 0, flags: int = 0):
        """cuStreamBatchMemOp of (operation, flags, address, value) records, queued."""
        item = ops.STREAM_BATCH_MEM_OP.request_item
        bulk = b"".join(item.pack(*op) for op in operations)
        return self._defer(_Request(ops.STREAM_BATCH_MEM_OP, (stream, len(operations), flags), bulk))

    def event_create(self, flags: int = 0):
        return self._call(_Request(ops.EVENT_CREATE, (flags,)))

    def event_destroy(self, event: int):
        return self._call(_Request(ops.EVENT_DESTROY, (event,)))

    def event_record(self, event: int, stream: int = 0):
        return self._defer(_Request(ops.EVENT_RECORD, (event, stream)))

    def event_synchronize(self, event: int):
        return self._call(_Request(ops.EVENT_SYNCHRONIZE, (event,)))

    def event_query(self, event: int):
        """True when the event has completed."""
        return self._call(_Request(ops.EVENT_QUERY, (event,), decode=_true))

    def event_elapsed_time(self, start: int, end: int):
        return self._call(_Request(ops.EVENT_ELAPSED_TIME, (start, end)))

    # -- several devices of one server -------------------------------------------------------------
    def device_can_access_peer(self, dev: int, peer: int):
        return self._call(_Request(ops.DEVICE_CAN_ACCESS_PEER, (dev, peer), decode=lambda v, b: bool(v[0])))

    def ctx_enable_peer_access(self, peer_ctx: int, flags: int = 0):
        return self._call(_Request(ops.CTX_ENABLE_PEER_ACCESS, (peer_ctx, flags)))

    def ctx_disable_peer_access(self, peer_ctx: int):
        return self._call(_Request(ops.CTX_DISABLE_PEER_ACCESS, (peer_ctx,)))

    def memcpy_peer(self, dst: int, dst_ctx: int, src: int, src_ctx: int, nbytes: int):
        return self._call(_Request(ops.MEMCPY_PEER, (dst, dst_ctx, src, src_ctx, nbytes)))

    def memcpy_peer_async(self, dst: int, dst_ctx: int, src: int, src_ctx: int, nbytes: int, stream: int = 0):
        return self._defer(_Request(ops.MEMCPY_PEER_ASYNC, (dst, dst_ctx, src, src_ctx, nbytes, stream)))

    # -- shared plumbing ---------------------------------------------------------------------------
    def _start_client_state(self, server_max_frame: int, batching: bool,
                            output: Callable[[bytes], None] | None = None) -> None:
        self.max_frame = server_max_frame
        self.batching = batching
        self._output = output or write_stdout
        self._takes_output = bool(self.server.features & Feature.OUTPUT)
        self._ids = itertools.count(2)  # 1 is the HELLO
        self._pending: list[bytes] = []
        self._pending_bytes = 0

    def _frame(self, req: _Request, flags: int = 0) -> Frame:
        frame = Frame(req.op.code, next(self._ids) & 0xFFFFFFFF, flags, args=req.op.pack_request(*req.values),
                      bulk=req.bulk)
        if req.sink is not None:
            self.io.conn.expect_bulk(frame.request_id, req.sink)
        return frame

    def _queue(self, req: _Request) -> bool:
        """Queue a deferred call; True when the queue should be sent now."""
        encoded = frame_bytes(self._frame(req, Flags.NO_REPLY))
        self._pending.append(encoded)
        self._pending_bytes += len(encoded)
        return len(self._pending) >= MAX_BATCH_CALLS or self._pending_bytes >= MAX_BATCH_BYTES

    def _take_batch(self) -> list[Frame]:
        if not self._pending:
            return []
        batch = Frame(ops.BATCH.code, next(self._ids) & 0xFFFFFFFF, Flags.NO_REPLY, bulk=b"".join(self._pending))
        self._pending, self._pending_bytes = [], 0
        return [batch]

    def _is_output(self, frame: Frame) -> bool:
        """True if `frame` is kernel output (OUTPUT), which is written out here, before the reply after it
        is returned -- where a local driver would have printed it."""
        if frame.opcode != ops.OUTPUT.code:
            return False
        if not self._takes_output:
            raise ProtocolError("the server sent kernel output, which this session did not ask for")
        if frame.args or frame.status or frame.request_id or not frame.flags & Flags.REPLY:
            raise ProtocolError("malformed OUTPUT frame from the server")
        self._output(bytes(frame.bulk))
        return True

    @staticmethod
    def _results(reqs: list[_Request], frames: list[Frame], replies: list[Frame]) -> list:
        """Match replies to requests; raise the first failure only after every reply has been read, so the
        connection stays in step."""
        results, error = [], None
        for req, sent, reply in zip(reqs, frames, replies):
            result, failure = _Operations._result(req, sent, reply)
            results.append(result)
            error = error or failure
        if error is not None:
            raise error
        return results

    @staticmethod
    def _result(req: _Request, sent: Frame, reply: Frame) -> tuple:
        """(what the call returns, the CudaError it raises or None) from its reply; a reply that answers another
        request, or the server's protocol error, raises at once."""
        if reply.opcode == ops.PROTOCOL_ERROR.code:
            raise CudaError(reply.status, bytes(reply.bulk).decode("utf-8", "replace"))
        if reply.request_id != sent.request_id or reply.opcode != sent.opcode:
            raise ProtocolError(f"reply {reply.request_id}/0x{reply.opcode:04x} does not answer request "
                                f"{sent.request_id}/0x{sent.opcode:04x}")
        deferred = CudaError(reply.deferred_status, deferred=True) if reply.deferred_status else None
        if reply.status == Status.NOT_READY and req.decode is _true:
            return False, deferred  # a query's "not finished" is an answer, not an error
        if reply.status:
            return None, deferred or CudaError(reply.status, bytes(reply.bulk).decode("utf-8", "replace"))
        return _Operations._success(req, req.op.reply_values(reply.args), reply.bulk), deferred

    @staticmethod
    def _success(req: _Request, values: tuple, bulk) -> Any:
        """What a call returns from its successful reply's values (a plain tuple) and bulk."""
        if req.decode is not None:
            return req.decode(req.op.Reply._make(values), bulk)
        if len(values) < 2:  # (the reply's named tuple is made only where it is handed on)
            return values[0] if values else None
        return req.op.Reply._make(values)


def _none(values, bulk):
    return None


def _true(values, bulk):
    return True


def _handshake_flow(hs: ClientHandshake):
    reply = yield hs.hello()
    auth = hs.on_hello_reply(reply)
    if auth is not None:
        reply = yield auth
        hs.on_auth_reply(reply)


def _resolve_psk(psk: bytes | None, psk_file: str | None) -> bytes | None:
    """An explicit key wins; then the file given, then $RGPU_PSK_FILE (as the CLI and the shims read it)."""
    if psk is not None:
        return psk
    path = config.psk_file(psk_file)
    return config.load_psk(path) if path else None


class ServerUnreachable(RgpuError, ConnectionError):
    """No TCP connection to the server: the message names the address and what to check."""


def _unreachable(host: str, port: int, e: OSError) -> ServerUnreachable:
    if isinstance(e, socket.gaierror):
        return ServerUnreachable(f"cannot resolve rgpu-server host {host!r}: {e.strerror}")
    reason = e.strerror or str(e) or type(e).__name__
    hint = " (is rgpu-server running there? start it, or set --server / RGPU_SERVER)" \
        if isinstance(e, (ConnectionRefusedError, TimeoutError)) else ""
    return ServerUnreachable(f"cannot reach rgpu-server at {host}:{port}: {reason}{hint}")


def _connection_lost(e: OSError) -> CudaError:
    return CudaError(Status.CONNECTION_LOST, f"connection to the server lost ({e})")


class Client(_Operations):
    """Blocking client over a plain socket."""

    def __init__(self, sock: socket.socket, io: SocketFrameStream, hs: ClientHandshake, batching: bool,
                 output: Callable[[bytes], None] | None = None):
        self.sock, self.io = sock, io
        self.server = hs.server
        self.session_id = hs.server.session_id
        self._start_client_state(hs.server.max_frame, batching, output)

    def _call(self, req: _Request):
        # (_call_many's work for one request, without its lists: the Python client's null call is this. With
        # nothing queued to go first, no bulk either way and plain records, it goes without Frames: see
        # Connection.lone_request.)
        if self._pending or req.bulk or req.sink is not None or self.io.conn.protector is not None:
            return self._call_frame(req)
        op = req.op
        request_id = next(self._ids) & 0xFFFFFFFF
        try:
            values = self.io.call(op, request_id, req.values)
            reply = self._receive_reply() if values is None else None
        except OSError as e:
            raise _connection_lost(e) from e
        if reply is None:
            return self._success(req, values, b"")
        return self._answer(req, Frame(op.code, request_id), reply)

    def _call_frame(self, req: _Request):
        frame = self._frame(req)
        try:
            self.io.send_frames(self._take_batch() + [frame] if self._pending else (frame,))
            reply = self._receive_reply()
        except OSError as e:
            raise _connection_lost(e) from e
        return self._answer(req, frame, reply)

    def _answer(self, req: _Request, sent: Frame, reply: Frame):
        result, error = self._result(req, sent, reply)
        if error is not None:
            raise error
        return result

    def _call_many(self, reqs: list[_Request]) -> list:
        frames = [self._frame(r) for r in reqs]
        try:
            self.io.send_frames(self._take_batch() + frames)
            replies = [self._receive_reply() for _ in frames]
        except OSError as e:
            raise _connection_lost(e) from e
        return self._results(reqs, frames, replies)

    def _receive_reply(self) -> Frame:
        while True:
            frame = self.io.receive_frame()
            if not self._is_output(frame):
                return frame

    def _then(self, value, fn):
        return fn(value)

    def _defer(self, req: _Request) -> None:
        if not self.batching:
            self._call(req)
        elif self._queue(req):
            self.flush()

    def flush(self) -> None:
        """Send queued asynchronous calls now (their errors still surface at the next synchronising call)."""
        try:
            self.io.send_frames(self._take_batch())
        except OSError as e:
            raise _connection_lost(e) from e

    def close(self) -> None:
        if self.sock.fileno() < 0:
            return
        try:
            self._call(_Request(ops.GOODBYE, decode=_none))
        finally:
            self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if exc[0] is None:
            self.close()
        else:
            self.sock.close()


class AsyncClient(_Operations):
    """trio client; every operation is awaited."""

    def __init__(self, stream: trio.abc.Stream, io: TrioFrameStream, hs: ClientHandshake, batching: bool,
                 output: Callable[[bytes], None] | None = None):
        self.stream, self.io = stream, io
        self.server = hs.server
        self.session_id = hs.server.session_id
        self._lock = trio.Lock()
        self._start_client_state(hs.server.max_frame, batching, output)

    async def _call(self, req: _Request):
        return (await self._call_many([req]))[0]

    async def _call_many(self, reqs: list[_Request]) -> list:
        async with self._lock:
            frames = [self._frame(r) for r in reqs]
            await self.io.send_frames(self._take_batch() + frames)
            replies = []
            for _ in frames:
                reply = await self.io.receive_frame()
                while reply is not None and self._is_output(reply):
                    reply = await self.io.receive_frame()
                if reply is None:
                    raise CudaError(Status.CONNECTION_LOST, "server closed the connection")
                replies.append(reply)
        return self._results(reqs, frames, replies)

    async def _then(self, awaitable, fn):
        return fn(await awaitable)

    async def _defer(self, req: _Request) -> None:
        if not self.batching:
            await self._call(req)
        elif self._queue(req):
            await self.flush()

    async def flush(self) -> None:
        async with self._lock:
            await self.io.send_frames(self._take_batch())

    async def aclose(self) -> None:
        try:
            await self._call(_Request(ops.GOODBYE, decode=_none))
        finally:
            await self.stream.aclose()

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        if exc[0] is None:
            await self.aclose()
        else:
            await self.stream.aclose()


def _open_blocking(address: str | None, hs: ClientHandshake, timeout: float) -> tuple[socket.socket, SocketFrameStream]:
    """TCP connection + handshake (+ record protection) to the configured server, for blocking clients."""
    host, port = parse_address(config.server_address(address))
    try:
        sock = socket.create_connection((host, port), timeout=timeout)
    except OSError as e:
        raise _unreachable(host, port, e) from None
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        io = SocketFrameStream(sock, Connection())
        flow = _handshake_flow(hs)
        frame = next(flow)
        while True:
            io.send_frames([frame])
            reply = io.receive_frame()
            try:
                frame = flow.send(reply)
            except StopIteration:
                break
        if hs.protector is not None:
            io.conn.protect(hs.protector)
        return sock, io
    except BaseException:
        sock.close()
        raise


def connect(address: str | None = None, psk: bytes | None = None, *, psk_file: str | None = None,
            timeout: float = 10.0, context: bool = True, batching: bool = True, spin_us: float = 300,
            output: Callable[[bytes], None] | None = None) -> Client:
    """Open a session. `address` defaults to $RGPU_SERVER, then 127.0.0.1:9713; without `psk` or `psk_file`
    the key comes from $RGPU_PSK_FILE, if set -- as for the `rgpu` commands and the native stand-ins. With
    `context=True` (default) the device-0 context is retained and made current, so memory and module calls
    work at once. `spin_us`: how long to poll for each reply before sleeping. `output`: what the session's
    kernels print (device printf) is passed to it, before the call that synchronised returns; default: this
    program's stdout. Several servers ("hostA:9713,hostB:9713") give a `rgpu.multi.MultiClient` over the
    devices of them all."""
    addresses = config.server_addresses(address)
    if len(addresses) > 1:
        from rgpu.multi import connect_many

        return connect_many(connect, addresses, psk, config.psk_files(psk_file, len(addresses)), context=context,
                            timeout=timeout, batching=batching, spin_us=spin_us, output=output)
    hs = ClientHandshake(_resolve_psk(psk, psk_file))
    sock, io = _open_blocking(address, hs, timeout)
    try:
        sock.settimeout(None)
        io.spin_ns = int(spin_us * 1000)  # not before: polling needs the socket's timeout gone
        client = Client(sock, io, hs, batching, output)
        if context:
            client.init()
            client.ctx_set_current(client.primary_ctx_retain(0))
        return client
    except BaseException:
        sock.close()
        raise


def server_status(address: str | None = None, psk: bytes | None = None, *, psk_file: str | None = None,
                  timeout: float = 10.0) -> dict:
    """The server's own view (SERVER_STATUS): backend, limits, live sessions. Authenticated like a session
    when the server has a key, but it is none: the server answers and closes."""
    import json

    hs = ClientHandshake(_resolve_psk(psk, psk_file), status=True)
    sock, io = _open_blocking(address, hs, timeout)
    with sock:
        if not hs.server.features & Feature.STATUS:
            raise RgpuError(f"the server ({hs.server.agent}) is too old to report its status")
        io.send_frames([Frame(ops.SERVER_STATUS.code, 1)])
        reply = io.receive_frame()
        if reply.status:
            raise CudaError(reply.status, bytes(reply.bulk).decode("utf-8", "replace"))
        return json.loads(bytes(reply.bulk))


async def connect_async(address: str | None = None, psk: bytes | None = None, *,
                        psk_file: str | None = None, context: bool = True, batching: bool = True,
                        stream: trio.abc.Stream | None = None,
                        output: Callable[[bytes], None] | None = None) -> AsyncClient:
    """trio flavour of connect() (the same defaults from the environment); `stream` lets tests pass an
    in-memory stream instead of TCP. One server only (several: the blocking `connect`)."""
    if stream is None and len(config.server_addresses(address)) > 1:
        raise config.ConfigurationError("connect_async takes one server; rgpu.connect gives the devices of several")
    key = _resolve_psk(psk, psk_file)
    if stream is None:
        host, port = parse_address(config.server_address(address))
        try:
            stream = await trio.open_tcp_stream(host, port)
        except OSError as e:
            raise _unreachable(host, port, e) from None
    try:
        io = TrioFrameStream(stream, Connection())
        hs = ClientHandshake(key)
        flow = _handshake_flow(hs)
        frame = next(flow)
        while True:
            await io.send_frame(frame)
            reply = await io.receive_frame()
            if reply is None:
                raise CudaError(Status.CONNECTION_LOST, "server closed the connection during the handshake")
            try:
                frame = flow.send(reply)
            except StopIteration:
                break
        if hs.protector is not None:
            io.conn.protect(hs.protector)
        client = AsyncClient(stream, io, hs, batching, output)
        if context:
            await client.init()
            await client.ctx_set_current(await client.primary_ctx_retain(0))
        return client
    except BaseException:
        with trio.CancelScope(shield=True):
            await stream.aclose()
        raise
