"""Launch attributes, stream capture and CUDA graphs: the handlers (registered into rgpu.dispatch.handlers).

Graphs, executable graphs and nodes are session resources named by handles the client mints
(HandleTable.add_client), so capture, instantiation and replay are all deferred calls: replaying a captured
graph is one GRAPH_LAUNCH record however many nodes it has. The backends do the work (rgpu.dispatch.cuda_graphs
captures for real through NVIDIA's driver; rgpu.dispatch.fake_graphs records and replays).
"""

from __future__ import annotations

import struct
import weakref

import attrs

from rgpu.backends.graph_types import KernelNodeParams, MemcpyNodeParams, MemsetNodeParams, NodeInfo  # noqa: F401
from rgpu.dispatch import quota
from rgpu.dispatch.registry import Reply, handles, handles_fields
from rgpu.errors import CudaError, Status
from rgpu.protocol import ops
from rgpu.session.handles import GRAPH_BODY, Kind, Region
from rgpu.session.state import Session

# -- launch attributes ------------------------------------------------------------------------------
# Values that start with a CUevent: the client sends its session handle, the server hands the driver its own.
EVENT_ATTRIBUTES = {7: "PROGRAMMATIC_EVENT", 12: "LAUNCH_COMPLETION_EVENT"}
# DEVICE_UPDATABLE_KERNEL_NODE (13) makes the driver write a device-node handle back into the caller's
# memory: there is no such memory on the server, so it is refused (it is meant for graphs only anyway).
_WRITE_BACK_ATTRIBUTES = {13: "DEVICE_UPDATABLE_KERNEL_NODE"}
_ATTRIBUTE = struct.Struct("<I4x64s")
assert _ATTRIBUTE.size == ops.LAUNCH_ATTRIBUTE_SIZE


@attrs.frozen(slots=True)
class LaunchAttribute:
    id: int
    value: bytes  # the 64-byte CUlaunchAttributeValue as the client sent it
    event: object = None  # the backend's event, for EVENT_ATTRIBUTES


def parse_attributes(s: Session, raw, count: int) -> list[LaunchAttribute]:
    if count > ops.MAX_LAUNCH_ATTRIBUTES:
        raise CudaError(Status.INVALID_VALUE, f"{count} launch attributes (at most {ops.MAX_LAUNCH_ATTRIBUTES})")
    out = []
    for i in range(count):
        ident, value = _ATTRIBUTE.unpack_from(raw, i * _ATTRIBUTE.size)
        event = None
        if ident in EVENT_ATTRIBUTES:
            (handle,) = struct.unpack_from("<Q", value)
            event = s.object(handle, Kind.EVENT)[1].obj
        elif ident in _WRITE_BACK_ATTRIBUTES:
            raise CudaError(Status.NOT_SUPPORTED, f"launch attribute {ident} ({_WRITE_BACK_ATTRIBUTES[ident]}) "
                                                  "writes a device-node handle back to the caller: not forwarded")
        elif ident not in ops.PLAIN_LAUNCH_ATTRIBUTES:
            raise CudaError(Status.INVALID_VALUE, f"unknown launch attribute {ident}")
        out.append(LaunchAttribute(ident, bytes(value), event))
    return out


# -- per-session graph state ------------------------------------------------------------------------
@attrs.define(slots=True)
class _GraphState:
    capturing: dict = attrs.Factory(dict)  # stream handle -> the graph handle its capture will have
    ex_launchers: dict = attrs.Factory(dict)  # (function, stream) -> Backend.launcher_ex(...)
    ex_launchers_at: int = -1  # handles.removals when ex_launchers was last known good
    # Attribute records -> parsed attributes, for records without event handles: a program launches with the
    # same few attribute sets again and again (llama.cpp: PDL on every launch).
    attribute_sets: dict = attrs.Factory(dict)
    into: set = attrs.Factory(set)  # streams capturing into a graph that existed before (STREAM_BEGIN_CAPTURE_TO_GRAPH)
    conditionals: dict = attrs.Factory(dict)  # graph handle -> the conditional handles made for it


_STATES: weakref.WeakKeyDictionary[Session, _GraphState] = weakref.WeakKeyDictionary()


def state(s: Session) -> _GraphState:
    st = _STATES.get(s)
    if st is None:
        st = _STATES[s] = _GraphState()
    return st


def graph_launches(s: Session) -> int:
    """How many GRAPH_LAUNCH calls the session made (one wire record each, however many nodes), in Python or in
    the fast lane."""
    return s.calls_by_op.get(ops.GRAPH_LAUNCH.code, 0)


# -- launches with attributes -----------------------------------------------------------------------
@handles(ops.LAUNCH_KERNEL_EX)
def _launch_ex(s: Session, args, bulk):
    attr_bytes = args.count * _ATTRIBUTE.size
    if args.count > ops.MAX_LAUNCH_ATTRIBUTES or len(bulk) < attr_bytes:
        raise CudaError(Status.INVALID_VALUE, f"{args.count} launch attributes, {len(bulk)} bytes of bulk")
    target = s.launch_target(args.function, args.stream)  # checks and caches the function/stream pair
    params = memoryview(bulk)[attr_bytes:]
    target.check_params(len(params))
    st = state(s)
    raw = bytes(bulk[:attr_bytes])
    attributes = st.attribute_sets.get(raw)
    if attributes is None:
        attributes = parse_attributes(s, bulk, args.count)
        if len(st.attribute_sets) < 64 and all(a.event is None for a in attributes):
            st.attribute_sets[raw] = attributes
    if st.ex_launchers_at != s.handles.removals:
        st.ex_launchers.clear()
        st.ex_launchers_at = s.handles.removals
    key = (args.function, args.stream)
    launch = st.ex_launchers.get(key)
    if launch is None:
        ctx, func = s.object(args.function, Kind.FUNCTION)
        stream = s.stream(args.stream)[1] if args.stream else None
        launch = st.ex_launchers[key] = s.backend.launcher_ex(ctx.obj, func.obj, stream)
        s.handles.watch(args.function, args.stream, func.ctx)
    launch(args.grid_x, args.grid_y, args.grid_z, args.block_x, args.block_y, args.block_z, args.shared_mem, attributes,
           params)


# -- stream capture ---------------------------------------------------------------------------------
CAPTURE_MODES = (0, 1, 2)  # CU_STREAM_CAPTURE_MODE_GLOBAL, THREAD_LOCAL, RELAXED


def _capture_stream(s: Session, handle: int):
    if handle == 0:
        # The legacy NULL stream synchronises with every other: CUDA never captures it.
        raise CudaError(Status.STREAM_CAPTURE_UNSUPPORTED, "the NULL stream cannot be captured")
    return s.stream(handle)


@handles(ops.STREAM_BEGIN_CAPTURE)
def _begin_capture(s: Session, args, bulk):
    if args.mode not in CAPTURE_MODES:
        raise CudaError(Status.INVALID_VALUE, f"capture mode {args.mode}")
    ctx, stream = _capture_stream(s, args.stream)
    st = state(s)
    if args.stream in st.capturing:
        raise CudaError(Status.ILLEGAL_STATE, "the stream is already capturing")
    s.handles.check_fresh(args.graph, Kind.GRAPH)
    s.backend.stream_begin_capture(ctx.obj, stream, args.mode)
    st.capturing[args.stream] = args.graph


@handles(ops.STREAM_BEGIN_CAPTURE_TO_GRAPH)
def _begin_capture_to_graph(s: Session, args, bulk):
    if args.mode not in CAPTURE_MODES or args.edge_data not in (0, 1):
        raise CudaError(Status.INVALID_VALUE, f"capture mode {args.mode}, edge data {args.edge_data}")
    ctx, stream = _capture_stream(s, args.stream)
    st = state(s)
    if args.stream in st.capturing:
        raise CudaError(Status.ILLEGAL_STATE, "the stream is already capturing")
    _, graph = s.object(args.graph, Kind.GRAPH)
    if graph.ctx != ctx_handle(s, args.stream):
        raise CudaError(Status.INVALID_VALUE, "the stream and the graph belong to different contexts")
    if args.graph in st.capturing.values():
        raise CudaError(Status.ILLEGAL_STATE, "another stream is capturing into the graph")
    deps_bytes = 8 * args.deps
    if args.deps > MAX_NODE_DEPENDENCIES or len(bulk) != deps_bytes * (1 + args.edge_data):
        raise CudaError(Status.INVALID_VALUE, f"{args.deps} dependencies in {len(bulk)} bytes")
    deps = _node_handles(s, bulk, args.deps, args.graph)
    data = _edge_data(bytes(bulk[deps_bytes:]), args.deps) if args.edge_data else None
    s.backend.stream_begin_capture_to_graph(ctx.obj, stream, graph.obj, deps, data, args.mode)
    st.capturing[args.stream] = args.graph
    st.into.add(args.stream)


@handles(ops.STREAM_END_CAPTURE)
def _end_capture(s: Session, args, bulk):
    ctx, stream = _capture_stream(s, args.stream)
    st = state(s)
    graph_handle = st.capturing.pop(args.stream, None)
    if graph_handle is None:
        raise CudaError(Status.ILLEGAL_STATE, "the stream is not capturing")
    if graph_handle != args.graph:
        s.log.info("capture began as graph 0x%x, ends as 0x%x", graph_handle, args.graph)
    if args.stream in st.into:  # the graph was the session's before: it keeps its handle, whatever the outcome
        st.into.discard(args.stream)
        s.backend.stream_end_capture(ctx.obj, stream)
        return
    # The driver ends the capture even when it fails (invalidated): no graph then.
    graph = s.backend.stream_end_capture(ctx.obj, stream)
    try:
        s.handles.add_client(args.graph, Kind.GRAPH, graph, ctx=ctx_handle(s, args.stream))
    except CudaError:
        s.backend.graph_destroy(ctx.obj, graph)
        raise


@handles(ops.STREAM_CAPTURE_DEPENDENCIES)
def _capture_dependencies(s: Session, args, bulk):
    ctx, stream = _capture_stream(s, args.stream)
    known = {s.backend.object_key(s.handles.get(h, Kind.GRAPH_NODE).obj): h
             for h in s.handles.owned_by(parent=args.graph, kind=Kind.GRAPH_NODE)}
    out = []
    for info in s.backend.capture_dependencies(ctx.obj, stream):
        handle = known.get(info.key)
        if handle is None:
            handle = known[info.key] = s.handles.add(Kind.GRAPH_NODE, info.obj, ctx=ctx_handle(s, args.stream),
                                                     parent=args.graph, info=info.type)
        out.append(handle)
    return Reply((len(out),), struct.pack(f"<{len(out)}Q", *out))


@handles(ops.STREAM_UPDATE_CAPTURE_DEPENDENCIES)
def _update_capture_dependencies(s: Session, args, bulk):
    ctx, stream = _capture_stream(s, args.stream)
    if args.flags not in (0, 1) or args.count > MAX_NODE_DEPENDENCIES or len(bulk) != 8 * args.count:
        raise CudaError(Status.INVALID_VALUE, f"flags {args.flags}, {args.count} nodes in {len(bulk)} bytes")
    nodes = [s.handles.get(h, Kind.GRAPH_NODE).obj for (h,) in struct.iter_unpack("<Q", bytes(bulk))]
    s.backend.update_capture_dependencies(ctx.obj, stream, nodes, args.flags)


def ctx_handle(s: Session, stream_handle: int) -> int:
    return s.handles.get(stream_handle, Kind.STREAM).ctx if stream_handle else s.current_ctx


# -- executable graphs ------------------------------------------------------------------------------
_INSTANTIATE_FLAGS = 0x1 | 0x2 | 0x8 | 0x10  # AUTO_FREE_ON_LAUNCH, UPLOAD, DEVICE_LAUNCH, USE_NODE_PRIORITY


@handles(ops.GRAPH_INSTANTIATE)
def _instantiate(s: Session, args, bulk):
    if args.flags & ~_INSTANTIATE_FLAGS:
        raise CudaError(Status.INVALID_VALUE, f"instantiate flags 0x{args.flags:x}")
    ctx, graph = s.object(args.graph, Kind.GRAPH)
    if args.exec in s.handles:
        raise CudaError(Status.INVALID_VALUE, f"0x{args.exec:x} is in use")
    if graph.info == GRAPH_BODY:
        raise CudaError(Status.INVALID_VALUE, "a graph that belongs to a node is instantiated with its node's graph")
    _register_exec(s, args, ctx, graph, s.backend.graph_instantiate(ctx.obj, graph.obj, args.flags))


def _register_exec(s: Session, args, ctx, graph, exe) -> None:
    """A new exec of `args.graph` under the client's `args.exec` (destroyed again if that fails)."""
    try:
        s.handles.add_client(args.exec, Kind.GRAPH_EXEC, exe, ctx=graph.ctx)
    except CudaError:
        s.backend.graph_exec_destroy(ctx.obj, exe)
        raise
    _hold_memory(s, args.graph, args.exec)


def _exec_on(s: Session, exec_handle: int, stream_handle: int):
    ctx, exe = s.object(exec_handle, Kind.GRAPH_EXEC)
    stream_ctx, stream = s.stream(stream_handle) if stream_handle else (ctx, None)
    if stream_ctx is not ctx:
        raise CudaError(Status.INVALID_VALUE, "the stream and the executable graph belong to different contexts")
    return ctx, exe, stream


@handles_fields(ops.GRAPH_LAUNCH)
def _graph_launch(s: Session, bulk, exec, stream):  # noqa: A002 (the spec's field name)
    ctx, exe, strm = _exec_on(s, exec, stream)
    s.backend.graph_launch(ctx.obj, exe.obj, strm)
    s.bind_lane_graph(exec, stream, ctx.obj, exe.obj, strm)


@handles(ops.GRAPH_UPLOAD)
def _graph_upload(s: Session, args, bulk):
    ctx, exe, stream = _exec_on(s, args.exec, args.stream)
    s.backend.graph_upload(ctx.obj, exe.obj, stream)


@handles(ops.GRAPH_EXEC_UPDATE)
def _exec_update(s: Session, args, bulk):
    ctx, exe = s.object(args.exec, Kind.GRAPH_EXEC)
    _, graph = s.object(args.graph, Kind.GRAPH)
    result = s.backend.graph_exec_update(ctx.obj, exe.obj, graph.obj)
    return (int(result), 0)


@handles(ops.GRAPH_EXEC_DESTROY)
def _graph_exec_destroy(s: Session, args, bulk):
    ctx, exe = s.object(args.exec, Kind.GRAPH_EXEC)
    s.handles.pop(args.exec, Kind.GRAPH_EXEC)
    s.backend.graph_exec_destroy(ctx.obj, exe.obj)
    _let_go_memory(s, args.exec)


@handles(ops.GRAPH_DESTROY)
def _graph_destroy(s: Session, args, bulk):
    ctx, graph = s.object(args.graph, Kind.GRAPH)
    if graph.info == GRAPH_BODY:
        raise CudaError(Status.INVALID_VALUE, f"graph 0x{args.graph:x} belongs to a node (a conditional body or a "
                                              "moved child graph): it goes with its node")
    children = s.handles.children((Kind.GRAPH, Kind.GRAPH_NODE))
    graphs = _within(children, graph=args.graph)
    _check_not_captured(s, graphs, "destroying a graph")
    s.backend.graph_destroy(ctx.obj, graph.obj)
    _forget(s, children, graphs)
    _let_go_memory(s, args.graph)


def _within(children: dict, *, graph: int = 0, node: int = 0) -> list:
    """A graph and the graphs its nodes own (conditional bodies, moved child graphs), theirs too -- or, given a
    node, the graphs it owns with theirs. `children`: HandleTable.children of graphs and nodes (a graph's are its
    nodes, a node's the graphs it owns), taken once for all of it."""
    out, todo = [], list(children.get(node, ())) if node else [graph]
    while todo:
        g = todo.pop()
        out.append(g)
        for n in children.get(g, ()):
            todo += children.get(n, ())
    return out


def _check_not_captured(s: Session, graphs: list, what: str) -> None:
    """As CUDA: a graph a stream is capturing into (or one within it) is not destroyed or moved under the
    capture."""
    if set(graphs).intersection(state(s).capturing.values()):
        raise CudaError(Status.ILLEGAL_STATE, f"{what} that a stream is capturing into")


def _forget(s: Session, children: dict, graphs: list) -> None:
    """The handles of destroyed graphs (_within's) and their nodes: the driver destroyed the graphs a destroyed
    graph or node owned with it. One pass over the handle table (children), however many bodies."""
    for g in graphs:
        for h in children.get(g, ()):
            s.handles.pop(h, Kind.GRAPH_NODE)
        state(s).conditionals.pop(g, None)
        s.handles.pop(g, Kind.GRAPH)


# -- the explicit graph API -------------------------------------------------------------------------
# CUgraphNodeType
KERNEL, MEMCPY, MEMSET, HOST, CHILD, EMPTY, WAIT_EVENT, EVENT_RECORD = range(8)
MEM_ALLOC, MEM_FREE, CONDITIONAL = 10, 11, 13
MAX_NODE_DEPENDENCIES = 4096
# CUgraphConditionalNodeType -> how many bodies a node of it may have; CU_GRAPH_COND_ASSIGN_DEFAULT
COND_IF, COND_WHILE, COND_SWITCH = 0, 1, 2
MAX_CONDITIONAL_HANDLES = 1 << 16  # a session's, over its graphs (the server keeps a set of them)
_COND_ASSIGN_DEFAULT = 0x1


@handles(ops.GRAPH_CREATE)
def _graph_create(s: Session, args, bulk):
    if args.flags:
        raise CudaError(Status.INVALID_VALUE, "cuGraphCreate flags must be 0")
    ctx = s.context()
    if args.graph in s.handles:
        raise CudaError(Status.INVALID_VALUE, f"0x{args.graph:x} is in use")
    graph = s.backend.graph_create(ctx.obj)
    s.handles.add_client(args.graph, Kind.GRAPH, graph, ctx=s.current_ctx)


def _node_handles(s: Session, raw, count: int, graph: int) -> list:
    """`count` u64 node handles from `raw`: nodes of `graph` -> their backend objects."""
    if count > MAX_NODE_DEPENDENCIES or len(raw) < 8 * count:
        raise CudaError(Status.INVALID_VALUE, f"{count} node handles in {len(raw)} bytes")
    out = []
    for (handle,) in struct.iter_unpack("<Q", bytes(raw[: 8 * count])):
        entry = s.handles.get(handle, Kind.GRAPH_NODE)
        if entry.parent != graph:
            raise CudaError(Status.INVALID_VALUE, f"node 0x{handle:x} is not in graph 0x{graph:x}")
        out.append(entry.obj)
    return out


def _add_or_set(s: Session, args, deps_raw, node_type: int, params) -> None:
    """A node operation: add `args.node` to `args.graph`, or set the parameters of an existing node."""
    if args.graph:
        ctx, graph = s.object(args.graph, Kind.GRAPH)
        if args.node in s.handles:
            raise CudaError(Status.INVALID_VALUE, f"0x{args.node:x} is in use")
        _check_body_node(s, graph, node_type)
        deps = _node_handles(s, deps_raw, args.deps, args.graph)
        node = s.backend.graph_add_node(ctx.obj, graph.obj, node_type, deps, params)
        try:
            s.handles.add_client(args.node, Kind.GRAPH_NODE, node, ctx=graph.ctx, parent=args.graph, info=node_type)
        except CudaError:
            s.backend.graph_destroy_node(ctx.obj, node)
            raise
        return
    ctx, node = s.object(args.node, Kind.GRAPH_NODE)
    if node.info != node_type:
        raise CudaError(Status.INVALID_VALUE, f"node 0x{args.node:x} is of type {node.info}, not {node_type}")
    exe = None
    if getattr(args, "exec", 0):
        _, exe_entry = s.object(args.exec, Kind.GRAPH_EXEC)
        exe = exe_entry.obj
    s.backend.graph_node_set_params(ctx.obj, node.obj, node_type, params, exe)


@handles(ops.GRAPH_KERNEL_NODE)
def _kernel_node(s: Session, args, bulk):
    deps_bytes, attr_bytes = 8 * args.deps, args.count * _ATTRIBUTE.size
    if args.count > ops.MAX_LAUNCH_ATTRIBUTES or args.deps > MAX_NODE_DEPENDENCIES or \
            len(bulk) < deps_bytes + attr_bytes:
        raise CudaError(Status.INVALID_VALUE, f"{args.deps} dependencies, {args.count} attributes, "
                                              f"{len(bulk)} bytes of bulk")
    view = memoryview(bulk)
    params = bytes(view[deps_bytes + attr_bytes:])
    _, func = s.object(args.function, Kind.FUNCTION)
    if func.info is not None:
        expected = func.info[-1][0] + func.info[-1][1] if func.info else 0
        if len(params) != expected:
            raise CudaError(Status.INVALID_VALUE, f"parameter buffer is {len(params)} bytes; the kernel's layout "
                                                  f"needs {expected}")
    if min(args.grid_x, args.grid_y, args.grid_z, args.block_x, args.block_y, args.block_z) < 1:
        raise CudaError(Status.INVALID_VALUE, "a kernel node's grid and block dimensions must be at least 1")
    attributes = tuple(parse_attributes(s, view[deps_bytes:], args.count))
    node = KernelNodeParams(func.obj, (args.grid_x, args.grid_y, args.grid_z),
                            (args.block_x, args.block_y, args.block_z), args.shared_mem, params, attributes)
    _add_or_set(s, args, view[:deps_bytes], KERNEL, node)


@handles(ops.GRAPH_MEMSET_NODE)
def _memset_node(s: Session, args, bulk):
    if args.element_size not in (1, 2, 4):
        raise CudaError(Status.INVALID_VALUE, f"element size {args.element_size}")
    s.memory.check_rows(args.dst, args.pitch, args.width * args.element_size, args.height)
    node = MemsetNodeParams(args.dst, args.pitch, args.value, args.element_size, args.width, args.height)
    _add_or_set(s, args, bulk, MEMSET, node)


@handles(ops.GRAPH_MEMCPY_NODE)
def _memcpy_node(s: Session, args, bulk):
    s.memory.check_rows(args.dst, args.dst_pitch, args.width, args.height)
    s.memory.check_rows(args.src, args.src_pitch, args.width, args.height)
    node = MemcpyNodeParams(args.dst, args.dst_pitch, args.src, args.src_pitch, args.width, args.height)
    _add_or_set(s, args, bulk, MEMCPY, node)


@handles(ops.GRAPH_OTHER_NODE)
def _other_node(s: Session, args, bulk):
    if args.type == EMPTY:
        obj = None
    elif args.type in (EVENT_RECORD, WAIT_EVENT):
        obj = s.object(args.object, Kind.EVENT)[1].obj
    elif args.type == CHILD:
        if args.object == args.graph:
            raise CudaError(Status.INVALID_VALUE, "a graph cannot be its own child")
        if _memory_of(s, args.object):  # as CUDA: a child graph may not allocate or free
            raise CudaError(Status.NOT_SUPPORTED, "a child graph with memory nodes")
        obj = s.object(args.object, Kind.GRAPH)[1].obj
        if _has_conditional(s, args.object):  # as CUDA (measured: 801 on the H100)
            raise CudaError(Status.NOT_SUPPORTED, "a child graph with conditional nodes")
    elif args.type == MEM_FREE:
        memory = _memory(s).get(args.object)
        if memory is None or memory.freed_by:
            raise CudaError(Status.INVALID_VALUE, f"0x{args.object:x} is not graph memory left to free")
        obj = args.object
    else:
        raise CudaError(Status.NOT_SUPPORTED, f"graph node type {args.type} through GRAPH_OTHER_NODE")
    if not args.graph:
        raise CudaError(Status.INVALID_VALUE, "GRAPH_OTHER_NODE adds nodes only")
    _add_or_set(s, args, bulk, args.type, obj)
    if args.type == MEM_FREE:
        _memory(s)[args.object].freed_by = args.graph


@handles(ops.GRAPH_EDGES)
def _graph_edges(s: Session, args, bulk):
    ctx, graph = s.object(args.graph, Kind.GRAPH)
    if args.remove not in (0, 1):
        raise CudaError(Status.INVALID_VALUE, f"remove={args.remove}")
    nodes = _node_handles(s, bulk, 2 * args.count, args.graph)
    s.backend.graph_edges(ctx.obj, graph.obj, list(zip(nodes[0::2], nodes[1::2])), bool(args.remove))


EDGE_RECORD = struct.Struct("<QQBBB5s")
MAX_EDGE_PORT, MAX_EDGE_TYPE = 2, 1  # CU_GRAPH_KERNEL_NODE_PORT_LAUNCH_ORDER, CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC
EDGE_DATA = struct.Struct("<BBB5s")


def _edge(from_port: int, to_port: int, kind: int, zero: bytes) -> tuple:
    """One CUgraphEdgeData record, checked -> (from_port, to_port, type)."""
    if from_port > MAX_EDGE_PORT or to_port or kind > MAX_EDGE_TYPE or any(zero):
        raise CudaError(Status.INVALID_VALUE, f"edge data ports {from_port}/{to_port}, type {kind}")
    return from_port, to_port, kind


def _edge_data(raw: bytes, count: int) -> list:
    return [_edge(*r) for r in EDGE_DATA.iter_unpack(raw[:EDGE_DATA.size * count])]


@handles(ops.GRAPH_EDGES_DATA)
def _graph_edges_data(s: Session, args, bulk):
    ctx, graph = s.object(args.graph, Kind.GRAPH)
    if args.remove not in (0, 1) or len(bulk) != EDGE_RECORD.size * args.count:
        raise CudaError(Status.INVALID_VALUE, f"GRAPH_EDGES_DATA: {args.count} edges in {len(bulk)} bytes")
    records = [EDGE_RECORD.unpack_from(bulk, EDGE_RECORD.size * i) for i in range(args.count)]
    data = [_edge(*r[2:]) for r in records]
    handles = struct.pack(f"<{2 * args.count}Q", *(h for r in records for h in r[:2]))
    nodes = _node_handles(s, handles, 2 * args.count, args.graph)
    s.backend.graph_edges(ctx.obj, graph.obj, list(zip(nodes[0::2], nodes[1::2])), bool(args.remove), data)


@handles(ops.GRAPH_CLONE)
def _graph_clone(s: Session, args, bulk):
    ctx, graph = s.object(args.graph, Kind.GRAPH)
    if args.clone in s.handles:
        raise CudaError(Status.INVALID_VALUE, f"0x{args.clone:x} is in use")
    if _memory_of(s, args.graph):
        raise CudaError(Status.NOT_SUPPORTED, "cloning a graph with memory nodes")
    if _has_conditional(s, args.graph):
        raise CudaError(Status.NOT_SUPPORTED, "cloning a graph with conditional nodes")
    if args.count > MAX_NODE_DEPENDENCIES or len(bulk) != 16 * args.count:
        raise CudaError(Status.INVALID_VALUE, f"{args.count} node pairs in {len(bulk)} bytes")
    pairs = list(struct.iter_unpack("<QQ", bytes(bulk)))
    originals = _node_handles(s, struct.pack(f"<{len(pairs)}Q", *(p[0] for p in pairs)), len(pairs), args.graph)
    for _, minted in pairs:
        s.handles.check_fresh(minted, Kind.GRAPH_NODE)
    clone, find = s.backend.graph_clone(ctx.obj, graph.obj)
    s.handles.add_client(args.clone, Kind.GRAPH, clone, ctx=graph.ctx)
    for (original, minted), obj in zip(pairs, originals):
        info = s.handles.get(original, Kind.GRAPH_NODE).info
        s.handles.add_client(minted, Kind.GRAPH_NODE, find(obj), ctx=graph.ctx, parent=args.clone, info=info)


@handles(ops.GRAPH_DESTROY_NODE)
def _graph_destroy_node(s: Session, args, bulk):
    ctx, node = s.object(args.node, Kind.GRAPH_NODE)
    if node.info in (MEM_ALLOC, MEM_FREE):
        raise CudaError(Status.NOT_SUPPORTED, "destroying a memory node (destroy its graph)")
    children = s.handles.children((Kind.GRAPH, Kind.GRAPH_NODE))
    graphs = _within(children, node=args.node)
    _check_not_captured(s, graphs, "destroying a node with a graph")
    s.backend.graph_destroy_node(ctx.obj, node.obj)
    s.handles.pop(args.node, Kind.GRAPH_NODE)
    _forget(s, children, graphs)


# -- changing nodes of executable graphs, event and child-graph nodes (1.9) ---------------------------------
@handles(ops.GRAPH_NODE_ENABLE)
def _node_enable(s: Session, args, bulk):
    ctx, exe = s.object(args.exec, Kind.GRAPH_EXEC)
    node = s.handles.get(args.node, Kind.GRAPH_NODE)
    if node.info not in (KERNEL, MEMSET, MEMCPY):
        raise CudaError(Status.INVALID_VALUE, f"node 0x{args.node:x} is of type {node.info}: only kernel, memset and "
                                              "memcpy nodes can be disabled")
    s.backend.graph_node_set_enabled(ctx.obj, exe.obj, node.obj, bool(args.enabled))


@handles(ops.GRAPH_EVENT_NODE_SET)
def _event_node_set(s: Session, args, bulk):
    ctx, node = s.object(args.node, Kind.GRAPH_NODE)
    if node.info not in (EVENT_RECORD, WAIT_EVENT):
        raise CudaError(Status.INVALID_VALUE, f"node 0x{args.node:x} is of type {node.info}, not an event node")
    event = s.object(args.event, Kind.EVENT)[1].obj
    exe = s.object(args.exec, Kind.GRAPH_EXEC)[1].obj if args.exec else None
    s.backend.graph_node_set_params(ctx.obj, node.obj, node.info, event, exe)


@handles(ops.GRAPH_EXEC_CHILD_SET)
def _exec_child_set(s: Session, args, bulk):
    ctx, exe = s.object(args.exec, Kind.GRAPH_EXEC)
    node = s.handles.get(args.node, Kind.GRAPH_NODE)
    if node.info != CHILD:
        raise CudaError(Status.INVALID_VALUE, f"node 0x{args.node:x} is of type {node.info}, not a child graph node")
    _, child = s.object(args.graph, Kind.GRAPH)
    if _memory_of(s, args.graph) or _has_conditional(s, args.graph):  # as CUDA's child graph nodes
        raise CudaError(Status.NOT_SUPPORTED, "a child graph with memory or conditional nodes")
    s.backend.graph_exec_child_set(ctx.obj, exe.obj, node.obj, child.obj)


# -- conditional nodes (1.9): the handle is the driver's, since the program's kernels set it ------------------
def _conditionals(s: Session) -> dict:
    """graph handle -> its conditional handles, for graphs that still exist (a context's teardown takes graphs
    without a word here, and a client may mint the same number again)."""
    conditionals = state(s).conditionals
    for g in [g for g in conditionals if g not in s.handles]:
        del conditionals[g]
    return conditionals


def _has_conditional(s: Session, graph: int) -> bool:
    return any(s.handles.get(h, Kind.GRAPH_NODE).info == CONDITIONAL
               for h in s.handles.owned_by(parent=graph, kind=Kind.GRAPH_NODE))


# CUDA's rule for a conditional node's bodies: these kinds of node only (recursively, child graphs included).
_BODY_NODE_TYPES = frozenset({KERNEL, EMPTY, CHILD, MEMSET, MEMCPY, CONDITIONAL})


def _check_body_node(s: Session, graph, node_type: int) -> None:
    """CUDA's rules for a graph that belongs to a node: no memory nodes (a moved child graph's would be held by
    nothing); within a conditional node's body, at any depth, only _BODY_NODE_TYPES."""
    if graph.info == GRAPH_BODY and node_type in (MEM_ALLOC, MEM_FREE):
        raise CudaError(Status.INVALID_VALUE, "a memory node in a graph that belongs to a node")
    entry = graph
    while entry.info == GRAPH_BODY:
        owner = s.handles.get(entry.parent, Kind.GRAPH_NODE)
        if owner.info == CONDITIONAL and node_type not in _BODY_NODE_TYPES:
            raise CudaError(Status.INVALID_VALUE, f"a node of type {node_type} in a conditional node's body")
        entry = s.handles.get(owner.parent, Kind.GRAPH)


@handles(ops.GRAPH_CONDITIONAL_HANDLE)
def _conditional_handle(s: Session, args, bulk):
    ctx, graph = s.object(args.graph, Kind.GRAPH)
    if args.flags & ~_COND_ASSIGN_DEFAULT:
        raise CudaError(Status.INVALID_VALUE, f"conditional handle flags 0x{args.flags:x}")
    conditionals = _conditionals(s)
    if sum(map(len, conditionals.values())) >= MAX_CONDITIONAL_HANDLES:
        raise CudaError(Status.OUT_OF_MEMORY, f"more than {MAX_CONDITIONAL_HANDLES} conditional handles")
    handle = s.backend.graph_conditional_handle(ctx.obj, graph.obj, args.default_value, args.flags)
    conditionals.setdefault(args.graph, set()).add(int(handle))
    return (int(handle),)


@handles(ops.GRAPH_CONDITIONAL_NODE)
def _conditional_node(s: Session, args, bulk):
    ctx, graph = s.object(args.graph, Kind.GRAPH)
    most = {COND_IF: 2, COND_WHILE: 1, COND_SWITCH: ops.MAX_SWITCH_BODIES}.get(args.type, 0)
    if not 1 <= args.size <= most:
        raise CudaError(Status.INVALID_VALUE, f"a conditional node of type {args.type} with {args.size} bodies")
    if args.handle not in _conditionals(s).get(args.graph, ()):
        raise CudaError(Status.INVALID_VALUE, f"0x{args.handle:x} is not a conditional handle of graph "
                                              f"0x{args.graph:x}")
    if args.deps > MAX_NODE_DEPENDENCIES or len(bulk) != 8 * (args.deps + args.size):
        raise CudaError(Status.INVALID_VALUE, f"{args.deps} dependencies and {args.size} bodies in {len(bulk)} bytes")
    deps = _node_handles(s, bulk, args.deps, args.graph)
    bodies = [h for (h,) in struct.iter_unpack("<Q", bytes(bulk[8 * args.deps:]))]
    s.handles.check_fresh(args.node, Kind.GRAPH_NODE)
    for h in bodies:
        s.handles.check_fresh(h, Kind.GRAPH)
    if len(set(bodies)) != len(bodies) or args.node in bodies:
        raise CudaError(Status.INVALID_VALUE, "a handle named twice")
    node, made = s.backend.graph_add_conditional(ctx.obj, graph.obj, deps, args.handle, args.type, args.size)
    s.handles.add_client(args.node, Kind.GRAPH_NODE, node, ctx=graph.ctx, parent=args.graph, info=CONDITIONAL)
    for h, body in zip(bodies, made):
        s.handles.add_client(h, Kind.GRAPH, body, ctx=graph.ctx, parent=args.node, info=GRAPH_BODY)


@handles(ops.GRAPH_MOVE_CHILD_NODE)
def _move_child_node(s: Session, args, bulk):
    """A child graph node that takes its graph (XLA's nested command buffers): the graph becomes the node's."""
    ctx, graph = s.object(args.graph, Kind.GRAPH)
    _, child = s.object(args.child, Kind.GRAPH)
    if child.info == GRAPH_BODY or child.ctx != graph.ctx:
        raise CudaError(Status.INVALID_VALUE, f"graph 0x{args.child:x} belongs to a node, or to another context")
    within = _within(s.handles.children((Kind.GRAPH, Kind.GRAPH_NODE)), graph=args.child)
    if args.graph in within:
        raise CudaError(Status.INVALID_VALUE, "a graph moved into itself, or into a graph within it")
    _check_not_captured(s, within, "moving a graph")
    _check_body_node(s, graph, CHILD)
    s.handles.check_fresh(args.node, Kind.GRAPH_NODE)
    deps = _node_handles(s, bulk, args.deps, args.graph)
    if len(bulk) != 8 * args.deps:
        raise CudaError(Status.INVALID_VALUE, f"{args.deps} dependencies in {len(bulk)} bytes")
    node = s.backend.graph_add_child_moved(ctx.obj, graph.obj, deps, child.obj)
    s.handles.add_client(args.node, Kind.GRAPH_NODE, node, ctx=graph.ctx, parent=args.graph, info=CHILD)
    child.parent, child.info = args.node, GRAPH_BODY
    for m in _memory(s).values():  # what the child's memory nodes allocate is the parent's now
        if args.child in m.holders:
            m.holders.discard(args.child)
            m.holders.add(args.graph)
        if m.freed_by == args.child:
            m.freed_by = args.graph


@handles(ops.GRAPH_CHILD_GRAPH)
def _child_graph(s: Session, args, bulk):
    """A child graph node's own graph, under a client-minted handle: the node's, as a body is."""
    ctx, node = s.object(args.node, Kind.GRAPH_NODE)
    if node.info != CHILD:
        raise CudaError(Status.INVALID_VALUE, f"node 0x{args.node:x} is of type {node.info}, not a child graph node")
    if s.handles.owned_by(parent=args.node, kind=Kind.GRAPH):
        raise CudaError(Status.INVALID_VALUE, f"node 0x{args.node:x}'s graph has a handle already")
    s.handles.check_fresh(args.graph, Kind.GRAPH)
    graph = s.backend.graph_child_graph(ctx.obj, node.obj)
    s.handles.add_client(args.graph, Kind.GRAPH, graph, ctx=node.ctx, parent=args.node, info=GRAPH_BODY)


# -- reading a graph back (captured graphs too) -------------------------------------------------------
def _handle_of(s: Session, kind: Kind, obj) -> int:
    """The session handle of a backend object (0: none, e.g. a library's own kernel)."""
    key = s.backend.object_key(obj)
    for h in s.handles.owned_by(kind=kind):
        if s.backend.object_key(s.handles.get(h, kind).obj) == key:
            return h
    return 0


def _node_record(s: Session, handle: int, info: NodeInfo, handles_by_key: dict) -> bytes:
    p, values = info.params, dict.fromkeys((f.name for f in ops.GRAPH_NODE_INFO.reply_fields), 0)
    params = b""
    if isinstance(p, KernelNodeParams):
        params = p.params
        values.update(function=_handle_of(s, Kind.FUNCTION, p.func) if p.func is not None else 0,
                      grid_x=p.grid[0], grid_y=p.grid[1], grid_z=p.grid[2], block_x=p.block[0],
                      block_y=p.block[1], block_z=p.block[2], shared_mem=p.shared_mem, params=len(params))
    elif isinstance(p, MemsetNodeParams):
        values.update(dst=p.dst, dst_pitch=p.pitch, value=p.value, element_size=p.element_size, width=p.width,
                      height=p.height)
    elif isinstance(p, MemcpyNodeParams):
        values.update(dst=p.dst, dst_pitch=p.dst_pitch, src=p.src, src_pitch=p.src_pitch, width=p.width,
                      height=p.height)
    elif info.type in (EVENT_RECORD, WAIT_EVENT) and p is not None:
        values.update(object=_handle_of(s, Kind.EVENT, p))
    deps = [handles_by_key[d] for d in info.deps if d in handles_by_key]
    values.update(node=handle, type=info.type, deps=len(deps))
    return (ops.GRAPH_NODE_INFO.pack_reply(*values.values()) + struct.pack(f"<{len(deps)}Q", *deps) + params)


def _graph_nodes(s: Session, graph_handle: int) -> tuple[list, dict]:
    """([(handle, NodeInfo)] of a graph in a topological order, {node key: handle}); nodes the client never
    named get handles now."""
    ctx, graph = s.object(graph_handle, Kind.GRAPH)
    known = {s.backend.object_key(s.handles.get(h, Kind.GRAPH_NODE).obj): h
             for h in s.handles.owned_by(parent=graph_handle, kind=Kind.GRAPH_NODE)}
    out = []
    def layout(func):
        handle = _handle_of(s, Kind.FUNCTION, func)
        return s.handles.get(handle, Kind.FUNCTION).info if handle else None

    for info in s.backend.graph_nodes(ctx.obj, graph.obj, layout):
        handle = known.get(info.key)
        if handle is None:
            handle = known[info.key] = s.handles.add(Kind.GRAPH_NODE, info.obj, ctx=graph.ctx, parent=graph_handle,
                                                     info=info.type)
        out.append((handle, info))
    return out, known


@handles(ops.GRAPH_GET_NODES)
def _graph_get_nodes(s: Session, args, bulk):
    nodes, known = _graph_nodes(s, args.graph)
    return Reply((len(nodes),), b"".join(_node_record(s, h, info, known) for h, info in nodes))


@handles(ops.GRAPH_NODE_INFO)
def _graph_node_info(s: Session, args, bulk):
    entry = s.handles.get(args.node, Kind.GRAPH_NODE)
    nodes, known = _graph_nodes(s, entry.parent)
    for h, info in nodes:
        if h == args.node:
            record = _node_record(s, h, info, known)
            size = ops.GRAPH_NODE_INFO.reply.size
            return Reply(ops.GRAPH_NODE_INFO.decode_reply(record[:size]), record[size:])
    raise CudaError(Status.INVALID_VALUE, f"node 0x{args.node:x} is no longer in its graph")


# -- host nodes: the client runs them; the server keeps their place (native/src/graph_host.c) -----------
@handles(ops.GRAPH_INSTANTIATE_PART)
def _instantiate_part(s: Session, args, bulk):
    """One stage of a graph with host nodes: the named nodes and the edges among them, instantiated."""
    if args.flags & ~_INSTANTIATE_FLAGS:
        raise CudaError(Status.INVALID_VALUE, f"instantiate flags 0x{args.flags:x}")
    if args.count == 0 or len(bulk) != 8 * args.count:
        raise CudaError(Status.INVALID_VALUE, f"GRAPH_INSTANTIATE_PART: {args.count} nodes in {len(bulk)} bytes")
    ctx, graph = s.object(args.graph, Kind.GRAPH)
    s.handles.check_fresh(args.exec, Kind.GRAPH_EXEC)
    nodes = _node_handles(s, bulk, args.count, args.graph)
    if len({s.backend.object_key(n) for n in nodes}) != len(nodes):
        raise CudaError(Status.INVALID_VALUE, "a node named twice")
    _register_exec(s, args, ctx, graph, s.backend.graph_instantiate_part(ctx.obj, graph.obj, nodes, args.flags))


@handles(ops.STREAM_CAPTURE_EMPTY_NODE)
def _capture_empty_node(s: Session, args, bulk):
    ctx, stream = _capture_stream(s, args.stream)
    if args.graph not in state(s).capturing.values():
        raise CudaError(Status.ILLEGAL_STATE, f"no capture into graph 0x{args.graph:x}")
    s.handles.check_fresh(args.node, Kind.GRAPH_NODE)
    node = s.backend.capture_empty_node(ctx.obj, stream)
    s.handles.add_client(args.node, Kind.GRAPH_NODE, node, ctx=ctx_handle(s, args.stream), parent=args.graph,
                         info=EMPTY)


# -- memory nodes: graph memory counts against the session's limit while a graph or exec holds it ----------
@attrs.define(slots=True)
class _GraphMemory:
    size: int
    ctx: int
    graph: int  # the graph of the allocating node
    holders: set  # that graph and the execs made from it
    freed_by: int = 0  # the free node's graph, once there is one


class _MemoryState:
    """A session extension (Session.extensions): graph memory by address, released with its context."""

    def __init__(self) -> None:
        self.graph_memory: dict[int, _GraphMemory] = {}
        self.high: dict[int, list] = {}  # device -> [used, reserved] high-water marks (GRAPH_MEM)

    def release_context(self, s: Session, ctx: int) -> None:
        # The context's graphs and execs go with it (Session.destroy_context), and its regions.
        for ptr, m in list(self.graph_memory.items()):
            if m.ctx == ctx:
                del self.graph_memory[ptr]
                quota.uncharge(s, m.size, quota.GRAPHS)


def _memory_state(s: Session) -> _MemoryState:
    ext = s.extensions.get("graph_memory")
    if ext is None:
        ext = s.extensions["graph_memory"] = _MemoryState()
    return ext


def _memory(s: Session) -> dict:
    return _memory_state(s).graph_memory


def _device_graph_memory(s: Session, device: int) -> int:
    """The session's graph memory on `device` now: what its graphs and execs hold."""
    return sum(m.size for m in _memory(s).values() if s.handles.get(m.ctx, Kind.CONTEXT).info == device)


def _note_high(s: Session, device: int) -> tuple[int, list]:
    """The session's graph memory on `device` now, and its [used, reserved] high-water marks, raised to it."""
    now = _device_graph_memory(s, device)
    high = _memory_state(s).high.setdefault(device, [0, 0])
    high[0], high[1] = max(high[0], now), max(high[1], now)
    return now, high


@handles(ops.GRAPH_MEM)
def _graph_mem(s: Session, args, bulk):
    """cuDeviceGraphMemTrim (nothing left to give back: memory no graph holds goes when it is let go) and the graph
    memory attributes, the session's own. Used and reserved are the same figure here: the server keeps no cache of
    graph memory beyond what graphs hold."""
    if not 0 <= args.device < s.backend.device_count():
        raise CudaError(Status.INVALID_DEVICE, f"device {args.device} does not exist")
    if args.which > 6:
        raise CudaError(Status.INVALID_VALUE, f"GRAPH_MEM which={args.which}")
    now, high = _note_high(s, args.device)
    if args.which in (5, 6):
        high[args.which - 5] = now
    return ((0, now, high[0], now, high[1], 0, 0)[args.which],)


def _memory_of(s: Session, holder: int) -> list:
    ext = s.extensions.get("graph_memory")
    return [ptr for ptr, m in ext.graph_memory.items() if holder in m.holders] if ext else []


def _hold_memory(s: Session, graph: int, holder: int) -> None:
    for ptr in _memory_of(s, graph):
        _memory(s)[ptr].holders.add(holder)


def _let_go_memory(s: Session, holder: int) -> None:
    """`holder` (a graph or exec) is gone: memory nothing holds any more leaves the quota and the range checks."""
    memory = _memory(s)
    for m in memory.values():
        if m.freed_by == holder:
            m.freed_by = 0
    for ptr in _memory_of(s, holder):
        m = memory[ptr]
        m.holders.discard(holder)
        if not m.holders:
            del memory[ptr]
            s.memory.remove(ptr)
            quota.uncharge(s, m.size, quota.GRAPHS)
            s.backend.graph_mem_release(s.context(m.ctx).obj, ptr)


@handles(ops.GRAPH_MEM_ALLOC_NODE)
def _mem_alloc_node(s: Session, args, bulk):
    ctx, graph = s.object(args.graph, Kind.GRAPH)
    if args.size == 0:
        raise CudaError(Status.INVALID_VALUE, "a memory allocation node of 0 bytes")
    if args.device != ctx.info:
        raise CudaError(Status.INVALID_VALUE, f"device {args.device} is not the graph's context's ({ctx.info})")
    _check_body_node(s, graph, MEM_ALLOC)
    s.handles.check_fresh(args.node, Kind.GRAPH_NODE)
    deps = _node_handles(s, bulk, args.deps, args.graph)
    quota.charge(s, args.size, quota.GRAPHS)
    try:
        node, ptr = s.backend.graph_add_mem_alloc(ctx.obj, graph.obj, deps, args.size)
    except BaseException:
        quota.uncharge(s, args.size, quota.GRAPHS)
        raise
    s.handles.add_client(args.node, Kind.GRAPH_NODE, node, ctx=graph.ctx, parent=args.graph, info=MEM_ALLOC)
    _memory(s)[ptr] = _GraphMemory(args.size, graph.ctx, args.graph, {args.graph})
    s.memory.add(Region(ptr, args.size, graph.ctx, "graph memory"))
    _note_high(s, ctx.info)
    return (ptr,)
