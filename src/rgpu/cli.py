"""Command line: `rgpu-server` and `rgpu` (info, demo, keygen)."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import subprocess
import sys
import tempfile
import time

import trio

from rgpu.errors import RgpuError
from rgpu.protocol.frames import DEFAULT_MAX_RECORD
from rgpu.serving.server import DEFAULT_PORT, ConfigError, Server, ServerConfig

log = logging.getLogger("rgpu")


def _size(text: str) -> int:
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
    text = text.strip().lower().removesuffix("ib").removesuffix("b")
    if text and text[-1] in units:
        return int(float(text[:-1]) * units[text[-1]])
    return int(text)


def _setup_logging(level: str) -> None:
    from rgpu import logs

    logs.setup(level)


LOG_LEVELS = ("debug", "info", "warning", "error")


def _add_version(p: argparse.ArgumentParser) -> None:
    from rgpu.version import __version__

    p.add_argument("--version", action="version", version=f"%(prog)s {__version__} (protocol "
                                                          f"{_protocol_version()})")


def _protocol_version() -> str:
    from rgpu.protocol.handshake import PROTOCOL_MAJOR, PROTOCOL_MINOR

    return f"{PROTOCOL_MAJOR}.{PROTOCOL_MINOR}"


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{port} is not a TCP port (0 to 65535; 0: any free port)")
    return port


def _add_allow_readable_psk(p: argparse.ArgumentParser) -> None:
    p.add_argument("--allow-readable-psk", action="store_true",
                   help="use a PSK file that group or others can read (refused otherwise; chmod 600 it instead); "
                        "also $RGPU_ALLOW_READABLE_PSK=1, which programs run by rgpu inherit")


def _allow_readable_psk(args) -> None:
    """--allow-readable-psk as the environment says it, so the clients and stand-ins started from here see it."""
    if getattr(args, "allow_readable_psk", False):
        from rgpu.config import ALLOW_READABLE_PSK

        os.environ[ALLOW_READABLE_PSK] = "1"


def server_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="rgpu-server", description="Serve this host's GPU to rgpu clients.")
    p.add_argument("--bind", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=_port, default=DEFAULT_PORT, help=f"TCP port (default {DEFAULT_PORT}; 0 = any)")
    p.add_argument("--backend", choices=("auto", "cuda", "fake"), default="auto",
                   help="cuda: the real GPU; fake: emulation for tests; auto: cuda if a GPU answers")
    p.add_argument("--devices", metavar="LIST",
                   help="show sessions only these devices (e.g. 0,2), renumbered from 0 as CUDA_VISIBLE_DEVICES "
                        "does (default: every device)")
    p.add_argument("--fake-devices", metavar="N",
                   help="how many devices the fake backend emulates (default 1; tests of several devices)")
    p.add_argument("--psk-file", help="pre-shared key file (hex or raw, >= 32 bytes): clients must prove it, "
                                      "frames are encrypted and authenticated")
    _add_allow_readable_psk(p)
    p.add_argument("--insecure", action="store_true",
                   help="allow a non-loopback --bind without a PSK (trusted networks only)")
    p.add_argument("--isolation", choices=("process", "thread"), default="process",
                   help="process (default): each session in its own worker process, so a kernel fault or a "
                        "crash stays in its session; thread: all sessions in this process")
    p.add_argument("--worker-pool", type=int, default=2, metavar="N",
                   help="worker processes kept started and ready for new sessions (default 2)")
    p.add_argument("--max-sessions", type=int, default=64)
    p.add_argument("--session-mem-limit", type=_size, default=None, metavar="BYTES",
                   help="device memory one session may allocate (e.g. 8G)")
    p.add_argument("--handshake-timeout", type=float, default=10.0, metavar="SECONDS")
    p.add_argument("--max-handshakes", type=int, default=128, metavar="N",
                   help="connections in the handshake at once; one more closes the oldest (default 128, at "
                        "most half the open-file limit)")
    p.add_argument("--frame-timeout", type=float, default=60.0, metavar="SECONDS",
                   help="once a frame has begun to arrive, the rest must follow within this time or the session "
                        "is closed (default 60; 0: no limit)")
    p.add_argument("--max-frame", type=_size, default=DEFAULT_MAX_RECORD, metavar="BYTES")
    p.add_argument("--module-cache", metavar="DIR|off",
                   help="where module images are cached by content across sessions (default: a private "
                        "temporary directory removed at exit; off: no cache)")
    p.add_argument("--spin-us", type=float, default=None, metavar="MICROSECONDS",
                   help="how long a session's worker polls for the next request before sleeping (default 300, or 0 "
                        "where the server may use fewer than 2 CPUs; 0: never poll). Polling saves the wake-up of a "
                        "sleeping process on every call; between polls the CPU goes to any other thread that wants "
                        "it (RGPU_SPIN_YIELD=0: it does not)")
    p.add_argument("--copy-links", type=int, default=4, metavar="N",
                   help="extra connections a session's client may open to send big copies' bytes in parallel "
                        "(default 4, at most 8; 0: none); with a PSK each carries records sealed under a key of its "
                        "own. Clients ask for them with RGPU_COPY_LINKS")
    p.add_argument("--inject-rtt-us", type=float, default=0.0, metavar="MICROSECONDS",
                   help="benchmarks: delay every reply by this long, as a slower network would (default 0)")
    p.add_argument("--stats-file", metavar="PATH",
                   help="append each finished session's counters (blocking replies, deferred calls, bytes, CPU "
                        "seconds) here as JSON lines")
    p.add_argument("--port-file", help="write the listening port here once ready (useful with --port 0)")
    p.add_argument("--log-level", default="info", type=str.lower, choices=LOG_LEVELS)
    p.add_argument("--log-file", metavar="PATH", help="append the server's and its workers' logs here, not stderr")
    p.add_argument("--log-format", default="text", choices=("text", "json"),
                   help="json: one JSON object per line (time, level, logger, message, pid for workers)")
    _add_version(p)
    from rgpu.bridge.cli import add_location_args

    add_location_args(p, prefix="bridge-")
    return p


async def _run_server(config: ServerConfig, extra_tasks=()) -> None:
    from rgpu.backends.factory import make_backend

    backend = make_backend(config.backend) if config.isolation == "thread" else None
    server = Server(config, backend)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_stop_on_signal, nursery.cancel_scope)
            await nursery.start(server.serve)
            for task in extra_tasks:
                nursery.start_soon(task, server)
    finally:
        if backend is not None:
            backend.close()
        log.info("server stopped")


def _bridge_task(bridge_config):
    async def run(server):
        from rgpu.bridge.daemon import run_bridge

        # Thread isolation shares the server's backend object; otherwise the bridge makes its own here
        # (sessions live in worker processes, so a bridge fault cannot reach them).
        await run_bridge(bridge_config, backend=server.backend)

    return run


async def _stop_on_signal(scope: trio.CancelScope) -> None:
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for signum in signals:
            log.info("%s: shutting down; freeing every session's resources", signal.Signals(signum).name)
            scope.cancel()
            return


def _leaves(exc: BaseException):
    """The plain exceptions inside (nested) exception groups."""
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            yield from _leaves(inner)
    else:
        yield exc


def _prepare_lane() -> None:
    """Find (a wheel's) or build (a checkout's) the workers' fast lane and name it in the environment they
    inherit (rgpu.backends.lane); without it they run every call in Python, which is said here once."""
    from rgpu import shims
    from rgpu.backends import lane

    try:
        os.environ[lane.LIBRARY_ENV], os.environ[lane.HEADER_ENV] = str(shims.lane_library()), str(shims.lane_header())
    except shims.ShimError as e:
        logging.getLogger("rgpu.server").warning(
            "fast lane unavailable, launches, small copies and memsets run in Python: %s", str(e).splitlines()[0])
        return
    lane.load_from_environment()  # thread isolation serves from this process


def server_main(argv=None) -> int:
    args = server_parser().parse_args(argv)
    os.environ["RGPU_LOG_FORMAT"] = args.log_format  # the workers log the same way
    from rgpu.backends import factory

    try:  # the workers make their backends from the environment, with the same devices
        if args.fake_devices is not None:
            factory.parse_fake_devices(args.fake_devices)
            os.environ[factory.FAKE_DEVICES_ENV] = args.fake_devices
        if args.devices is not None:
            os.environ[factory.DEVICES_ENV] = ",".join(map(str, factory.parse_devices(args.devices)))
    except ValueError as e:
        print(f"rgpu-server: {e}", file=sys.stderr)
        return 2
    if args.log_file:
        from rgpu import logs

        try:
            logs.redirect_stderr(args.log_file)
        except OSError as e:
            print(f"rgpu-server: cannot open --log-file {args.log_file}: {e.strerror}", file=sys.stderr)
            return 2
    _setup_logging(args.log_level)
    _allow_readable_psk(args)
    if args.backend != "fake":
        _prepare_lane()
    try:
        psk = None
        if args.psk_file:
            from rgpu.config import load_psk

            psk = load_psk(args.psk_file)  # the same checks and messages as the clients
        spin_us = args.spin_us
        if spin_us is None:
            from rgpu.serving.server import default_spin_us, usable_cpus

            cpus = usable_cpus()
            spin_us = default_spin_us(cpus)
            if not spin_us and args.isolation == "process":  # (thread isolation has no workers to poll)
                logging.getLogger("rgpu.server").info(
                    "this server may use %.3g CPU(s): its workers do not poll for requests (--spin-us 0), which "
                    "on one core would take the time the kernel needs to deliver them", cpus)
        config = ServerConfig(isolation=args.isolation, backend=args.backend, worker_pool=args.worker_pool,
                              log_level=args.log_level, bind=args.bind, port=args.port, psk=psk, insecure=args.insecure,
                              max_sessions=args.max_sessions, session_mem_limit=args.session_mem_limit,
                              handshake_timeout=args.handshake_timeout, max_frame=args.max_frame,
                              max_handshakes=args.max_handshakes, frame_timeout=args.frame_timeout,
                              port_file=args.port_file, module_cache=args.module_cache, spin_us=spin_us,
                              inject_rtt_us=args.inject_rtt_us, stats_file=args.stats_file,
                              copy_links=args.copy_links)
        from rgpu.serving.server import check_config

        check_config(config)
        from rgpu.bridge.cli import config_from_args

        bridge = config_from_args(args, prefix="bridge-", backend=args.backend)
        trio.run(_run_server, config, [_bridge_task(bridge)] if bridge else [])
    except (ConfigError, ValueError, OSError) as e:
        log.error("%s", e)
        return 2
    except Exception as e:
        from rgpu.backends.base import BackendUnavailable
        from rgpu.serving.pool import WorkerStartError

        # Startup failures arrive wrapped in the nursery's exception groups: report the one that matters.
        startup = (ConfigError, BackendUnavailable, WorkerStartError, ValueError, OSError)
        known = [x for x in _leaves(e) if isinstance(x, startup)]
        if known:
            log.error("%s", known[0])
            return 2
        raise
    return 0


# -- rgpu ----------------------------------------------------------------------------------------------
def _servers(args) -> list[tuple[str, str | None]]:
    """(address, PSK file) of each server --server / RGPU_SERVER names (several: comma-separated)."""
    from rgpu import config

    addresses = config.server_addresses(args.server)
    return list(zip(addresses, config.psk_files(args.psk_file, len(addresses))))


def cmd_info(args) -> int:
    import rgpu

    first = 0  # a program given all these servers numbers their devices on from here
    for address, psk_file in _servers(args):
        with rgpu.connect(address, psk_file=psk_file) as c:
            print(f"server {address}: session {c.session_id}, agent {c.server.agent!r}, protocol "
                  f"{c.server.major}.{c.server.minor}")
            count = c.device_count()
            print(f"driver version {c.driver_version()}, {count} device(s)")
            for dev in range(count):
                attrs = c.device_attributes(dev)
                c.ctx_set_current(c.primary_ctx_retain(dev))
                free, total = c.mem_get_info()
                print(f"  device {first + dev}: {c.device_name(dev)}, compute {attrs.get(75)}.{attrs.get(76)}, "
                      f"{attrs.get(16)} SMs, {c.device_total_mem(dev) / 2**30:.1f} GiB ({free / 2**30:.1f} free), "
                      f"uuid {c.device_uuid(dev).hex()}")
            first += count
    return 0


def _mib(n: int | None) -> str:
    return "-" if n is None else f"{n / 2**20:.1f} MiB"


def cmd_status(args) -> int:
    """Like nvidia-smi for an rgpu server: its backend, devices and memory, and its live sessions."""
    import json

    servers = _servers(args)
    reports, first = [], 0
    for address, psk_file in servers:
        report = _server_report(address, psk_file, first)
        first += len(report["devices"])
        reports.append(report)
    if args.json:
        # One server: its report as before; several: a list of them, devices numbered across them.
        print(json.dumps(reports[0] if len(reports) == 1 else reports, indent=2))
        return 0
    for report in reports:
        _print_status(report)
    return 0


def _server_report(address: str, psk_file: str | None, first: int) -> dict:
    """`rgpu status` of one server; its devices numbered from `first` (its place in a list of servers)."""
    import rgpu
    from rgpu.client import server_status

    status = server_status(address, psk_file=psk_file)
    devices = []
    with rgpu.connect(address, psk_file=psk_file) as c:  # after the status query: not among its sessions
        for dev in range(c.device_count()):
            c.ctx_set_current(c.primary_ctx_retain(dev))
            # (free memory is the driver's, device-wide, read in this session's context on the device)
            devices.append({"index": first + dev, "name": c.device_name(dev), "total": c.device_total_mem(dev),
                            "free": c.mem_get_info()[0]})
    return {"address": address, "server": status, "devices": devices}


def _print_status(report: dict) -> None:
    address, status, devices = report["address"], report["server"], report["devices"]
    gib = 2.0 ** 30
    print(f"rgpu-server {status['version']} at {address}: {status['backend']} backend, {status['isolation']} "
          f"isolation, up {status['uptime_s']:.0f} s, {'PSK authentication' if status['psk'] else 'no authentication'}")
    if status.get("fallback"):
        print(f"  NO GPU: {status['fallback']}")
    for d in devices:
        free = d.get("free")
        used = f"{(d['total'] - free) / gib:.1f} GiB used, {free / gib:.1f} GiB free" if free is not None else ""
        print(f"device {d['index']}: {d['name']}, {d['total'] / gib:.1f} GiB" + (f" ({used})" if used else ""))
    sessions = status["sessions"]
    print(f"sessions: {len(sessions)} live (limit {status['max_sessions']})")
    if sessions:
        print(f"  {'id':>5}  {'peer':24} {'age':>9} {'memory':>10} {'peak':>10} {'allocs':>6} {'calls':>8}  last error")
    for row in sessions:
        memory, peak = (_mib(row.get(k)) for k in ("memory", "memory_peak"))
        if row.get("memory_limit") is not None:
            memory += f" of {_mib(row['memory_limit'])}"
        print(f"  {row['id']:>5}  {row['peer']:24} {row['age_s']:>7.1f} s {memory:>10} {peak:>10} "
              f"{row.get('allocations', '-'):>6} {row.get('calls', '-'):>8}  {row.get('last_error') or '-'}")
        other = {k: v for k, v in row.get("memory_by_kind", {}).items() if k != "alloc"}
        if other:
            print("         also: " + ", ".join(f"{k} {_mib(v)}" for k, v in sorted(other.items())))
    if status["recently_ended"]:
        print(f"recently ended: {len(status['recently_ended'])} session(s); the last: "
              f"{status['recently_ended'][-1].get('reason')}")


@contextlib.contextmanager
def local_server(backend: str = "auto", extra_args=(), cpus: set[int] | None = None):
    """Start `rgpu-server` on an ephemeral loopback port; yields its address; SIGTERMs it afterwards and
    checks that it exits 0. `cpus`: the cores it and its workers may run on (benchmarks that place the two ends)."""
    with tempfile.TemporaryDirectory() as tmp:
        port_file = os.path.join(tmp, "port")
        proc = subprocess.Popen([sys.executable, "-m", "rgpu.cli", "server", "--port", "0", "--port-file",
                                 port_file, "--backend", backend, *extra_args],
                                preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None)
        try:
            deadline = time.monotonic() + 60
            while not os.path.exists(port_file):
                if proc.poll() is not None:
                    raise RuntimeError(f"rgpu-server exited with {proc.returncode} before listening")
                if time.monotonic() > deadline:
                    raise RuntimeError("rgpu-server did not start within 60 s")
                time.sleep(0.05)
            with open(port_file) as f:
                yield f"127.0.0.1:{int(f.read())}"
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                code = proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                raise RuntimeError("rgpu-server did not stop within 30 s of SIGTERM") from None
            if code != 0:
                raise RuntimeError(f"rgpu-server exited with {code}")


def run_demo(address: str, psk_file: str | None = None, n: int = 1 << 20) -> None:
    """vadd and saxpy from PTX through a server, checked against numpy."""
    import numpy as np

    import rgpu
    from rgpu.kernels import load

    rng = np.random.default_rng(7)
    a = rng.standard_normal(n, dtype=np.float32)
    b = rng.standard_normal(n, dtype=np.float32)
    with rgpu.connect(address, psk_file=psk_file) as c:
        print(f"connected to {address}: {c.device_name(0)} (session {c.session_id})")
        mod = c.module_load(load("demo.ptx"))
        vadd, saxpy = c.get_function(mod, "vadd"), c.get_function(mod, "saxpy")
        da, db, dc = (c.mem_alloc(n * 4) for _ in range(3))
        c.memcpy_htod(da, a)
        c.memcpy_htod(db, b)
        start, end = c.event_create(), c.event_create()
        c.event_record(start)
        c.launch(vadd, (n + 255) // 256, 256, (da, db, dc, n))
        c.launch(saxpy, (n + 255) // 256, 256, (2.0, da, db, n))
        c.event_record(end)
        c.event_synchronize(end)
        got_c = np.frombuffer(c.memcpy_dtoh(dc, n * 4), dtype=np.float32)
        got_b = np.frombuffer(c.memcpy_dtoh(db, n * 4), dtype=np.float32)
        ms = c.event_elapsed_time(start, end)
        ok_c = np.array_equal(got_c, a + b)
        ok_b = np.allclose(got_b, np.float32(2.0) * a + b, rtol=1e-6, atol=1e-6)
        print(f"vadd  n={n}: {'OK' if ok_c else 'MISMATCH'}")
        print(f"saxpy n={n}: {'OK' if ok_b else 'MISMATCH'}")
        print(f"kernel time {ms:.3f} ms (events)")
        if not (ok_c and ok_b):
            raise SystemExit(1)


def run_native_demo(address: str, psk_file: str | None = None) -> bool:
    """The same vector add as a compiled C program on the driver API, through rgpu's libcuda.so.1."""
    from rgpu import shims
    from rgpu.kernels import build as kernels

    try:
        shim_dir = shims.ensure_examples(shims.ensure_built())  # prebuilt, or rebuilt where stale
    except shims.BuildFailed as e:
        print(f"native demo FAILED: {e}")
        return False
    except shims.ShimError as e:  # no compiler or headers here: the Python demo above is all we can show
        print(f"native demo skipped: cannot build the stand-ins: {e}")
        return True
    env = shims.environment(shim_dir)
    env["RGPU_SERVER"] = address
    if psk_file:
        env["RGPU_PSK_FILE"] = psk_file
    ptx = kernels.HERE / "demo.ptx"
    proc = subprocess.run([str(shim_dir / "vecadd"), str(ptx)], env=env, capture_output=True, text=True)
    print(f"C program through libcuda.so.1 shim: {proc.stdout.strip() or proc.stderr.strip()}")
    return proc.returncode == 0


def run_runtime_demo(address: str, psk_file: str | None = None) -> bool:
    """An unmodified `nvcc -cudart shared` program (<<<>>> launches) through rgpu's libcudart + libcuda."""
    import shutil

    from rgpu import shims

    nat = shims.native_dir()
    # The wheel carries the program under rgpu/_native/demo; a checkout keeps it with the other test programs.
    source = nat / "demo" / "vector_add.cu"
    if not source.exists():
        source = nat.parent / "tests" / "cuda" / "vector_add.cu"
    if shutil.which("nvcc") is None:
        print("runtime demo skipped: needs nvcc (the CUDA compiler) to build an unmodified CUDA program")
        return True
    shim_dir = shims.ensure_built()
    exe = shims.default_out_dir() / "vector_add_runtime"  # a wheel's own directory may not be writable
    if not exe.exists() or exe.stat().st_mtime < source.stat().st_mtime:
        exe.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["nvcc", "-cudart", "shared", "-o", str(exe), str(source)], check=True, capture_output=True)
    env = shims.environment(shim_dir)
    env["RGPU_SERVER"] = address
    if psk_file:
        env["RGPU_PSK_FILE"] = psk_file
    proc = subprocess.run([str(exe)], env=env, capture_output=True, text=True)
    print(f"nvcc program through libcudart + libcuda shims: {proc.stdout.strip() or proc.stderr.strip()}")
    return proc.returncode == 0


def cmd_demo(args) -> int:
    from rgpu import config

    server = args.server or os.environ.get("RGPU_SERVER")  # else a local server of its own
    if server:
        psk_file = config.psk_file(args.psk_file)
        run_demo(server, psk_file)
        ok = run_native_demo(server, psk_file) and run_runtime_demo(server, psk_file)
        return 0 if ok else 1
    with local_server(args.backend) as address:
        run_demo(address)
        ok = run_native_demo(address) and run_runtime_demo(address)
    return 0 if ok else 1


def cmd_keygen(args) -> int:
    key = os.urandom(32).hex()
    fd = os.open(args.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(key + "\n")
    print(f"wrote a new 256-bit key to {args.path} (mode 0600); give it to the server and its clients")
    return 0


def cmd_build_shims(args) -> int:
    import pathlib

    from rgpu import shims

    out = pathlib.Path(args.out) if args.out else shims.default_out_dir()
    lib = shims.build(out, verbose=args.verbose, progress=True, jobs=args.jobs)
    examples = shims.build_examples(out, progress=True, verbose=args.verbose)
    print(f"stand-ins up to date in {lib.parent} (examples: {', '.join(e.name for e in examples)})")
    return 0


def _program(args) -> list[str]:
    """The program to run, with --server / --psk-file passed on to the stand-ins through the environment,
    checked here first: the stand-ins can only log what is wrong from inside the program."""
    from rgpu import config

    argv = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    if not argv:
        raise config.ConfigurationError("give a program to run after --, e.g. `rgpu run -- ./my_cuda_program`")
    addresses = config.server_addresses(args.server)
    for address in addresses:
        config.parse_address(address)
    os.environ["RGPU_SERVER"] = ",".join(addresses)
    psk_file = config.psk_file(args.psk_file)
    if psk_file:
        for path in set(config.psk_files(psk_file, len(addresses))):
            config.load_psk(path)
        os.environ["RGPU_PSK_FILE"] = psk_file
    if args.copy_links is not None:
        from rgpu.session.links import MAX_LINKS

        if not 0 <= args.copy_links <= MAX_LINKS:
            raise config.ConfigurationError(f"--copy-links must be between 0 and {MAX_LINKS}, not {args.copy_links}")
        os.environ["RGPU_COPY_LINKS"] = str(args.copy_links)
    return argv


def cmd_run(args) -> int:
    import pathlib

    from rgpu import shims
    from rgpu.doctor import own_runtime_warning

    argv = _program(args)
    warning = own_runtime_warning(argv)
    if warning:  # (it runs anyway: the program's own error handling then reports the failed call)
        print(f"rgpu: warning: {warning}", file=sys.stderr)
    return shims.run(argv, pathlib.Path(args.shims) if args.shims else None)


def cmd_doctor(args) -> int:
    import pathlib

    from rgpu.doctor import doctor

    return doctor(_program(args), pathlib.Path(args.shims) if args.shims else None)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["server"]:
        return server_main(argv[1:])
    p = argparse.ArgumentParser(prog="rgpu", description="rgpu: use a remote NVIDIA GPU.")
    _add_version(p)
    sub = p.add_subparsers(dest="command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--server", help="host:port of rgpu-server, or several comma-separated (one program, the "
                                         "devices of them all) (default: $RGPU_SERVER, else 127.0.0.1:9713)")
    common.add_argument("--psk-file", help="pre-shared key file, or one per server comma-separated (default: "
                                           "$RGPU_PSK_FILE, else none)")
    common.add_argument("--log-level", default="warning", type=str.lower, choices=LOG_LEVELS)
    _add_allow_readable_psk(common)
    info = sub.add_parser("info", parents=[common], help="show the server's devices")
    info.set_defaults(fn=cmd_info)
    demo = sub.add_parser("demo", parents=[common],
                          help="run vadd/saxpy through rgpu (starts a local server unless --server is given)")
    demo.add_argument("--backend", default="auto", choices=("auto", "cuda", "fake"))
    demo.set_defaults(fn=cmd_demo)
    status = sub.add_parser("status", parents=[common],
                            help="show a running server's backend, devices, memory and live sessions")
    status.add_argument("--json", action="store_true", help="machine-readable output")
    status.set_defaults(fn=cmd_status)
    keygen = sub.add_parser("keygen", help="write a new random pre-shared key file")
    keygen.add_argument("path")
    keygen.set_defaults(fn=cmd_keygen)
    sub.add_parser("server", help="same as rgpu-server")
    bs = sub.add_parser("build-shims",
                        help="compile the native stand-ins: libcuda, libcudart, libcublas(Lt), libcudnn, libcufft")
    bs.add_argument("--out", help="output directory (default: $RGPU_SHIM_DIR; build/shims in a source checkout; "
                                  "otherwise a per-user cache directory, ~/.cache/rgpu/VERSION-...)")
    bs.add_argument("-j", "--jobs", type=int, help="parallel compiler runs (default: one per CPU)")
    bs.add_argument("-v", "--verbose", action="store_true", help="print every compiler command")
    bs.set_defaults(fn=cmd_build_shims)
    for name, fn, text in (("run", cmd_run, "run a program with rgpu's CUDA libraries"),
                           ("doctor", cmd_doctor, "run a program and report which CUDA libraries it loaded")):
        rp = sub.add_parser(name, parents=[common], help=text)
        rp.add_argument("--shims", help="directory with the built shims")
        rp.add_argument("--copy-links", type=int, metavar="N",
                        help="send copies up of 2 MiB or more ($RGPU_COPY_LINK_MIN_KIB) over N extra connections "
                             "at once, as many as the server offers (default: $RGPU_COPY_LINKS, else 0: none; at "
                             "most 8)")
        rp.add_argument("argv", nargs=argparse.REMAINDER, help="-- program [args...]")
        rp.set_defaults(fn=fn)
    from rgpu.bridge.cli import add_parser as add_bridge_parser

    add_bridge_parser(sub, common)
    args = p.parse_args(argv)
    _setup_logging(getattr(args, "log_level", "warning"))
    _allow_readable_psk(args)
    try:
        return args.fn(args)
    except (RgpuError, OSError, RuntimeError, ValueError) as e:
        print(f"rgpu: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
