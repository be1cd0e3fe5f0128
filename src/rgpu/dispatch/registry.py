"""The handler registry: opcode -> handler. Handlers are plain functions `(session, args, bulk) -> results`;
results are a tuple for the reply's fixed fields, or `Reply(values, bulk)`. Every handler module (handlers.py
and the feature modules beside it: vmm, pools, graphs, ...) registers through `handles` from here, so none of
them imports another to register.
"""

from __future__ import annotations

from collections.abc import Callable

import attrs

from rgpu.protocol import ops


@attrs.frozen(slots=True)
class Reply:
    values: tuple = ()
    bulk: bytes | bytearray | memoryview = b""


@attrs.frozen(slots=True)
class Handler:
    op: ops.Op
    fn: Callable
    blocking: bool


HANDLERS: dict[int, Handler] = {}
# The handlers registered with handles_fields, by opcode: fn(session, bulk, *fields). The dispatcher runs deferred
# records of these straight from their bytes.
FIELD_HANDLERS: dict[int, Callable] = {}


def handles(op: ops.Op, *, blocking: bool = False):
    """Register `fn(session, args, bulk)` for `op`; `args` is the request decoded by `op.decode` (read its fields
    by name)."""
    def register(fn):
        HANDLERS[op.code] = Handler(op, fn, blocking)
        return fn

    return register


def handles_fields(op: ops.Op, *, blocking: bool = False):
    """Register `fn(session, bulk, <field>, ...)`, which takes the request's fields as parameters named and
    ordered as in the spec (checked here). For the hottest calls: the dispatcher's launch path passes the
    unpacked values straight in, without building a named tuple or reading attributes."""
    def register(fn):
        code = fn.__code__
        params = code.co_varnames[2 : code.co_argcount]
        fields = tuple(f.name for f in op.request_fields)
        if params != fields:
            raise TypeError(f"{fn.__name__} takes {params}; {op.name}'s fields are {fields}")
        HANDLERS[op.code] = Handler(op, lambda s, args, bulk: fn(s, bulk, *args), blocking)
        FIELD_HANDLERS[op.code] = fn
        return fn

    return register
