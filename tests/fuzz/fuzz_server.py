"""Fuzz the server's frame decoder and dispatch in-process (no sockets): random bytes, random frames and
mutations of valid frames go through the same code a connection runs -- RecordDecoder, parse_frame,
classify, the handlers on a fake-backend session. The only acceptable outcomes are replies and
ProtocolError (which closes that connection); any other exception is a server crash. So is an input that
costs more than CPU_LIMIT seconds of CPU or makes Python or numpy hold more than MEMORY_LIMIT bytes at once:
every input here is a few KiB, and the server's work must stay in proportion to what it is sent.

    python tests/fuzz/fuzz_server.py --count 1000000 [--seed N]

Crashing inputs are written to tests/fuzz/corpus/ (replayed by tests/test_fuzz.py).
"""

from __future__ import annotations

import argparse
import logging
import pathlib
import random
import struct
import sys
import time
import tracemalloc

from rgpu.backends import fake
from rgpu.dispatch.dispatcher import execute_batch_sync, execute_sync
from rgpu.errors import ProtocolError
from rgpu.kernels import load
from rgpu.protocol import ops
from rgpu.protocol.frames import Flags, Frame, RecordDecoder, frame_bytes, parse_frame
from rgpu.serving.requests import Step, classify
from rgpu.session.state import Session

CORPUS = pathlib.Path(__file__).parent / "corpus"
MAX_RECORD = 1 << 20
CPU_LIMIT = 2.0  # seconds per input; a typical one takes well under a millisecond
MEMORY_LIMIT = 256 << 20  # peak bytes traced per input, over what the session held before it
PTX = load("demo.ptx")


def _no_wait(deadline: float) -> None:
    """Fuzzed launches may keep a fake stream 'busy' for years; never actually sleep."""


class InternalErrors(logging.Handler):
    """The dispatcher answers a handler's unexpected exception with UNKNOWN and logs it: for the fuzzer that
    is a crash as much as an exception escaping."""

    def __init__(self):
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record):
        if record.exc_info:
            self.records.append(record)


class Harness:
    def __init__(self, cpu_limit: float = CPU_LIMIT, memory_limit: int | None = MEMORY_LIMIT):
        self.cpu_limit = cpu_limit
        self.memory_limit = memory_limit
        self.internal = InternalErrors()
        logging.getLogger("rgpu").addHandler(self.internal)
        logging.getLogger("rgpu.dispatch").setLevel(logging.ERROR)  # unknown-opcode notices are expected
        self.backend = fake.FakeBackend(total_mem=1 << 30)
        self.backend.wait_until = _no_wait
        self.reset()

    def reset(self) -> None:
        if getattr(self, "session", None) is not None:
            self.session.release_all()
        self.session = Session(1, self.backend, mem_limit=64 << 20)
        # A realistic starting point: a context, a module, a function, memory, a stream, an event.
        self.ctx = self._ok(ops.PRIMARY_CTX_RETAIN, 0)[0]
        self._ok(ops.CTX_SET_CURRENT, self.ctx)
        self.mod = self._ok(ops.MODULE_LOAD_DATA, bulk=PTX)[0]
        self.func = self._ok(ops.MODULE_GET_FUNCTION, self.mod, bulk=b"fill")[0]
        self.ptr = self._ok(ops.MEM_ALLOC, 4096)[0]
        self.stream = self._ok(ops.STREAM_CREATE, 0)[0]
        self.event = self._ok(ops.EVENT_CREATE, 0)[0]
        self.known = [0, 1, self.ctx, self.mod, self.func, self.ptr, self.ptr + 4095, self.stream, self.event,
                      2**64 - 1, 2**63]

    def _ok(self, op, *values, bulk=b""):
        reply = execute_sync(self.session, Frame(op.code, 1, args=op.request.pack(*values), bulk=bulk))
        assert reply.status == 0, (op.name, reply.status, bytes(reply.bulk))
        return op.reply.unpack(reply.args)

    def feed(self, data: bytes) -> None:
        """One connection's worth of input bytes. Raises only on a server bug (unbounded work is one)."""
        # Traced for this input only (numpy reports its buffers to tracemalloc too); a caller's tracing is kept.
        trace = self.memory_limit is not None and not tracemalloc.is_tracing()
        if trace:
            tracemalloc.start()
        cpu = time.process_time()
        try:
            self._feed(data)
            peak = tracemalloc.get_traced_memory()[1] if trace else 0
        finally:
            if trace:
                tracemalloc.stop()
        cpu = time.process_time() - cpu
        if cpu > self.cpu_limit:
            raise RuntimeError(f"unbounded work: one input of {len(data)} bytes took {cpu:.2f}s of CPU")
        if peak > (self.memory_limit or peak):
            raise RuntimeError(f"unbounded memory: one input of {len(data)} bytes peaked at {peak >> 20} MiB")

    def _feed(self, data: bytes) -> None:
        decoder = RecordDecoder(MAX_RECORD, reuse_big=True)  # as a server's
        try:
            decoder.feed(data)
            while (record := decoder.next_record()) is not None:
                frame = parse_frame(record)
                step, work = classify(frame)
                if step is Step.BATCH:
                    execute_batch_sync(self.session, work, MAX_RECORD)
                elif step is Step.CALL:
                    execute_sync(self.session, frame)
        except ProtocolError:
            pass  # the connection is closed: correct handling of bad input
        if self.session.memory.allocated > 48 << 20 or len(self.session.handles) > 2000:
            self.reset()
        if self.internal.records:
            record = self.internal.records.pop()
            self.internal.records.clear()
            raise RuntimeError(f"internal error: {record.getMessage()}: {record.exc_info[1]!r}")


def random_value(rng: random.Random, code: str, known: list[int]):
    if code in "fd":
        return rng.choice([0.0, 1.0, -1.0, 1e30, float("nan")])
    bits = {"Q": 64, "q": 64, "I": 32, "i": 32, "H": 16}[code]
    choice = rng.random()
    if choice < 0.4:
        value = rng.choice(known)
    elif choice < 0.7:
        value = rng.randrange(0, 1 << min(bits, 16))
    else:
        value = rng.getrandbits(bits)
    if code in "qi":
        value = (value & ((1 << bits) - 1)) - (1 << (bits - 1)) if value >= 1 << (bits - 1) else value
    return value & ((1 << bits) - 1) if code in "QIH" else value


def random_frame(rng: random.Random, known: list[int], inner: bool = False) -> bytes:
    """One encoded frame; `inner` frames (a BATCH's) mostly carry NO_REPLY and are often launches, so the
    dispatcher's straight-from-the-bytes launch path gets its share."""
    op = ops.LAUNCH_KERNEL if inner and rng.random() < 0.4 else rng.choice(list(ops.OPS.values()))
    values = []
    for code in op.request.format[1:]:
        if code.isdigit():
            continue
        values.append(rng.randbytes(32) if code == "s" else random_value(rng, code, known))
    try:
        args = op.request.pack(*values)
    except struct.error:
        args = rng.randbytes(op.request.size)
    if rng.random() < 0.1:
        args = args[: rng.randrange(len(args) + 1)] + rng.randbytes(rng.randrange(4))
    bulk = rng.choice([b"", b"fill", b"vadd", PTX[: rng.randrange(len(PTX))], rng.randbytes(rng.randrange(64))])
    flags = rng.choice([0, 0, 0, Flags.NO_REPLY, Flags.REPLY, 0x80])
    if inner and rng.random() < 0.8:
        flags = Flags.NO_REPLY
    if op is ops.LAUNCH_KERNEL and rng.random() < 0.5:
        bulk = rng.randbytes(rng.choice([0, 8, 16, 20, 24, 28, 64]))  # right and wrong parameter sizes
    frame = Frame(op.code if rng.random() < 0.95 else rng.getrandbits(16), rng.getrandbits(32), int(flags),
                  args=args, bulk=bulk)
    data = frame_bytes(frame)
    if op is ops.BATCH and rng.random() < 0.8:
        data = random_batch(rng, known)
    return data


def random_batch(rng: random.Random, known: list[int]) -> bytes:
    inner = b"".join(random_frame(rng, known, inner=True) for _ in range(rng.randrange(1, 9)))
    return frame_bytes(Frame(ops.BATCH.code, 7, Flags.NO_REPLY, bulk=inner))


def mutate(rng: random.Random, data: bytes) -> bytes:
    b = bytearray(data)
    for _ in range(rng.randrange(1, 4)):
        kind = rng.random()
        if kind < 0.5 and b:
            b[rng.randrange(len(b))] = rng.getrandbits(8)
        elif kind < 0.7:
            del b[rng.randrange(len(b) + 1):]
        elif kind < 0.85:
            pos = rng.randrange(len(b) + 1)
            b[pos:pos] = rng.randbytes(rng.randrange(1, 16))
        else:
            struct.pack_into("<I", b, 0, rng.getrandbits(32)) if len(b) >= 4 else None
    return bytes(b)


def generate(rng: random.Random, known: list[int]) -> bytes:
    kind = rng.random()
    if kind < 0.1:
        return rng.randbytes(rng.randrange(64))
    if kind < 0.3:
        batch = random_batch(rng, known)
        return mutate(rng, batch) if rng.random() < 0.3 else batch
    frames = b"".join(random_frame(rng, known) for _ in range(rng.randrange(1, 4)))
    return mutate(rng, frames) if kind < 0.5 else frames


def run(count: int, seed: int, report_every: int = 0) -> int:
    rng = random.Random(seed)
    harness = Harness()
    crashes = 0
    t0 = time.monotonic()
    for i in range(count):
        data = generate(rng, harness.known)
        try:
            harness.feed(data)
        except Exception as e:  # a server bug: keep the input
            crashes += 1
            CORPUS.mkdir(exist_ok=True)
            path = CORPUS / f"crash-{seed}-{i}.bin"
            path.write_bytes(data)
            print(f"CRASH on input {i}: {type(e).__name__}: {e} -> {path}", file=sys.stderr)
            harness.reset()
        if report_every and (i + 1) % report_every == 0:
            rate = (i + 1) / (time.monotonic() - t0)
            print(f"{i + 1} inputs, {crashes} crashes, {rate:,.0f}/s", flush=True)
    return crashes


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--count", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    t0 = time.monotonic()
    crashes = run(args.count, args.seed, report_every=max(1, args.count // 10))
    print(f"fuzzed {args.count} inputs (seed {args.seed}) in {time.monotonic() - t0:.0f}s: {crashes} crashes")
    return 1 if crashes else 0


if __name__ == "__main__":
    sys.exit(main())
