"""Launch attributes, stream capture and CUDA graphs on a real GPU (a mixin of CudaBackend).

Capture is NVIDIA's own: cuStreamBeginCapture on the session's real stream, and the deferred launches,
memsets and device-to-device copies that follow are captured by the driver; cuStreamEndCapture yields the
real CUgraph. Host<->device copies of the program's memory cannot be captured faithfully (the server's
staging buffer is not the program's memory): the client refuses them during capture, and on the server the
driver's own rule (no synchronisation of a capturing stream) fails them and invalidates the capture.
"""

from __future__ import annotations

import functools

import cffi

from rgpu.backends.base import MAX_PARAM_BYTES
from rgpu.errors import CudaError, Status

try:
    from cuda.bindings import driver as cu
except ImportError:  # pragma: no cover - the cuda backend is unavailable then
    cu = None

_ffi = cffi.FFI()
_ffi.cdef("""
    typedef struct {
        unsigned gx, gy, gz, bx, by, bz, shmem;
        uintptr_t stream;
        void *attrs;
        unsigned count;
    } rgpu_launch_config;
    typedef struct {
        uintptr_t func;
        unsigned gx, gy, gz, bx, by, bz, shmem;
        void **params;
        void **extra;
        uintptr_t kern;
        uintptr_t ctx;
    } rgpu_kernel_node_params;  /* CUDA_KERNEL_NODE_PARAMS_v2 */
    int cuCtxSetCurrent(uintptr_t ctx);
    int cuLaunchKernelEx(const rgpu_launch_config *config, uintptr_t f, void **params, void **extra);
    int cuStreamSetAttribute(uintptr_t stream, int id, const void *value);
    int cuStreamGetAttribute(uintptr_t stream, int id, void *value);
    int cuStreamCopyAttributes(uintptr_t dst, uintptr_t src);
    int cuOccupancyMaxActiveClusters(int *clusters, uintptr_t f, const rgpu_launch_config *config);
    int cuOccupancyMaxPotentialClusterSize(int *size, uintptr_t f, const rgpu_launch_config *config);
    int cuGraphAddKernelNode_v2(uintptr_t *node, uintptr_t graph, const uintptr_t *deps, size_t count,
                                const rgpu_kernel_node_params *params);
    int cuGraphKernelNodeSetParams_v2(uintptr_t node, const rgpu_kernel_node_params *params);
    int cuGraphExecKernelNodeSetParams_v2(uintptr_t exec, uintptr_t node, const rgpu_kernel_node_params *params);
    int cuGraphKernelNodeSetAttribute(uintptr_t node, int id, const void *value);
    typedef struct {
        uintptr_t dst;
        size_t pitch;
        unsigned value, element_size;
        size_t width, height;
    } rgpu_memset_params;  /* CUDA_MEMSET_NODE_PARAMS */
    int cuGraphGetNodes(uintptr_t graph, uintptr_t *nodes, size_t *count);
    int cuGraphAddEmptyNode(uintptr_t *node, uintptr_t graph, const uintptr_t *deps, size_t count);
    int cuGraphNodeGetType(uintptr_t node, int *type);
    int cuGraphNodeGetDependencies_v2(uintptr_t node, uintptr_t *deps, void *edges, size_t *count);
    int cuGraphKernelNodeGetParams_v2(uintptr_t node, rgpu_kernel_node_params *params);
    int cuGraphMemsetNodeGetParams(uintptr_t node, rgpu_memset_params *params);
    int cuGraphEventRecordNodeGetEvent(uintptr_t node, uintptr_t *event);
    int cuGraphEventWaitNodeGetEvent(uintptr_t node, uintptr_t *event);
    int cuStreamGetCaptureInfo_v3(uintptr_t stream, int *status, uint64_t *id, uintptr_t *graph,
                                  const uintptr_t **deps, const void **edges, size_t *count);
    int cuStreamUpdateCaptureDependencies_v2(uintptr_t stream, uintptr_t *deps, const void *edges, size_t count,
                                             unsigned flags);
    int cuStreamBeginCaptureToGraph(uintptr_t stream, uintptr_t graph, const uintptr_t *deps, const void *edges,
                                    size_t count, int mode);
    int cuGraphNodeSetEnabled(uintptr_t exec, uintptr_t node, unsigned enabled);
    int cuGraphEventRecordNodeSetEvent(uintptr_t node, uintptr_t event);
    int cuGraphEventWaitNodeSetEvent(uintptr_t node, uintptr_t event);
    int cuGraphExecEventRecordNodeSetEvent(uintptr_t exec, uintptr_t node, uintptr_t event);
    int cuGraphExecEventWaitNodeSetEvent(uintptr_t exec, uintptr_t node, uintptr_t event);
    int cuGraphExecChildGraphNodeSetParams(uintptr_t exec, uintptr_t node, uintptr_t child);
    int cuGraphConditionalHandleCreate(uint64_t *handle, uintptr_t graph, uintptr_t ctx, unsigned value,
                                       unsigned flags);
    typedef struct {
        int type;
        int reserved0[3];
        uint64_t handle;      /* CUDA_CONDITIONAL_NODE_PARAMS, the union's member for conditional nodes */
        int cond_type;
        unsigned size;
        uintptr_t *graphs_out;
        uintptr_t ctx;
        long long rest[25];
        long long reserved2;
    } rgpu_conditional_node_params;  /* CUgraphNodeParams, 256 bytes */
    typedef struct {
        int type;
        int reserved0[3];
        uintptr_t graph;      /* CUDA_CHILD_GRAPH_NODE_PARAMS */
        int ownership;
        int pad;
        long long rest[27];
        long long reserved2;
    } rgpu_child_node_params;  /* CUgraphNodeParams, 256 bytes */
    int cuGraphAddNode_v2(uintptr_t *node, uintptr_t graph, const uintptr_t *deps, const void *edges, size_t count,
                          void *params);
""")
assert _ffi.sizeof("rgpu_conditional_node_params") == _ffi.sizeof("rgpu_child_node_params") == 256
_ATTRIBUTE_SIZE = 72


def _lib():
    from rgpu.backends.cuda_common import driver

    return driver(_ffi)


def _check(result):
    from rgpu.backends.cuda_common import check

    return check(result)


@functools.cache
def _graph_launch():
    """cuGraphLaunch through cffi (cuda_common.hot): a decoding step's one call per token."""
    from rgpu.backends.cuda_common import hot

    return hot().cuGraphLaunch


def _fail(err: int) -> None:
    if err:
        _check((cu.CUresult(err),))


def _attribute_records(attributes) -> bytes:
    """CUlaunchAttribute records for the driver: its own CUevent in place of the session handle."""
    out = b""
    for a in attributes:
        value = int(a.event).to_bytes(8, "little") + a.value[8:] if a.event is not None else a.value
        out += a.id.to_bytes(4, "little") + bytes(4) + value
    return out


# CUgraphNodeType (rgpu.dispatch.graphs)
_KERNEL, _MEMCPY, _MEMSET, _CHILD, _EMPTY, _WAIT_EVENT, _EVENT_RECORD = 0, 1, 2, 4, 5, 6, 7
_MEM_FREE, _CONDITIONAL = 11, 13
_RELAXED = 2  # CU_STREAM_CAPTURE_MODE_RELAXED


def _stream(stream):
    return cu.CUstream(0) if stream is None else stream


class CudaGraphs:
    """Mixed into CudaBackend."""

    # -- launches with attributes ------------------------------------------------------------------
    def launcher_ex(self, ctx, func, stream):
        # As CudaBackend.launcher: bound once per (function, stream); the buffers belong to this launcher.
        lib = _lib()
        ctx_ptr, func_ptr = int(ctx), int(func)
        config = _ffi.new("rgpu_launch_config *")
        config.stream = int(stream) if stream else 0
        records = _ffi.new("char[]", 16 * _ATTRIBUTE_SIZE)
        config.attrs = records
        buffer = _ffi.new("char[]", MAX_PARAM_BYTES)
        nbytes = _ffi.new("size_t *")
        extra = _ffi.new("void *[5]", [_ffi.cast("void *", 1), buffer, _ffi.cast("void *", 2), nbytes, _ffi.NULL])

        def launch(gx, gy, gz, bx, by, bz, shared_mem, attributes, params):
            size = len(params)
            if size > MAX_PARAM_BYTES:
                raise CudaError(Status.INVALID_VALUE, f"{size} bytes of kernel parameters (at most {MAX_PARAM_BYTES})")
            _ffi.memmove(buffer, params, size)
            nbytes[0] = size
            raw = _attribute_records(attributes)
            _ffi.memmove(records, raw, len(raw))
            config.gx, config.gy, config.gz, config.bx, config.by, config.bz = gx, gy, gz, bx, by, bz
            config.shmem, config.count = shared_mem, len(attributes)
            err = lib.cuCtxSetCurrent(ctx_ptr) or lib.cuLaunchKernelEx(config, func_ptr, _ffi.NULL, extra)
            if err:
                _check((cu.CUresult(err),))

        return launch

    # -- stream attributes: the same 64-byte values as launch attributes' -----------------------------
    def stream_set_attribute(self, ctx, stream, ident: int, value: bytes) -> None:
        lib = _lib()
        _fail(lib.cuCtxSetCurrent(int(ctx)) or lib.cuStreamSetAttribute(int(_stream(stream)), ident, value))

    def stream_get_attribute(self, ctx, stream, ident: int) -> bytes:
        lib = _lib()
        out = _ffi.new("char[]", 64)
        _fail(lib.cuCtxSetCurrent(int(ctx)) or lib.cuStreamGetAttribute(int(_stream(stream)), ident, out))
        return bytes(_ffi.buffer(out, 64))

    def stream_copy_attributes(self, ctx, dst, src) -> None:
        lib = _lib()
        _fail(lib.cuCtxSetCurrent(int(ctx)) or lib.cuStreamCopyAttributes(int(_stream(dst)), int(_stream(src))))

    def occupancy_clusters(self, ctx, func, which, grid, block, shared_mem, attributes) -> int:
        lib = _lib()
        config = _ffi.new("rgpu_launch_config *")
        records = _ffi.new("char[]", _attribute_records(attributes))  # (one byte more: never empty)
        config.attrs, config.count = records, len(attributes)
        config.gx, config.gy, config.gz = grid
        config.bx, config.by, config.bz = block
        config.shmem = shared_mem
        out = _ffi.new("int *")
        query = lib.cuOccupancyMaxPotentialClusterSize if which else lib.cuOccupancyMaxActiveClusters
        _fail(lib.cuCtxSetCurrent(int(ctx)) or query(out, int(func), config))
        return int(out[0])

    # -- capture ------------------------------------------------------------------------------------
    def stream_is_capturing(self, ctx, stream) -> bool:
        """Whether work queued on `stream` now is being captured (its own capture, or one it joined)."""
        self._use(ctx)
        status = _check(cu.cuStreamIsCapturing(_stream(stream)))
        return status != cu.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_NONE

    def stream_begin_capture(self, ctx, stream, mode: int) -> None:
        # Always relaxed here: capture modes restrict *other calls of the program's threads*, which the client
        # enforces (native/src/graph.c); on the server a stricter mode would instead refuse the session's own
        # allocations made after the program relaxed its thread, and, with in-process sessions, other sessions.
        del mode
        self._use(ctx)
        _check(cu.cuStreamBeginCapture(_stream(stream), cu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED))
        self._captures_begun += 1

    def stream_begin_capture_to_graph(self, ctx, stream, graph, deps: list, data, mode: int) -> None:
        del mode  # relaxed, as stream_begin_capture says
        self._use(ctx)
        array = _ffi.new("uintptr_t[]", [int(d) for d in deps] or [0])
        edges = _ffi.new("char[]", b"".join(bytes((f, t, k)) + bytes(5) for f, t, k in data)) if data else _ffi.NULL
        _fail(_lib().cuStreamBeginCaptureToGraph(int(_stream(stream)), int(graph), array, edges, len(deps), _RELAXED))
        self._captures_begun += 1

    def stream_end_capture(self, ctx, stream):
        self._use(ctx)
        try:
            return _check(cu.cuStreamEndCapture(_stream(stream)))
        finally:  # the driver ends a capture even when ending it fails (invalidated)
            self._captures_begun = max(0, self._captures_begun - 1)

    def capture_dependencies(self, ctx, stream) -> list:
        from rgpu.backends.graph_types import NodeInfo

        lib = _lib()
        self._use(ctx)
        status, ident, graph = _ffi.new("int *"), _ffi.new("uint64_t *"), _ffi.new("uintptr_t *")
        deps, edges, count = _ffi.new("const uintptr_t **"), _ffi.new("const void **"), _ffi.new("size_t *")
        _fail(lib.cuStreamGetCaptureInfo_v3(int(stream), status, ident, graph, deps, edges, count))
        kind, out = _ffi.new("int *"), []
        for node in (deps[0][0:count[0]] if count[0] else []):
            _fail(lib.cuGraphNodeGetType(node, kind))
            out.append(NodeInfo(node, cu.CUgraphNode(node), kind[0], ()))
        return out

    def capture_empty_node(self, ctx, stream):
        """An empty node at the stream's place in its capture, then the stream's only dependency."""
        lib = _lib()
        self._use(ctx)
        status, ident, graph = _ffi.new("int *"), _ffi.new("uint64_t *"), _ffi.new("uintptr_t *")
        deps, edges, count = _ffi.new("const uintptr_t **"), _ffi.new("const void **"), _ffi.new("size_t *")
        _fail(lib.cuStreamGetCaptureInfo_v3(int(stream), status, ident, graph, deps, edges, count))
        if status[0] != int(cu.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_ACTIVE):
            raise CudaError(Status.STREAM_CAPTURE_INVALIDATED if status[0] else Status.ILLEGAL_STATE,
                            "the stream is not capturing (or its capture was invalidated)")
        node = _ffi.new("uintptr_t *")
        _fail(lib.cuGraphAddEmptyNode(node, graph[0], deps[0] if count[0] else _ffi.NULL, count[0]))
        self.update_capture_dependencies(ctx, stream, [node[0]], 1)  # CU_STREAM_SET_CAPTURE_DEPENDENCIES
        return cu.CUgraphNode(node[0])

    def update_capture_dependencies(self, ctx, stream, nodes: list, flags: int) -> None:
        self._use(ctx)
        array = _ffi.new("uintptr_t[]", [int(n) for n in nodes] or [0])
        _fail(_lib().cuStreamUpdateCaptureDependencies_v2(int(stream), array, _ffi.NULL, len(nodes), flags))

    # -- executable graphs --------------------------------------------------------------------------
    def graph_instantiate(self, ctx, graph, flags: int):
        self._use(ctx)
        return _check(cu.cuGraphInstantiate(graph, flags))  # cuda-bindings' name for WithFlags

    def graph_instantiate_part(self, ctx, graph, nodes: list, flags: int):
        """The subgraph of `nodes` and the edges among them: a clone without the other nodes, instantiated.

        The clone lives as long as the exec: exec set-params name the graph's nodes, the driver wants the
        clone's (_part_nodes maps them)."""
        self._use(ctx)
        keep = {int(n) for n in nodes}
        clone = _check(cu.cuGraphClone(graph))
        try:
            mapping = {}
            for node in self._all_nodes(graph):
                found = _check(cu.cuGraphNodeFindInClone(cu.CUgraphNode(node), clone))
                if node in keep:
                    mapping[node] = found
                else:
                    _check(cu.cuGraphDestroyNode(found))
            exe = _check(cu.cuGraphInstantiate(clone, flags))
        except BaseException:
            _check(cu.cuGraphDestroy(clone))
            raise
        self._part_nodes[int(exe)] = (clone, mapping)
        return exe

    @functools.cached_property
    def _part_nodes(self) -> dict:
        """int(exec) -> (the clone it was instantiated from, {int(graph node): the clone's node})."""
        return {}

    def _all_nodes(self, graph) -> list:
        """Every node of a graph, as the driver's integer handles."""
        lib = _lib()
        count = _ffi.new("size_t *")
        _fail(lib.cuGraphGetNodes(int(graph), _ffi.NULL, count))
        raw = _ffi.new("uintptr_t[]", max(count[0], 1))
        if count[0]:
            _fail(lib.cuGraphGetNodes(int(graph), raw, count))
        return list(raw[0:count[0]])

    def graph_launch(self, ctx, exe, stream) -> None:
        self._use(ctx)
        _fail(_graph_launch()(int(exe), 0 if stream is None else int(stream)))

    def graph_upload(self, ctx, exe, stream) -> None:
        self._use(ctx)
        _check(cu.cuGraphUpload(exe, _stream(stream)))

    def graph_exec_update(self, ctx, exe, graph) -> int:
        self._use(ctx)
        err, info = cu.cuGraphExecUpdate(exe, graph)
        if err == cu.CUresult.CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE:
            # cuda-bindings gives no result info with a failure: CU_GRAPH_EXEC_UPDATE_ERROR then.
            return (int(info.result) if info is not None else 0) or 1
        _check((err,))
        return 0

    def graph_destroy(self, ctx, graph) -> None:
        _check(cu.cuGraphDestroy(graph))

    def graph_exec_destroy(self, ctx, exe) -> None:
        self._use(ctx)
        _check(cu.cuGraphExecDestroy(exe))
        part = self._part_nodes.pop(int(exe), None)
        if part is not None:
            _check(cu.cuGraphDestroy(part[0]))

    # -- the explicit graph API --------------------------------------------------------------------
    def graph_create(self, ctx):
        self._use(ctx)
        return _check(cu.cuGraphCreate(0))

    def _kernel_params(self, ctx, p):
        """CUDA_KERNEL_NODE_PARAMS_v2 with the parameter buffer handed over whole; the driver copies it."""
        buffer = _ffi.new("char[]", max(len(p.params), 1))
        _ffi.memmove(buffer, p.params, len(p.params))
        nbytes = _ffi.new("size_t *", len(p.params))
        extra = _ffi.new("void *[5]", [_ffi.cast("void *", 1), buffer, _ffi.cast("void *", 2), nbytes, _ffi.NULL])
        params = _ffi.new("rgpu_kernel_node_params *")
        params.func, params.ctx = int(p.func), int(ctx)
        params.gx, params.gy, params.gz = p.grid
        params.bx, params.by, params.bz = p.block
        params.shmem, params.params, params.extra = p.shared_mem, _ffi.NULL, extra
        return params, (buffer, nbytes, extra)

    def _set_kernel_attributes(self, node: int, attributes) -> None:
        records = _attribute_records(attributes)
        for i, a in enumerate(attributes):  # the value union follows the id and its padding
            _fail(_lib().cuGraphKernelNodeSetAttribute(node, a.id, _ffi.from_buffer(records, require_writable=False)
                                                       + i * _ATTRIBUTE_SIZE + 8))

    def _memset_params(self, p):
        m = cu.CUDA_MEMSET_NODE_PARAMS()
        m.dst, m.pitch, m.value, m.elementSize, m.width, m.height = p.dst, p.pitch, p.value, p.element_size, \
            p.width, p.height
        return m

    def _memcpy_params(self, p):
        m = cu.CUDA_MEMCPY3D()
        m.srcMemoryType = m.dstMemoryType = cu.CUmemorytype.CU_MEMORYTYPE_DEVICE
        m.srcDevice, m.srcPitch, m.dstDevice, m.dstPitch = p.src, p.src_pitch or p.width, p.dst, \
            p.dst_pitch or p.width
        m.WidthInBytes, m.Height, m.Depth = p.width, p.height, 1
        return m

    def graph_add_node(self, ctx, graph, node_type: int, deps: list, params):
        self._use(ctx)
        n = len(deps)
        if node_type == _KERNEL:
            raw, keep = self._kernel_params(ctx, params)
            out = _ffi.new("uintptr_t *")
            dep_array = _ffi.new("uintptr_t[]", [int(d) for d in deps] or [0])
            _fail(_lib().cuGraphAddKernelNode_v2(out, int(graph), dep_array, n, raw))
            del keep
            node = cu.CUgraphNode(out[0])
            self._set_kernel_attributes(out[0], params.attributes)
            return node
        if node_type == _MEMSET:
            return _check(cu.cuGraphAddMemsetNode(graph, deps, n, self._memset_params(params), ctx))
        if node_type == _MEMCPY:
            return _check(cu.cuGraphAddMemcpyNode(graph, deps, n, self._memcpy_params(params), ctx))
        if node_type == _EMPTY:
            return _check(cu.cuGraphAddEmptyNode(graph, deps, n))
        if node_type == _EVENT_RECORD:
            return _check(cu.cuGraphAddEventRecordNode(graph, deps, n, params))
        if node_type == _WAIT_EVENT:
            return _check(cu.cuGraphAddEventWaitNode(graph, deps, n, params))
        if node_type == _CHILD:
            return _check(cu.cuGraphAddChildGraphNode(graph, deps, n, params))
        if node_type == _MEM_FREE:
            return _check(cu.cuGraphAddMemFreeNode(graph, deps, n, cu.CUdeviceptr(params)))
        raise CudaError(Status.NOT_SUPPORTED, f"graph node type {node_type}")

    def graph_add_mem_alloc(self, ctx, graph, deps: list, size: int) -> tuple:
        """A memory allocation node on the context's device -> (node, the address the driver gave it)."""
        self._use(ctx)
        p = cu.CUDA_MEM_ALLOC_NODE_PARAMS()
        p.poolProps.allocType = cu.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
        p.poolProps.location.type = cu.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
        p.poolProps.location.id = int(_check(cu.cuCtxGetDevice()))
        p.bytesize = size
        node = _check(cu.cuGraphAddMemAllocNode(graph, deps, len(deps), p))
        return node, int(p.dptr)

    def graph_mem_release(self, ctx, ptr: int) -> None:
        """No graph or exec holds the memory now: the driver's cache of graph memory goes back to the device."""
        self._use(ctx)
        _check(cu.cuDeviceGraphMemTrim(_check(cu.cuCtxGetDevice())))

    def _exec_node(self, exe, node):
        """The node an exec names: a stage of a graph with host nodes knows it by its clone's node."""
        if exe is not None and int(exe) in self._part_nodes:
            node = self._part_nodes[int(exe)][1].get(int(node))
            if node is None:
                raise CudaError(Status.INVALID_VALUE, "the node is not in that stage of the executable graph")
        return node

    def graph_node_set_enabled(self, ctx, exe, node, enabled: bool) -> None:
        self._use(ctx)
        _fail(_lib().cuGraphNodeSetEnabled(int(exe), int(self._exec_node(exe, node)), int(enabled)))

    def graph_exec_child_set(self, ctx, exe, node, child) -> None:
        self._use(ctx)
        _fail(_lib().cuGraphExecChildGraphNodeSetParams(int(exe), int(self._exec_node(exe, node)), int(child)))

    def graph_conditional_handle(self, ctx, graph, default: int, flags: int) -> int:
        self._use(ctx)
        out = _ffi.new("uint64_t *")
        _fail(_lib().cuGraphConditionalHandleCreate(out, int(graph), int(ctx), default, flags))
        return int(out[0])

    def graph_add_conditional(self, ctx, graph, deps: list, handle: int, kind: int, size: int):
        """A conditional node -> (node, [the bodies the driver made for it])."""
        self._use(ctx)
        p = _ffi.new("rgpu_conditional_node_params *")
        p.type, p.handle, p.cond_type, p.size, p.ctx = _CONDITIONAL, handle, kind, size, int(ctx)
        out = _ffi.new("uintptr_t *")
        array = _ffi.new("uintptr_t[]", [int(d) for d in deps] or [0])
        _fail(_lib().cuGraphAddNode_v2(out, int(graph), array, _ffi.NULL, len(deps), p))
        return cu.CUgraphNode(out[0]), [cu.CUgraph(p.graphs_out[i]) for i in range(size)]

    def graph_add_child_moved(self, ctx, graph, deps: list, child):
        """A child graph node that takes `child` (CU_GRAPH_CHILD_GRAPH_OWNERSHIP_MOVE)."""
        self._use(ctx)
        p = _ffi.new("rgpu_child_node_params *")
        p.type, p.graph, p.ownership = _CHILD, int(child), 1
        out = _ffi.new("uintptr_t *")
        array = _ffi.new("uintptr_t[]", [int(d) for d in deps] or [0])
        _fail(_lib().cuGraphAddNode_v2(out, int(graph), array, _ffi.NULL, len(deps), p))
        return cu.CUgraphNode(out[0])

    def graph_child_graph(self, ctx, node):
        self._use(ctx)
        return _check(cu.cuGraphChildGraphNodeGetGraph(node))

    def graph_node_set_params(self, ctx, node, node_type: int, params, exe) -> None:
        self._use(ctx)
        node = self._exec_node(exe, node)
        if node_type == _KERNEL:
            raw, keep = self._kernel_params(ctx, params)
            if exe is None:
                _fail(_lib().cuGraphKernelNodeSetParams_v2(int(node), raw))
                self._set_kernel_attributes(int(node), params.attributes)
            else:
                _fail(_lib().cuGraphExecKernelNodeSetParams_v2(int(exe), int(node), raw))
            del keep
        elif node_type == _MEMSET:
            m = self._memset_params(params)
            _check(cu.cuGraphMemsetNodeSetParams(node, m) if exe is None
                   else cu.cuGraphExecMemsetNodeSetParams(exe, node, m, ctx))
        elif node_type == _MEMCPY:
            m = self._memcpy_params(params)
            _check(cu.cuGraphMemcpyNodeSetParams(node, m) if exe is None
                   else cu.cuGraphExecMemcpyNodeSetParams(exe, node, m, ctx))
        elif node_type in (_EVENT_RECORD, _WAIT_EVENT):  # params: the event
            lib, record = _lib(), node_type == _EVENT_RECORD
            if exe is None:
                set_event = lib.cuGraphEventRecordNodeSetEvent if record else lib.cuGraphEventWaitNodeSetEvent
                _fail(set_event(int(node), int(params)))
            else:
                set_event = lib.cuGraphExecEventRecordNodeSetEvent if record else lib.cuGraphExecEventWaitNodeSetEvent
                _fail(set_event(int(exe), int(node), int(params)))
        else:
            raise CudaError(Status.NOT_SUPPORTED, f"setting the parameters of a node of type {node_type}")

    def graph_edges(self, ctx, graph, pairs: list, remove: bool, data: list | None = None) -> None:
        self._use(ctx)
        sources, targets = [p[0] for p in pairs], [p[1] for p in pairs]
        fn = cu.cuGraphRemoveDependencies if remove else cu.cuGraphAddDependencies
        edges = None
        if data:
            edges = []
            for from_port, to_port, kind in data:
                edge = cu.CUgraphEdgeData()
                edge.from_port, edge.to_port, edge.type = from_port, to_port, kind
                edges.append(edge)
        try:
            _check(fn(graph, sources, targets, edges, len(pairs)))  # 13.x: with edge data
        except TypeError:
            if edges:
                raise CudaError(Status.NOT_SUPPORTED, "graph edge data with CUDA 12's bindings") from None
            _check(fn(graph, sources, targets, len(pairs)))  # 12.x

    def graph_clone(self, ctx, graph):
        self._use(ctx)
        clone = _check(cu.cuGraphClone(graph))
        return clone, lambda node: _check(cu.cuGraphNodeFindInClone(node, clone))

    def graph_destroy_node(self, ctx, node) -> None:
        self._use(ctx)
        _check(cu.cuGraphDestroyNode(node))

    # -- reading a graph back ------------------------------------------------------------------------
    def object_key(self, obj):
        return int(obj)

    def graph_nodes(self, ctx, graph, layout) -> list:
        """Every node, dependencies first; kernel parameters packed by `layout(function)` (None: unknown)."""
        from rgpu.backends.graph_types import MemsetNodeParams, NodeInfo

        lib = _lib()
        self._use(ctx)
        nodes, deps, kind = self._all_nodes(graph), {}, _ffi.new("int *")
        for node in nodes:
            n = _ffi.new("size_t *")
            _fail(lib.cuGraphNodeGetDependencies_v2(node, _ffi.NULL, _ffi.NULL, n))
            if n[0] == 0:  # the driver refuses an output array with a count of 0 (measured: INVALID_VALUE)
                deps[node] = ()
                continue
            # Edge data too: without it the driver refuses graphs with programmatic (PDL) edges.
            out, edges = _ffi.new("uintptr_t[]", n[0]), _ffi.new("char[]", 8 * n[0])
            _fail(lib.cuGraphNodeGetDependencies_v2(node, out, edges, n))
            deps[node] = tuple(out[0:n[0]])
        order, placed = [], set()
        while len(order) < len(nodes):  # the driver lists nodes in no promised order
            ready = [node for node in nodes if node not in placed and all(d in placed for d in deps[node])]
            if not ready:
                raise CudaError(Status.INVALID_VALUE, "the graph has a cycle")
            order += ready
            placed.update(ready)
        infos = []
        for node in order:
            _fail(lib.cuGraphNodeGetType(node, kind))
            params = None
            if kind[0] == _KERNEL:
                params = self._kernel_node_params(node, layout)
            elif kind[0] == _MEMSET:
                m = _ffi.new("rgpu_memset_params *")
                _fail(lib.cuGraphMemsetNodeGetParams(node, m))
                params = MemsetNodeParams(m.dst, m.pitch, m.value, m.element_size, m.width, m.height)
            elif kind[0] in (_EVENT_RECORD, _WAIT_EVENT):
                event = _ffi.new("uintptr_t *")
                get = lib.cuGraphEventRecordNodeGetEvent if kind[0] == _EVENT_RECORD else \
                    lib.cuGraphEventWaitNodeGetEvent
                _fail(get(node, event))
                params = cu.CUevent(event[0])
            infos.append(NodeInfo(node, cu.CUgraphNode(node), kind[0], deps[node], params))
        return infos

    def _kernel_node_params(self, node: int, layout):
        from rgpu.backends.graph_types import KernelNodeParams

        p = _ffi.new("rgpu_kernel_node_params *")
        _fail(_lib().cuGraphKernelNodeGetParams_v2(node, p))
        func = cu.CUfunction(p.func)
        shape = layout(func)
        buf = b""
        if shape is not None and p.params != _ffi.NULL:
            out = bytearray(shape[-1][0] + shape[-1][1] if shape else 0)
            for i, (offset, size) in enumerate(shape):
                out[offset:offset + size] = _ffi.buffer(p.params[i], size)
            buf = bytes(out)
        elif p.extra != _ffi.NULL:
            i, pointer, size = 0, None, 0
            while p.extra[i] != _ffi.NULL and i < 16:
                if int(_ffi.cast("uintptr_t", p.extra[i])) == 1:
                    pointer = p.extra[i + 1]
                elif int(_ffi.cast("uintptr_t", p.extra[i])) == 2:
                    size = _ffi.cast("size_t *", p.extra[i + 1])[0]
                i += 2
            buf = bytes(_ffi.buffer(pointer, size)) if pointer is not None else b""
        return KernelNodeParams(func if shape is not None else None, (p.gx, p.gy, p.gz), (p.bx, p.by, p.bz), p.shmem,
                                buf, ())
