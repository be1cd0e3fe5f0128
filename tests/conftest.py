"""Shared fixtures: an in-process server on the fake backend, bound to 127.0.0.1 only."""

from __future__ import annotations

import contextlib
import os
import time

import attrs
import pytest
import trio

import rgpu
from rgpu import shims
from rgpu.backends import lane
from rgpu.backends.fake import FakeBackend
from rgpu.kernels import load
from rgpu.serving.server import Server, ServerConfig

# Fake sessions run launches and memsets through the C fast lane (rgpu.backends.fake_lane), as GPU sessions
# do: in this process, and in the worker processes, which inherit the environment (as rgpu-server's do).
# RGPU_TEST_LANE_LIBRARY names another build of it (test_lane_sanitized's, with the sanitizers).
LANE_LIBRARY = os.environ.get("RGPU_TEST_LANE_LIBRARY") or str(shims.build_lane())
os.environ[lane.LIBRARY_ENV], os.environ[lane.HEADER_ENV] = LANE_LIBRARY, str(shims.lane_header())
lane.load_from_environment()


def pytest_report_header(config):
    return f"fast lane: {LANE_LIBRARY}"


TEST_PSK = bytes(range(32))  # obviously-not-a-secret key for tests only
DEMO_PTX = load("demo.ptx")


@attrs.define
class RunningServer:
    server: Server
    backend: FakeBackend
    address: str
    cancel: trio.CancelScope

    async def connect(self, **kw) -> rgpu.AsyncClient:
        return await rgpu.connect_async(self.address, **kw)


@contextlib.asynccontextmanager
async def running_server(**config):
    """Worker processes (isolation "process", what ships) by default, `backend` naming a kind ("fake"). A test
    that must look inside the backend or a session passes isolation="thread" (sessions in this process, on
    `backend`, a FakeBackend unless given) and says why."""
    config.setdefault("isolation", "process")
    if config["isolation"] == "thread":
        backend = config.pop("backend", None) or FakeBackend()
    else:
        config.setdefault("backend", "fake")
        backend = None
    cfg = ServerConfig(bind="127.0.0.1", port=0, **config)
    server = Server(cfg, backend)
    async with trio.open_nursery() as nursery:
        ports = await nursery.start(server.serve)
        yield RunningServer(server, backend, f"127.0.0.1:{ports[0]}", nursery.cancel_scope)
        nursery.cancel_scope.cancel()


@pytest.fixture
async def srv():
    async with running_server() as s:
        yield s


@pytest.fixture
async def tsrv():
    """Sessions in this process (isolation "thread"), for tests that inspect the backend or a Session."""
    async with running_server(isolation="thread") as s:
        yield s


@pytest.fixture
async def client(srv):
    c = await srv.connect()
    yield c
    with trio.CancelScope(shield=True):
        with contextlib.suppress(Exception):
            await c.aclose()


def wait_for_stats_record(stats, timeout: float) -> None:
    """A server's worker writes its --stats-file record as the session ends, just after the client exits."""
    deadline = time.monotonic() + timeout
    while not (stats.exists() and stats.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.05)


async def wait_for(predicate, timeout: float = 5.0) -> None:
    with trio.fail_after(timeout):
        while not predicate():
            await trio.sleep(0.01)


async def long_kernel_vs_other_session(a: rgpu.AsyncClient, b: rgpu.AsyncClient, seconds: float):
    """Session `a` runs a `seconds`-long kernel and synchronises while session `b` keeps making calls.
    Returns (a's synchronise time, b's slowest call) in seconds."""
    import time

    mod = await a.module_load(DEMO_PTX)
    spin = await a.get_function(mod, "spin_ns")
    elapsed, worst = [], 0.0
    done = trio.Event()

    async def long_job():
        t0 = time.monotonic()
        await a.launch(spin, 1, 1, (int(seconds * 1e9),))
        await a.synchronize()
        elapsed.append(time.monotonic() - t0)
        done.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(long_job)
        await trio.sleep(0.1)
        while not done.is_set():
            t0 = time.monotonic()
            await b.nop()
            await b.mem_get_info()
            worst = max(worst, time.monotonic() - t0)
            await trio.sleep(0.01)
    return elapsed[0], worst


@pytest.fixture(scope="session")
def shim_dir(tmp_path_factory):
    """The native stand-ins (libcuda.so.1, libcudart.so.12/.13) and the C examples, built once per run."""
    from rgpu import shims

    out = tmp_path_factory.mktemp("shims")
    shims.build(out)
    shims.build_examples(out)
    return out
