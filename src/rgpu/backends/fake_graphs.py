"""Launch attributes, stream capture and CUDA graphs for the fake backend (a mixin of FakeBackend).

Capture is emulated the way the driver behaves towards a program: work queued on a capturing stream is
recorded into a graph instead of running; calls that would wait on a capturing stream, or move host memory
through it, fail with STREAM_CAPTURE_UNSUPPORTED and invalidate the capture; instantiating snapshots the
graph and launching replays its nodes in order on the launch stream.
"""

from __future__ import annotations

import functools
import inspect
import threading
import weakref

import attrs

from rgpu.backends import array_types
from rgpu.errors import CudaError, Status

# CUgraphNodeType
KERNEL, MEMCPY, MEMSET, HOST, CHILD, EMPTY, WAIT_EVENT, EVENT_RECORD = range(8)
MEM_ALLOC, MEM_FREE, BATCH_MEM_OP, CONDITIONAL = 10, 11, 12, 13
COND_IF, COND_WHILE, COND_SWITCH = 0, 1, 2  # CUgraphConditionalNodeType
COND_ASSIGN_DEFAULT = 0x1
# Conditional bodies run this many times in one launch (all its conditional nodes, nested ones too) are taken
# for a kernel that never clears its condition: a GPU would spin on; the fake fails the launch instead of hanging
# the session.
MAX_BODY_RUNS = 1 << 16
NON_BLOCKING = 0x1  # CU_STREAM_NON_BLOCKING
# CUgraphExecUpdateResult
UPDATE_SUCCESS, UPDATE_ERROR, UPDATE_TOPOLOGY_CHANGED, UPDATE_NODE_TYPE_CHANGED = 0, 1, 2, 3


@attrs.define(eq=False)
class FakeNode:
    type: int
    call: object = None  # (function, bound arguments): replayed with the launch stream as `stream`
    deps: list = attrs.Factory(list)
    owner: object = None  # the FakeGraph it is in (explicit API)
    enabled: bool = True  # (an exec's copy: cuGraphNodeSetEnabled)


@attrs.define(eq=False)
class FakeGraph:
    nodes: list = attrs.Factory(list)
    conditionals: list = attrs.Factory(list)  # the handles made for it (kept alive by it, its nodes and its execs)


@attrs.define(eq=False)
class FakeExec:
    ctx: object
    nodes: list  # copies, in a topological order
    by_origin: dict = attrs.Factory(dict)  # the graph's node -> its copy here (exec set-params name the former)
    destroyed: bool = False
    resets: list = attrs.Factory(list)  # FakeConditionals set to their default as each launch begins


@attrs.define(eq=False)
class FakeConditional:
    """A conditional handle: the value a conditional node reads, which kernels set (cudaGraphSetConditional)."""

    graph: FakeGraph  # the graph it was made for
    default: int
    assign_default: bool
    value: int = 0


def _topological(nodes: list) -> list:
    """Kahn's order, stable: among ready nodes, the one added first goes first (capture order for captures)."""
    index = {node: i for i, node in enumerate(nodes)}
    waiting = {node: len({d for d in node.deps if d in index}) for node in nodes}
    users: dict = {node: [] for node in nodes}
    for node in nodes:
        for d in set(node.deps):
            if d in index:
                users[d].append(node)
    ready = sorted((n for n in nodes if not waiting[n]), key=index.get)
    order = []
    while ready:
        node = ready.pop(0)
        order.append(node)
        for user in users[node]:
            waiting[user] -= 1
            if not waiting[user]:
                ready.append(user)
                ready.sort(key=index.get)
    if len(order) != len(nodes):
        raise CudaError(Status.INVALID_VALUE, "the graph has a cycle")
    return order


def _copies(nodes: list) -> tuple[list, dict]:
    """Nodes copied with their edges, in a topological order; and original -> copy (the nodes of graphs that
    nodes own too: an exec's setters name them)."""
    order = _topological(nodes)
    mapping: dict = {}
    for node in order:
        call, nested = _snapshot(node)
        mapping[node] = FakeNode(node.type, call, [mapping[d] for d in node.deps if d in mapping])
        mapping.update(nested)
    return [mapping[n] for n in order], mapping


def _own_graph_call(*args, **kwargs):
    """The marker a child graph node's call carries before instantiation, its graph the node's own (copied into
    it, or moved): _snapshot makes it a launch of the graph's copy."""
    raise AssertionError("a child graph node runs from its exec's copy")


def _snapshot(node: FakeNode) -> tuple:
    """A node's call as an exec keeps it, and the copies it made: the graphs a node owns -- a conditional node's
    bodies, a child graph node's graph -- copied as they are now (CUDA instantiates them with the graph), each an
    exec of its own."""
    if node.call is None or (node.type != CONDITIONAL and node.call[0] is not _own_graph_call):
        return node.call, {}
    fn, call = node.call
    nested: dict = {}

    def exec_of(graph):
        nodes, mapping = _copies(graph.nodes)
        nested.update(mapping)
        return FakeExec(call["ctx"], nodes, mapping)

    if node.type == CONDITIONAL:
        return (fn, {**call, "bodies": [exec_of(b) for b in call["bodies"]]}), nested
    launch = call["launch"]
    return (launch, dict(ctx=call["ctx"], exe=exec_of(call["graph"]), stream=None)), nested


def _graphs_within(graph: FakeGraph) -> list:
    """A graph and the graphs its nodes own (conditional bodies, child graph nodes' graphs), theirs too."""
    out = [graph]
    for node in graph.nodes:
        if node.call is not None and node.type == CONDITIONAL:
            for body in node.call[1]["bodies"]:
                out += _graphs_within(body)
        elif node.call is not None and node.call[0] is _own_graph_call:
            out += _graphs_within(node.call[1]["graph"])
    return out


@attrs.define(eq=False)
class FakeCapture:
    graph: FakeGraph
    mode: int
    origin: object  # the stream that began it
    invalidated: bool = False
    tails: dict = attrs.Factory(dict)  # id(stream) -> the nodes its next captured work depends on
    streams: list = attrs.Factory(list)


def _capture_of(stream):
    return getattr(stream, "capture", None) if stream is not None else None


# name -> (node type, or None where the call cannot be captured; predicate: the call is asynchronous)
_ASYNC = lambda a: a.get("asynchronous", False)  # noqa: E731
_CAPTURED = {
    "launch": (KERNEL, None), "launch_ex": (KERNEL, None), "blas_gemm": (KERNEL, None),
    "blas_gemm_batched": (KERNEL, None),
    "lt_matmul": (KERNEL, None), "dnn_execute": (KERNEL, None), "dnn_bn_inference": (KERNEL, None),
    "dnn_bn_training": (KERNEL, None), "dnn_bn_backward": (KERNEL, None), "fft_exec": (KERNEL, None),
    "memset": (MEMSET, _ASYNC), "memset_2d": (MEMSET, _ASYNC), "memcpy_dtod": (MEMCPY, _ASYNC),
    "memcpy_2d": (MEMCPY, lambda a: a.get("asynchronous", False) and a["kind"] == 3),
    "array_copy": (MEMCPY, lambda a: a["asynchronous"] and array_types.HOST not in (a["src"].type, a["dst"].type)),
    "event_record": (EVENT_RECORD, None), "stream_wait_event": (WAIT_EVENT, None),
    "stream_mem_ops": (BATCH_MEM_OP, None),  # (a wait is checked when the graph runs, as on a GPU)
    # Host memory cannot be captured here (the server's staging buffer is not the program's memory), and
    # waiting on a capturing stream would wait forever: both fail and invalidate the capture, as in CUDA.
    # NVIDIA's driver (580, CUDA 13) refuses a graph launched into a capture the same way (measured on the H200).
    "memcpy_htod": (None, None), "memcpy_dtoh": (None, None), "stream_synchronize": (None, None),
    "graph_launch": (None, None),
    "stream_query": (None, None), "ctx_synchronize": (None, None),
}


def _frozen(value):
    # Receive buffers are reused after the call returns: a recorded call keeps its own copy.
    return bytes(value) if isinstance(value, (memoryview, bytearray)) else value


def _capturing(fn, node_type, is_async):
    signature = inspect.signature(fn)

    @functools.wraps(fn)
    def wrapper(self, *args, **kwargs):
        # Binding the signature costs microseconds per call: with no capture live (nearly always), nothing here
        # can apply -- no stream is capturing, and no event can make one join a capture.
        if not self._live_captures:
            return fn(self, *args, **kwargs)
        bound = signature.bind(self, *args, **kwargs)
        if "stream" not in bound.arguments:  # ctx_synchronize: waits on every stream, capturing ones too
            self._check_no_capture(bound.arguments["ctx"])
            return fn(self, *args, **kwargs)
        stream = bound.arguments["stream"]
        capture = _capture_of(stream)
        if capture is None and node_type == WAIT_EVENT and self.stream_wait_event_joins(
                stream, bound.arguments["event"]):
            capture = stream.capture
        if capture is None:
            if stream is None:
                self._check_legacy_stream(bound.arguments.get("ctx"))
            return fn(self, *args, **kwargs)
        if node_type is None or (is_async is not None and not is_async(bound.arguments)):
            capture.invalidated = True
            raise CudaError(Status.STREAM_CAPTURE_UNSUPPORTED,
                            f"{fn.__name__} is not permitted on a capturing stream; the capture is invalidated")
        if capture.invalidated:
            raise CudaError(Status.STREAM_CAPTURE_INVALIDATED, "the stream's capture was invalidated")
        call = {k: _frozen(v) for k, v in bound.arguments.items() if k != "self"}
        deps = list(capture.tails.get(id(stream), ()))
        if node_type == WAIT_EVENT:  # waiting on work captured on another stream: an edge from it
            seen = self._captured_events.get(call["event"])
            if seen is not None and seen[0] is capture and seen[1] not in deps:
                deps.append(seen[1])
        node = FakeNode(node_type, (fn, call), deps, capture.graph)
        capture.graph.nodes.append(node)
        capture.tails[id(stream)] = [node]
        if fn.__name__ == "event_record":
            self._captured_events[call["event"]] = (capture, node)
        return None

    return wrapper


class FakeGraphs:
    """Mixed into FakeBackend; wraps the subclass's capturable calls (see _CAPTURED) when it is defined."""

    _live_captures = 0  # captures begun and not ended (one left by a destroyed context only slows calls down)

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        for name, (node_type, is_async) in _CAPTURED.items():
            fn = getattr(cls, name, None)  # defined here, by the subclass, or by another of its mixins
            if fn is not None and not getattr(fn, "captured", False):
                wrapped = _capturing(fn, node_type, is_async)
                wrapped.captured = True
                setattr(cls, name, wrapped)

    def stream_is_capturing(self, ctx, stream) -> bool:
        """Whether work queued on `stream` now is being captured (its own capture, or one it joined)."""
        return stream is not None and getattr(stream, "capture", None) is not None

    @functools.cached_property
    def _captured_events(self) -> weakref.WeakKeyDictionary:
        return weakref.WeakKeyDictionary()

    def _check_legacy_stream(self, ctx) -> None:
        """Work on the legacy NULL stream waits for every blocking stream: not while one is capturing."""
        for stream in getattr(ctx, "streams", ()):
            capture = _capture_of(stream)
            if capture is not None and not stream.flags & NON_BLOCKING:
                capture.invalidated = True
                raise CudaError(Status.STREAM_CAPTURE_IMPLICIT,
                                "the NULL stream would wait on a capturing stream; the capture is invalidated")

    def _check_no_capture(self, ctx) -> None:
        for stream in getattr(ctx, "streams", ()):
            capture = _capture_of(stream)
            if capture is not None:
                capture.invalidated = True
                raise CudaError(Status.STREAM_CAPTURE_UNSUPPORTED,
                                "synchronizing a context with a capturing stream; the capture is invalidated")

    # -- launches with attributes ------------------------------------------------------------------
    def launch_ex(self, ctx, func, grid, block, shared_mem, stream, params, attributes) -> None:
        for a in attributes:
            if a.id == 4:  # CLUSTER_DIMENSION: the grid must be whole clusters, as the driver requires
                cluster = [int.from_bytes(a.value[i:i + 4], "little") for i in (0, 4, 8)]
                if min(cluster) < 1 or any(g % c for g, c in zip(grid, cluster)):
                    raise CudaError(Status.INVALID_VALUE, f"grid {grid} is not a whole number of {cluster} clusters")
            if a.id == 2 and int.from_bytes(a.value[:4], "little"):  # COOPERATIVE: the whole grid resident at once
                resident = self.resident_blocks(ctx, func, block, shared_mem)
                if grid[0] * grid[1] * grid[2] > resident:
                    raise CudaError(Status.COOPERATIVE_LAUNCH_TOO_LARGE,
                                    f"a cooperative grid of {grid} blocks; at most {resident} can be resident")
        self.launch(ctx, func, grid, block, shared_mem, stream, params)
        for a in attributes:  # both event attributes fire once the kernel is done (or may start the next)
            if a.event is not None:
                self.event_record(ctx, a.event, stream)

    def launcher_ex(self, ctx, func, stream):
        def launch(gx, gy, gz, bx, by, bz, shared_mem, attributes, params):
            self.launch_ex(ctx, func, (gx, gy, gz), (bx, by, bz), shared_mem, stream, params, attributes)

        return launch

    # -- capture ------------------------------------------------------------------------------------
    def stream_begin_capture(self, ctx, stream, mode: int) -> None:
        ctx.check()
        if _capture_of(stream) is not None:
            raise CudaError(Status.ILLEGAL_STATE, "the stream is already capturing")
        stream.capture = FakeCapture(FakeGraph(), mode, stream, streams=[stream])
        self._live_captures += 1

    def stream_begin_capture_to_graph(self, ctx, stream, graph: FakeGraph, deps: list, data, mode: int) -> None:
        """A capture whose nodes join `graph`, the first ones after `deps` (edge data changes when a node may
        start, not what it computes: as graph_edges)."""
        ctx.check()
        if _capture_of(stream) is not None:
            raise CudaError(Status.ILLEGAL_STATE, "the stream is already capturing")
        if any(d.owner is not graph for d in deps):
            raise CudaError(Status.INVALID_VALUE, "a dependency that is not in the graph")
        capture = FakeCapture(graph, mode, stream, streams=[stream])
        capture.tails[id(stream)] = list(deps)
        stream.capture = capture
        self._live_captures += 1

    def stream_end_capture(self, ctx, stream) -> FakeGraph:
        capture = _capture_of(stream)
        if capture is None:
            raise CudaError(Status.ILLEGAL_STATE, "the stream is not capturing")
        if capture.origin is not stream:
            capture.invalidated = True
            raise CudaError(Status.STREAM_CAPTURE_UNMATCHED, "capture ended on a stream that did not begin it")
        for s in capture.streams:
            s.capture = None
        self._live_captures -= 1
        if capture.invalidated:
            raise CudaError(Status.STREAM_CAPTURE_INVALIDATED, "the capture was invalidated by an illegal call")
        return capture.graph

    def stream_wait_event_joins(self, stream, event) -> bool:
        """A stream that waits on an event recorded during a capture joins that capture."""
        seen = self._captured_events.get(event)
        if seen is None or stream is None or _capture_of(stream) is not None:
            return False
        capture, node = seen
        stream.capture = capture
        capture.streams.append(stream)
        capture.tails[id(stream)] = [node]
        return True

    def capture_dependencies(self, ctx, stream) -> list:
        from rgpu.backends.graph_types import NodeInfo

        capture = _capture_of(stream)
        if capture is None:
            raise CudaError(Status.ILLEGAL_STATE, "the stream is not capturing")
        return [NodeInfo(id(n), n, n.type, ()) for n in capture.tails.get(id(stream), ())]

    def update_capture_dependencies(self, ctx, stream, nodes: list, flags: int) -> None:
        capture = _capture_of(stream)
        if capture is None:
            raise CudaError(Status.ILLEGAL_STATE, "the stream is not capturing")
        if any(n.owner is not capture.graph for n in nodes):
            raise CudaError(Status.INVALID_VALUE, "a node that is not in the capture's graph")
        tails = [] if flags == 1 else list(capture.tails.get(id(stream), ()))  # 1: CU_STREAM_SET_CAPTURE_DEPENDENCIES
        capture.tails[id(stream)] = tails + [n for n in nodes if n not in tails]

    def capture_empty_node(self, ctx, stream) -> FakeNode:
        """An empty node at the stream's place in its capture, then the stream's only dependency."""
        capture = _capture_of(stream)
        if capture is None:
            raise CudaError(Status.ILLEGAL_STATE, "the stream is not capturing")
        if capture.invalidated:
            raise CudaError(Status.STREAM_CAPTURE_INVALIDATED, "the stream's capture was invalidated")
        node = FakeNode(EMPTY, None, list(capture.tails.get(id(stream), ())), capture.graph)
        capture.graph.nodes.append(node)
        capture.tails[id(stream)] = [node]
        return node

    # -- executable graphs --------------------------------------------------------------------------
    def graph_instantiate(self, ctx, graph: FakeGraph, flags: int) -> FakeExec:
        ctx.check()
        nodes, mapping = _copies(graph.nodes)
        return FakeExec(ctx, nodes, mapping, resets=self._resets(graph))

    def _resets(self, graph: FakeGraph) -> list:
        """The ASSIGN_DEFAULT handles of a graph and of the graphs within it: set as each launch begins."""
        return [c for g in _graphs_within(graph) for c in g.conditionals if c.assign_default]

    def graph_instantiate_part(self, ctx, graph: FakeGraph, nodes: list, flags: int) -> FakeExec:
        """The subgraph of `nodes` and the edges among them (_copies drops edges from other nodes)."""
        keep = set(nodes)
        return self.graph_instantiate(ctx, FakeGraph([n for n in graph.nodes if n in keep]), flags)

    @functools.cached_property
    def _launching(self) -> threading.local:
        """The launch this thread is in: `left`, the conditional bodies it may still run (sessions of one server
        process share the backend, each on a thread of its own)."""
        return threading.local()

    def graph_launch(self, ctx, exe: FakeExec, stream) -> None:
        ctx.check()
        launching = self._launching
        top = getattr(launching, "left", None) is None  # (bodies and child graphs run through here too)
        if top:
            launching.left = MAX_BODY_RUNS
        try:
            for cond in exe.resets:
                cond.value = cond.default
            for node in exe.nodes:
                if node.call is None or not node.enabled:
                    continue
                fn, call = node.call
                fn(self, **{**call, "stream": stream}) if "stream" in call else fn(self, **call)
        finally:
            if top:
                launching.left = None

    def graph_upload(self, ctx, exe: FakeExec, stream) -> None:
        ctx.check()

    def graph_exec_update(self, ctx, exe: FakeExec, graph: FakeGraph) -> int:
        """The graph's parameters into the exec's nodes, paired in topological order (node identities stay)."""
        ctx.check()
        try:
            nodes = _topological(graph.nodes)
        except CudaError:
            return UPDATE_ERROR
        if len(exe.nodes) != len(nodes):
            return UPDATE_TOPOLOGY_CHANGED
        index = {n: i for i, n in enumerate(nodes)}
        old_index = {n: i for i, n in enumerate(exe.nodes)}
        for old, new in zip(exe.nodes, nodes):
            if old.type != new.type:
                return UPDATE_NODE_TYPE_CHANGED
            if sorted(old_index.get(d, -1) for d in old.deps) != sorted(index.get(d, -1) for d in new.deps):
                return UPDATE_TOPOLOGY_CHANGED
        for old, new in zip(exe.nodes, nodes):
            old.call, nested = _snapshot(new)
            exe.by_origin.update(nested)
        exe.resets = self._resets(graph)
        return UPDATE_SUCCESS

    def graph_destroy(self, ctx, graph: FakeGraph) -> None:
        graph.nodes.clear()

    def graph_exec_destroy(self, ctx, exe: FakeExec) -> None:
        exe.nodes = []
        exe.by_origin = {}
        exe.destroyed = True

    # -- the explicit graph API --------------------------------------------------------------------
    def graph_create(self, ctx) -> FakeGraph:
        ctx.check()
        return FakeGraph()

    def _node_call(self, ctx, node_type: int, params):
        cls = type(self)
        if node_type == KERNEL:
            return (cls.launch_ex.__wrapped__, dict(ctx=ctx, func=params.func, grid=params.grid, block=params.block,
                                                    shared_mem=params.shared_mem, stream=None, params=params.params,
                                                    attributes=list(params.attributes)))
        if node_type == MEMSET:
            return (cls.memset_2d.__wrapped__, dict(ctx=ctx, dst=params.dst, pitch=params.pitch, value=params.value,
                                                    elem=params.element_size, width=params.width,
                                                    height=params.height, stream=None, asynchronous=True))
        if node_type == MEMCPY:
            return (cls.memcpy_2d.__wrapped__, dict(ctx=ctx, kind=3, dst=params.dst, dpitch=params.dst_pitch,
                                                    src=params.src, spitch=params.src_pitch, width=params.width,
                                                    height=params.height, rows=None, stream=None,
                                                    asynchronous=True))
        if node_type == EVENT_RECORD:
            return (cls.event_record.__wrapped__, dict(ctx=ctx, event=params, stream=None))
        if node_type == WAIT_EVENT:
            return (cls.stream_wait_event.__wrapped__, dict(ctx=ctx, stream=None, event=params, flags=0))
        if node_type == CHILD:  # CUDA copies the child graph into the node when it is added: the node's own
            return self._child_call(ctx, self.graph_clone(ctx, params)[0])
        if node_type in (EMPTY, MEM_FREE):  # graph memory stays allocated while its graph or an exec holds it
            return None
        raise CudaError(Status.NOT_SUPPORTED, f"graph node type {node_type}")

    def graph_add_node(self, ctx, graph: FakeGraph, node_type: int, deps: list, params) -> FakeNode:
        ctx.check()
        node = FakeNode(node_type, self._node_call(ctx, node_type, params), list(deps), graph)
        graph.nodes.append(node)
        return node

    def graph_add_mem_alloc(self, ctx, graph: FakeGraph, deps: list, size: int) -> tuple:
        """A memory allocation node: the memory is allocated now, at the address every launch will use."""
        ctx.check()
        ptr = self.mem_alloc(ctx, size)
        node = FakeNode(MEM_ALLOC, None, list(deps), graph)
        graph.nodes.append(node)
        return node, ptr

    def graph_mem_release(self, ctx, ptr: int) -> None:
        self.mem_free(ctx, ptr)

    def graph_node_set_params(self, ctx, node: FakeNode, node_type: int, params, exe: FakeExec | None) -> None:
        ctx.check()
        target = node if exe is None else self._exec_copy(exe, node)
        target.call = self._node_call(ctx, node_type, params)

    def _exec_copy(self, exe: FakeExec, node: FakeNode) -> FakeNode:
        target = exe.by_origin.get(node)
        if target is None:
            raise CudaError(Status.INVALID_VALUE, "the node is not in that executable graph")
        return target

    def graph_node_set_enabled(self, ctx, exe: FakeExec, node: FakeNode, enabled: bool) -> None:
        ctx.check()
        self._exec_copy(exe, node).enabled = enabled

    def graph_exec_child_set(self, ctx, exe: FakeExec, node: FakeNode, child: FakeGraph) -> None:
        ctx.check()
        target = self._exec_copy(exe, node)
        call, _ = _snapshot(FakeNode(CHILD, self._node_call(ctx, CHILD, child)))
        if [n.type for n in target.call[1]["exe"].nodes] != [n.type for n in call[1]["exe"].nodes]:
            raise CudaError(Status.INVALID_VALUE, "the child graph's topology differs from the node's")
        target.call = call

    def _child_call(self, ctx, graph: FakeGraph):
        """A child graph node's call: its own graph, copied into each exec made with it (_snapshot)."""
        return (_own_graph_call, dict(ctx=ctx, graph=graph, launch=type(self).graph_launch.__wrapped__))

    def graph_add_child_moved(self, ctx, graph: FakeGraph, deps: list, child: FakeGraph) -> FakeNode:
        ctx.check()
        node = FakeNode(CHILD, self._child_call(ctx, child), list(deps), graph)
        graph.nodes.append(node)
        return node

    def graph_child_graph(self, ctx, node: FakeNode) -> FakeGraph:
        """cuGraphChildGraphNodeGetGraph: the node's own graph, which changes the node when it changes."""
        ctx.check()
        if node.type != CHILD or node.call is None or node.call[0] is not _own_graph_call:
            raise CudaError(Status.INVALID_VALUE, "not a child graph node")
        return node.call[1]["graph"]

    # -- conditional nodes ---------------------------------------------------------------------------
    @functools.cached_property
    def _conditional_handles(self) -> weakref.WeakValueDictionary:
        """handle -> FakeConditional, while a graph, node or exec still holds it: a destroyed graph's go with it."""
        return weakref.WeakValueDictionary()

    def graph_conditional_handle(self, ctx, graph: FakeGraph, default: int, flags: int) -> int:
        ctx.check()
        self._conditionals_made = getattr(self, "_conditionals_made", 0) + 1
        handle = 0xC0D0_0000_0000 + self._conditionals_made
        assign = bool(flags & COND_ASSIGN_DEFAULT)
        cond = FakeConditional(graph, default, assign, default if assign else 0)
        self._conditional_handles[handle] = cond
        graph.conditionals.append(cond)
        return handle

    def set_conditional(self, handle: int, value: int) -> bool:
        """cudaGraphSetConditional from a fake kernel; False: no such handle (a bad address, as on a GPU)."""
        cond = self._conditional_handles.get(int(handle))
        if cond is not None:
            cond.value = int(value) & 0xFFFFFFFF
        return cond is not None

    def graph_add_conditional(self, ctx, graph: FakeGraph, deps: list, handle: int, kind: int, size: int):
        """A conditional node on `handle` and its `size` empty bodies -> (node, [body graphs])."""
        ctx.check()
        cond = self._conditional_handles.get(int(handle))
        if cond is None or cond.graph is not graph:
            raise CudaError(Status.INVALID_VALUE, "the conditional handle is not the graph's")
        bodies = [FakeGraph() for _ in range(size)]
        call = (type(self)._run_conditional, dict(ctx=ctx, cond=cond, kind=kind, bodies=bodies, stream=None))
        node = FakeNode(CONDITIONAL, call, list(deps), graph)
        graph.nodes.append(node)
        return node, bodies

    def _run_conditional(self, ctx, cond: FakeConditional, kind: int, bodies: list, stream) -> None:
        def run(body):
            launching = self._launching
            if getattr(launching, "left", None) is not None:
                if launching.left <= 0:
                    raise CudaError(Status.LAUNCH_TIMEOUT, f"a launch ran conditional bodies {MAX_BODY_RUNS} times")
                launching.left -= 1
            type(self).graph_launch.__wrapped__(self, ctx, body, stream)

        if kind == COND_IF:
            chosen = bodies[0] if cond.value else bodies[1] if len(bodies) > 1 else None
            if chosen is not None:
                run(chosen)
        elif kind == COND_SWITCH:
            if cond.value < len(bodies):
                run(bodies[cond.value])
        else:
            while cond.value:
                run(bodies[0])

    def graph_edges(self, ctx, graph: FakeGraph, pairs: list, remove: bool, data: list | None = None) -> None:
        # Edge data (programmatic edges) changes when a dependent may start, not what it computes: the fake runs
        # nodes one after another, which every kind of edge allows.
        for source, target in pairs:
            if remove:
                if source not in target.deps:
                    raise CudaError(Status.INVALID_VALUE, "no such edge")
                target.deps.remove(source)
            else:
                if source is target or source in target.deps:
                    raise CudaError(Status.INVALID_VALUE, "the edge exists or joins a node to itself")
                target.deps.append(source)

    def graph_clone(self, ctx, graph: FakeGraph):
        mapping: dict = {}
        clone = FakeGraph()
        for node in graph.nodes:  # nodes come after their dependencies unless edges were added later
            call = node.call
            if call is not None and call[0] is _own_graph_call:  # a child graph node's graph is cloned with it
                call = self._child_call(call[1]["ctx"], self.graph_clone(ctx, call[1]["graph"])[0])
            mapping[node] = FakeNode(node.type, call, [], clone)
            clone.nodes.append(mapping[node])
        for node in graph.nodes:
            mapping[node].deps = [mapping[d] for d in node.deps]
        return clone, mapping.__getitem__

    def object_key(self, obj):
        return id(obj)

    def graph_nodes(self, ctx, graph: FakeGraph, layout) -> list:
        from rgpu.backends.graph_types import KernelNodeParams, MemcpyNodeParams, MemsetNodeParams, NodeInfo

        out = []
        for node in _topological(graph.nodes):
            params, name, a = None, node.call[0].__name__ if node.call else "", node.call[1] if node.call else {}
            if name in ("launch", "launch_ex"):
                params = KernelNodeParams(a["func"], tuple(a["grid"]), tuple(a["block"]), a["shared_mem"],
                                          bytes(a["params"]), tuple(a.get("attributes", ())))
            elif node.type == KERNEL:  # a library's kernel (cuBLAS, cuDNN): no function of the session's
                params = KernelNodeParams(None, (1, 1, 1), (1, 1, 1), 0, b"", ())
            elif name == "memset":
                params = MemsetNodeParams(a["dst"], a["count"] * a["width"], a["value"], a["width"], a["count"], 1)
            elif name == "memset_2d":
                params = MemsetNodeParams(a["dst"], a["pitch"], a["value"], a["elem"], a["width"], a["height"])
            elif name == "memcpy_dtod":
                params = MemcpyNodeParams(a["dst"], a["nbytes"], a["src"], a["nbytes"], a["nbytes"], 1)
            elif name == "memcpy_2d":
                params = MemcpyNodeParams(a["dst"], a["dpitch"], a["src"], a["spitch"], a["width"], a["height"])
            elif name in ("event_record", "stream_wait_event"):
                params = a["event"]
            out.append(NodeInfo(id(node), node, node.type, tuple(id(d) for d in node.deps), params))
        return out

    def graph_destroy_node(self, ctx, node: FakeNode) -> None:
        graph = node.owner
        if graph is None or node not in graph.nodes:
            return
        graph.nodes.remove(node)
        for other in graph.nodes:
            other.deps = [d for d in other.deps if d is not node]
