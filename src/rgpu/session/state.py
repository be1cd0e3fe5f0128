"""Per-connection session state: what it owns, and how all of it is released."""

from __future__ import annotations

import functools
import logging
from typing import Any

import attrs

from rgpu.dispatch.backend import MAX_PARAM_BYTES, Backend
from rgpu.errors import CudaError, Status
from rgpu.session.handles import AllocationMap, Entry, HandleTable, Kind, Region
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


class _SessionLog(logging.LoggerAdapter):
    def process(self, msg, kwargs):
        return f"[session {self.extra['session']}] {msg}", kwargs


class Session:
    def __init__(self, session_id: int, backend: Backend, *, mem_limit: int | None = None, peer: str = "",
                 module_cache: ModuleCache | None = None):
        self.id = session_id
        self.backend = backend
        self.module_cache = module_cache
        self.peer = peer
        self.log = _SessionLog(logging.getLogger("rgpu.session"), {"session": session_id})
        self.handles = HandleTable()
        self.memory = AllocationMap(mem_limit)
        self.current_ctx = 0
        self.primary: dict[int, list[int]] = {}  # device -> [context handle, retain count]
        self.deferred_error = 0
        self.closed = False
        self.frames_received = 0  # frames off the wire (a BATCH counts once)
        self.calls = 0  # operations executed
        self._launch_targets: dict[tuple[int, int], LaunchTarget] = {}
        self._launch_targets_at = 0  # handles.removals when the cache was last known good

    @functools.cached_property
    def limiter(self):
        """One call at a time leaves the event loop for this session, so its calls keep their order (the
        in-process trio loop only; a worker process serves its one session on one thread)."""
        import trio

        return trio.CapacityLimiter(1)

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
        if self._launch_targets_at != self.handles.removals:
            self._launch_targets.clear()
            self._launch_targets_at = self.handles.removals
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
            self._launch_targets[key] = target
        return target

    # -- deferred errors ---------------------------------------------------------------------------
    def defer_error(self, code: int, what: str, request_id: int) -> None:
        self.log.info("deferred call %s (request %d) failed: %s; reported with the next reply", what,
                      request_id, code)
        if not self.deferred_error:
            self.deferred_error = code

    def take_deferred_error(self) -> int:
        code, self.deferred_error = self.deferred_error, 0
        return code

    # -- teardown ----------------------------------------------------------------------------------
    def destroy_context(self, handle: int) -> None:
        """Free everything made in a context, then the context. Runs to the end even when the context is
        broken (a faulted kernel makes most calls fail; cuCtxDestroy still releases it all)."""
        ctx_entry = self.handles.get(handle, Kind.CONTEXT)
        ctx = ctx_entry.obj
        be = self.backend
        for h in self.handles.owned_by(ctx=handle):
            entry = self.handles.remove(h)
            release = {Kind.EVENT: be.event_destroy, Kind.STREAM: be.stream_destroy,
                       Kind.MODULE: be.module_unload, Kind.BLAS: be.blas_destroy, Kind.DNN: be.dnn_destroy,
                       Kind.DNN_DESC: be.dnn_destroy_descriptor, Kind.GRAPH_EXEC: be.graph_exec_destroy,
                       Kind.GRAPH: be.graph_destroy}.get(entry.kind)
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
        contexts = self.handles.owned_by(kind=Kind.CONTEXT)
        for handle in contexts:
            try:
                self.destroy_context(handle)
            except Exception:
                self.log.exception("teardown of context 0x%x failed", handle)
        self.primary.clear()
        if contexts:
            self.log.info("released %d context(s) and everything in them", len(contexts))

    def add_region(self, start: int, size: int, ctx: int, owner: str) -> None:
        self.memory.add(Region(start, size, ctx, owner))
