"""Handlers read requests by field name (ops.py is the one place that knows the order of fields)."""

from __future__ import annotations

import ast
import pathlib

import pytest

from rgpu.dispatch import handlers
from rgpu.protocol import ops

DISPATCH = pathlib.Path(handlers.__file__).parent


def _positional_uses(tree: ast.AST) -> list[str]:
    """`x, y = args`, `args[0]`, `*args`, `f(*args)` inside functions registered with @handles."""
    found = []
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef):
            continue
        decorators = [d.func.id for d in fn.decorator_list
                      if isinstance(d, ast.Call) and isinstance(d.func, ast.Name)]
        if "handles" not in decorators or len(fn.args.args) < 2:
            continue
        name = fn.args.args[1].arg  # (session, args, bulk)

        def is_args(n, name=name):
            return isinstance(n, ast.Name) and n.id == name

        for node in ast.walk(fn):
            if isinstance(node, ast.Subscript) and is_args(node.value):
                found.append(f"{fn.name}: {name}[...]")
            elif isinstance(node, ast.Starred) and is_args(node.value):
                found.append(f"{fn.name}: *{name}")
            elif isinstance(node, ast.Assign) and is_args(node.value) and isinstance(node.targets[0], ast.Tuple):
                found.append(f"{fn.name}: ... = {name}")
    return found


def test_handlers_read_fields_by_name():
    found = []
    for path in sorted(DISPATCH.glob("*.py")):
        found += [f"{path.name}: {x}" for x in _positional_uses(ast.parse(path.read_text()))]
    assert not found, "read request fields by name (args.field):\n" + "\n".join(found)


def test_the_positional_check_catches_each_form():
    src = '''
@handles(ops.X)
def a(s, args, bulk):
    x, y = args
@handles(ops.X)
def b(s, args, bulk):
    return args[0]
@handles(ops.X)
def c(s, args, bulk):
    return f(*args)
@handles(ops.X)
def d(s, args, bulk):
    return args.dptr
'''
    assert _positional_uses(ast.parse(src)) == ["a: ... = args", "b: args[...]", "c: *args"]


def test_field_handlers_must_name_the_fields_in_spec_order():
    before = dict(handlers.HANDLERS)
    with pytest.raises(TypeError, match="LAUNCH_KERNEL's fields"):
        @handlers.handles_fields(ops.LAUNCH_KERNEL)
        def swapped(s, bulk, function, grid_y, grid_x, grid_z, block_x, block_y, block_z, shared_mem, stream):
            pass
    with pytest.raises(TypeError):
        @handlers.handles_fields(ops.EVENT_RECORD)
        def short(s, bulk, event):
            pass
    assert handlers.HANDLERS == before
    assert handlers.HANDLERS[ops.LAUNCH_KERNEL.code].op is ops.LAUNCH_KERNEL
