"""A name a module or class defines twice: the later definition silently replaces the earlier, and every caller of
the first gets the second (bench/workloads.py once had two `_block`s, and three GPU workloads built models of
None); in a test file the first test silently stops running. Property setters and other decorators that take the
name again on purpose are left alone."""

from __future__ import annotations

import ast
import pathlib

REPO = pathlib.Path(__file__).parents[1]
TREES = ("src/rgpu", "bench", "tests", "native", "tools")
ON_PURPOSE = (".setter", ".deleter", ".register", "overload")


def _defined_twice(body, where: str) -> list[str]:
    found, seen = [], {}
    for node in body:
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        if not any(ast.unparse(d).endswith(ON_PURPOSE) for d in node.decorator_list):
            if node.name in seen:
                found.append(f"{where}: {node.name} at lines {seen[node.name]} and {node.lineno}")
            seen[node.name] = node.lineno
        if isinstance(node, ast.ClassDef):
            found += _defined_twice(node.body, f"{where}:{node.name}")
    return found


def test_no_module_or_class_defines_a_name_twice():
    paths = sorted({p for tree in TREES for p in (REPO / tree).rglob("*.py") if "results" not in p.parts})
    assert len(paths) > 100
    found = [f for p in paths for f in _defined_twice(ast.parse(p.read_text()).body, str(p.relative_to(REPO)))]
    assert not found, found


def test_the_check_sees_a_name_defined_twice():
    source = "def a(): pass\nclass C:\n    def m(self): pass\n    def m(self): pass\ndef a(): pass\n"
    assert len(_defined_twice(ast.parse(source).body, "x")) == 2
    assert not _defined_twice(ast.parse("class C:\n    @property\n    def p(self): pass\n"
                                        "    @p.setter\n    def p(self, v): pass\n").body, "x")
