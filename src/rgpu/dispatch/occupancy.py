"""Occupancy queries beyond the single-block-size one in handlers.py: a table over block sizes (so the client can
search for the best block size, running the program's dynamic-shared-memory callback itself, in one round trip),
the dynamic shared memory left per block, and clusters (how many of a launch's can be resident, the largest
cluster size it could take)."""

from __future__ import annotations

import struct

from rgpu.dispatch.graphs import parse_attributes
from rgpu.dispatch.registry import Reply, handles
from rgpu.errors import CudaError, Status
from rgpu.protocol import ops
from rgpu.session.handles import Kind
from rgpu.session.state import Session

MAX_ENTRIES = 1024
_ENTRY = struct.Struct("<IQ")


@handles(ops.OCCUPANCY_TABLE)
def _table(s: Session, args, bulk):
    ctx, func = s.object(args.function, Kind.FUNCTION)
    if not 0 < args.count <= MAX_ENTRIES or len(bulk) != args.count * _ENTRY.size:
        raise CudaError(Status.INVALID_VALUE, f"{args.count} occupancy entries in {len(bulk)} bytes")
    blocks = []
    for i in range(args.count):
        block_size, smem = _ENTRY.unpack_from(bulk, i * _ENTRY.size)
        if not 0 < block_size <= 1 << 16:
            raise CudaError(Status.INVALID_VALUE, f"block size {block_size}")
        blocks.append(s.backend.occupancy_max_blocks(ctx.obj, func.obj, block_size, smem, args.flags))
    return Reply((args.count,), struct.pack(f"<{args.count}i", *blocks))


@handles(ops.OCCUPANCY_AVAILABLE_SMEM)
def _available_smem(s: Session, args, bulk):
    ctx, func = s.object(args.function, Kind.FUNCTION)
    if args.blocks <= 0 or args.block_size <= 0:
        raise CudaError(Status.INVALID_VALUE, f"{args.blocks} blocks of {args.block_size} threads")
    return (s.backend.occupancy_available_smem(ctx.obj, func.obj, args.blocks, args.block_size),)


@handles(ops.OCCUPANCY_CLUSTERS)
def _clusters(s: Session, args, bulk):
    ctx, func = s.object(args.function, Kind.FUNCTION)
    if args.which > 1:
        raise CudaError(Status.INVALID_VALUE, f"cluster occupancy query {args.which}")
    if args.count > ops.MAX_LAUNCH_ATTRIBUTES or len(bulk) != args.count * ops.LAUNCH_ATTRIBUTE_SIZE:
        raise CudaError(Status.INVALID_VALUE, f"{args.count} launch attributes in {len(bulk)} bytes")
    grid, block = (args.grid_x, args.grid_y, args.grid_z), (args.block_x, args.block_y, args.block_z)
    if 0 in grid or 0 in block:
        raise CudaError(Status.INVALID_VALUE, f"a grid of {grid} blocks of {block}")
    attributes = parse_attributes(s, bulk, args.count)
    return (s.backend.occupancy_clusters(ctx.obj, func.obj, args.which, grid, block, args.shared_mem, attributes),)
