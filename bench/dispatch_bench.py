"""The server's cost per deferred call of a BATCH, without sockets or a GPU: records of one operation run through
the dispatcher against the fake backend, and the backend's own cost for the same work alone, so the difference is
the dispatcher's. With --backend cuda (on the GPU box) the same against the real driver, plus the driver call by
itself through cffi: the floor a worker without Python per record would reach.

    python3 bench/dispatch_bench.py [--records 20000] [--repeat 7] [--backend fake|cuda] [--only OP] [--profile]
"""

from __future__ import annotations

import argparse
import struct
import time

from rgpu import shims
from rgpu.backends import lane
from rgpu.backends.factory import make_backend
from rgpu.dispatch.graphs import LaunchAttribute
from rgpu.kernels import load
from rgpu.dispatch.dispatcher import execute_batch_sync
from rgpu.protocol import ops
from rgpu.protocol.frames import FLAG_NO_REPLY, Frame, frame_bytes
from rgpu.serving.loop import next_action
from rgpu.serving.requests import classify
from rgpu.session.handles import Kind
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


def _best_alternating(a, b, repeat: int) -> tuple[float, float]:
    """Best times of `a` and `b` taken in turn, so that a drift of the machine (or of the GPU's queue) reaches both."""
    best_a = best_b = float("inf")
    for _ in range(repeat):
        best_a = min(best_a, _best(a, 1))
        best_b = min(best_b, _best(b, 1))
    return best_a, best_b


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=20000)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--backend", default="fake", choices=("fake", "cuda"))
    ap.add_argument("--only", help="one operation's case (e.g. DNN_BN_INFERENCE)")
    ap.add_argument("--profile", action="store_true",
                    help="then the dispatched records of each case once more under cProfile: the 15 costliest "
                         "functions by own time (a profiler inflates every Python call: shares, not microseconds)")
    args = ap.parse_args()
    # The fast lane, as rgpu-server's workers load it; RGPU_LANE=0 measures the Python path alone.
    lane.load(shims.lane_library(), shims.lane_header())
    print(f"fast lane: {'on' if lane.wanted() else 'off (RGPU_LANE=0)'}")
    s = Session(1, make_backend(args.backend))
    ctx = _call(s, ops.PRIMARY_CTX_RETAIN, 0)
    next_action(s, Frame(ops.CTX_SET_CURRENT.code, 2, args=ops.CTX_SET_CURRENT.pack_request(ctx)), MAX).run()
    stream = _call(s, ops.STREAM_CREATE, 1)
    ptr = _call(s, ops.MEM_ALLOC, 4096)
    copier = s.backend.async_copier(s.context().obj, s.stream(stream)[1])
    module = next_action(s, Frame(ops.MODULE_LOAD_DATA.code, 4, bulk=load("demo.ptx")), MAX).run()
    module = ops.MODULE_LOAD_DATA.decode_reply(module.args)[0]
    fill = next_action(s, Frame(ops.MODULE_GET_FUNCTION.code, 5, args=ops.MODULE_GET_FUNCTION.pack_request(module),
                                bulk=b"fill"), MAX).run()
    fill = ops.MODULE_GET_FUNCTION.decode_reply(fill.args)[0]
    fill_params = struct.pack("<QfI", ptr, 1.0, 64)
    launch = s.launch_target(fill, stream).launch
    # llama.cpp's launches: one PROGRAMMATIC_STREAM_SERIALIZATION attribute (PDL) each
    pdl = LaunchAttribute(6, (1).to_bytes(4, "little").ljust(64, b"\0"))
    pdl_record = struct.pack("<I4x", pdl.id) + pdl.value
    fill_func, fill_stream = s.object(fill, Kind.FUNCTION)[1].obj, s.stream(stream)[1]
    launch_ex = s.backend.launcher_ex(s.context().obj, fill_func, fill_stream)
    cases = {
        "LAUNCH_KERNEL": (ops.LAUNCH_KERNEL.pack_request(fill, 1, 1, 1, 64, 1, 1, 0, stream), fill_params,
                          lambda: launch(1, 1, 1, 64, 1, 1, 0, fill_params)),
        "LAUNCH_KERNEL_EX": (ops.LAUNCH_KERNEL_EX.pack_request(fill, 1, 1, 1, 64, 1, 1, 0, stream, 1),
                             pdl_record + fill_params, lambda: launch_ex(1, 1, 1, 64, 1, 1, 0, [pdl], fill_params)),
        "STREAM_SYNCHRONIZE": (ops.STREAM_SYNCHRONIZE.pack_request(stream), b"",
                               lambda: s.backend.stream_synchronize(s.context().obj, s.stream(stream)[1])),
        "MEMSET_D8_ASYNC": (ops.MEMSET_D8_ASYNC.pack_request(ptr, 1, 256, stream), b"",
                            lambda: s.backend.memset(s.context().obj, ptr, 1, 256, 1, s.stream(stream)[1], True)),
        "MEMCPY_HTOD_ASYNC": (ops.MEMCPY_HTOD_ASYNC.pack_request(ptr, stream), b"x" * 16,
                              lambda: copier(ptr, b"x" * 16)),
        "DNN_BN_INFERENCE": _bn_inference_case(s, stream),
    }
    n = args.records
    floors = _driver_floors(s, stream, ptr) if args.backend == "cuda" else {}
    print(f"{'operation':<20} {'dispatched us':>14} {'backend alone us':>17} {'dispatcher us':>14} {'driver us':>10}")
    if args.only:
        cases = {args.only: cases[args.only]}
    for name, (request, bulk, alone) in cases.items():
        op = ops.BY_NAME[name]
        records = b"".join(frame_bytes(Frame(op.code, 10 + i, FLAG_NO_REPLY, args=request, bulk=bulk))
                           for i in range(n))
        _, batch = classify(Frame(ops.BATCH.code, 3, bulk=records))
        dispatched, backend = (best / n * 1e6 for best in _best_alternating(
            lambda: execute_batch_sync(s, batch, MAX), lambda: [alone() for _ in range(n)], args.repeat))
        floor = _best(lambda: [floors[name]() for _ in range(n)], args.repeat) / n * 1e6 if name in floors else 0
        print(f"{name:<20} {dispatched:>14.2f} {backend:>17.2f} {dispatched - backend:>14.2f} {floor:>10.2f}")
        if args.profile:
            _profile(lambda: execute_batch_sync(s, batch, MAX))
    s.release_all()


def _profile(fn) -> None:
    import cProfile
    import pstats

    profiler = cProfile.Profile()
    profiler.runcall(fn)
    pstats.Stats(profiler).sort_stats("tottime").print_stats(15)


def _bn_inference_case(s: Session, stream: int):
    """ResNet-18's batch norm at batch 1 (64 channels of 8x8, float): cuDNN's legacy inference call, which the
    worker serves 20 times a step -- "backend alone" is the backend's call (cuDNN's own, through cffi, on the
    box), so the difference is what serving it adds."""
    from rgpu.protocol import dnn_wire

    def tensor(dims):
        strides = [1] * len(dims)
        for i in range(len(dims) - 2, -1, -1):
            strides[i] = strides[i + 1] * dims[i + 1]
        pad = [0] * (8 - len(dims))
        return struct.pack("<II8i8i", 0, len(dims), *dims, *pad, *strides, *pad)

    handle = _call(s, ops.DNN_CREATE)
    mem = _call(s, ops.MEM_ALLOC, 1 << 20)
    x, y, params = mem, mem + (64 << 10), [mem + (128 << 10) + i * 4096 for i in range(4)]
    bulk = tensor([1, 64, 8, 8]) * 2 + tensor([1, 64, 1, 1])
    request = ops.DNN_BN_INFERENCE.pack_request(handle, stream, 1, 1.0, 0.0, 1e-5, x, y, *params)
    ctx, h = s.object(handle, Kind.DNN)
    tensors = dnn_wire.parse_tensors(bulk, 3)
    return request, bulk, lambda: s.backend.dnn_bn_inference(ctx.obj, h.obj, s.stream(stream)[1], 1, 1.0, 0.0,
                                                             1e-5, tensors, (x, y, *params))


def _driver_floors(s: Session, stream: int, ptr: int) -> dict:
    """Each case's driver call alone, through cffi (the HtoD copy from a page-locked buffer, as the copy ring does)."""
    import cffi

    ffi = cffi.FFI()
    ffi.cdef("""int cuStreamSynchronize(uintptr_t s); int cuMemsetD8Async(unsigned long long d, unsigned char v,
                size_t n, uintptr_t s); int cuMemcpyHtoDAsync_v2(unsigned long long d, uintptr_t src, size_t n,
                uintptr_t s); int cuMemHostAlloc(void **p, size_t n, unsigned flags);""")
    lib = ffi.dlopen("libcuda.so.1")
    strm = int(s.stream(stream)[1])
    pinned = ffi.new("void **")
    lib.cuMemHostAlloc(pinned, 4096, 0)
    src = int(ffi.cast("uintptr_t", pinned[0]))
    return {"STREAM_SYNCHRONIZE": lambda: lib.cuStreamSynchronize(strm),
            "MEMSET_D8_ASYNC": lambda: lib.cuMemsetD8Async(ptr, 1, 256, strm),
            "MEMCPY_HTOD_ASYNC": lambda: lib.cuMemcpyHtoDAsync_v2(ptr, src, 16, strm)}


if __name__ == "__main__":
    main()
