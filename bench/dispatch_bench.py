"""The server's cost per deferred call of a BATCH, without sockets or a GPU: records of one operation run through
the dispatcher against the fake backend, and the backend's own cost for the same work alone, so the difference is
the dispatcher's. The GPU box's worker pays the same Python per record on top of the driver's time.

    python3 bench/dispatch_bench.py [--records 20000] [--repeat 7]
"""

from __future__ import annotations

import argparse
import time

from rgpu.backends.fake import FakeBackend
from rgpu.dispatch.dispatcher import execute_batch_sync
from rgpu.protocol import ops
from rgpu.protocol.frames import FLAG_NO_REPLY, Frame, frame_bytes
from rgpu.serving.loop import next_action
from rgpu.serving.requests import classify
from rgpu.session.state import Session

MAX = 1 << 30


def _call(s: Session, op, *values):
    reply = next_action(s, Frame(op.code, 1, args=op.pack_request(*values)), MAX).run()
    return op.decode_reply(reply.args)[0]


def _best(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=20000)
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    s = Session(1, FakeBackend())
    ctx = _call(s, ops.PRIMARY_CTX_RETAIN, 0)
    next_action(s, Frame(ops.CTX_SET_CURRENT.code, 2, args=ops.CTX_SET_CURRENT.pack_request(ctx)), MAX).run()
    stream = _call(s, ops.STREAM_CREATE, 1)
    ptr = _call(s, ops.MEM_ALLOC, 4096)
    cases = {
        "STREAM_SYNCHRONIZE": (ops.STREAM_SYNCHRONIZE.pack_request(stream), b"",
                               lambda: s.backend.stream_synchronize(s.context().obj, s.stream(stream)[1])),
        "MEMSET_D8_ASYNC": (ops.MEMSET_D8_ASYNC.pack_request(ptr, 1, 256, stream), b"",
                            lambda: s.backend.memset(s.context().obj, ptr, 1, 256, 1, s.stream(stream)[1], True)),
        "MEMCPY_HTOD_ASYNC": (ops.MEMCPY_HTOD_ASYNC.pack_request(ptr, stream), b"x" * 16,
                              lambda: s.backend.memcpy_htod(s.context().obj, ptr, b"x" * 16, s.stream(stream)[1],
                                                            asynchronous=True)),
    }
    n = args.records
    print(f"{'operation':<20} {'dispatched us':>14} {'backend alone us':>17} {'dispatcher us':>14}")
    for name, (request, bulk, alone) in cases.items():
        op = ops.BY_NAME[name]
        records = b"".join(frame_bytes(Frame(op.code, 10 + i, FLAG_NO_REPLY, args=request, bulk=bulk))
                           for i in range(n))
        _, batch = classify(Frame(ops.BATCH.code, 3, bulk=records), MAX)
        dispatched = _best(lambda: execute_batch_sync(s, batch), args.repeat) / n * 1e6
        backend = _best(lambda: [alone() for _ in range(n)], args.repeat) / n * 1e6
        print(f"{name:<20} {dispatched:>14.2f} {backend:>17.2f} {dispatched - backend:>14.2f}")
    s.release_all()


if __name__ == "__main__":
    main()
