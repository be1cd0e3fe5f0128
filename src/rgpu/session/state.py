"""Per-connection session state: what it owns, and how all of it is released."""

from __future__ import annotations

import functools
import logging
import threading
import time
from typing import Any, Callable

import attrs

from rgpu.backends.base import MAX_PARAM_BYTES, Backend
from rgpu.backends.lane import fill_wanted
from rgpu.backends.ptx import image_device_bytes
from rgpu.errors import CudaError, Status, status_name
from rgpu.session.handles import GRAPH_BODY, AllocationMap, Entry, HandleTable, Kind, Region
from rgpu.session.links import CopyLinks, LinksOffer
from rgpu.session.ipc import IpcRegistry
from rgpu.session.modcache import ModuleCache

@attrs.frozen(slots=True)
class LaunchTarget:
    """What a (function, stream) pair of handles resolves to, checked once and then cached: launches are the
    one call programs make at high rates, and resolving handles costs more than the rest of the launch."""

    launch: Any  # Backend.launcher(ctx, func, stream): (gx, gy, gz, bx, by, bz, shared_mem, params)
    param_bytes: int | None  # None: the layout is unknown, so the driver checks the buffer itself

    def check_params(self, nbytes: int) -> None:
        expected = min(nbytes, MAX_PARAM_BYTES) if self.param_bytes is None else self.param_bytes
        if nbytes != expected:
            raise CudaError(Status.INVALID_VALUE,
                            f"parameter buffer is {nbytes} bytes; the kernel's layout needs {expected}")


# Failed deferred calls: the first is logged with its details, the rest are counted and summarised at most
# once per this many seconds (and when the session ends), so a client that streams failing NO_REPLY calls
# costs the server's log a line per interval rather than a line per call.
DEFERRED_LOG_INTERVAL = 10.0


@attrs.define(slots=True)
class DeferredFailures:
    """A session's failed deferred calls, for its log."""

    total: int = 0
    unreported: int = 0  # failures since the last line logged
    last: str = ""
    next_line_at: float = 0.0

    def record(self, log: logging.LoggerAdapter, description: str, now: float) -> None:
        self.total += 1
        self.last = description
        if self.total == 1:
            log.info("deferred call %s; reported with the next reply (further failures are counted and "
                     "summarised every %gs)", description, DEFERRED_LOG_INTERVAL)
            self.next_line_at = now + DEFERRED_LOG_INTERVAL
            return
        self.unreported += 1
        if now >= self.next_line_at:
            self.flush(log)
            self.next_line_at = now + DEFERRED_LOG_INTERVAL

    def flush(self, log: logging.LoggerAdapter) -> None:
        if self.unreported:
            log.info("%d more deferred call(s) failed (%d in all); the last: %s", self.unreported, self.total,
                     self.last)
            self.unreported = 0


class _SessionLog(logging.LoggerAdapter):
    def process(self, msg, kwargs):
        return f"[session {self.extra['session']}] {msg}", kwargs


class Session:
    def __init__(self, session_id: int, backend: Backend, *, mem_limit: int | None = None, peer: str = "",
                 module_cache: ModuleCache | None = None, ipc: IpcRegistry | None = None):
        self.id = session_id
        self.backend = backend
        self.module_cache = module_cache
        self.ipc = ipc  # the server's registry of exports (None: a session that cannot share)
        self.peer = peer
        self.log = _SessionLog(logging.getLogger("rgpu.session"), {"session": session_id})
        self.handles = HandleTable()
        self.memory = AllocationMap(mem_limit)
        self.current_ctx = 0
        self.primary: dict[int, list[int]] = {}  # device -> [context handle, retain count]
        self.deferred_error = 0
        self.deferred_failures = DeferredFailures()
        self.closed = False
        # Called once everything the session owns is released (its quota slot may go to the next session).
        self.on_released: Callable[[], None] | None = None
        # Set while the session pays for memory it freed that is not released yet (IPC: mapped by another session);
        # called before a charge, to release what can be released by then.
        self.reclaim: Callable[[], None] | None = None
        self.frames_received = 0  # frames off the wire (a BATCH counts once)
        self.calls = 0  # operations executed
        self.replies_sent = 0  # of them, those the client waited for (blocking round trips)
        self.replies_by_op: dict[int, int] = {}  # the same, by opcode (benchmarks: where the round trips go)
        self.calls_by_op: dict[int, int] = {}  # every operation executed, by opcode (benchmarks: where the work goes)
        self.ns_by_op: dict[int, int] = {}  # the time they took, by opcode
        self.loop_ns = [0, 0, 0]  # the worker loop's time receiving, running and replying (serving/worker.py)
        # (perf_counter_ns when the loop began waiting for the frame it waits for now, or 0; loop_ns[0] then)
        self.receiving = (0, 0)
        # Held while the worker's C request loop serves and its counts land here (serving/native_loop.py): a
        # reading of the counters (`rgpu status`, from another thread) never falls between a frame the client
        # already has an answer to and that frame's counts.
        self.counting = threading.Lock()
        self._launch_targets: dict[tuple[int, int], LaunchTarget] = {}
        self._bound_calls_at = 0  # handles.removals when the launch and copy caches were last known good
        self._copiers: dict[tuple[int, int], Any] = {}  # (stream, context for the NULL stream) -> async_copier
        # The backend's fast lane (rgpu.backends.lane), or None. It runs what this session has bound in it: the
        # launch targets above, and the streams in _lane_streams (same keys as _copiers); both go when the
        # caches do. Its copy of the memory regions is as of memory.changes == _lane_regions_at.
        self.lane = backend.make_lane()
        self._lane_streams: set[tuple[int, int]] = set()
        self._lane_batch_norms: set[tuple[int, bytes]] = set()  # (cuDNN handle, tensor descriptors) bound
        self._lane_dnn_executes: set[tuple[int, int, bytes]] = set()  # (cuDNN handle, plan, variant pack) bound
        self._lane_regions_at = -1
        # Per-feature state made on first use (rgpu.dispatch.vmm, pools): name -> object whose
        # release_context(session, ctx_handle) frees what it holds in a context before the context goes.
        self.extensions: dict[str, Any] = {}
        # Copy links (rgpu.session.links): what the supervisor offered this session, and the links once the client
        # opened them (LINKS_OPEN); closed with the session.
        self.links_offer: LinksOffer | None = None
        self.copy_links: CopyLinks | None = None

    @functools.cached_property
    def limiter(self):
        """One call at a time leaves the event loop for this session, so its calls keep their order (the
        in-process trio loop only; a worker process serves its one session on one thread)."""
        import trio

        return trio.CapacityLimiter(1)

    def usage(self) -> dict:
        """What `rgpu status` shows of this session: memory (bytes charged to its quota, by kind, the peak,
        the limit), what it holds, how busy it is. Called from another thread while the session runs (a
        worker's status thread): each container is copied in one step, so figures may be a call apart."""
        memory = self.memory
        return {"memory": memory.allocated, "memory_peak": memory.peak, "memory_limit": memory.limit,
                "memory_by_kind": {what: n for what, n in dict(memory.charged).items() if n},
                "memory_by_device": {str(d): n for d, n in sorted(self.memory_by_device().items())},
                "allocations": memory.allocation_count(), "objects": self.handles.counts(),
                "calls": self.calls, "frames": self.frames_received,
                "last_error": status_name(self.deferred_error) if self.deferred_error else None}

    # -- lookups -----------------------------------------------------------------------------------
    def context(self, handle: int = 0) -> Entry:
        handle = handle or self.current_ctx
        if not handle:
            raise CudaError(Status.INVALID_CONTEXT, "no current context (retain or create one first)")
        try:
            return self.handles.get(handle, Kind.CONTEXT)
        except CudaError:
            raise CudaError(Status.INVALID_CONTEXT, f"0x{handle:x} is not a context of this session") from None

    def stream(self, handle: int) -> tuple[Entry, object | None]:
        """(context entry, backend stream); handle 0 is the current context's NULL stream."""
        if handle == 0:
            return self.context(), None
        entry = self.handles.get(handle, Kind.STREAM)
        return self.context(entry.ctx), entry.obj

    def object(self, handle: int, kind: Kind) -> tuple[Entry, Entry]:
        """(context entry, object entry) for a session-owned object."""
        entry = self.handles.get(handle, kind)
        return self.context(entry.ctx), entry

    def launch_target(self, func_handle: int, stream_handle: int) -> LaunchTarget:
        """The checked backend objects for launching `func_handle` on `stream_handle` (0: the NULL stream of
        the function's own context, whatever context is current)."""
        self._forget_bound_calls_if_stale()
        key = (func_handle, stream_handle)
        target = self._launch_targets.get(key)
        if target is None:
            ctx, func = self.object(func_handle, Kind.FUNCTION)
            stream = None
            if stream_handle:
                stream_ctx, stream = self.stream(stream_handle)
                if stream_ctx is not ctx:
                    raise CudaError(Status.INVALID_HANDLE, "stream and function belong to different contexts")
            if func.info is None:
                param_bytes = None
            else:  # parameters lie in offset order
                param_bytes = func.info[-1][0] + func.info[-1][1] if func.info else 0
            target = LaunchTarget(self.backend.launcher(ctx.obj, func.obj, stream), param_bytes)
            self.handles.watch(func_handle, stream_handle, func.ctx)
            self._launch_targets[key] = target
            if self.lane is not None:
                self.lane.bind_launch(func_handle, stream_handle, ctx.obj, func.obj, stream, param_bytes)
        return target

    def async_copier(self, stream_handle: int):
        """The backend's bound asynchronous host-to-device copy (dst, data) for `stream_handle` (0: the current
        context's NULL stream)."""
        self._forget_bound_calls_if_stale()
        key = (stream_handle, 0 if stream_handle else self.current_ctx)
        copier = self._copiers.get(key)
        if copier is None:
            ctx, stream = self.stream(stream_handle)
            copier = self._copiers[key] = self.backend.async_copier(ctx.obj, stream)
            self.handles.watch(*key)
        return copier

    def bind_lane_stream(self, stream_handle: int) -> None:
        """Let the fast lane run copies and memsets on `stream_handle` (0: the current context's NULL stream),
        once Python has run one there."""
        if self.lane is None:
            return
        key = (stream_handle, 0 if stream_handle else self.current_ctx)
        if key not in self._lane_streams:
            ctx, stream = self.stream(stream_handle)
            self.lane.bind_stream(stream_handle, key[1], ctx.obj, stream)
            self.handles.watch(*key)
            self._lane_streams.add(key)

    def bind_lane_batch_norm(self, handle: int, tensors_bytes: bytes, ctx, dnn, tensors, stream_handle: int) -> None:
        """Let the fast lane run batch norms of cuDNN handle `handle` with these tensor descriptors (on any bound
        stream of its context), once Python has run one on `stream_handle`."""
        if self.lane is None or (handle, tensors_bytes) in self._lane_batch_norms:
            return
        self.bind_lane_stream(stream_handle)
        self.lane.bind_batch_norm(handle, tensors_bytes, ctx.obj, dnn.obj, tensors, tuple(t.nbytes() for t in tensors))
        self.handles.watch(handle)
        self._lane_batch_norms.add((handle, tensors_bytes))

    def bind_lane_dnn_execute(self, handle: int, plan: int, pack_bytes: bytes, ctx, dnn, plan_entry, attributes,
                              ranges: list[tuple[int, int]], stream_handle: int) -> None:
        """Let the fast lane run executions of `plan` with this variant pack (on any bound stream of its context),
        once Python has run one on `stream_handle`; `ranges` are what it checked."""
        if self.lane is None or (handle, plan, pack_bytes) in self._lane_dnn_executes:
            return
        self.bind_lane_stream(stream_handle)
        self.lane.bind_dnn_execute(handle, plan, pack_bytes, ctx.obj, dnn.obj, plan_entry.obj, attributes, ranges)
        self.handles.watch(handle, plan)
        self._lane_dnn_executes.add((handle, plan, pack_bytes))

    def bind_lane_graph(self, exec_handle: int, stream_handle: int, ctx_obj, exec_obj, stream_obj) -> None:
        """Let the fast lane launch `exec_handle` on `stream_handle`, once Python has done so."""
        if self.lane is not None:
            self.lane.bind_graph(exec_handle, stream_handle, ctx_obj, exec_obj, stream_obj)
            self.handles.watch(exec_handle, stream_handle)

    def lane_ready(self):
        """The fast lane, its bindings and regions brought up to date (before each of its runs)."""
        self._forget_bound_calls_if_stale()
        if self._lane_regions_at != self.memory.changes:
            regions = self.memory.regions_by_start()
            fills = [self._fill_context(r) for r in regions] if fill_wanted() else None  # (else no ring fills)
            self.lane.set_regions([(r.start, r.size) for r in regions], fills)
            self._lane_regions_at = self.memory.changes
        return self.lane

    def _fill_context(self, region):
        """The backend context whose streams the lane's fill kernel may write `region` from -- an allocation's,
        cuMemAlloc's or a pool's -- or None: a module's global (constants among them) and a virtual memory mapping
        (whose access is set per device, not per context) are written by copies only."""
        if region.owner not in ("alloc", "pool"):
            return None
        try:
            return self.handles.get(region.ctx, Kind.CONTEXT).obj
        except CudaError:
            return None

    def _forget_bound_calls_if_stale(self) -> None:
        """Launchers, copiers and the lane's bindings hold backend objects: once a handle one was resolved from has
        gone (HandleTable.watch), they may be stale."""
        if self._bound_calls_at != self.handles.removals:
            self._launch_targets.clear()
            self._copiers.clear()
            if self.lane is not None:
                self.lane.forget()
                self._lane_streams.clear()
                self._lane_batch_norms.clear()
                self._lane_dnn_executes.clear()
            self._bound_calls_at = self.handles.removals

    # -- deferred errors ---------------------------------------------------------------------------
    def defer_error(self, code: int, what: str, request_id: int, message: str = "") -> None:
        # The message says which argument was wrong: without it a deferred failure names only its status.
        detail = f" ({message})" if message else ""
        self.deferred_failures.record(self.log, f"{what} (request {request_id}) failed: {code}{detail}",
                                      time.monotonic())
        if not self.deferred_error:
            self.deferred_error = code

    def take_deferred_error(self) -> int:
        code, self.deferred_error = self.deferred_error, 0
        return code

    # -- device memory quota -----------------------------------------------------------------------------
    # Everything a session makes device memory for counts against --session-mem-limit. Allocations are
    # charged as their regions are added (add_region); anything else -- module globals here, and whatever a
    # new kind of object holds (virtual-memory mappings, pools, graphs, library workspaces) -- calls
    # charge_memory *before* asking the backend for the memory, release_memory when it is freed, and stores
    # (nbytes, what) as its handle's `charge` so that destroying its context releases it too.
    def charge_memory(self, nbytes: int, what: str) -> None:
        """Count `nbytes` against the session's quota, or raise OUT_OF_MEMORY (and count nothing)."""
        if self.reclaim is not None:
            self.reclaim()
        self.memory.charge(nbytes, what)

    def release_memory(self, nbytes: int, what: str) -> None:
        self.memory.release(nbytes, what)

    def add_charged(self, kind: Kind, obj, nbytes: int, what: str, *, ctx: int, **kw) -> int:
        """A handle for an object already charged `nbytes` (see charge_memory): its release goes with it."""
        return self.handles.add(kind, obj, ctx=ctx, charge=(nbytes, what), **kw)

    def remove_handle(self, handle: int, kind: Kind | None = None) -> Entry:
        """Forget a handle, and give back the quota its object held."""
        entry = self.handles.pop(handle, kind) if kind is not None else self.handles.remove(handle)
        if entry.charge is not None:
            self.release_memory(*entry.charge)
        return entry

    def load_module(self, image: bytes) -> int:
        """Load a module into the current context, its variables charged to the quota before they exist."""
        ctx = self.context()
        nbytes = image_device_bytes(image)
        self.charge_memory(nbytes, "module globals")
        try:
            module = self.backend.module_load(ctx.obj, image)
        except BaseException:
            self.release_memory(nbytes, "module globals")
            raise
        return self.add_charged(Kind.MODULE, module, nbytes, "module globals", ctx=self.current_ctx)

    def unload_module(self, handle: int) -> None:
        ctx, entry = self.object(handle, Kind.MODULE)
        for h in self.handles.owned_by(parent=handle):
            self.handles.pop(h, Kind.FUNCTION)
        for region in self.memory.regions(owner=f"module:{handle:x}"):
            self.memory.remove(region.start)
        self.remove_handle(handle, Kind.MODULE)
        self.backend.module_unload(ctx.obj, entry.obj)

    # -- teardown ----------------------------------------------------------------------------------
    def destroy_context(self, handle: int) -> None:
        """Free everything made in a context, then the context. Runs to the end even when the context is
        broken (a faulted kernel makes most calls fail; cuCtxDestroy still releases it all)."""
        ctx_entry = self.handles.get(handle, Kind.CONTEXT)
        ctx = ctx_entry.obj
        be = self.backend
        for extension in list(self.extensions.values()):
            extension.release_context(self, handle)
        for h in self.handles.owned_by(ctx=handle):
            entry = self.remove_handle(h)
            if entry.kind == Kind.GRAPH and entry.info == GRAPH_BODY:
                continue  # a conditional node's body: the driver destroys it with its graph
            release = {Kind.EVENT: be.event_destroy, Kind.STREAM: be.stream_destroy,
                       Kind.MODULE: be.module_unload, Kind.BLAS: be.blas_destroy, Kind.DNN: be.dnn_destroy,
                       Kind.DNN_DESC: be.dnn_destroy_descriptor, Kind.GRAPH_EXEC: be.graph_exec_destroy,
                       Kind.GRAPH: be.graph_destroy, Kind.RAND: be.rand_destroy, Kind.SOLVER: be.solver_destroy,
                       Kind.SPARSE: be.sparse_destroy, Kind.SPARSE_SPGEMM: be.spgemm_destroy,
                       Kind.JIT_LINK: be.jit_link_destroy, Kind.ARRAY: be.array_destroy}.get(entry.kind)
            if release is not None:
                self._quietly(release, ctx, entry.obj)
        for region in self.memory.regions(ctx=handle):
            self.memory.remove(region.start)
            if region.owner == "alloc":
                self._quietly(be.mem_free, ctx, region.start)
        self.handles.pop(handle, Kind.CONTEXT)
        if self.current_ctx == handle:
            self.current_ctx = 0
        be.ctx_destroy(ctx)

    def _quietly(self, fn, *args) -> None:
        try:
            fn(*args)
        except CudaError as e:
            self.log.debug("teardown: %s failed (%s); the context's destruction releases it", fn.__name__, e)

    def release_all(self) -> None:
        """Everything the session owns, however the session ended. Blocking: run it off the event loop."""
        if self.closed:
            return
        self.closed = True
        if self.copy_links is not None:
            self.copy_links.close()  # (first: no link thread goes on receiving for a session that is gone)
        contexts = self.handles.owned_by(kind=Kind.CONTEXT)
        for handle in contexts:
            try:
                self.destroy_context(handle)
            except Exception:
                self.log.exception("teardown of context 0x%x failed", handle)
        self.primary.clear()
        if self.lane is not None:
            self.lane.close()
            self.lane = None
        if contexts:
            self.log.info("released %d context(s) and everything in them", len(contexts))
        self.deferred_failures.flush(self.log)
        if self.on_released is not None:
            self.on_released()

    def add_region(self, start: int, size: int, ctx: int, owner: str) -> None:
        self.memory.add(Region(start, size, ctx, owner))

    # -- several devices ---------------------------------------------------------------------------
    def device_of(self, region: Region) -> int:
        """The device a region of this session's memory is on (its context's; regions go with their context)."""
        return self.context(region.ctx).info

    def memory_by_device(self) -> dict[int, int]:
        """The bytes of device memory the session's ranges span, per device (status and statistics; the quota
        itself, --session-mem-limit, is on the session's total over all devices)."""
        usage: dict[int, int] = {}
        for region in self.memory.regions():
            device = self.device_of(region)
            usage[device] = usage.get(device, 0) + region.size
        return usage
