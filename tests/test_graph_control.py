"""Protocol 1.9's graph control flow at the server (rgpu.dispatch.graphs): conditional nodes and their bodies'
handles, capture into an existing graph, node enabling, event and child-graph setters, graph memory figures --
what they do, and what a hostile client's records get (a CUDA error; the session goes on). The C stand-ins' side
is tests/cuda/graph_control.cu (test_cuda_programs). RGPU_TEST_BACKEND=cuda runs the backend-neutral ones on
NVIDIA's driver."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from rgpu.backends import fake_graphs
from rgpu.dispatch import graphs
from rgpu.errors import CudaError, Status
from rgpu.protocol import ops
from rgpu.session.handles import Kind

from .test_graphs import call, defer, get, kernel_node, mint, put, setup_vadd, srv  # noqa: F401 (srv: fixture)

FAKE_ONLY = pytest.mark.skipif(__import__("os").environ.get("RGPU_TEST_BACKEND") == "cuda",
                               reason="the fake backend's emulation")
EMPTY, EVENT_RECORD, CHILD = 5, 7, 4


async def refused(status, coro):
    with pytest.raises(CudaError) as e:
        await coro
    assert e.value.code == status, e.value


async def new_graph(client):
    graph = mint(Kind.GRAPH)
    await call(client, ops.GRAPH_CREATE, graph, 0)
    return graph


async def conditional(client, graph, kind, size, handle=None, deps=()):
    """A conditional node of `graph` -> (node, [its bodies' handles])."""
    if handle is None:
        handle = await call(client, ops.GRAPH_CONDITIONAL_HANDLE, graph, 0, 0)
    node, bodies = mint(Kind.GRAPH_NODE), [mint(Kind.GRAPH) for _ in range(size)]
    await call(client, ops.GRAPH_CONDITIONAL_NODE, graph, node, len(deps), handle, kind, size,
               bulk=struct.pack(f"<{len(deps) + size}Q", *deps, *bodies))
    return node, bodies


async def test_conditional_node_records_a_hostile_client_may_send(client):
    await setup_vadd(client)
    graph, other = await new_graph(client), await new_graph(client)
    handle = await call(client, ops.GRAPH_CONDITIONAL_HANDLE, graph, 0, 0)
    # (the driver numbers a graph's handles from the same start: another graph's second is none of this one's)
    foreign = [await call(client, ops.GRAPH_CONDITIONAL_HANDLE, other, 0, 0) for _ in range(2)][-1]
    await refused(Status.INVALID_VALUE, call(client, ops.GRAPH_CONDITIONAL_HANDLE, graph, 0, 2))  # unknown flag
    node, body = mint(Kind.GRAPH_NODE), mint(Kind.GRAPH)

    def record(kind=0, size=1, h=handle, bodies=None, deps=(), extra=b""):
        bodies = [body] if bodies is None else bodies
        return call(client, ops.GRAPH_CONDITIONAL_NODE, graph, node, len(deps), h, kind, size,
                    bulk=struct.pack(f"<{len(deps) + len(bodies)}Q", *deps, *bodies) + extra)

    for status, attempt in [
        (Status.INVALID_VALUE, record(size=0, bodies=[])),  # no body
        (Status.INVALID_VALUE, record(size=3, bodies=[body, mint(Kind.GRAPH), mint(Kind.GRAPH)])),  # IF: 1 or 2
        (Status.INVALID_VALUE, record(kind=1, size=2, bodies=[body, mint(Kind.GRAPH)])),  # WHILE: one body
        (Status.INVALID_VALUE, record(kind=7)),  # no such type
        (Status.INVALID_VALUE, record(kind=2, size=ops.MAX_SWITCH_BODIES + 1, bodies=[])),
        (Status.INVALID_VALUE, record(h=foreign)),  # another graph's handle
        (Status.INVALID_VALUE, record(h=12345)),
        (Status.INVALID_VALUE, record(bodies=[graph])),  # not a fresh handle
        (Status.INVALID_VALUE, record(bodies=[mint(Kind.GRAPH_NODE)])),  # not a graph handle
        (Status.INVALID_VALUE, record(kind=0, size=2, bodies=[body, body])),  # named twice
        (Status.INVALID_VALUE, record(extra=b"x")),  # bulk longer than its counts
        (Status.INVALID_VALUE, record(bodies=[], size=1)),  # shorter
        (Status.INVALID_HANDLE, record(deps=(mint(Kind.GRAPH_NODE),))),
    ]:
        await refused(status, attempt)
    await record()  # and the session goes on: the well-formed record is taken
    await refused(Status.INVALID_VALUE, call(client, ops.GRAPH_DESTROY, body))  # a body goes with its node


async def test_bodies_go_with_their_node_and_graph(client):
    fn, a, b, c = await setup_vadd(client)
    graph = await new_graph(client)
    node, (body,) = await conditional(client, graph, 1, 1)
    inner, (nested,) = await conditional(client, body, 0, 1)  # a conditional inside the body
    await kernel_node(client, nested, mint(Kind.GRAPH_NODE), fn, (a, b, c, 256))
    await call(client, ops.GRAPH_DESTROY_NODE, node)
    for gone in (body, nested):  # the node took both bodies, nested ones too
        await refused(Status.INVALID_HANDLE, call(client, ops.GRAPH_GET_NODES, gone))
    node2, (body2,) = await conditional(client, graph, 0, 1)
    await kernel_node(client, body2, mint(Kind.GRAPH_NODE), fn, (a, b, c, 256))
    await call(client, ops.GRAPH_DESTROY, graph)
    await refused(Status.INVALID_HANDLE, call(client, ops.GRAPH_GET_NODES, body2))
    assert await client.mem_get_info()  # the session goes on


async def test_context_teardown_leaves_bodies_to_the_driver(client):
    await client.primary_ctx_retain(0)
    ctx = await client.ctx_create(0, 0)
    await client.ctx_set_current(ctx)
    graph = await new_graph(client)
    await conditional(client, graph, 2, 3)
    await client.ctx_destroy(ctx)  # the bodies are not destroyed on their own (the driver takes them with the graph)
    await client.ctx_set_current(await client.primary_ctx_retain(0))
    assert await client.mem_get_info()


@FAKE_ONLY
async def test_a_while_body_that_never_clears_its_condition_stops(client):
    n = 256
    fn, a, b, c = await setup_vadd(client, n)
    stream = await client.stream_create(1)
    await put(client, a, np.ones(n))
    await put(client, b, np.zeros(n))
    graph = await new_graph(client)
    handle = await call(client, ops.GRAPH_CONDITIONAL_HANDLE, graph, 1, 1)  # ASSIGN_DEFAULT, 1
    node, (body,) = await conditional(client, graph, 1, 1, handle)
    await kernel_node(client, body, mint(Kind.GRAPH_NODE), fn, (a, b, b, n))  # b += 1, never clears the condition
    exe = mint(Kind.GRAPH_EXEC)
    await call(client, ops.GRAPH_INSTANTIATE, graph, exe, 0)
    old = fake_graphs.MAX_BODY_RUNS
    fake_graphs.MAX_BODY_RUNS = 5
    try:
        await refused(Status.LAUNCH_TIMEOUT, call(client, ops.GRAPH_LAUNCH, exe, stream))
    finally:
        fake_graphs.MAX_BODY_RUNS = old
    assert np.all(await get(client, b, n) == 5)  # ran until stopped, not forever


async def test_capture_into_a_graph_keeps_its_handle_and_adds_after_the_deps(client):
    n = 256
    fn, a, b, c = await setup_vadd(client, n)
    stream = await client.stream_create(1)
    await put(client, a, np.full(n, 2.0))
    await put(client, b, np.full(n, 3.0))
    graph = await new_graph(client)
    root = mint(Kind.GRAPH_NODE)
    await call(client, ops.GRAPH_OTHER_NODE, graph, root, 0, EMPTY, 0)
    await call(client, ops.STREAM_BEGIN_CAPTURE_TO_GRAPH, stream, 0, graph, 1, 0, bulk=struct.pack("<Q", root))
    await client.launch(fn, (1, 1, 1), (n, 1, 1), (a, b, c, n), stream=stream)
    await call(client, ops.STREAM_END_CAPTURE, stream, graph)
    count = await call(client, ops.GRAPH_GET_NODES, graph)
    assert count == 2
    exe = mint(Kind.GRAPH_EXEC)
    await call(client, ops.GRAPH_INSTANTIATE, graph, exe, 0)
    await call(client, ops.GRAPH_LAUNCH, exe, stream)
    await client.stream_synchronize(stream)
    assert np.all(await get(client, c, n) == 5)
    other = await new_graph(client)
    stranger = mint(Kind.GRAPH_NODE)
    await call(client, ops.GRAPH_OTHER_NODE, other, stranger, 0, EMPTY, 0)
    bad_edge = struct.pack("<Q", root) + bytes([9, 0, 0, 0, 0, 0, 0, 0])
    for status, attempt in [
        (Status.INVALID_VALUE, (stream, 0, graph, 1, 0, struct.pack("<Q", stranger))),  # another graph's node
        (Status.INVALID_VALUE, (stream, 0, graph, 1, 1, bad_edge)),  # a port that does not exist
        (Status.INVALID_VALUE, (stream, 0, graph, 2, 0, struct.pack("<Q", root))),  # fewer than it says
        (Status.INVALID_VALUE, (stream, 0, graph, 1, 2, struct.pack("<Q", root))),
        (Status.INVALID_VALUE, (stream, 5, graph, 0, 0, b"")),  # no such mode
        (Status.INVALID_VALUE, (stream, 0, graph, graphs.MAX_NODE_DEPENDENCIES + 1, 0, b"")),
        (Status.INVALID_HANDLE, (stream, 0, mint(Kind.GRAPH), 0, 0, b"")),
        (Status.STREAM_CAPTURE_UNSUPPORTED, (0, 0, graph, 0, 0, b"")),  # the NULL stream
    ]:
        *values, bulk = attempt
        await refused(status, call(client, ops.STREAM_BEGIN_CAPTURE_TO_GRAPH, *values, bulk=bulk))
    await client.stream_synchronize(stream)  # nothing was left capturing


async def test_disabled_nodes_do_not_run_until_enabled_again(client):
    n = 256
    fn, a, b, c = await setup_vadd(client, n)
    stream = await client.stream_create(1)
    await put(client, a, np.full(n, 2.0))
    await put(client, b, np.full(n, 3.0))
    await put(client, c, np.zeros(n))
    graph = await new_graph(client)
    add, empty = mint(Kind.GRAPH_NODE), mint(Kind.GRAPH_NODE)
    await kernel_node(client, graph, add, fn, (a, b, c, n))
    await call(client, ops.GRAPH_OTHER_NODE, graph, empty, 0, EMPTY, 0)
    exe = mint(Kind.GRAPH_EXEC)
    await call(client, ops.GRAPH_INSTANTIATE, graph, exe, 0)
    await call(client, ops.GRAPH_NODE_ENABLE, exe, add, 0)
    await call(client, ops.GRAPH_LAUNCH, exe, stream)
    await client.stream_synchronize(stream)
    assert np.all(await get(client, c, n) == 0)
    await call(client, ops.GRAPH_NODE_ENABLE, exe, add, 1)
    await call(client, ops.GRAPH_LAUNCH, exe, stream)
    await client.stream_synchronize(stream)
    assert np.all(await get(client, c, n) == 5)
    await refused(Status.INVALID_VALUE, call(client, ops.GRAPH_NODE_ENABLE, exe, empty, 0))  # not disableable
    other = await new_graph(client)
    stranger = mint(Kind.GRAPH_NODE)
    await kernel_node(client, other, stranger, fn, (a, b, c, n))
    await refused(Status.INVALID_VALUE, call(client, ops.GRAPH_NODE_ENABLE, exe, stranger, 0))  # not in the exec
    await refused(Status.INVALID_HANDLE, call(client, ops.GRAPH_NODE_ENABLE, mint(Kind.GRAPH_EXEC), add, 0))


async def test_event_and_child_setters_check_what_they_are_given(client):
    n = 256
    fn, a, b, c = await setup_vadd(client, n)
    graph, child = await new_graph(client), await new_graph(client)
    record, kernel, nested = mint(Kind.GRAPH_NODE), mint(Kind.GRAPH_NODE), mint(Kind.GRAPH_NODE)
    e1, e2 = await client.event_create(0), await client.event_create(0)
    await call(client, ops.GRAPH_OTHER_NODE, graph, record, 0, EVENT_RECORD, e1)
    await kernel_node(client, graph, kernel, fn, (a, b, c, n))
    await call(client, ops.GRAPH_OTHER_NODE, graph, nested, 0, CHILD, child)
    await call(client, ops.GRAPH_EVENT_NODE_SET, 0, record, e2)
    exe = mint(Kind.GRAPH_EXEC)
    await call(client, ops.GRAPH_INSTANTIATE, graph, exe, 0)
    await call(client, ops.GRAPH_EVENT_NODE_SET, exe, record, e1)
    await call(client, ops.GRAPH_EXEC_CHILD_SET, exe, nested, child)
    for status, op, values in [
        (Status.INVALID_VALUE, ops.GRAPH_EVENT_NODE_SET, (0, kernel, e1)),  # not an event node
        (Status.INVALID_HANDLE, ops.GRAPH_EVENT_NODE_SET, (0, record, mint(Kind.GRAPH))),  # not an event
        (Status.INVALID_HANDLE, ops.GRAPH_EVENT_NODE_SET, (mint(Kind.GRAPH_EXEC), record, e1)),
        (Status.INVALID_VALUE, ops.GRAPH_EXEC_CHILD_SET, (exe, kernel, child)),  # not a child graph node
        (Status.INVALID_HANDLE, ops.GRAPH_EXEC_CHILD_SET, (exe, nested, mint(Kind.GRAPH))),
    ]:
        await refused(status, call(client, op, *values))
    assert await client.mem_get_info()


async def test_graph_memory_figures_are_the_sessions_own(client, srv):
    await setup_vadd(client)
    before = await call(client, ops.GRAPH_MEM, 0, 1)
    graph = await new_graph(client)
    node = mint(Kind.GRAPH_NODE)
    await call(client, ops.GRAPH_MEM_ALLOC_NODE, graph, node, 0, 0, 1 << 20)
    used = await call(client, ops.GRAPH_MEM, 0, 1)
    high = await call(client, ops.GRAPH_MEM, 0, 2)
    other = await srv.connect()  # another session sees none of it
    try:
        await setup_vadd(other)
        theirs = await call(other, ops.GRAPH_MEM, 0, 3)
    finally:
        await other.aclose()
    await call(client, ops.GRAPH_DESTROY, graph)
    await call(client, ops.GRAPH_MEM, 0, 0)  # trim
    after = await call(client, ops.GRAPH_MEM, 0, 3)
    high_after = await call(client, ops.GRAPH_MEM, 0, 4)
    await call(client, ops.GRAPH_MEM, 0, 6)  # reset the reserved high-water mark
    reset = await call(client, ops.GRAPH_MEM, 0, 4)
    assert (before, used, high, theirs, after, high_after, reset) == (0, 1 << 20, 1 << 20, 0, 0, 1 << 20, 0)
    await refused(Status.INVALID_DEVICE, call(client, ops.GRAPH_MEM, 99, 1))
    await refused(Status.INVALID_DEVICE, call(client, ops.GRAPH_MEM, -1, 1))
    await refused(Status.INVALID_VALUE, call(client, ops.GRAPH_MEM, 0, 7))


async def test_a_moved_child_graph_is_its_nodes_and_goes_with_it(client):
    n = 256
    fn, a, b, c = await setup_vadd(client, n)
    stream = await client.stream_create(1)
    await put(client, a, np.full(n, 2.0))
    await put(client, b, np.full(n, 3.0))
    parent, child, spare = await new_graph(client), await new_graph(client), await new_graph(client)
    inner, moved = mint(Kind.GRAPH_NODE), mint(Kind.GRAPH_NODE)
    await kernel_node(client, child, inner, fn, (a, b, c, n))
    await call(client, ops.GRAPH_MOVE_CHILD_NODE, parent, moved, 0, child)
    exe = mint(Kind.GRAPH_EXEC)
    await call(client, ops.GRAPH_INSTANTIATE, parent, exe, 0)
    await call(client, ops.GRAPH_LAUNCH, exe, stream)
    await client.stream_synchronize(stream)
    assert np.all(await get(client, c, n) == 5)
    await kernel_node(client, 0, inner, fn, (a, a, c, n), exec_=exe)  # the child's node, through the parent's exec
    await call(client, ops.GRAPH_LAUNCH, exe, stream)
    await client.stream_synchronize(stream)
    assert np.all(await get(client, c, n) == 4)
    for status, op, values in [
        (Status.INVALID_VALUE, ops.GRAPH_DESTROY, (child,)),  # the node's now
        (Status.INVALID_VALUE, ops.GRAPH_INSTANTIATE, (child, mint(Kind.GRAPH_EXEC), 0)),
        (Status.INVALID_VALUE, ops.GRAPH_MOVE_CHILD_NODE, (spare, mint(Kind.GRAPH_NODE), 0, child)),  # moved twice
        (Status.INVALID_VALUE, ops.GRAPH_MOVE_CHILD_NODE, (child, mint(Kind.GRAPH_NODE), 0, parent)),  # a cycle
        (Status.INVALID_VALUE, ops.GRAPH_MOVE_CHILD_NODE, (spare, mint(Kind.GRAPH_NODE), 0, spare)),
        (Status.INVALID_VALUE, ops.GRAPH_MOVE_CHILD_NODE, (spare, moved, 0, await new_graph(client))),  # in use
    ]:
        await refused(status, call(client, op, *values))
    await refused(Status.INVALID_VALUE, call(client, ops.GRAPH_MEM_ALLOC_NODE, child, mint(Kind.GRAPH_NODE), 0, 0,
                                             1 << 20))  # memory nobody would hold
    await call(client, ops.GRAPH_EXEC_DESTROY, exe)
    await call(client, ops.GRAPH_DESTROY, parent)
    await refused(Status.INVALID_HANDLE, call(client, ops.GRAPH_GET_NODES, child))
    # a graph moved into a conditional body is inside the body: CUDA's rules for bodies hold there too
    graph, inner = await new_graph(client), await new_graph(client)
    _, (body,) = await conditional(client, graph, 0, 1)
    await call(client, ops.GRAPH_MOVE_CHILD_NODE, body, mint(Kind.GRAPH_NODE), 0, inner)
    event = await client.event_create(0)
    await refused(Status.INVALID_VALUE, call(client, ops.GRAPH_OTHER_NODE, inner, mint(Kind.GRAPH_NODE), 0,
                                             EVENT_RECORD, event))


async def test_a_graph_being_captured_into_stays_until_the_capture_ends(client):
    await setup_vadd(client)
    stream = await client.stream_create(1)
    graph = await new_graph(client)
    node, (body,) = await conditional(client, graph, 0, 1)
    await call(client, ops.STREAM_BEGIN_CAPTURE_TO_GRAPH, stream, 0, body, 0, 0)
    other = await client.stream_create(1)
    await refused(Status.ILLEGAL_STATE, call(client, ops.STREAM_BEGIN_CAPTURE_TO_GRAPH, other, 0, body, 0, 0))
    await refused(Status.ILLEGAL_STATE, call(client, ops.GRAPH_DESTROY, graph))  # its body is being captured into
    await refused(Status.ILLEGAL_STATE, call(client, ops.GRAPH_DESTROY_NODE, node))
    await call(client, ops.STREAM_END_CAPTURE, stream, body)
    await call(client, ops.GRAPH_DESTROY, graph)
    await refused(Status.INVALID_HANDLE, call(client, ops.GRAPH_GET_NODES, body))


async def test_graphs_with_conditional_nodes_are_not_child_graphs(client):
    await setup_vadd(client)
    graph, holder = await new_graph(client), await new_graph(client)
    await conditional(client, graph, 1, 1)
    await refused(Status.NOT_SUPPORTED, call(client, ops.GRAPH_OTHER_NODE, holder, mint(Kind.GRAPH_NODE), 0, CHILD,
                                             graph))
    await refused(Status.NOT_SUPPORTED, call(client, ops.GRAPH_CLONE, graph, mint(Kind.GRAPH), 0))


async def test_a_child_graph_nodes_own_graph_is_the_nodes(client):
    n = 256
    fn, a, b, c = await setup_vadd(client, n)
    stream = await client.stream_create(1)
    await put(client, a, np.full(n, 2.0))
    await put(client, b, np.full(n, 3.0))
    parent, child = await new_graph(client), await new_graph(client)
    add, nested, empty = mint(Kind.GRAPH_NODE), mint(Kind.GRAPH_NODE), mint(Kind.GRAPH_NODE)
    await call(client, ops.GRAPH_OTHER_NODE, child, empty, 0, EMPTY, 0)
    await call(client, ops.GRAPH_OTHER_NODE, parent, nested, 0, CHILD, child)
    own = mint(Kind.GRAPH)
    await call(client, ops.GRAPH_CHILD_GRAPH, nested, own)
    count = await call(client, ops.GRAPH_GET_NODES, own)
    assert count == 1  # the node's copy of the child, not the child itself
    await kernel_node(client, own, add, fn, (a, b, c, n))  # added to the node's graph: the node runs it
    exe = mint(Kind.GRAPH_EXEC)
    await call(client, ops.GRAPH_INSTANTIATE, parent, exe, 0)
    await call(client, ops.GRAPH_LAUNCH, exe, stream)
    await client.stream_synchronize(stream)
    assert np.all(await get(client, c, n) == 5)
    assert await call(client, ops.GRAPH_GET_NODES, child) == 1  # the original is untouched
    for status, values in [
        (Status.INVALID_VALUE, (nested, mint(Kind.GRAPH))),  # it has its handle already
        (Status.INVALID_VALUE, (add, mint(Kind.GRAPH))),  # not a child graph node
        (Status.INVALID_HANDLE, (mint(Kind.GRAPH_NODE), mint(Kind.GRAPH))),
    ]:
        await refused(status, call(client, ops.GRAPH_CHILD_GRAPH, *values))
    other = mint(Kind.GRAPH_NODE)
    await call(client, ops.GRAPH_OTHER_NODE, parent, other, 0, CHILD, child)
    await refused(Status.INVALID_VALUE, call(client, ops.GRAPH_CHILD_GRAPH, other, child))  # a handle in use
    await refused(Status.INVALID_VALUE, call(client, ops.GRAPH_DESTROY, own))
    await call(client, ops.GRAPH_EXEC_DESTROY, exe)
    await call(client, ops.GRAPH_DESTROY, parent)
    await refused(Status.INVALID_HANDLE, call(client, ops.GRAPH_GET_NODES, own))
