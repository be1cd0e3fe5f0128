"""rgpu-server: accept connections, one session per connection, each in its own task."""

from __future__ import annotations

import contextlib
import errno
import ipaddress
import itertools
import logging
import os
import pathlib
import resource
import socket
import threading
import time

import attrs
import trio

from rgpu.backends.base import Backend
from rgpu.protocol import handshake
from rgpu.protocol.frames import DEFAULT_MAX_RECORD
from rgpu.session.ipc import IpcRegistry
from rgpu.session.links import MAX_LINKS
from rgpu.session.modcache import ModuleCache
from rgpu.serving.pool import WorkerPool
from rgpu.serving.runner import run_session
from rgpu.transport import DEFAULT_PORT

log = logging.getLogger("rgpu.server")

# Polling pays only where the poller does not take the core that the bytes it waits for need: on the H200 box a
# server held to one core took 3.2-3.9 ms a token of token_loop's prompt shape polling (the kernel's receive work
# for the client's copy waits for the poller's time slice), 0.51-0.52 ms not polling, and 0.21-0.25 ms on four
# cores polling (bench/results/gpu-2026-12-05b-fork-pinned, run 5). The CUDA driver's own automatic policy spins
# only with cores to spare, too.
DEFAULT_SPIN_US = 300.0


def _quota(cpu_max: pathlib.Path) -> float | None:
    """The CPUs a cgroup v2 cpu.max grants ("QUOTA PERIOD"), or None: no file (cgroup v1, no cgroup), "max", or
    anything but two positive integers."""
    try:
        quota, period = cpu_max.read_text().split()
        return int(quota) / int(period) if int(quota) > 0 and int(period) > 0 else None
    except (OSError, ValueError):
        return None


def usable_cpus(cgroup_root: str = "/sys/fs/cgroup", proc_cgroup: str = "/proc/self/cgroup") -> float:
    """The CPUs this process may use: its affinity, less the tightest cgroup v2 quota (cpu.max) of its own cgroup
    (/proc/self/cgroup's "0::" line: a systemd service's CPUQuota, a container without a cgroup namespace) and the
    cgroups above it up to the mount's root. cgroup v1 quotas are not read."""
    cpus = float(len(os.sched_getaffinity(0)))
    root = pathlib.Path(cgroup_root)
    try:
        own = next(line[3:] for line in pathlib.Path(proc_cgroup).read_text().splitlines() if line.startswith("0::"))
    except (OSError, StopIteration):
        own = "/"
    group = root if ".." in own.split("/") else root / own.strip().lstrip("/")
    for d in (group, *group.parents):
        if not d.is_relative_to(root):
            break
        if (quota := _quota(d / "cpu.max")) is not None:
            cpus = min(cpus, quota)
    return cpus


def default_spin_us(cpus: float | None = None) -> float:
    """--spin-us when not given: DEFAULT_SPIN_US with two CPUs or more, else 0 (never poll)."""
    return DEFAULT_SPIN_US if (usable_cpus() if cpus is None else cpus) >= 2 else 0.0


@attrs.frozen
class ServerConfig:
    # "process": every session in its own worker process (a kernel fault is sticky for a whole CUDA
    # process, so this is the only real isolation); "thread": sessions share this process (tests, debugging).
    isolation: str = "process"
    backend: str = "auto"  # what workers run (process isolation)
    worker_pool: int = 2  # workers kept started and initialised, ready for the next session
    log_level: str = "info"
    bind: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    psk: bytes | None = attrs.field(default=None, repr=False)
    insecure: bool = False
    max_sessions: int = 64
    session_mem_limit: int | None = None
    handshake_timeout: float = 10.0
    # Connections in the handshake at once; when one more arrives, the oldest is closed (see Admission).
    max_handshakes: int = 128
    # Once a frame has begun to arrive, the rest must follow within this many seconds (0: no limit).
    frame_timeout: float = 60.0
    max_frame: int = DEFAULT_MAX_RECORD
    teardown_timeout: float = 30.0
    port_file: str | None = None
    # Module images by content, shared by sessions: None = a private temporary directory removed at exit,
    # "off" = no cache, else a directory the operator keeps (it must not be writable by others).
    module_cache: str | None = None
    module_cache_bytes: int = 2 << 30
    # A worker polls this long for the next request before sleeping in recv (see SocketFrameStream).
    spin_us: float = DEFAULT_SPIN_US
    # Benchmarks only: hold every reply this long, as a network of that round-trip time would (the GPU box has
    # no tc/netem). Deferred calls are not delayed: they wait for no reply.
    inject_rtt_us: float = 0.0
    # Append each finished session's counters here, one JSON object per line (benchmarks read them).
    stats_file: str | None = None
    # Copy links a session's client may open (rgpu.session.links); 0: none.
    copy_links: int = 4


class ConfigError(Exception):
    pass


class Slot:
    """One of --max-sessions, held from the HELLO that asked for it until everything the session owned is
    released. release() is idempotent and thread-safe (a session's teardown may run off the event loop)."""

    def __init__(self, slots: "SessionSlots"):
        self._slots = slots
        self._held = True

    def release(self) -> None:
        with self._slots.lock:
            if self._held:
                self._held = False
                self._slots.taken -= 1


class SessionSlots:
    def __init__(self, limit: int):
        self.limit = limit
        self.taken = 0
        self.lock = threading.Lock()

    def take(self) -> Slot | None:
        """A slot, or None at the limit. Taken when checked: concurrent HELLOs cannot all pass the check."""
        with self.lock:
            if self.taken >= self.limit:
                return None
            self.taken += 1
        return Slot(self)


class Admission:
    """Connections that have not finished the handshake: at most `limit` at once. One more evicts the oldest,
    so connections that never finish (or finish slowly) cannot keep a prompt client out -- it is always the
    newest -- nor run the server out of file descriptors, which would stop it accepting anyone at all."""

    def __init__(self, limit: int):
        self.limit = limit
        self._pending: dict[trio.CancelScope, None] = {}  # oldest first
        self.evicted = 0

    @contextlib.contextmanager
    def admit(self):
        """A cancel scope for one connection's handshake; evicting it cancels the scope."""
        while len(self._pending) >= self.limit:
            oldest = next(iter(self._pending))
            del self._pending[oldest]
            oldest.cancel()
            self.evicted += 1
        scope = trio.CancelScope()
        self._pending[scope] = None
        try:
            with scope:
                yield scope
        finally:
            self._pending.pop(scope, None)


def handshake_limit(configured: int) -> int:
    """--max-handshakes, kept to half the open-file limit: the rest is for sessions, workers and logs."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return configured
    return max(1, min(configured, soft // 2))


def _module_cache(config: ServerConfig) -> ModuleCache | None:
    if config.module_cache == "off":
        return None
    if config.module_cache is None:
        return ModuleCache.temporary(config.module_cache_bytes)
    path = pathlib.Path(config.module_cache)
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    if path.stat().st_mode & 0o022:
        raise ConfigError(f"--module-cache {path} is writable by other users; images there would be loaded "
                          "into sessions (chmod 700 it)")
    return ModuleCache(path, config.module_cache_bytes)


def is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None)
    except socket.gaierror:
        return False
    return bool(infos) and all(ipaddress.ip_address(i[4][0]).is_loopback for i in infos)


def check_config(config: ServerConfig) -> None:
    if not is_loopback(config.bind) and config.psk is None and not config.insecure:
        raise ConfigError(
            f"refusing to listen on non-loopback address {config.bind!r} without a pre-shared key: anyone who "
            "can reach the port could run code on the GPU and read its memory. Give --psk-file, or say "
            "--insecure if the network is trusted."
        )
    if config.psk is not None and (missing := handshake.missing_aead_support()) is not None:
        raise ConfigError(missing)
    if not 0 <= config.port <= 65535:
        raise ConfigError(f"--port must be between 0 and 65535 (0: any free port), not {config.port}")
    if config.max_sessions < 1:
        raise ConfigError("--max-sessions must be at least 1")
    if config.max_handshakes < 1:
        raise ConfigError("--max-handshakes must be at least 1")
    if config.frame_timeout < 0:
        raise ConfigError("--frame-timeout must be 0 (no limit) or more")
    if not 0 <= config.inject_rtt_us <= 10_000_000:
        raise ConfigError(f"--inject-rtt-us must be between 0 and 10000000, not {config.inject_rtt_us}")
    if not 0 <= config.spin_us <= 1_000_000:
        raise ConfigError("--spin-us must be between 0 and 1000000")
    if not 0 <= config.copy_links <= MAX_LINKS:
        raise ConfigError(f"--copy-links must be between 0 and {MAX_LINKS}, not {config.copy_links}")
    if config.isolation not in ("process", "thread"):
        raise ConfigError(f"--isolation must be process or thread, not {config.isolation!r}")


class Server:
    """`backend` serves sessions in this process (isolation "thread"); with process isolation the workers
    make their own from `config.backend`, and this process never touches the GPU."""

    def __init__(self, config: ServerConfig, backend: Backend | None = None):
        check_config(config)
        if config.isolation == "thread" and backend is None:
            raise ConfigError("thread isolation needs a backend object")
        self.config = config
        self.backend = backend
        self.pool = WorkerPool(config.backend, config.worker_pool, config.log_level) \
            if config.isolation == "process" else None
        self.module_cache = _module_cache(config)
        self.ipc = IpcRegistry.temporary()
        self.sessions: dict = {}  # live sessions, until everything they owned is released
        self.session_started: dict[int, float] = {}  # wall-clock time each live session opened
        self.started = time.time()
        self.slots = SessionSlots(config.max_sessions)
        self.admission = Admission(handshake_limit(config.max_handshakes))
        self._ids = itertools.count(1)
        self.ports: list[int] = []

    def status(self) -> dict:
        """What `rgpu status` shows: the server, its limits and its live sessions (SERVER_STATUS), with the
        figures of in-process sessions; status_report() adds those of sessions in worker processes."""
        from rgpu.version import __version__

        now = time.time()
        info = (self.pool.backend_info or {}) if self.pool is not None else \
            {"backend": self.backend.name, "device": self.backend.device_name(0)}
        sessions = []
        for sid, value in sorted(self.sessions.items()):
            row = {"id": sid, "age_s": round(now - self.session_started.get(sid, now), 1)}
            if isinstance(value, str):
                row["peer"] = value
            else:
                row.update(peer=value.peer, **value.usage())
            sessions.append(row)
        recent = list(self.pool.finished)[-10:] if self.pool is not None else []
        return {"version": __version__, "backend": info.get("backend"), "device": info.get("device"),
                "fallback": info.get("fallback"), "isolation": self.config.isolation,
                "uptime_s": round(now - self.started, 1), "max_sessions": self.config.max_sessions,
                "session_mem_limit": self.config.session_mem_limit, "psk": self.config.psk is not None,
                "sessions": sessions, "recently_ended": recent}

    async def status_report(self) -> dict:
        """status(), with each worker's own figures for its session (asked all at once; a worker that does not
        answer within a second is listed without them)."""
        report = self.status()
        if self.pool is not None:
            async with trio.open_nursery() as nursery:
                for row in report["sessions"]:
                    nursery.start_soon(self._add_usage, row)
        return report

    async def _add_usage(self, row: dict) -> None:
        usage = await self.pool.session_usage(row["id"])
        if usage:
            row.update(usage)

    async def serve(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        try:
            async with trio.open_nursery() as nursery:
                if self.pool is not None:
                    await nursery.start(self.pool.run)
                ports = await nursery.start(self._listen)
                task_status.started(ports)
        finally:
            if self.module_cache is not None and self.config.module_cache is None:
                self.module_cache.remove()
            self.ipc.remove()

    async def _listen(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        try:
            listeners = await trio.open_tcp_listeners(self.config.port, host=self.config.bind)
        except socket.gaierror as e:
            raise ConfigError(f"cannot listen on {self.config.bind!r}: {e.strerror} (give --bind an address "
                              "of this host, such as 127.0.0.1 or 0.0.0.0)") from None
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                raise ConfigError(f"{self.config.bind}:{self.config.port} is already in use (another "
                                  "rgpu-server? stop it, or choose another --port)") from None
            raise ConfigError(f"cannot listen on {self.config.bind}:{self.config.port}: "
                              f"{e.strerror or e}") from None
        self.ports = sorted({lst.socket.getsockname()[1] for lst in listeners})
        where = ", ".join(f"{self.config.bind}:{p}" for p in self.ports)
        backend = self.backend.name if self.backend else f"{self.config.backend} in one process per session"
        log.info("listening on %s (backend %s, %s)", where, backend,
                 "PSK authentication on" if self.config.psk else "no authentication")
        if self.config.port_file:
            tmp = self.config.port_file + ".tmp"
            with open(tmp, "w") as f:
                f.write(f"{self.ports[0]}\n")
            os.replace(tmp, self.config.port_file)
        task_status.started(self.ports)
        await trio.serve_listeners(self._handle, listeners)

    async def _handle(self, stream: trio.SocketStream) -> None:
        session_id = next(self._ids)
        try:
            host, port = stream.socket.getpeername()[:2]
            peer = f"{host}:{port}"
            stream.socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            peer = "?"
        try:
            await run_session(self, stream, session_id, peer)
        except Exception:
            # One broken session must never take the server down.
            log.exception("[session %d] crashed; server continues", session_id)
