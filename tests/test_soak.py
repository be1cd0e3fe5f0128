"""Soak: many sessions killed mid-work leave nothing behind (fake backend accounting exact, server RSS flat),
and real client processes killed with SIGKILL against the process-isolated server."""

from __future__ import annotations

import os
import random
import signal
import struct
import subprocess
import sys
import textwrap
import time

import trio

from rgpu.protocol import ops

from .conftest import DEMO_PTX, running_server, wait_for


def rss_bytes() -> int:
    with open(f"/proc/{os.getpid()}/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


async def doomed_session(srv, rng: random.Random) -> None:
    """Connect, do some work, and vanish at a random point (sometimes in the middle of a frame)."""
    c = await srv.connect()
    try:
        for _ in range(rng.randrange(1, 4)):
            await c.mem_alloc(rng.randrange(1, 256) * 1024)
        if rng.random() < 0.5:
            mod = await c.module_load(DEMO_PTX)
            fill = await c.get_function(mod, "fill")
            p = await c.mem_alloc(4096)
            for _ in range(rng.randrange(1, 50)):
                await c.launch(fill, 1, 32, (p, 1.0, 32))
            if rng.random() < 0.5:
                await c.flush()
        if rng.random() < 0.3:
            await c.stream.send_all(struct.pack("<I", 5000) + struct.pack("<HH", ops.MEMCPY_HTOD.code, 0) + b"\0" * 50)
    finally:
        await c.stream.aclose()


async def test_thousand_sessions_cut_mid_work_leave_nothing_behind():
    # In-process sessions: the fake backend's accounting and the server's RSS are the point, and 1100 worker
    # processes would take minutes (test_sigkilled_client_processes... below runs workers).
    async with running_server(max_sessions=256, isolation="thread") as srv:
        rng = random.Random(11)
        limiter = trio.CapacityLimiter(32)

        async def one(i):
            async with limiter:
                await doomed_session(srv, random.Random(rng.random()))

        async def wave(n):
            async with trio.open_nursery() as nursery:
                for i in range(n):
                    nursery.start_soon(one, i)
            await wait_for(lambda: not srv.server.sessions and srv.backend.used == 0, 30)

        await wave(100)  # warm-up: allocator pools, caches
        rss_before = rss_bytes()
        t0 = time.monotonic()
        await wave(1000)
        elapsed = time.monotonic() - t0
        rss_after = rss_bytes()
        assert srv.backend.used == 0 and srv.backend.contexts_alive == 0
        growth = rss_after - rss_before
        print(f"\n1000 cut sessions in {elapsed:.1f}s; server RSS {rss_before >> 20} -> {rss_after >> 20} MiB")
        assert growth < 32 << 20, f"server RSS grew by {growth >> 20} MiB over 1000 sessions"


CLIENT = textwrap.dedent("""
    import os, sys, rgpu
    from rgpu.kernels import load
    c = rgpu.connect(sys.argv[1])
    c.mem_alloc(8 << 20)
    mod = c.module_load(load("demo.ptx"))
    fill = c.get_function(mod, "fill")
    p = c.mem_alloc(4096)
    print("working", flush=True)
    while True:
        c.launch(fill, 1, 32, (p, 1.0, 32))
        c.synchronize()
""")


async def test_sigkilled_client_processes_end_their_workers_cleanly():
    async with running_server(isolation="process", worker_pool=4) as srv:
        procs = []
        for _ in range(12):
            procs.append(subprocess.Popen([sys.executable, "-c", CLIENT, srv.address], stdout=subprocess.PIPE,
                                          text=True))
        for p in procs:
            assert await trio.to_thread.run_sync(p.stdout.readline) == "working\n"
        await trio.sleep(0.2)
        for p in procs:
            p.send_signal(signal.SIGKILL)
            p.wait()
        await wait_for(lambda: len(srv.server.pool.finished) == 12 and not srv.server.sessions, 60)
        stats = list(srv.server.pool.finished)
        assert all(s["exit_code"] == 0 for s in stats), stats
        assert all(s["backend_bytes_in_use"] == 0 and s["contexts_alive"] == 0 for s in stats), stats
        assert all("connection" in s["reason"] for s in stats), stats
