"""Benchmark aids of rgpu-server: per-session counters in --stats-file, and --inject-rtt-us holding replies."""

import json
import time

import trio

from .conftest import running_server


async def test_stats_file_counts_blocking_and_deferred_calls(tmp_path):
    stats = tmp_path / "stats.jsonl"
    async with running_server(stats_file=str(stats)) as s:
        c = await s.connect()
        ptr = await c.mem_alloc(4096)
        for _ in range(5):
            await c.memset_d8_async(ptr, 1, 4096)  # deferred: no reply
        await c.synchronize()
        await c.nop()
        await c.aclose()
        with trio.fail_after(30):
            while not stats.exists() or not stats.read_text().strip():
                await trio.sleep(0.05)
    (record,) = [json.loads(line) for line in stats.read_text().splitlines()]
    # mem_alloc, synchronize, nop (GOODBYE's confirmation is not a call); the 5 memsets went without replies.
    assert record["blocking"] >= 3 and record["deferred"] >= 5
    assert record["calls"] == record["blocking"] + record["deferred"]
    assert record["bytes_in"] > 0 and record["bytes_out"] > 0 and record["cpu_s"] > 0


async def test_injected_round_trip_time_holds_every_reply():
    async with running_server(inject_rtt_us=20_000) as s:
        c = await s.connect()
        start = time.perf_counter()
        for _ in range(5):
            await c.nop()
        assert time.perf_counter() - start >= 5 * 0.020  # a lower bound only: never flaky on a slow machine
        await c.aclose()
