"""rgpu over loopback vs baselines measured in the same run.

    python bench/rpc_bench.py --backend fake          # CI-able, no GPU
    python bench/rpc_bench.py --backend cuda --psk    # on the GPU box

Prints one table: null-call round trip (p50/p99) against a raw TCP echo through a trio server and against
the C floor (bench/raw_tcp.c: plain C on both ends, polling before sleeping exactly as rgpu does with
--spin-us); kernel launches/s batched and unbatched against native cuLaunchKernel (cuda backend only);
host<->device copy bandwidth against raw loopback TCP streaming, and per size against a blocking raw TCP copy
of the same size in Python and in C (the strict baselines: one synchronous copy at a time, as cudaMemcpy is).
`--with-shim` then runs the C shim against the native driver in the same command. Everything binds 127.0.0.1.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import textwrap
import time

import numpy as np

import rgpu
from rgpu.cli import local_server
from rgpu.kernels import load

ECHO_SERVER = textwrap.dedent("""
    import socket, sys, trio
    async def handle(stream):
        sock = stream.socket
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        buf = bytearray(1 << 20)
        while True:
            n = await sock.recv_into(buf)
            if not n:
                return
            if sys.argv[1] == "echo":
                await stream.send_all(bytes(buf[:n]))
    async def main():
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        print(listeners[0].socket.getsockname()[1], flush=True)
        await trio.serve_listeners(handle, listeners)
    trio.run(main)
""")


# The strict per-size baseline: a plain blocking server that answers one copy at a time, as a synchronous
# cudaMemcpy must: 'U' + u64 n, then n bytes, answered with one byte; 'D' + u64 n, answered with n bytes.
COPY_SERVER = textwrap.dedent("""
    import socket, struct
    srv = socket.create_server(("127.0.0.1", 0))
    print(srv.getsockname()[1], flush=True)
    conn, _ = srv.accept()
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    view = memoryview(bytearray(16 << 20))
    while True:
        head = conn.recv(9, socket.MSG_WAITALL)
        if len(head) < 9:
            break
        n = struct.unpack("<Q", head[1:])[0]
        while n:
            k = min(n, len(view))
            if head[0] == ord("U"):
                k = conn.recv_into(view[:k])
                if not k:
                    raise SystemExit
            else:
                conn.sendall(view[:k])
            n -= k
        if head[0] == ord("U"):
            conn.sendall(b"k")
""")


def copy_reps(size: int) -> int:
    """How many copies of `size` each copy figure is the best of -- rgpu's, the raw and the C baselines alike
    (bench/raw_tcp.c has the same rule): three of a large copy, but more of a small one, whose best of three
    moved by 20 points between commands on the GPU box (a 1 MiB copy takes a quarter of a millisecond)."""
    return max(3, min(30, (64 << 20) // max(size, 1)))


def raw_copy_rates(sizes) -> dict:
    """size -> (upload, download) bytes/s over raw loopback TCP, one synchronous copy at a time, best of
    copy_reps."""
    proc = subprocess.Popen([sys.executable, "-c", COPY_SERVER], stdout=subprocess.PIPE, text=True)
    sock = socket.create_connection(("127.0.0.1", int(proc.stdout.readline())))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    out = {}
    try:
        for size in sizes:
            data, land = memoryview(bytearray(size)), memoryview(bytearray(size))
            up = down = float("inf")
            for _ in range(copy_reps(size)):
                t0 = time.perf_counter()
                sock.sendall(b"U" + size.to_bytes(8, "little"))
                sock.sendall(data)
                sock.recv(1, socket.MSG_WAITALL)
                up = min(up, time.perf_counter() - t0)
                t0 = time.perf_counter()
                sock.sendall(b"D" + size.to_bytes(8, "little"))
                got = 0
                while got < size:
                    got += sock.recv_into(land[got:])
                down = min(down, time.perf_counter() - t0)
            out[size] = (size / up, size / down)
    finally:
        sock.close()
        proc.kill()
        proc.wait()
    return out


def c_raw_baselines(calls: int, spin_us: float, sizes) -> dict:
    """bench/raw_tcp.c, built here with the system C compiler: {spin_us: its JSON} for no polling and for
    rgpu's polling setting; {} when no compiler is found."""
    source = os.path.join(os.path.dirname(os.path.abspath(__file__)), "raw_tcp.c")
    cc = os.environ.get("CC", "cc")
    with tempfile.TemporaryDirectory() as tmp:
        exe = os.path.join(tmp, "raw_tcp")
        try:
            subprocess.run([cc, "-O2", "-pthread", "-o", exe, source], check=True, capture_output=True)
        except (OSError, subprocess.CalledProcessError) as e:
            print(f"C baseline skipped: cannot build {source} with {cc}: {e}", file=sys.stderr)
            return {}
        out = {}
        for spin in sorted({0, int(spin_us)}):
            res = subprocess.run([exe, str(calls), str(spin), *map(str, sizes)], capture_output=True, text=True,
                                 timeout=600, check=True)
            data = json.loads(res.stdout)
            data["copy"] = {int(k): tuple(v) for k, v in data["copy"].items()}
            out[spin] = data
        return out


def percentile(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def timed_calls(fn, n):
    for _ in range(min(500, n)):
        fn()
    samples = []
    for _ in range(n):
        t0 = time.perf_counter_ns()
        fn()
        samples.append((time.perf_counter_ns() - t0) / 1000)
    return percentile(samples, 0.5), percentile(samples, 0.99)


class RawServer:
    def __init__(self, mode):
        self.proc = subprocess.Popen([sys.executable, "-c", ECHO_SERVER, mode], stdout=subprocess.PIPE, text=True)
        self.port = int(self.proc.stdout.readline())
        self.sock = socket.create_connection(("127.0.0.1", self.port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def close(self):
        self.sock.close()
        self.proc.kill()
        self.proc.wait()


def raw_echo_latency(n):
    srv = RawServer("echo")
    msg = bytes(24)  # the size of a NOP frame
    buf = bytearray(64)

    def once():
        srv.sock.sendall(msg)
        got = 0
        while got < len(msg):
            got += srv.sock.recv_into(memoryview(buf)[got:])

    try:
        return timed_calls(once, n)
    finally:
        srv.close()


def raw_stream_bandwidth(nbytes):
    srv = RawServer("sink")
    data = memoryview(bytearray(nbytes))
    try:
        t0 = time.perf_counter()
        srv.sock.sendall(data)
        srv.sock.shutdown(socket.SHUT_WR)
        srv.sock.recv(1)  # wait for the sink to see EOF and close
        return nbytes / (time.perf_counter() - t0)
    finally:
        srv.close()


def launch_rate(client, fn, ptr, n):
    client.launch(fn, 1, 1, (ptr, 1.0, 1))
    client.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        client.launch(fn, 1, 1, (ptr, 1.0, 1))
    client.synchronize()
    return n / (time.perf_counter() - t0)


def native_cuda_baselines(n_launch, sizes):
    """Native numbers via cuda-python in a child process (the bench process itself stays driver-free)."""
    code = textwrap.dedent(f"""
        import ctypes, json, time, numpy as np
        from cuda.bindings import driver as cu
        from rgpu.kernels import load
        def ck(r):
            assert r[0] == cu.CUresult.CUDA_SUCCESS, r[0]
            return r[1] if len(r) == 2 else r[1:]
        ck(cu.cuInit(0)); dev = ck(cu.cuDeviceGet(0))
        try: ctx = ck(cu.cuCtxCreate(None, 0, dev))
        except TypeError: ctx = ck(cu.cuCtxCreate(0, dev))
        mod = ck(cu.cuModuleLoadData(load("demo.ptx") + b"\\0")); fn = ck(cu.cuModuleGetFunction(mod, b"fill"))
        p = ck(cu.cuMemAlloc(1 << 20))
        a0 = ctypes.c_uint64(int(p)); a1 = ctypes.c_float(1.0); a2 = ctypes.c_int(1)
        params = np.array([ctypes.addressof(a0), ctypes.addressof(a1), ctypes.addressof(a2)], dtype=np.intp)
        def launch(): ck(cu.cuLaunchKernel(fn, 1,1,1, 1,1,1, 0, cu.CUstream(0), params.ctypes.data, 0))
        for _ in range(100): launch()
        ck(cu.cuCtxSynchronize())
        t0 = time.perf_counter()
        for _ in range({n_launch}): launch()
        ck(cu.cuCtxSynchronize())
        out = {{"launch_rate": {n_launch} / (time.perf_counter() - t0)}}
        t0 = time.perf_counter_ns(); n = 20000
        for _ in range(n): ck(cu.cuCtxGetDevice())
        out["null_us"] = (time.perf_counter_ns() - t0) / n / 1000
        for size in {sizes!r}:
            host = np.ones(size, np.uint8); d = ck(cu.cuMemAlloc(size))
            ck(cu.cuMemcpyHtoD(d, host.ctypes.data, size))
            t0 = time.perf_counter(); ck(cu.cuMemcpyHtoD(d, host.ctypes.data, size)); h2d = size / (time.perf_counter() - t0)
            t0 = time.perf_counter(); ck(cu.cuMemcpyDtoH(host.ctypes.data, d, size)); d2h = size / (time.perf_counter() - t0)
            out[f"h2d_{{size}}"] = h2d; out[f"d2h_{{size}}"] = d2h
            ck(cu.cuMemFree(d))
        print(json.dumps(out))
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    if proc.returncode:
        print(proc.stderr, file=sys.stderr)
        return None
    return json.loads(proc.stdout.strip().splitlines()[-1])


def bench_backend(backend, isolation, args, psk_file, rows, raw):
    extra = (["--psk-file", psk_file] if psk_file else []) + ["--isolation", isolation]
    label = backend + ("+psk" if psk_file else "") + ("" if isolation == "process" else f" {isolation}")
    extra += ["--spin-us", str(args.spin_us)]
    c_floor = raw["c"].get(int(args.spin_us))
    # No idle workers: one starting in the background (cuInit and imports) would compete with the measurement.
    with local_server(backend, extra + ["--log-level", "warning", "--worker-pool", "0"]) as address:
        with rgpu.connect(address, psk_file=psk_file, spin_us=args.spin_us) as c:
            p50, p99 = timed_calls(c.nop, args.calls)
            rows.append((f"null call p50 [{label}]", f"{p50:.1f} us", f"raw TCP echo p50 {raw['echo_p50']:.1f} us",
                         f"{p50 / raw['echo_p50']:.2f}x"))
            rows.append((f"null call p99 [{label}]", f"{p99:.1f} us", f"raw TCP echo p99 {raw['echo_p99']:.1f} us",
                         f"{p99 / raw['echo_p99']:.2f}x"))
            if c_floor:
                rows.append((f"null call p50 vs C floor [{label}]", f"{p50:.1f} us",
                             f"C echo, spin {args.spin_us:g} us, p50 {c_floor['echo_p50_us']:.1f} us",
                             f"{p50 / c_floor['echo_p50_us']:.2f}x"))
            mod = c.module_load(load("demo.ptx"))
            fill = c.get_function(mod, "fill")
            ptr = c.mem_alloc(1 << 20)
            batched = launch_rate(c, fill, ptr, args.launches)
            c.batching = False
            unbatched = launch_rate(c, fill, ptr, max(1000, args.launches // 20))
            c.batching = True
            native = raw.get("native", {}).get("launch_rate") if backend == "cuda" else None
            for name, rate in (("batched", batched), ("unbatched", unbatched)):
                rows.append((f"launches/s {name} [{label}]", f"{rate:,.0f}",
                             f"native {native:,.0f}" if native else "-",
                             f"{rate / native:.1%}" if native else "-"))
            for size in args.sizes:
                d = c.mem_alloc(size)
                host = np.ones(size, np.uint8)
                c.memcpy_htod(d, host)  # (one each way first: the first copies of a size set up memory on both ends)
                c.memcpy_dtoh(d, size, out=host)
                h2d = d2h = float("inf")
                for _ in range(copy_reps(size)):  # as many as the baselines take
                    t0 = time.perf_counter()
                    c.memcpy_htod(d, host)
                    h2d = min(h2d, time.perf_counter() - t0)
                    t0 = time.perf_counter()
                    c.memcpy_dtoh(d, size, out=host)
                    d2h = min(d2h, time.perf_counter() - t0)
                c.mem_free(d)
                base = raw["stream_bw"]
                up, down = raw["copy"][size]
                for name, bw, strict in (("H2D", size / h2d, up), ("D2H", size / d2h, down)):
                    rows.append((f"{name} {size_label(size)} [{label}]", f"{bw / 1e9:.2f} GB/s",
                                 f"raw loopback TCP {base / 1e9:.2f} GB/s", f"{bw / base:.1%}"))
                    rows.append((f"{name} {size_label(size)} vs same-size raw copy [{label}]",
                                 f"{bw / 1e9:.2f} GB/s", f"blocking raw TCP, {size_label(size)} {strict / 1e9:.2f} GB/s",
                                 f"{bw / strict:.1%}"))
                    if c_floor and size in c_floor["copy"]:
                        c_rate = c_floor["copy"][size][0 if name == "H2D" else 1]
                        rows.append((f"{name} {size_label(size)} vs same-size C copy [{label}]",
                                     f"{bw / 1e9:.2f} GB/s", f"blocking C TCP, {size_label(size)} {c_rate / 1e9:.2f} GB/s",
                                     f"{bw / c_rate:.1%}"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", default="fake", choices=("fake", "cuda", "both"))
    ap.add_argument("--psk", action="store_true", help="also measure with PSK authentication + AEAD")
    ap.add_argument("--calls", type=int, default=20000)
    ap.add_argument("--launches", type=int, default=20000)
    ap.add_argument("--sizes", type=parse_sizes, default=[1 << 20, 64 << 20],
                    help="copy sizes, comma-separated, with K/M/G units (plain numbers are MiB); "
                         "e.g. 4K,64K,1M,16M,256M,1G for the full sweep")
    ap.add_argument("--plot", help="also write a PNG of every ratio here (needs matplotlib)")
    ap.add_argument("--isolation", default="process", help="comma list of process,thread")
    ap.add_argument("--json", help="also write the rows here")
    ap.add_argument("--spin-us", type=float, default=300.0,
                    help="polling before sleeping, for the server (--spin-us), the client and the C floor")
    ap.add_argument("--with-shim", action="store_true",
                    help="then the C shim against the native driver (bench/shim_bench.py), in the same command")
    args = ap.parse_args()
    backends = ["fake", "cuda"] if args.backend == "both" else [args.backend]

    raw = {}
    raw["echo_p50"], raw["echo_p99"] = raw_echo_latency(args.calls)
    raw["stream_bw"] = max(raw_stream_bandwidth(max(args.sizes)) for _ in range(2))
    raw["copy"] = raw_copy_rates(args.sizes)
    raw["c"] = c_raw_baselines(args.calls, args.spin_us, args.sizes)
    if "cuda" in backends:
        raw["native"] = native_cuda_baselines(args.launches, args.sizes) or {}
    rows = [("baseline: raw TCP echo p50/p99", f"{raw['echo_p50']:.1f} / {raw['echo_p99']:.1f} us", "", ""),
            ("baseline: raw loopback TCP stream", f"{raw['stream_bw'] / 1e9:.2f} GB/s", "", "")]
    for spin, c_raw in raw["c"].items():
        rows.append((f"baseline: C echo p50/p99, spin {spin} us",
                     f"{c_raw['echo_p50_us']:.1f} / {c_raw['echo_p99_us']:.1f} us", "", ""))
    if raw.get("native"):
        n = raw["native"]
        rows.append(("baseline: native cuCtxGetDevice", f"{n['null_us']:.2f} us", "", ""))
        rows.append(("baseline: native launches/s", f"{n['launch_rate']:,.0f}", "", ""))
        for size in args.sizes:
            rows.append((f"baseline: native pageable H2D/D2H {size_label(size)}",
                         f"{n[f'h2d_{size}'] / 1e9:.2f} / {n[f'd2h_{size}'] / 1e9:.2f} GB/s", "", ""))
    with tempfile.TemporaryDirectory() as tmp:
        psk_file = None
        if args.psk:
            psk_file = os.path.join(tmp, "key")
            with os.fdopen(os.open(psk_file, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
                f.write(os.urandom(32).hex())
        for backend in backends:
            for isolation in args.isolation.split(","):
                bench_backend(backend, isolation, args, None, rows, raw)
            if psk_file:
                bench_backend(backend, "process", args, psk_file, rows, raw)
    width = max(len(r[0]) for r in rows)
    print(f"{'measure':<{width}}  {'rgpu':>14}  {'baseline (same run)':<36} ratio")
    for name, value, base, ratio in rows:
        print(f"{name:<{width}}  {value:>14}  {base:<36} {ratio}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    if args.plot:
        plot(rows, args.plot)
    if args.with_shim:
        shim = [sys.executable, os.path.join(os.path.dirname(__file__), "shim_bench.py")]
        for backend in backends:
            print(f"\n--- C shim vs native driver ({backend})", flush=True)
            with tempfile.TemporaryDirectory() as tmp:
                numbers = os.path.join(tmp, "shim.json")
                subprocess.run([*shim, "--backend", backend, "--spin-us", str(args.spin_us), "--json", numbers,
                                *(["--psk"] if args.psk else [])], check=True)
                with open(numbers) as f:
                    shim_copies_against_c(json.load(f), raw["c"].get(int(args.spin_us)))


def shim_copies_against_c(shim_rows: dict, c_floor: dict | None) -> None:
    """The C stand-ins' copies (bench_calls, through rgpu) against C TCP copies of the same size, same command."""
    if not c_floor:
        return
    for label, r in shim_rows.items():
        if not label.startswith("rgpu"):
            continue
        for size, key in ((64 << 20, ""), (1 << 20, "_1m")):
            if size not in c_floor["copy"] or f"h2d{key}_gbps" not in r:
                continue
            for i, name in enumerate(("H2D", "D2H")):
                rate, c_rate = r[f"{name.lower()}{key}_gbps"], c_floor["copy"][size][i] / 1e9
                print(f"C stand-in {name} {size_label(size)} vs same-size C copy [{label}]: {rate:.2f} GB/s, "
                      f"blocking C TCP {c_rate:.2f} GB/s, {rate / c_rate:.1%}")


def parse_sizes(text: str) -> list[int]:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    sizes = []
    for item in text.upper().split(","):
        item = item.strip().removesuffix("IB").removesuffix("B")
        sizes.append(int(item[:-1]) * units[item[-1]] if item[-1] in units else int(item) << 20)
    return sizes


def size_label(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} B"


def plot(rows, path: str) -> None:
    """One horizontal bar per measurement that has a ratio against its same-run baseline."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("--plot needs matplotlib (pip install matplotlib); table only", file=sys.stderr)
        return
    points = []
    for name, _value, _base, ratio in rows:
        if ratio.endswith("%"):
            points.append((name, float(ratio[:-1]) / 100))
        elif ratio.endswith("x"):
            points.append((name, 1 / float(ratio[:-1])))  # latency: baseline / rgpu, so higher is better
    if not points:
        return
    fig, ax = plt.subplots(figsize=(10, 0.32 * len(points) + 1.2))
    ax.barh([p[0] for p in points][::-1], [p[1] for p in points][::-1], color="#4a7ab5")
    ax.axvline(1.0, color="grey", lw=0.8)
    ax.set_xlabel("rgpu relative to the same-run baseline (1.0 = equal; latency shown as baseline/rgpu)")
    ax.set_title("rgpu over loopback vs baselines measured in the same run")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"plot written to {path}")


if __name__ == "__main__":
    main()
