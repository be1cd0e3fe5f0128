"""The server's side of host nodes (native/src/graph_host.c runs them on the client): a stage of an executable
graph (GRAPH_INSTANTIATE_PART) and a host function's place in a capture (STREAM_CAPTURE_EMPTY_NODE); and memory
nodes (GRAPH_MEM_ALLOC_NODE) in the session's quota. On the fake backend; RGPU_TEST_BACKEND=cuda runs the ones
with a `client` fixture on NVIDIA's graphs (tests/gpu/run_on_gpu.sh)."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from rgpu.client import _Request
from rgpu.errors import CudaError, Status
from rgpu.protocol import ops
from rgpu.session.handles import Kind

from .conftest import running_server
from .test_graphs import call, defer, get, kernel_node, launch_ex, mint, parse_nodes, put, setup_vadd
from .test_graphs import srv  # noqa: F401 -- the fixture: NVIDIA's graphs under RGPU_TEST_BACKEND=cuda


def part(graph, exe, *nodes, flags=0):
    return (ops.GRAPH_INSTANTIATE_PART, graph, exe, flags, len(nodes)), struct.pack(f"<{len(nodes)}Q", *nodes)


async def instantiate_part(client, graph, exe, *nodes, sync=False):
    (op, *values), bulk = part(graph, exe, *nodes)
    return await (call if sync else defer)(client, op, *values, bulk=bulk)


async def two_step_graph(client, n):
    """add: c = a + b; then copy: d = c (after clear: d = 0)."""
    fn, a, b, c = await setup_vadd(client, n)
    d = await client.mem_alloc(4 * n)
    graph = mint(Kind.GRAPH)
    await defer(client, ops.GRAPH_CREATE, graph, 0)
    clear, add, copy = (mint(Kind.GRAPH_NODE) for _ in range(3))
    await defer(client, ops.GRAPH_MEMSET_NODE, graph, clear, 0, 0, d, 4 * n, 0, 4, n, 1)
    await kernel_node(client, graph, add, fn, (a, b, c, n))
    await defer(client, ops.GRAPH_MEMCPY_NODE, graph, copy, 0, 2, d, 4 * n, c, 4 * n, 4 * n, 1,
                bulk=struct.pack("<QQ", clear, add))
    return fn, (a, b, c, d), graph, (clear, add, copy)


async def test_each_stage_runs_only_its_nodes(client):
    n = 256
    fn, (a, b, c, d), graph, (clear, add, copy) = await two_step_graph(client, n)
    stream = await client.stream_create(1)
    await put(client, a, np.full(n, 2.0))
    await put(client, b, np.full(n, 3.0))
    await put(client, d, np.full(n, 9.0))
    first, second = mint(Kind.GRAPH_EXEC), mint(Kind.GRAPH_EXEC)
    await instantiate_part(client, graph, first, add)
    await instantiate_part(client, graph, second, clear, copy)
    await defer(client, ops.GRAPH_LAUNCH, first, stream)
    await client.stream_synchronize(stream)
    assert np.all(await get(client, c, n) == 5) and np.all(await get(client, d, n) == 9)
    await put(client, c, np.full(n, 7.0))
    await defer(client, ops.GRAPH_LAUNCH, second, stream)
    await client.stream_synchronize(stream)
    assert np.all(await get(client, d, n) == 7)  # the copy, after the clear; the add did not run again
    # Exec set-params name the graph's node, in the stage that has it.
    await kernel_node(client, 0, add, fn, (b, b, c, n), exec_=first)
    await defer(client, ops.GRAPH_LAUNCH, first, stream)
    await client.stream_synchronize(stream)
    assert np.all(await get(client, c, n) == 6)
    await kernel_node(client, 0, add, fn, (a, a, c, n), exec_=second)  # not in that stage
    with pytest.raises(CudaError) as e:
        await client.synchronize()
    assert e.value.code == Status.INVALID_VALUE
    for exe in (first, second):
        await defer(client, ops.GRAPH_EXEC_DESTROY, exe)
    await defer(client, ops.GRAPH_DESTROY, graph)
    await client.synchronize()


async def test_bad_stage_input_is_refused(client):
    n = 256
    fn, _, graph, (clear, add, copy) = await two_step_graph(client, n)
    other = mint(Kind.GRAPH)
    await defer(client, ops.GRAPH_CREATE, other, 0)
    await defer(client, ops.GRAPH_OTHER_NODE, other, foreign := mint(Kind.GRAPH_NODE), 0, 5, 0)
    used = mint(Kind.GRAPH_EXEC)
    await instantiate_part(client, graph, used, add, sync=True)
    cases = [
        part(graph, mint(Kind.GRAPH_EXEC)),  # no nodes
        ((ops.GRAPH_INSTANTIATE_PART, graph, mint(Kind.GRAPH_EXEC), 0, 2), struct.pack("<Q", add)),  # short bulk
        part(graph, mint(Kind.GRAPH_EXEC), add, foreign),  # a node of another graph
        part(graph, mint(Kind.GRAPH_EXEC), add, add),  # a node twice
        part(graph, used, clear),  # the exec handle in use
        part(graph, 1234, clear),  # not client-minted
        part(graph, mint(Kind.GRAPH), clear),  # the wrong kind
        part(graph, mint(Kind.GRAPH_EXEC), clear, flags=0x4),  # unknown instantiate flag
        part(mint(Kind.GRAPH), mint(Kind.GRAPH_EXEC), clear),  # no such graph
    ]
    for (op, *values), bulk in cases:
        with pytest.raises(CudaError) as e:
            await call(client, op, *values, bulk=bulk)
        assert e.value.code in (Status.INVALID_VALUE, Status.INVALID_HANDLE), values
    await defer(client, ops.GRAPH_LAUNCH, used, 0)  # the session goes on
    await client.synchronize()


async def test_a_host_functions_place_in_a_capture_is_an_empty_node(client):
    n = 256
    fn, a, b, c = await setup_vadd(client, n)
    stream = await client.stream_create(1)
    node = mint(Kind.GRAPH_NODE)
    with pytest.raises(CudaError) as e:  # not capturing
        await call(client, ops.STREAM_CAPTURE_EMPTY_NODE, stream, mint(Kind.GRAPH), node)
    assert e.value.code == Status.ILLEGAL_STATE
    await defer(client, ops.STREAM_BEGIN_CAPTURE, stream, 0, graph := mint(Kind.GRAPH))
    await launch_ex(client, fn, 2, 128, (a, b, c, n), stream=stream)
    with pytest.raises(CudaError) as e:  # not this capture's graph
        await call(client, ops.STREAM_CAPTURE_EMPTY_NODE, stream, mint(Kind.GRAPH), node)
    assert e.value.code == Status.ILLEGAL_STATE
    await defer(client, ops.STREAM_CAPTURE_EMPTY_NODE, stream, graph, node)
    with pytest.raises(CudaError) as e:  # the node handle is taken
        await call(client, ops.STREAM_CAPTURE_EMPTY_NODE, stream, graph, node)
    assert e.value.code == Status.INVALID_VALUE
    count, raw = await client._call(_Request(ops.STREAM_CAPTURE_DEPENDENCIES, (stream, graph),
                                             decode=lambda v, bulk: (v[0], bytes(bulk))))
    assert struct.unpack(f"<{count}Q", raw) == (node,)  # the stream's next work follows it
    await defer(client, ops.MEMSET_D32_ASYNC, a, 0, n, stream)
    await defer(client, ops.STREAM_END_CAPTURE, stream, graph)
    count, raw = await client._call(_Request(ops.GRAPH_GET_NODES, (graph,), decode=lambda v, bulk: (v[0], bytes(bulk))))
    (kernel, kdeps, _), (empty, edeps, _), (memset, mdeps, _) = parse_nodes(count, raw)
    assert (kernel.type, empty.type, memset.type) == (0, 5, 2)
    assert empty.node == node and edeps == (kernel.node,) and mdeps == (node,)
    # The stages either side of it, as the client instantiates them.
    first, second = mint(Kind.GRAPH_EXEC), mint(Kind.GRAPH_EXEC)
    await instantiate_part(client, graph, first, kernel.node)
    await instantiate_part(client, graph, second, memset.node)
    await put(client, a, np.full(n, 1.0))
    await put(client, b, np.full(n, 2.0))
    await defer(client, ops.GRAPH_LAUNCH, first, stream)
    await client.stream_synchronize(stream)
    assert np.all(await get(client, c, n) == 3) and np.all(await get(client, a, n) == 1)
    await defer(client, ops.GRAPH_LAUNCH, second, stream)
    await client.stream_synchronize(stream)
    assert np.all(await get(client, a, n) == 0)


# -- memory nodes -----------------------------------------------------------------------------------------
async def mem_alloc_node(client, graph, node, size, deps=(), device=0):
    dptr = await call(client, ops.GRAPH_MEM_ALLOC_NODE, graph, node, len(deps), device, size,
                      bulk=struct.pack(f"<{len(deps)}Q", *deps))
    return dptr


async def test_graph_memory_counts_while_a_graph_or_exec_holds_it():
    async with running_server(session_mem_limit=1 << 20, isolation="thread") as s:
        c = await s.connect()
        await c.ctx_set_current(await c.primary_ctx_retain(0))
        session = s.server.sessions[c.session_id]
        graph = mint(Kind.GRAPH)
        await defer(c, ops.GRAPH_CREATE, graph, 0)
        with pytest.raises(CudaError) as e:  # over the session's limit
            await mem_alloc_node(c, graph, mint(Kind.GRAPH_NODE), 2 << 20)
        assert e.value.code == Status.OUT_OF_MEMORY
        for bad in ((graph, mint(Kind.GRAPH_NODE), 0, 0), (graph, mint(Kind.GRAPH_NODE), 4096, 7),
                    (graph, 1234, 4096, 0)):  # no bytes, another device, not a client node handle
            with pytest.raises(CudaError) as e:
                await mem_alloc_node(c, *bad[:3], device=bad[3])
            assert e.value.code == Status.INVALID_VALUE
        alloc = mint(Kind.GRAPH_NODE)
        dptr = await mem_alloc_node(c, graph, alloc, 600 << 10)
        assert session.memory.charged["graph memory"] == 600 << 10
        with pytest.raises(CudaError):
            await c.mem_alloc(600 << 10)  # the graph's bytes are taken
        await defer(c, ops.GRAPH_MEMSET_NODE, graph, set_ := mint(Kind.GRAPH_NODE), 0, 1, dptr, 4096, 7, 1, 4096, 1,
                    bulk=struct.pack("<Q", alloc))  # graph memory is device memory for the range checks
        await defer(c, ops.GRAPH_OTHER_NODE, graph, free := mint(Kind.GRAPH_NODE), 1, 11, dptr,
                    bulk=struct.pack("<Q", set_))
        await c.synchronize()
        with pytest.raises(CudaError) as e:  # freed twice
            await call(c, ops.GRAPH_OTHER_NODE, graph, mint(Kind.GRAPH_NODE), 1, 11, dptr, bulk=struct.pack("<Q", free))
        assert e.value.code == Status.INVALID_VALUE
        with pytest.raises(CudaError) as e:  # not graph memory
            await call(c, ops.GRAPH_OTHER_NODE, graph, mint(Kind.GRAPH_NODE), 0, 11, dptr + 4096)
        assert e.value.code == Status.INVALID_VALUE
        with pytest.raises(CudaError) as e:
            await call(c, ops.GRAPH_CLONE, graph, mint(Kind.GRAPH), 0)
        assert e.value.code == Status.NOT_SUPPORTED
        exe = mint(Kind.GRAPH_EXEC)
        await defer(c, ops.GRAPH_INSTANTIATE, graph, exe, 0)
        await defer(c, ops.GRAPH_LAUNCH, exe, 0)
        await defer(c, ops.GRAPH_DESTROY, graph)
        await c.synchronize()
        assert session.memory.charged["graph memory"] == 600 << 10  # the exec holds it
        await defer(c, ops.GRAPH_EXEC_DESTROY, exe)
        await c.synchronize()
        assert session.memory.charged["graph memory"] == 0
        with pytest.raises(CudaError):  # no longer the session's memory
            await call(c, ops.MEMSET_D8, dptr, 0, 16)
        await c.mem_free(await c.mem_alloc(600 << 10))  # its bytes are back
        await c.aclose()
