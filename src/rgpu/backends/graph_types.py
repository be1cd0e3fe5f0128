"""What the graph handlers (rgpu.dispatch.graphs) and the backends' graph mixins hand each other: node
parameters and what a backend reports of one node when reading a graph back."""

from __future__ import annotations

import attrs


@attrs.frozen(slots=True)
class KernelNodeParams:
    func: object
    grid: tuple
    block: tuple
    shared_mem: int
    params: bytes
    attributes: tuple  # LaunchAttribute


@attrs.frozen(slots=True)
class MemsetNodeParams:
    dst: int
    pitch: int
    value: int
    element_size: int
    width: int  # elements
    height: int


@attrs.frozen(slots=True)
class MemcpyNodeParams:  # device to device
    dst: int
    dst_pitch: int
    src: int
    src_pitch: int
    width: int  # bytes
    height: int


@attrs.frozen(slots=True)
class NodeInfo:
    """What a backend reports of one node: `key` identifies it (and `deps` its dependencies) among the graph's
    nodes; params is a *NodeParams, the event or child graph (`object`), or None."""

    key: object
    obj: object
    type: int
    deps: tuple
    params: object = None
