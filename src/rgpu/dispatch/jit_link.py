"""JIT linking (cuLinkCreate, AddData, Complete, Destroy): one pending linker invocation per handle, on the
session's backend. Programs that build kernels at run time (Numba, CuPy's separate compilation, NVIDIA's ptxjit
sample) link PTX, objects and libraries this way, then load the image with cuModuleLoadData.

The driver's logs are the program's buffers natively; here the server keeps them and each reply carries them as
they stand, capped at what the client asked for, and the client copies them into the program's buffers. A call
the driver refuses still answers with its logs: the refusal travels in the reply's `status` field, so that the
error log, which says why, reaches the program."""

from __future__ import annotations

import hashlib
import struct

import attrs

from rgpu.dispatch.registry import Reply, handles
from rgpu.errors import CudaError, Status
from rgpu.protocol import ops
from rgpu.session.handles import Kind
from rgpu.session.state import Session

_OPTION = struct.Struct("<IIQ")
assert _OPTION.size == ops.JIT_OPTION_SIZE
MAX_NAME = 4096
MAX_READ = 16 << 20  # a JIT_LINK_READ's most bytes (a client reads a big image in parts)
JIT = "JIT links"  # what the quota calls the server memory links hold


@attrs.define(slots=True)
class PendingLink:
    """What the server knows of one invocation beyond the backend's object."""

    info_size: int  # the most bytes of each log a reply may carry
    error_size: int
    added: int = 0  # bytes of input so far
    image: bytes | None = None  # after a successful JIT_LINK_COMPLETE


def options(bulk, count: int) -> tuple[tuple[int, int], ...]:
    """The (CUjit_option, value) records at the start of `bulk`; only those the server forwards."""
    if count > ops.MAX_JIT_OPTIONS or len(bulk) < count * _OPTION.size:
        raise CudaError(Status.INVALID_VALUE, f"{count} JIT options in {len(bulk)} bytes")
    out = []
    for i in range(count):
        option, pad, value = _OPTION.unpack_from(bulk, i * _OPTION.size)
        if option not in ops.FORWARDED_JIT_OPTIONS or pad or value >> 32:
            raise CudaError(Status.INVALID_VALUE, f"JIT option {option} with value {value}")
        out.append((option, value))
    return tuple(out)


def _pending(s: Session, handle: int):
    ctx, entry = s.object(handle, Kind.JIT_LINK)
    return ctx, entry, entry.info


def _outputs(s: Session, entry, pending: PendingLink) -> tuple[bytes, bytes, float]:
    info, error, wall_ms = s.backend.jit_link_outputs(entry.obj)
    return bytes(info[: pending.info_size]), bytes(error[: pending.error_size]), wall_ms


def _charge(s: Session, entry, nbytes: int) -> None:
    """What the server holds for a link (its inputs, its image) counts against the session's memory limit,
    and is given back with the link's handle."""
    s.charge_memory(nbytes, JIT)
    held = entry.charge[0] if entry.charge else 0
    entry.charge = (held + nbytes, JIT)


def _outcome(s: Session, what: str, fn, *args):
    """(status, result): the backend's refusal is an answer here, logged, not a failed request."""
    try:
        return 0, fn(*args)
    except CudaError as e:
        s.log.info("%s refused: %s", what, e)
        return e.code, None


@handles(ops.JIT_LINK_CREATE, blocking=True)
def _create(s: Session, args, bulk):
    if len(bulk) != args.count * _OPTION.size:
        raise CudaError(Status.INVALID_VALUE, f"{args.count} JIT options in {len(bulk)} bytes")
    forwarded = options(bulk, args.count)
    if args.info_size > ops.MAX_JIT_LOG or args.error_size > ops.MAX_JIT_LOG:
        raise CudaError(Status.INVALID_VALUE, f"JIT logs of {args.info_size} and {args.error_size} bytes")
    if len(s.handles.owned_by(kind=Kind.JIT_LINK)) >= ops.MAX_JIT_LINKS:
        raise CudaError(Status.OUT_OF_MEMORY, f"{ops.MAX_JIT_LINKS} linker invocations are open already")
    ctx = s.context()
    link = s.backend.jit_link_create(ctx.obj, forwarded, args.info_size, args.error_size)
    return (s.handles.add(Kind.JIT_LINK, link, ctx=s.current_ctx, info=PendingLink(args.info_size, args.error_size)),)


@handles(ops.JIT_LINK_ADD, blocking=True)
def _add(s: Session, args, bulk):
    ctx, entry, pending = _pending(s, args.link)
    if args.type not in ops.JIT_INPUT_TYPES:
        raise CudaError(Status.INVALID_VALUE, f"JIT input type {args.type}")
    forwarded = options(bulk, args.count)
    start = args.count * _OPTION.size
    if args.name_size > MAX_NAME or start + args.name_size >= len(bulk):
        raise CudaError(Status.INVALID_VALUE, f"a name of {args.name_size} bytes and no input after it")
    name = bytes(bulk[start : start + args.name_size]).decode("utf-8", "replace")
    data = bytes(bulk[start + args.name_size :])
    if pending.image is not None:
        raise CudaError(Status.INVALID_VALUE, "the link is complete; its inputs cannot change")
    if pending.added + len(data) > ops.MAX_JIT_LINK_BYTES:
        raise CudaError(Status.OUT_OF_MEMORY, f"a link's inputs may take {ops.MAX_JIT_LINK_BYTES} bytes in all")
    _charge(s, entry, len(data))
    pending.added += len(data)
    status, _ = _outcome(s, f"JIT input {name!r}", s.backend.jit_link_add, ctx.obj, entry.obj, args.type, data,
                         name, forwarded)
    info, error, wall_ms = _outputs(s, entry, pending)
    return Reply((status, len(info), len(error), wall_ms), info + error)


@handles(ops.JIT_LINK_COMPLETE, blocking=True)
def _complete(s: Session, args, bulk):
    ctx, entry, pending = _pending(s, args.link)
    status, image = _outcome(s, "JIT link", s.backend.jit_link_complete, ctx.obj, entry.obj)
    image = image or b""
    if status == 0 and len(image) > ops.MAX_JIT_IMAGE:
        status, image = Status.OUT_OF_MEMORY, b""
        s.log.info("JIT link refused: an image of more than %d bytes", ops.MAX_JIT_IMAGE)
    if status == 0 and pending.image is None:
        try:
            _charge(s, entry, len(image))
        except CudaError as e:
            status, image = e.code, b""
            s.log.info("JIT link refused: %s", e)
    digest = bytes(32)
    if status == 0:
        pending.image = image = bytes(image)
        digest = hashlib.sha256(image).digest()
        if s.module_cache is not None:
            s.module_cache.put(image)  # the program loads it next, usually: that load then sends only the digest
    info, error, wall_ms = _outputs(s, entry, pending)
    return Reply((status, len(info), len(error), wall_ms, len(image), digest), info + error)


@handles(ops.JIT_LINK_READ)
def _read(s: Session, args, bulk):
    _, _, pending = _pending(s, args.link)
    if pending.image is None:
        raise CudaError(Status.INVALID_VALUE, "the link has no image: complete it first")
    if args.size > MAX_READ or args.offset + args.size > len(pending.image):
        raise CudaError(Status.INVALID_VALUE, f"{args.size} bytes from {args.offset} of a "
                                              f"{len(pending.image)}-byte image")
    return Reply((), pending.image[args.offset : args.offset + args.size])


@handles(ops.JIT_LINK_DESTROY, blocking=True)
def _destroy(s: Session, args, bulk):
    ctx, entry, _ = _pending(s, args.link)
    s.remove_handle(args.link, Kind.JIT_LINK)
    s.backend.jit_link_destroy(ctx.obj, entry.obj)
