"""How long the server takes to destroy a graph whose conditional nodes own many bodies (GRAPH_DESTROY forgets
every body's handle): one pass over the session's handle table, so the time grows with the bodies, not with their
square. On the fake backend by default (the server's own bookkeeping is what this measures).
    python bench/graph_bodies_bench.py [--nodes 2,4,8,16] [--bodies 1024]
"""

from __future__ import annotations

import argparse
import pathlib
import struct
import sys
import time

import trio

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from rgpu.protocol import ops  # noqa: E402
from rgpu.session.handles import Kind  # noqa: E402
from tests.conftest import running_server  # noqa: E402
from tests.test_graphs import call, mint  # noqa: E402


async def main(nodes: list[int], bodies: int) -> None:
    async with running_server(isolation="thread") as srv:
        client = await srv.connect()
        await client.ctx_set_current(await client.primary_ctx_retain(0))
        for count in nodes:
            graph = mint(Kind.GRAPH)
            await call(client, ops.GRAPH_CREATE, graph, 0)
            for _ in range(count):
                handle = await call(client, ops.GRAPH_CONDITIONAL_HANDLE, graph, 0, 0)
                minted = [mint(Kind.GRAPH) for _ in range(bodies)]
                await call(client, ops.GRAPH_CONDITIONAL_NODE, graph, mint(Kind.GRAPH_NODE), 0, handle, 2, bodies,
                           bulk=struct.pack(f"<{bodies}Q", *minted))
            start = time.perf_counter()
            await call(client, ops.GRAPH_DESTROY, graph)
            print(f"{count} SWITCH nodes of {bodies} bodies: GRAPH_DESTROY {time.perf_counter() - start:.3f} s")
        await client.aclose()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default="2,4,8,16")
    parser.add_argument("--bodies", type=int, default=1024)
    args = parser.parse_args()
    trio.run(main, [int(n) for n in args.nodes.split(",")], args.bodies)
