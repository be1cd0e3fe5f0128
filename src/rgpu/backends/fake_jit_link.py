"""JIT linking on the fake backend: the FakeBackend mixin (requests are checked in rgpu.dispatch.jit_link).

The fake runs kernels by name from their PTX (rgpu.backends.ptx), so linking is what a linker checks and keeps:
each input must be PTX the fake can read (plain, or inside a fatbin or cubin); at the end every `.extern` function
or variable must be defined by some input, and none defined twice. The image is a fatbin holding the inputs' PTX
one after the other, which the fake's module loader reads as one module."""

from __future__ import annotations

import re
import time

import attrs

from rgpu.backends import ptx
from rgpu.errors import CudaError, Status

_PTX, _LIBRARY, _NVVM = 1, 4, 5
_LOG_VERBOSE = 12
_LINK_ONLY_OPTIONS = {8: "TARGET_FROM_CUCONTEXT", 9: "TARGET"}  # cuLinkAddData does not take these
# What the device runtime provides every program: printf, device-side malloc, assert (PTX declares them .extern).
_SYSTEM_CALLS = frozenset({"vprintf", "malloc", "free", "__assertfail"})
# A declaration or definition with linkage: `.visible .func (.param .b32 r) name(`, `.extern .global .u32 name;`.
# Anchored at a line start and kept within the line (see rgpu.backends.ptx on linear-time patterns).
_LINKAGE = re.compile(
    rb"^[ \t]*((?:\.(?:visible|extern|weak)[ \t]+)+)\.(?:func|entry|global|const)[ \t]+(?:\([^)\n]*\)[ \t]*)?"
    rb"(?:\.align[ \t]+\d+[ \t]+)?(?:\.[a-z]+\d*[ \t]+)?([\w$]+)", re.M)


@attrs.define(eq=False)
class FakeLink:
    ctx: object
    verbose: bool
    info_size: int
    error_size: int
    inputs: list[tuple[str, bytes]] = attrs.Factory(list)  # (name, PTX text)
    info: bytearray = attrs.Factory(bytearray)
    error: bytearray = attrs.Factory(bytearray)
    wall_ms: float = 0.0

    def note(self, log: bytearray, line: str) -> None:
        log += line.encode() + b"\n"


def _symbols(text: bytes) -> tuple[set[str], set[str], set[str]]:
    """(what the text needs from other inputs, what it defines, what it defines weakly: these may repeat)."""
    needs, strong, weak = set(), set(), set()
    for m in _LINKAGE.finditer(text):
        linkage, name = m.group(1), m.group(2).decode()
        (needs if b"extern" in linkage else weak if b"weak" in linkage else strong).add(name)
    return needs - strong - weak, strong, weak


class FakeJitLink:
    """Mixed into FakeBackend."""

    def jit_link_create(self, ctx, options, info_size: int, error_size: int) -> FakeLink:
        ctx.check()
        return FakeLink(ctx, dict(options).get(_LOG_VERBOSE, 0) != 0, info_size, error_size)

    def jit_link_add(self, ctx, link: FakeLink, input_type: int, data: bytes, name: str, options) -> None:
        ctx.check()
        started = time.perf_counter()
        try:
            refused = sorted(_LINK_ONLY_OPTIONS[o] for o, _ in options if o in _LINK_ONLY_OPTIONS)
            if refused:
                raise CudaError(Status.INVALID_VALUE, f"{', '.join(refused)} apply to the whole link, not one input")
            if input_type in (_LIBRARY, _NVVM):
                raise CudaError(Status.NOT_SUPPORTED, "the fake backend links PTX (plain, or in a fatbin or cubin); "
                                                      "not libraries or LTO IR")
            text, mod = ptx.runnable_ptx(data if input_type != _PTX else data.split(b"\0", 1)[0])
        except CudaError as e:
            link.note(link.error, f"error   : {name}: {e.message}")
            raise
        finally:
            link.wall_ms += (time.perf_counter() - started) * 1000
        link.inputs.append((name, text))
        if link.verbose:
            link.note(link.info, f"info    : {name}: PTX ISA {mod.version[0]}.{mod.version[1]}, "
                                 f"{len(mod.entries)} kernel(s)")

    def jit_link_complete(self, ctx, link: FakeLink) -> bytes:
        ctx.check()
        if not link.inputs:
            link.note(link.error, "error   : nothing to link")
            raise CudaError(Status.INVALID_VALUE, "a link without inputs")
        defined_in: dict[str, str] = {}
        weak: set[str] = set()
        needed: list[tuple[str, str]] = []
        for name, text in link.inputs:
            needs, strong, weak_here = _symbols(text)
            for symbol in sorted(strong):
                if symbol in defined_in:
                    link.note(link.error, f"nvlink error   : Multiple definition of '{symbol}' in '{name}', "
                                          f"first defined in '{defined_in[symbol]}'")
                    raise CudaError(Status.INVALID_PTX, f"{symbol} is defined twice")
                defined_in[symbol] = name
            weak |= weak_here
            needed += [(symbol, name) for symbol in sorted(needs)]
        for symbol, name in needed:
            if symbol not in defined_in and symbol not in weak and symbol not in _SYSTEM_CALLS:
                link.note(link.error, f"nvlink error   : Undefined reference to '{symbol}' in '{name}'")
                raise CudaError(Status.INVALID_PTX, f"{symbol} is not defined by any input")
        if link.verbose:
            link.note(link.info, f"info    : linked {len(link.inputs)} input(s)")
        return ptx.fatbin_of_ptx(b"\n".join(text for _, text in link.inputs))

    def jit_link_outputs(self, link: FakeLink) -> tuple[bytes, bytes, float]:
        # Like the driver's buffers: what fits with its NUL, and the NUL (nothing at all while a log is empty).
        info, error = (bytes(log[: size - 1]) + b"\0" if log and size else b""
                       for log, size in ((link.info, link.info_size), (link.error, link.error_size)))
        return info, error, link.wall_ms

    def jit_link_destroy(self, ctx, link: FakeLink) -> None:
        link.inputs.clear()
