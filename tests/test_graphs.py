"""Launch attributes, stream capture and CUDA graphs, end to end on the fake backend (the handlers in
rgpu.dispatch.graphs, the emulation in rgpu.dispatch.fake_graphs); on the GPU box, RGPU_TEST_BACKEND=cuda runs
the same tests on rgpu.dispatch.cuda_graphs (NVIDIA's own capture)."""

from __future__ import annotations

import os
import struct

import numpy as np
import pytest

from rgpu.client import _Request, pack_params
from rgpu.dispatch import graphs
from rgpu.errors import CudaError, Status
from rgpu.protocol import ops
from rgpu.session.handles import Kind

from .conftest import DEMO_PTX, running_server

_minted = iter(range(1, 1 << 20))


@pytest.fixture
async def srv():
    backend = None
    if os.environ.get("RGPU_TEST_BACKEND") == "cuda":
        from rgpu.backends.cuda import CudaBackend

        backend = CudaBackend()
        backend.init()
    # Thread isolation: some tests read the session's graph counters in this process.
    async with running_server(backend=backend, isolation="thread") as s:
        yield s


def mint(kind: Kind) -> int:
    return ops.CLIENT_HANDLE_BIT | int(kind) << 56 | next(_minted)


def attribute(ident: int, value: bytes = b"") -> bytes:
    return struct.pack("<I4x64s", ident, value)


async def call(client, op, *values, bulk=b""):
    return await client._call(_Request(op, values, bulk))


async def defer(client, op, *values, bulk=b""):
    return await client._defer(_Request(op, values, bulk))


async def setup_vadd(client, n=256):
    await client.primary_ctx_retain(0)
    ctx = await client.primary_ctx_retain(0)
    await client.ctx_set_current(ctx)
    mod = await client.module_load(DEMO_PTX)
    fn = await client.get_function(mod, "vadd")
    a, b, c = [await client.mem_alloc(4 * n) for _ in range(3)]
    return fn, a, b, c


async def put(client, ptr, values):
    await client.memcpy_htod(ptr, np.asarray(values, dtype=np.float32).tobytes())


async def get(client, ptr, n):
    return np.frombuffer(await client.memcpy_dtoh(ptr, 4 * n), dtype=np.float32)


async def launch_ex(client, fn, grid, block, args, attrs=(), stream=0):
    bulk = b"".join(attrs) + pack_params(fn.layout, args)
    return await defer(client, ops.LAUNCH_KERNEL_EX, fn.handle, grid, 1, 1, block, 1, 1, 0, stream, len(attrs),
                       bulk=bulk)


async def test_launch_with_pdl_and_scheduling_attributes_runs(client):
    n = 256
    fn, a, b, c = await setup_vadd(client, n)
    await put(client, a, np.arange(n))
    await put(client, b, np.ones(n))
    pdl = attribute(6, struct.pack("<i", 1))
    prio = attribute(8, struct.pack("<i", 0))
    cluster = attribute(4, struct.pack("<III", 1, 1, 1))
    await launch_ex(client, fn, 2, 128, (a, b, c, n), (pdl, prio, cluster))
    assert np.array_equal(await get(client, c, n), np.arange(n) + 1)


async def test_launch_attribute_with_an_event_is_translated_and_checked(client):
    n = 256
    fn, a, b, c = await setup_vadd(client, n)
    event = await client.event_create(2)  # CU_EVENT_DISABLE_TIMING
    await launch_ex(client, fn, 2, 128, (a, b, c, n), (attribute(12, struct.pack("<Qi", event, 0)),))
    await client.event_synchronize(event)
    await launch_ex(client, fn, 2, 128, (a, b, c, n), (attribute(7, struct.pack("<Qii", 0x1234, 0, 0)),))
    with pytest.raises(CudaError) as e:  # a number that is not one of this session's events
        await client.synchronize()
    assert e.value.code == Status.INVALID_HANDLE


@pytest.mark.parametrize("ident, status", [(15, Status.INVALID_VALUE), (99, Status.INVALID_VALUE),
                                           (13, Status.NOT_SUPPORTED)])
async def test_unknown_or_unforwardable_attributes_are_refused(client, ident, status):
    fn, a, b, c = await setup_vadd(client)
    await launch_ex(client, fn, 2, 128, (a, b, c, 256), (attribute(ident),))
    with pytest.raises(CudaError) as e:
        await client.synchronize()
    assert e.value.code == status


async def test_cluster_dimension_must_divide_the_grid(client):
    fn, a, b, c = await setup_vadd(client)
    await launch_ex(client, fn, 3, 128, (a, b, c, 256), (attribute(4, struct.pack("<III", 2, 1, 1)),))
    with pytest.raises(CudaError) as e:
        await client.synchronize()
    assert e.value.code in (Status.INVALID_VALUE, 912)  # the driver says CUDA_ERROR_INVALID_CLUSTER_SIZE


async def test_a_cooperative_grid_must_be_resident_at_once(client):
    # (the C stand-ins refuse a grid that is too large before sending it; the server's driver checks it too)
    n = 256
    fn, a, b, c = await setup_vadd(client, n)
    await put(client, a, np.arange(n))
    await put(client, b, np.ones(n))
    cooperative = attribute(2, struct.pack("<i", 1))
    await launch_ex(client, fn, 2, 128, (a, b, c, n), (cooperative,))
    assert np.array_equal(await get(client, c, n), np.arange(n) + 1)
    sms = await client.device_attribute(16)  # (MULTIPROCESSOR_COUNT of device 0, setup_vadd's)
    per_sm = await client.occupancy_max_blocks(fn, 128)
    await launch_ex(client, fn, per_sm * sms + 1, 128, (a, b, c, n), (cooperative,))
    with pytest.raises(CudaError) as e:
        await client.synchronize()
    assert e.value.code == Status.COOPERATIVE_LAUNCH_TOO_LARGE


async def test_cluster_occupancy_takes_the_launch_s_shape_and_attributes(client):
    fn, a, b, c = await setup_vadd(client)
    two = attribute(4, struct.pack("<III", 2, 1, 1))

    async def ask(which, attrs, block=128, bulk=None):
        return (await call(client, ops.OCCUPANCY_CLUSTERS, fn.handle, which, 64, 1, 1, block, 1, 1, 0, len(attrs),
                           bulk=b"".join(attrs) if bulk is None else bulk))

    assert await ask(1, ()) >= 2
    active = await ask(0, (two,))
    assert active > 0
    per_sm, sms = await client.occupancy_max_blocks(fn, 128), await client.device_attribute(16)
    assert active <= per_sm * sms // 2
    # no cluster size: the H200's driver counted clusters of one block, the H100's answered 0 (both CUDA 13)
    unsized = await ask(0, ())
    assert unsized == 0 or active <= unsized <= per_sm * sms
    for wrong in (lambda: ask(2, (two,)),  # no such query
                  lambda: ask(0, (two,), bulk=two[:-1]),  # attribute bytes cut short
                  lambda: ask(0, (two,), block=0)):  # no threads to a block
        with pytest.raises(CudaError) as e:
            await wrong()
        assert e.value.code == Status.INVALID_VALUE


async def test_attribute_count_and_bulk_must_agree(client):
    fn, a, b, c = await setup_vadd(client)
    with pytest.raises(CudaError) as e:
        await call(client, ops.LAUNCH_KERNEL_EX, fn.handle, 1, 1, 1, 1, 1, 1, 0, 0, 40, bulk=b"x" * 100)
    assert e.value.code == Status.INVALID_VALUE


async def capture_vadd(client, fn, a, b, c, n, stream, pdl=True):
    await defer(client, ops.STREAM_BEGIN_CAPTURE, stream, 2, graph := mint(Kind.GRAPH))  # relaxed, as llama.cpp
    await launch_ex(client, fn, 2, 128, (a, b, c, n), (attribute(6, struct.pack("<i", 1)),) if pdl else (),
                    stream=stream)
    await defer(client, ops.MEMSET_D32_ASYNC, a, 0x3F800000, n, stream)  # a[] = 1.0 after the add
    await defer(client, ops.STREAM_END_CAPTURE, stream, graph)
    return graph


async def test_capture_instantiate_replay_with_changing_inputs(srv, client):
    n = 256
    fn, a, b, c = await setup_vadd(client, n)
    stream = await client.stream_create(1)
    await put(client, a, np.full(n, 5.0))
    await put(client, b, np.full(n, 2.0))
    graph = await capture_vadd(client, fn, a, b, c, n, stream)
    await client.stream_synchronize(stream)
    assert np.all(await get(client, c, n) == 0)  # captured, not run
    assert np.all(await get(client, a, n) == 5)
    exe = mint(Kind.GRAPH_EXEC)
    await defer(client, ops.GRAPH_INSTANTIATE, graph, exe, 0)
    for i in range(5):
        await put(client, b, np.full(n, float(i)))
        await defer(client, ops.GRAPH_LAUNCH, exe, stream)
        await client.stream_synchronize(stream)
        expected = (5.0 if i == 0 else 1.0) + i
        assert np.all(await get(client, c, n) == expected)
    (session,) = srv.server.sessions.values()
    assert graphs.graph_launches(session) == 5  # one wire record per replay
    await defer(client, ops.GRAPH_EXEC_DESTROY, exe)
    await defer(client, ops.GRAPH_DESTROY, graph)
    await client.synchronize()


async def test_exec_update_takes_new_parameters_of_the_same_topology(client):
    n = 256
    fn, a, b, c = await setup_vadd(client, n)
    d = await client.mem_alloc(4 * n)
    stream = await client.stream_create(1)
    await put(client, a, np.full(n, 1.0))
    await put(client, b, np.full(n, 2.0))
    g1 = await capture_vadd(client, fn, a, b, c, n, stream)
    exe = mint(Kind.GRAPH_EXEC)
    await defer(client, ops.GRAPH_INSTANTIATE, g1, exe, 0)
    g2 = await capture_vadd(client, fn, a, b, d, n, stream)  # same shape, writes d instead of c
    assert await call(client, ops.GRAPH_EXEC_UPDATE, exe, g2) == (0, 0)
    await defer(client, ops.GRAPH_LAUNCH, exe, stream)
    await client.stream_synchronize(stream)
    assert np.all(await get(client, d, n) == 3) and np.all(await get(client, c, n) == 0)
    # A different topology cannot update: the program destroys the exec and instantiates again.
    await defer(client, ops.STREAM_BEGIN_CAPTURE, stream, 0, g3 := mint(Kind.GRAPH))
    await defer(client, ops.MEMSET_D32_ASYNC, a, 0, n, stream)
    await defer(client, ops.STREAM_END_CAPTURE, stream, g3)
    result, _ = await call(client, ops.GRAPH_EXEC_UPDATE, exe, g3)
    assert result != 0


async def test_illegal_calls_during_capture_invalidate_it(client):
    n = 256
    fn, a, b, c = await setup_vadd(client, n)
    stream = await client.stream_create(0)
    await defer(client, ops.STREAM_BEGIN_CAPTURE, stream, 0, graph := mint(Kind.GRAPH))
    with pytest.raises(CudaError) as e:
        await client.stream_synchronize(stream)
    assert e.value.code == Status.STREAM_CAPTURE_UNSUPPORTED
    with pytest.raises(CudaError) as e:  # the legacy stream would wait on the capturing (blocking) stream
        await client.memset_d8(a, 0, 4)
    assert e.value.code == Status.STREAM_CAPTURE_IMPLICIT
    with pytest.raises(CudaError) as e:
        await call(client, ops.STREAM_END_CAPTURE, stream, graph)
    assert e.value.code == Status.STREAM_CAPTURE_INVALIDATED
    with pytest.raises(CudaError) as e:  # no graph came of it
        await call(client, ops.GRAPH_INSTANTIATE, graph, mint(Kind.GRAPH_EXEC), 0)
    assert e.value.code == Status.INVALID_HANDLE
    await client.stream_synchronize(stream)  # the stream is usable again


async def test_bad_capture_and_graph_input(client):
    fn, a, b, c = await setup_vadd(client)
    stream = await client.stream_create(1)
    with pytest.raises(CudaError) as e:  # never began
        await call(client, ops.STREAM_END_CAPTURE, stream, mint(Kind.GRAPH))
    assert e.value.code == Status.ILLEGAL_STATE
    with pytest.raises(CudaError) as e:
        await call(client, ops.STREAM_BEGIN_CAPTURE, 0, 0, mint(Kind.GRAPH))
    assert e.value.code == Status.STREAM_CAPTURE_UNSUPPORTED
    with pytest.raises(CudaError) as e:
        await call(client, ops.STREAM_BEGIN_CAPTURE, stream, 7, mint(Kind.GRAPH))
    assert e.value.code == Status.INVALID_VALUE
    graph = await capture_vadd(client, fn, a, b, c, 256, stream)
    exe = mint(Kind.GRAPH_EXEC)
    await call(client, ops.GRAPH_INSTANTIATE, graph, exe, 0)
    for bad in (exe, mint(Kind.GRAPH_EXEC) & ~ops.CLIENT_HANDLE_BIT, mint(Kind.GRAPH)):
        with pytest.raises(CudaError) as e:  # in use, not client-minted, wrong kind
            await call(client, ops.GRAPH_INSTANTIATE, graph, bad, 0)
        assert e.value.code in (Status.INVALID_VALUE, Status.INVALID_HANDLE)
    await call(client, ops.GRAPH_EXEC_DESTROY, exe)
    with pytest.raises(CudaError) as e:  # a destroyed exec launched: an error, not a crash
        await call(client, ops.GRAPH_LAUNCH, exe, stream)
    assert e.value.code == Status.INVALID_HANDLE
    with pytest.raises(CudaError) as e:
        await call(client, ops.GRAPH_DESTROY, mint(Kind.GRAPH))
    assert e.value.code == Status.INVALID_HANDLE


async def test_a_graph_launched_into_a_capture_is_refused_and_invalidates_it(client):
    # As NVIDIA's driver does (CUDA 13, measured on the H200): STREAM_CAPTURE_UNSUPPORTED, the capture ends
    # invalidated, and the graph itself still replays outside a capture.
    n = 256
    fn, a, b, c = await setup_vadd(client, n)
    stream = await client.stream_create(1)
    await put(client, a, np.full(n, 1.0))
    await put(client, b, np.full(n, 1.0))
    inner = await capture_vadd(client, fn, a, b, c, n, stream, pdl=False)
    inner_exec = mint(Kind.GRAPH_EXEC)
    await defer(client, ops.GRAPH_INSTANTIATE, inner, inner_exec, 0)
    await defer(client, ops.STREAM_BEGIN_CAPTURE, stream, 1, outer := mint(Kind.GRAPH))
    await defer(client, ops.GRAPH_LAUNCH, inner_exec, stream)
    with pytest.raises(CudaError) as e:
        await client.nop()
    assert e.value.deferred and e.value.code == Status.STREAM_CAPTURE_UNSUPPORTED
    with pytest.raises(CudaError) as e:
        await call(client, ops.STREAM_END_CAPTURE, stream, outer)
    assert e.value.code == Status.STREAM_CAPTURE_INVALIDATED
    await client.stream_synchronize(stream)
    assert np.all(await get(client, c, n) == 0)
    await defer(client, ops.GRAPH_LAUNCH, inner_exec, stream)
    await client.stream_synchronize(stream)
    assert np.all(await get(client, c, n) == 2)


async def kernel_node(client, graph, node, fn, args, deps=(), attrs=(), exec_=0, grid=2):
    bulk = struct.pack(f"<{len(deps)}Q", *deps) + b"".join(attrs) + pack_params(fn.layout, args)
    await defer(client, ops.GRAPH_KERNEL_NODE, graph, node, exec_, len(deps), fn.handle, grid, 1, 1, 128, 1, 1, 0,
                len(attrs), bulk=bulk)


async def test_explicit_graph_with_kernel_memset_memcpy_nodes(client):
    n = 256
    fn, a, b, c = await setup_vadd(client, n)
    d = await client.mem_alloc(4 * n)
    stream = await client.stream_create(1)
    await put(client, a, np.full(n, 2.0))
    await put(client, b, np.full(n, 3.0))
    graph = mint(Kind.GRAPH)
    await defer(client, ops.GRAPH_CREATE, graph, 0)
    clear, add, copy, done = (mint(Kind.GRAPH_NODE) for _ in range(4))
    await defer(client, ops.GRAPH_MEMSET_NODE, graph, clear, 0, 0, d, 4 * n, 0, 4, n, 1)
    await kernel_node(client, graph, add, fn, (a, b, c, n))
    await defer(client, ops.GRAPH_MEMCPY_NODE, graph, copy, 0, 2, d, 4 * n, c, 4 * n, 4 * n, 1,
                bulk=struct.pack("<QQ", clear, add))
    await defer(client, ops.GRAPH_OTHER_NODE, graph, done, 1, 5, 0, bulk=struct.pack("<Q", copy))
    exe = mint(Kind.GRAPH_EXEC)
    await defer(client, ops.GRAPH_INSTANTIATE, graph, exe, 0)
    await defer(client, ops.GRAPH_LAUNCH, exe, stream)
    await client.stream_synchronize(stream)
    assert np.all(await get(client, d, n) == 5)
    # New kernel parameters: in the graph (the exec keeps its own), then in the exec.
    await kernel_node(client, 0, add, fn, (a, a, c, n))
    await defer(client, ops.GRAPH_LAUNCH, exe, stream)
    await client.stream_synchronize(stream)
    assert np.all(await get(client, d, n) == 5)
    await kernel_node(client, 0, add, fn, (b, b, c, n), exec_=exe)
    await defer(client, ops.GRAPH_LAUNCH, exe, stream)
    await client.stream_synchronize(stream)
    assert np.all(await get(client, d, n) == 6)
    exe2 = mint(Kind.GRAPH_EXEC)
    await defer(client, ops.GRAPH_INSTANTIATE, graph, exe2, 0)
    await defer(client, ops.GRAPH_LAUNCH, exe2, stream)
    await client.stream_synchronize(stream)
    assert np.all(await get(client, d, n) == 4)
    # A clone, with a child-graph node in another graph.
    clone, clone_nodes = mint(Kind.GRAPH), [mint(Kind.GRAPH_NODE) for _ in range(4)]
    pairs = b"".join(struct.pack("<QQ", o, c_) for o, c_ in zip((clear, add, copy, done), clone_nodes))
    await defer(client, ops.GRAPH_CLONE, graph, clone, 4, bulk=pairs)
    outer, child = mint(Kind.GRAPH), mint(Kind.GRAPH_NODE)
    await defer(client, ops.GRAPH_CREATE, outer, 0)
    await defer(client, ops.GRAPH_OTHER_NODE, outer, child, 0, 4, clone)
    await put(client, a, np.full(n, 10.0))
    exe3 = mint(Kind.GRAPH_EXEC)
    await defer(client, ops.GRAPH_INSTANTIATE, outer, exe3, 0)
    await defer(client, ops.GRAPH_LAUNCH, exe3, stream)
    await client.stream_synchronize(stream)
    assert np.all(await get(client, d, n) == 20)
    await defer(client, ops.GRAPH_DESTROY, graph)
    with pytest.raises(CudaError) as e:  # its nodes went with it
        await call(client, ops.GRAPH_DESTROY_NODE, add)
    assert e.value.code == Status.INVALID_HANDLE


async def test_explicit_graph_edges_and_bad_nodes(client):
    n = 256
    fn, a, b, c = await setup_vadd(client, n)
    stream = await client.stream_create(1)
    graph, other = mint(Kind.GRAPH), mint(Kind.GRAPH)
    await defer(client, ops.GRAPH_CREATE, graph, 0)
    await defer(client, ops.GRAPH_CREATE, other, 0)
    first, second, stranger = (mint(Kind.GRAPH_NODE) for _ in range(3))
    # Added in the wrong order, then ordered by an edge: c = a + b after c[:] = 0, so the add must win.
    await kernel_node(client, graph, first, fn, (a, b, c, n))
    await defer(client, ops.GRAPH_MEMSET_NODE, graph, second, 0, 0, c, 4 * n, 0, 4, n, 1)
    await defer(client, ops.GRAPH_EDGES, graph, 1, 0, bulk=struct.pack("<QQ", second, first))
    await put(client, a, np.full(n, 1.0))
    await put(client, b, np.full(n, 1.0))
    exe = mint(Kind.GRAPH_EXEC)
    await defer(client, ops.GRAPH_INSTANTIATE, graph, exe, 0)
    await defer(client, ops.GRAPH_LAUNCH, exe, stream)
    await client.stream_synchronize(stream)
    assert np.all(await get(client, c, n) == 2)
    await defer(client, ops.GRAPH_OTHER_NODE, other, stranger, 0, 5, 0)
    bad = [
        (ops.GRAPH_OTHER_NODE, (graph, mint(Kind.GRAPH_NODE), 1, 5, 0), struct.pack("<Q", stranger)),  # foreign dep
        (ops.GRAPH_OTHER_NODE, (graph, mint(Kind.GRAPH_NODE), 0, 3, 0), b""),  # host node: not on the server
        (ops.GRAPH_MEMSET_NODE, (graph, mint(Kind.GRAPH_NODE), 0, 0, c, 4 * n, 0, 4, n + 1, 1), b""),  # overflow
        (ops.GRAPH_MEMCPY_NODE, (graph, mint(Kind.GRAPH_NODE), 0, 0, c, 0, 0x1000, 0, 16, 1), b""),  # not ours
        (ops.GRAPH_EDGES_DATA, (graph, 1, 0), struct.pack("<QQ", first, second)),  # no edge data
        (ops.GRAPH_EDGES_DATA, (graph, 1, 0), struct.pack("<QQBBB5s", first, second, 7, 0, 1, b"")),  # no port 7
        (ops.GRAPH_EDGES_DATA, (graph, 1, 0), struct.pack("<QQBBB5s", first, second, 1, 0, 1, b"x")),  # reserved
        (ops.GRAPH_EDGES_DATA, (graph, 1, 0), struct.pack("<QQBBB5s", first, stranger, 1, 0, 1, b"")),  # foreign
        (ops.GRAPH_EDGES, (graph, 1, 0), struct.pack("<QQ", first, second)),  # a cycle only at instantiate...
    ]
    for op, values, bulk in bad[:-1]:
        with pytest.raises(CudaError) as e:
            await call(client, op, *values, bulk=bulk)
        assert e.value.code in (Status.INVALID_VALUE, Status.NOT_SUPPORTED, Status.INVALID_HANDLE), op.name
    op, values, bulk = bad[-1]
    await call(client, op, *values, bulk=bulk)
    with pytest.raises(CudaError) as e:
        await call(client, ops.GRAPH_INSTANTIATE, graph, mint(Kind.GRAPH_EXEC), 0)
    assert e.value.code == Status.INVALID_VALUE


async def test_a_stream_that_waits_on_a_captured_event_joins_the_capture(client):
    """Fork and join, as PyTorch's side streams do: s2 waits on an event recorded in s1's capture, works, and s1
    waits on s2's event before the capture ends; all of it is in the graph."""
    n = 256
    fn, a, b, c = await setup_vadd(client, n)
    d = await client.mem_alloc(4 * n)
    s1, s2 = await client.stream_create(1), await client.stream_create(1)
    fork, join = await client.event_create(2), await client.event_create(2)
    await put(client, a, np.full(n, 1.0))
    await put(client, b, np.full(n, 2.0))
    await defer(client, ops.STREAM_BEGIN_CAPTURE, s1, 0, graph := mint(Kind.GRAPH))
    await defer(client, ops.MEMSET_D32_ASYNC, c, 0, n, s1)
    await client.event_record(fork, s1)
    await client.stream_wait_event(s2, fork)
    await launch_ex(client, fn, 2, 128, (a, b, d, n), stream=s2)
    await client.event_record(join, s2)
    await client.stream_wait_event(s1, join)
    await launch_ex(client, fn, 2, 128, (d, b, c, n), stream=s1)
    await call(client, ops.STREAM_END_CAPTURE, s1, graph)
    await client.synchronize()
    assert np.all(await get(client, d, n) == 0)  # nothing ran, on either stream
    exe = mint(Kind.GRAPH_EXEC)
    await defer(client, ops.GRAPH_INSTANTIATE, graph, exe, 0)
    await defer(client, ops.GRAPH_LAUNCH, exe, s1)
    await client.stream_synchronize(s1)
    assert np.all(await get(client, d, n) == 3) and np.all(await get(client, c, n) == 5)


def parse_nodes(count, bulk):
    size, out, off = ops.GRAPH_NODE_INFO.reply.size, [], 0
    for _ in range(count):
        rec = ops.GRAPH_NODE_INFO.decode_reply(bytes(bulk[off:off + size]))
        off += size
        deps = struct.unpack_from(f"<{rec.deps}Q", bulk, off)
        off += 8 * rec.deps
        out.append((rec, deps, bytes(bulk[off:off + rec.params])))
        off += rec.params
    assert off == len(bulk)
    return out


async def test_a_captured_graph_can_be_read_back_and_its_kernel_node_changed(client):
    """What programs do to patch a captured graph: list its nodes, read a kernel node's parameters, set new
    ones, and update the exec from the graph."""
    n = 256
    fn, a, b, c = await setup_vadd(client, n)
    d = await client.mem_alloc(4 * n)
    stream = await client.stream_create(1)
    await put(client, a, np.full(n, 1.0))
    await put(client, b, np.full(n, 2.0))
    graph = await capture_vadd(client, fn, a, b, c, n, stream, pdl=False)
    exe = mint(Kind.GRAPH_EXEC)
    await defer(client, ops.GRAPH_INSTANTIATE, graph, exe, 0)
    count, raw = await client._call(_Request(ops.GRAPH_GET_NODES, (graph,), decode=lambda v, bulk: (v[0], bytes(bulk))))
    nodes = parse_nodes(count, raw)
    (kernel, kdeps, params), (memset, mdeps, _) = nodes
    assert kernel.type == 0 and kernel.function == fn.handle and (kernel.grid_x, kernel.block_x) == (2, 128)
    assert params == pack_params(fn.layout, (a, b, c, n)) and kdeps == ()
    assert memset.type == 2 and memset.dst == a and memset.value == 0x3F800000 and memset.width == n
    assert mdeps == (kernel.node,)
    again = await client._call(_Request(ops.GRAPH_NODE_INFO, (kernel.node,), decode=lambda v, bulk: v))
    assert again == kernel  # the same handle the second time
    await kernel_node(client, 0, kernel.node, fn, (a, b, d, n))
    assert await call(client, ops.GRAPH_EXEC_UPDATE, exe, graph) == (0, 0)
    await defer(client, ops.GRAPH_LAUNCH, exe, stream)
    await client.stream_synchronize(stream)
    assert np.all(await get(client, d, n) == 3) and np.all(await get(client, c, n) == 0)



async def test_capture_dependencies_can_be_read_and_replaced(client):
    """cuStreamGetCaptureInfo's dependency set and cuStreamUpdateCaptureDependencies (PyTorch's allocator): the
    next captured work depends on the nodes set, here none, so it becomes a root."""
    n = 256
    fn, a, b, c = await setup_vadd(client, n)
    stream = await client.stream_create(1)
    await defer(client, ops.STREAM_BEGIN_CAPTURE, stream, 2, graph := mint(Kind.GRAPH))
    await defer(client, ops.MEMSET_D32_ASYNC, a, 0, n, stream)
    count, raw = await client._call(_Request(ops.STREAM_CAPTURE_DEPENDENCIES, (stream, graph),
                                             decode=lambda v, bulk: (v[0], bytes(bulk))))
    (memset_node,) = struct.unpack(f"<{count}Q", raw)
    await defer(client, ops.STREAM_UPDATE_CAPTURE_DEPENDENCIES, stream, 1, 0)  # set: none
    await launch_ex(client, fn, 2, 128, (b, b, c, n), stream=stream)
    count, raw = await client._call(_Request(ops.STREAM_CAPTURE_DEPENDENCIES, (stream, graph),
                                             decode=lambda v, bulk: (v[0], bytes(bulk))))
    (kernel_node,) = struct.unpack(f"<{count}Q", raw)
    await defer(client, ops.STREAM_UPDATE_CAPTURE_DEPENDENCIES, stream, 0, 1, bulk=struct.pack("<Q", memset_node))
    await defer(client, ops.MEMSET_D32_ASYNC, b, 0, n, stream)  # after both
    await call(client, ops.STREAM_END_CAPTURE, stream, graph)
    count, raw = await client._call(_Request(ops.GRAPH_GET_NODES, (graph,), decode=lambda v, bulk: (v[0], bytes(bulk))))
    nodes = {rec.node: deps for rec, deps, _ in parse_nodes(count, raw)}
    assert nodes[memset_node] == () and nodes[kernel_node] == ()  # two roots, the same handles as before
    (last,) = [h for h in nodes if h not in (memset_node, kernel_node)]
    assert set(nodes[last]) == {memset_node, kernel_node}
    with pytest.raises(CudaError):  # the capture is over
        await call(client, ops.STREAM_UPDATE_CAPTURE_DEPENDENCIES, stream, 0, 1, bulk=struct.pack("<Q", last))
