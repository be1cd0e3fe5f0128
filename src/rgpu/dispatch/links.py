"""Copy links (rgpu.session.links; docs/protocol.md, "Copy links"): opening them, and host-to-device copies whose
bytes come over them."""

from __future__ import annotations

from rgpu.dispatch.registry import handles
from rgpu.errors import CudaError, ProtocolError, Status
from rgpu.protocol import ops
from rgpu.session.links import MAX_PARTS, CopyLinks
from rgpu.session.state import Session


@handles(ops.LINKS_OPEN)
def _links_open(s: Session, args, bulk):
    if s.copy_links is None:
        if s.links_offer is None:
            raise CudaError(Status.NOT_SUPPORTED, "this session has no copy links (the server offers them to "
                            "sessions in worker processes, unless --copy-links 0)")
        s.copy_links = CopyLinks(s.links_offer)
    links = s.copy_links
    return (links.token, links.count, links.part_max)


@handles(ops.MEMCPY_HTOD_LINKED, blocking=True)
def _memcpy_htod_linked(s: Session, args, bulk):
    links = s.copy_links
    if links is None:
        raise CudaError(Status.NOT_SUPPORTED, "MEMCPY_HTOD_LINKED before LINKS_OPEN: the session has no copy links")
    if links.broken:
        raise ProtocolError(f"the copy links were closed: {links.broken}")
    # Anything wrong with the frame or its parts puts the links out of step with the copies: they are closed,
    # and this and every later linked copy fail.
    try:
        _check_frame(links, args, bulk)
        links.next_seq += 1
        # The copy's own errors (memory not the session's, a bad stream) are the program's: its parts are still
        # taken, so the links stay in step, and the first error is the call's.
        copy = error = None
        try:
            s.memory.check(args.dst, args.size)
            copy = s.async_copier(args.stream)
        except CudaError as e:
            error = e
        _take_parts(links, args, copy)
    except ProtocolError as e:
        links.fail(str(e))
        raise
    if error is not None:
        raise error
    if args.sync:  # (its parts went as asynchronous copies on the NULL stream: one wait for them all)
        ctx, _ = s.stream(0)
        s.backend.stream_synchronize(ctx.obj, None)


def _check_frame(links: CopyLinks, args, bulk) -> None:
    if len(bulk):
        raise ProtocolError("MEMCPY_HTOD_LINKED carries its bytes over the copy links, not as bulk")
    if args.seq != links.next_seq:
        raise ProtocolError(f"linked copy {args.seq} where {links.next_seq} was due")
    if not 1 <= args.parts <= MAX_PARTS or not 0 < args.size <= args.parts * links.part_max:
        raise ProtocolError(f"a linked copy of {args.size} bytes in {args.parts} parts (1..{MAX_PARTS} parts of at "
                            f"most {links.part_max} bytes)")
    if not 1 <= args.links <= links.count:
        raise ProtocolError(f"a linked copy over {args.links} links; the session has {links.count}")
    if args.sync not in (0, 1) or (args.sync and args.stream):
        raise ProtocolError("MEMCPY_HTOD_LINKED: sync is 0 or 1, and a synchronous copy names no stream")


def _take_parts(links: CopyLinks, args, copy) -> None:
    """Take the copy's parts in order, each through `copy` (None: an earlier error; taken and dropped), until
    the first CudaError, which is raised once every part is taken."""
    error = None
    done = 0
    for part in range(args.parts):
        link = part % args.links
        data, offset = links.take(link, args.seq, part)
        try:
            if offset != done or len(data) > args.size - done:
                raise ProtocolError(f"copy link {link}: part {part} of linked copy {args.seq} is {len(data)} bytes "
                                    f"for offset {offset}, where offset {done} of {args.size} bytes was due")
            if copy is not None and error is None:
                try:
                    copy(args.dst + done, data)
                except CudaError as e:
                    error = e
        finally:
            links.release(link)
        done += len(data)
    if done != args.size:
        raise ProtocolError(f"linked copy {args.seq}: {done} bytes in its parts, {args.size} announced")
    if error is not None:
        raise error
