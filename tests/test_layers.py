"""The package layers of src/rgpu: every import (including ones deferred into a function) points down this list,
never up or sideways, so no two packages import each other and the server side cannot pull in the client.

A new top-level package or module must be placed here; that is the point of listing them."""

from __future__ import annotations

import ast
import pathlib

SRC = pathlib.Path(__file__).resolve().parent.parent / "src" / "rgpu"

# Top to bottom. Units in one layer are independent of each other; a unit may import any unit below its layer.
LAYERS: list[set[str]] = [
    {"__main__"},  # python -m rgpu
    {"cli"},  # rgpu, rgpu-server
    {"doctor"},  # rgpu doctor: what a program loaded, and whether the server answers (through the client)
    {"__init__"},  # `import rgpu`: the client's names, loaded on first use
    {"serving", "bridge", "client", "shims"},  # the servers (rgpu-server, the Open-IOV bridge), the client
    {"multi"},  # the sessions of several servers as one program's devices (made by client.connect)
    {"dispatch"},  # opcode -> handler
    {"session"},  # per-session state: handles, owned memory, module cache
    {"backends", "kernels"},  # cuda, fake and their library parts; the shipped PTX
    {"config"},  # one configuration for client and CLI: server address, PSK file
    {"transport"},  # frames over sockets
    {"protocol"},  # the sans-IO codec: frames, handshake, operation spec, library wire formats
    {"errors", "logs", "version"},  # errors; the log format shared by server and workers; the version
]
LAYER_OF = {unit: i for i, layer in enumerate(LAYERS) for unit in layer}


def _module_name(path: pathlib.Path) -> str:
    parts = ["rgpu", *path.relative_to(SRC).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in SRC.rglob("*.py")}


def _unit(module: str) -> str:
    """The top-level package or module of src/rgpu a module belongs to."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _imports(module: str) -> set[str]:
    """The rgpu modules `module` imports, anywhere in its body. `from pkg import name` counts as importing
    pkg.name when that is a module, else pkg itself."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                origin = ".".join(base + ([node.module] if node.module else []))
            else:
                origin = node.module
            for alias in node.names:
                sub = f"{origin}.{alias.name}"
                found.add(sub if sub in MODULES else origin)
    return {m for m in found if m == "rgpu" or m.startswith("rgpu.")}


EDGES = {m: _imports(m) for m in MODULES}


def test_every_unit_has_a_layer():
    unplaced = sorted({_unit(m) for m in MODULES} - LAYER_OF.keys())
    assert not unplaced, f"place these in LAYERS of {__file__}: {unplaced}"


def upward(edges: dict[str, set[str]]) -> list[str]:
    wrong = []
    for importer, imported in sorted(edges.items()):
        for target in sorted(imported):
            a, b = _unit(importer), _unit(target)
            if a != b and LAYER_OF.get(a, -1) >= LAYER_OF.get(b, -1):
                wrong.append(f"{importer} -> {target}")
    return wrong


def cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One import cycle among modules, if any: within a package too (a base class importing its own
    subclasses, two modules each needing the other)."""
    state: dict[str, int] = {}  # 1 visiting, 2 done

    def visit(m: str, stack: list[str]) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for t in sorted(edges.get(m, ())):
            # A submodule naming its own package is how `from pkg import name` reads; that is a cycle only if
            # the package's __init__ imports back, which its own edges show.
            if t not in edges or m.startswith(t + "."):
                continue
            if state.get(t) == 1:
                return stack[stack.index(t):] + [t]
            if t not in state and (found := visit(t, stack)):
                return found
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(edges):
        if m not in state and (found := visit(m, [])):
            return found
    return None


def test_imports_point_down():
    wrong = upward(EDGES)
    assert not wrong, "imports that point up or sideways:\n" + "\n".join(wrong)


def test_no_module_cycles():
    found = cycle(EDGES)
    assert found is None, "import cycle: " + " -> ".join(found)


def test_the_checks_catch_what_they_are_for():
    back = {"rgpu.session.state": {"rgpu.dispatch.handlers"}, "rgpu.dispatch.handlers": {"rgpu.session.state"}}
    assert upward(back) == ["rgpu.session.state -> rgpu.dispatch.handlers"]
    assert cycle(back) == ["rgpu.dispatch.handlers", "rgpu.session.state", "rgpu.dispatch.handlers"]
    assert upward({"rgpu.serving.worker": {"rgpu.client"}}) == ["rgpu.serving.worker -> rgpu.client"]
    # The parser found real edges, deferred imports included (make_backend imports the backends lazily).
    assert "rgpu.session.state" in EDGES["rgpu.dispatch.handlers"]
    assert "rgpu.backends.fake" in EDGES["rgpu.backends.factory"]
