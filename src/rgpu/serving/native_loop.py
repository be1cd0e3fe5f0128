"""The session's request loop in C for what the fast lane serves whole (native/src/lane/serve.c): BATCH frames
whose records the lane runs, NOPs, cuMemGetInfo, context and stream synchronizes, device-to-host copies, and
host-to-device copies sent as frames of their own (received straight into the stream's copy ring). The worker's
blocking loop (worker.py) hands it the socket, and the bytes its decoder holds, between frames whenever no
deferred error waits for a reply; what it hands back -- the bytes it did not serve, a batch the lane stopped
in -- lands here in the state Python's own loop would have left, and its counts in the session's counters.

Sealed sessions (a pre-shared key) too: C opens each record whole once it has arrived, with the counters Python
hands it and takes back after each turn, and seals its replies; a record too big for its buffer stays sealed for
Python, and a frame it opened but leaves to Python comes back opened (Connection.receive_opened). Without
libcrypto, under RGPU_TRACE_OPS or RGPU_NATIVE_LOOP=0 (a benchmarking aid, like RGPU_LANE=0) every frame takes
Python's path. Injected round-trip time (--inject-rtt-us) holds the C loop's replies as it holds Python's."""

from __future__ import annotations

import os
import select
import time

from rgpu.backends import lane as lanes
from rgpu.dispatch import dispatcher
from rgpu.protocol import ops
from rgpu.protocol.frames import HEADER, PREFIX_SIZE
from rgpu.protocol.handshake import tampered
from rgpu.serving.output import KernelOutput
from rgpu.session.state import Session
from rgpu.transport import SPIN_YIELD, SocketFrameStream

# Frames larger than this are Python's, but for host-to-device copies, which C streams through the copy ring; a
# copy it cannot finish goes back with up to a ring slot of received bytes behind a frame head, which must fit. A
# sealed record must fit whole (C uses none of it before its tag): the C stand-ins seal copies up in records of
# four slots (1 MiB), opened straight into four consecutive slots of the ring.
BUFFER_BYTES = lanes.SEALED_COPY_SLOTS * lanes.RING_SLOT_BYTES + (4 << 10)
# Back to Python after this many frames at most, so that it sees a signal and `rgpu status` fresh counts.
MAX_FRAMES = 64



_unsealed_said = False  # (the warning that sealed sessions stay in Python's loop: once per worker)


def wanted() -> bool:
    return os.environ.get("RGPU_NATIVE_LOOP") != "0"


class NativeLoop:
    def __init__(self, session: Session, io: SocketFrameStream, output: KernelOutput | None, inject_rtt_us: float,
                 seal=None):
        ffi = lanes.ffi()
        self._session = session
        self._io = io
        self._buf = bytearray(BUFFER_BYTES)
        self._args = ffi.new("rgpu_lane_serve_io *")
        a = self._args
        self._buf_c = ffi.from_buffer("uint8_t[]", self._buf)
        self._held = ffi.from_buffer("int[]", output.held) if output is not None else ffi.NULL
        a.fd = io.sock.fileno()
        a.buf, a.cap = self._buf_c, len(self._buf)
        a.max_record = io.conn.max_record
        a.spin_ns, a.spin_yield = io.spin_ns, int(SPIN_YIELD)
        a.output_fd = output.read_fd if output is not None else -1
        a.output_held = self._held
        a.max_frames = MAX_FRAMES
        a.memory_limited = session.memory.limit is not None
        a.inject_ns = int(inject_rtt_us * 1000)
        self._protector = io.conn.protector
        self._seal = seal
        if seal is not None:
            self._plain = bytearray(BUFFER_BYTES)
            a.seal, a.plain = seal, ffi.from_buffer("uint8_t[]", self._plain)
            self._counters = ffi.new("uint64_t[2]")
        self._out = ffi.new("rgpu_lane_served *")
        self._poll = select.poll()
        self._poll.register(io.sock, select.POLLIN)

    @classmethod
    def make(cls, session: Session, io: SocketFrameStream, output: KernelOutput | None,
             inject_rtt_us: float) -> NativeLoop | None:
        """The C loop for this session, or None where every frame must take Python's path."""
        if session.lane is None or not wanted() or dispatcher.tracing():
            return None
        seal = None
        if io.conn.protector is not None and (seal := lanes.seal_for(*io.conn.protector.native_keys())) is None:
            global _unsealed_said
            if not _unsealed_said:
                _unsealed_said = True
                session.log.warning("the fast lane cannot load libcrypto (OpenSSL 3): sessions with a pre-shared key "
                                    "are served by Python's request loop, several times slower per request")
            return None
        return cls(session, io, output, inject_rtt_us, seal)

    def serve(self) -> bool:
        """Serve frames in C until one is Python's. True: go on (call again); False: the next frame is for
        Python's own receive (in its decoder, or still in the socket). A deferred error waiting for the next
        reply, or a large record on its way into Python's decoder, keeps the C loop out (False at once)."""
        session, io, out = self._session, self._io, self._out
        if session.deferred_error or io.conn.has_opened:
            return False
        held = io.conn.decoder.take_raw(len(self._buf))  # what Python's last receive brought beyond its frame
        if held is None:
            return False
        self._buf[: len(held)] = held
        self._args.have = len(held)
        lane = session.lane_ready()
        self._args.current_ctx = session.current_ctx
        self._args.capture_possible = lane.capture_possible()
        loop_ns = session.loop_ns
        with session.counting:
            session.receiving = (time.perf_counter_ns(), loop_ns[0])
            protector = self._protector
            if protector is not None:
                lanes.library().rgpu_lane_seal_set_counters(self._seal, *protector.counters)
            try:
                lane.serve(self._args, out)
            finally:
                session.receiving = (0, loop_ns[0])
                if protector is not None:
                    counters = self._counters
                    lanes.library().rgpu_lane_seal_counters(self._seal, counters, counters + 1)
                    protector.set_counters(counters[0], counters[1])
                self._count(out)
        outcome = out.outcome
        if out.tampered:
            raise tampered()
        if out.deferred.status:  # (a request served without a reply failed afterwards: its copy's synchronize)
            failed = lanes.stop_from(out.deferred)
            session.defer_error(failed.status, ops.OPS[failed.opcode].name, failed.request_id, failed.what)
        if out.opened_len:  # (a frame C opened and left to Python: before the bytes after it)
            io.conn.receive_opened(bytes(self._plain[out.opened_at + PREFIX_SIZE : out.opened_at + out.opened_len]))
        rest = memoryview(self._buf)[out.rest_at : out.rest_end]
        if rest:
            io.conn.receive_data(rest)  # (copied: the buffer is the C loop's again next time)
        if outcome == lanes.SERVE_IDLE:
            if not rest:
                self._wait_readable()
            return not rest
        if outcome == lanes.SERVE_PYTHON:
            return False
        if outcome == lanes.SERVE_FAILED:
            if out.failed_status:
                # The reply's status had gone out as success: the client cannot be told otherwise.
                what = lanes.ffi().string(out.failed_what).decode(errors="replace")
                session.log.warning("the context failed (%s: CUDA status %d) while a copy back was being sent; "
                                    "its reply had begun, so the session ends", what, out.failed_status)
                raise OSError(out.error, f"context failed during a copy back ({what}: {out.failed_status})")
            raise OSError(out.error, f"sending a reply: {os.strerror(out.error)}")
        if outcome == lanes.SERVE_BATCH_STOPPED:
            started = time.perf_counter_ns()
            held = self._plain if out.frame_in_plain else self._buf
            frame = memoryview(held)[out.frame_at : out.frame_at + out.frame_len]
            _op, _flags, _rid, _st, _def, bulk_len = HEADER.unpack_from(frame, PREFIX_SIZE)
            dispatcher.resume_batch(session, frame[len(frame) - bulk_len :], lanes.stop_from(out.stop))
            loop_ns[1] += time.perf_counter_ns() - started
        return True

    def _count(self, out) -> None:
        session, io = self._session, self._io
        session.frames_received += out.frames
        io.bytes_received += out.bytes_in
        io.bytes_sent += out.bytes_out
        io.wait_ns += out.wait_ns
        loop_ns = session.loop_ns
        loop_ns[0] += out.receive_ns
        loop_ns[1] += out.run_ns
        loop_ns[2] += out.reply_ns
        dispatcher.take_lane_counts(session)  # (its calls and replies by operation)

    def _wait_readable(self) -> None:
        """Sleep until the client sends (the C loop polled long enough): a signal interrupts this as it would
        Python's own receive."""
        session, loop_ns = self._session, self._session.loop_ns
        started = time.perf_counter_ns()
        session.receiving = (started, loop_ns[0])
        try:
            self._poll.poll()
        finally:
            waited = time.perf_counter_ns() - started
            loop_ns[0] += waited
            self._io.wait_ns += waited
            session.receiving = (0, loop_ns[0])
