"""The kernels the fake backend can execute, chosen by source-level name (mangled names are reduced with
ptx.base_name, so `_Z4vaddPKfS0_Pfi` runs `vadd`).

Each kernel declares its parameter signature as struct codes; a launch whose parameter layout disagrees is
refused with INVALID_VALUE rather than reading garbage. Only the x dimension of the launch decides how many
elements are processed (one thread per element, `blockIdx.x * blockDim.x + threadIdx.x < n`), so a wrong
launch configuration shows up as unprocessed elements, as it would on a GPU.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable

import attrs
import numpy as np


@attrs.frozen(slots=True)
class FakeKernel:
    name: str
    signature: str  # struct codes, one per parameter ("16s" is a 16-byte struct by value)
    run: Callable  # (exec: KernelExec, *params) -> None
    doc: str = ""


def write_stdout(data: bytes) -> None:
    """Device printf: the driver writes a kernel's output to the process's stdout (fd 1), as this does."""
    while data:
        data = data[os.write(1, data):]


@attrs.frozen(slots=True)
class KernelExec:
    """What a fake kernel sees: its launch shape and device memory."""

    threads_x: int
    view: Callable  # (ptr, nbytes) -> writable np.uint8 array; raises IllegalAddress
    stream_delay: Callable  # (seconds) -> None: keep the stream busy, like a long kernel
    grid: tuple[int, int, int] = (1, 1, 1)
    block: tuple[int, int, int] = (1, 1, 1)
    printf: Callable[[bytes], None] = write_stdout
    texture: Callable | None = None  # (texture or surface object) -> FakeTexture (backends.fake_arrays)
    symbol: Callable | None = None  # (a global's name in the kernel's module) -> its address
    conditional: Callable | None = None  # (conditional handle, value): cudaGraphSetConditional

    def array(self, ptr: int, count: int, dtype) -> np.ndarray:
        dtype = np.dtype(dtype)
        return self.view(ptr, count * dtype.itemsize).view(dtype)

    def elements(self, n: int) -> int:
        return max(0, min(int(n), self.threads_x))


KERNELS: dict[str, FakeKernel] = {}


def kernel(name: str, signature: str, doc: str = "", aliases: tuple[str, ...] = ()):
    def register(fn):
        for n in (name, *aliases):
            KERNELS[n] = FakeKernel(n, signature, fn, doc)
        return fn

    return register


@kernel("vadd", "QQQi", "c[i] = a[i] + b[i] (float32)")
def _vadd(ex: KernelExec, a, b, c, n):
    k = ex.elements(n)
    ex.array(c, k, np.float32)[:] = ex.array(a, k, np.float32) + ex.array(b, k, np.float32)


@kernel("vadd_mutated", "QQQi", "c[i] = a[i] + b[i] + 1 (float32): proves which kernel ran")
def _vadd_mutated(ex: KernelExec, a, b, c, n):
    k = ex.elements(n)
    ex.array(c, k, np.float32)[:] = ex.array(a, k, np.float32) + ex.array(b, k, np.float32) + np.float32(1)


@kernel("saxpy", "fQQi", "y[i] = a * x[i] + y[i] (float32)")
def _saxpy(ex: KernelExec, a, x, y, n):
    k = ex.elements(n)
    ys = ex.array(y, k, np.float32)
    ys[:] = np.float32(a) * ex.array(x, k, np.float32) + ys


@kernel("fill", "Qfi", "p[i] = v (float32)")
def _fill(ex: KernelExec, p, v, n):
    k = ex.elements(n)
    ex.array(p, k, np.float32)[:] = np.float32(v)


@kernel("mail", "QQi", "out[i] = in[i] (bytes): the bridge's message round trip",
        aliases=("mail_kernel", "copy", "copy_bytes"))
def _mail(ex: KernelExec, src, dst, n):
    k = ex.elements(n)
    ex.view(dst, k)[:] = ex.view(src, k)


@kernel("noop", "", "does nothing (launch overhead, module reloads)")
def _noop(ex: KernelExec):
    pass


@kernel("mixed_params", "bhid16sQ",
        "out[0..4] = c, s, i, d, p.scale * p.offset + p.bias: every parameter size, a struct by value")
def _mixed_params(ex: KernelExec, c, s, i, d, params, out):
    scale, offset, bias = struct.unpack("<fid", params)  # float, int, double: no padding
    ex.array(out, 5, np.float32)[:] = [c, s, i, d, scale * offset + bias]


@kernel("spin_ns", "Q", "keeps its stream busy for ns nanoseconds (a long-running kernel)",
        aliases=("sleep_ns", "spin"))
def _spin(ex: KernelExec, ns):
    ex.stream_delay(ns / 1e9)


@kernel("printf_demo", "i", 'printf("printf_demo: block %d thread %d tag %d\\n", blockIdx.x, threadIdx.x, tag) '
        "for every thread of the x dimensions (device printf; tests/cuda/printf.cu)")
def _printf_demo(ex: KernelExec, tag):
    ex.printf("".join(f"printf_demo: block {b} thread {t} tag {tag}\n"
                      for b in range(ex.grid[0]) for t in range(ex.block[0])).encode())


@kernel("printf_flood", "Q", "prints n bytes of text (a kernel that prints too much)")
def _printf_flood(ex: KernelExec, n):
    line = b"printf_flood: 0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789\n"
    whole, rest = divmod(int(n), len(line))
    for done in range(0, whole, 4096):
        ex.printf(line * min(4096, whole - done))
    ex.printf(line[:rest])


@kernel("fault", "Q", "writes through its pointer argument; a bad pointer faults the context",
        aliases=("illegal_write",))
def _fault(ex: KernelExec, p):
    ex.view(p, 4)[:] = 0xFF


def _words_back(ex: KernelExec, out, raw: bytes) -> None:
    """out[i] = w[i] * 3 + i over a struct of u32 words passed by value (tests/cuda/big_params.cu)."""
    words = np.frombuffer(raw, np.uint32)
    k = ex.elements(len(words))
    ex.array(out, k, np.uint32)[:] = words[:k] * np.uint32(3) + np.arange(k, dtype=np.uint32)


@kernel("huge_params", "Q32756s", "out[i] = p.w[i] * 3 + i: 32764 parameter bytes, the driver's limit")
def _huge_params(ex: KernelExec, out, p):
    _words_back(ex, out, p)


@kernel("over4k_params", "Q4100s", "out[i] = p.w[i] * 3 + i: 4108 parameter bytes, just above 4 KiB")
def _over4k_params(ex: KernelExec, out, p):
    _words_back(ex, out, p)


def _texel_grid(ex: KernelExec, w, h):
    """Thread i's (x, y) over a w x h image, for the threads the launch has."""
    i = np.arange(ex.elements(int(w) * int(h)))
    return i, i % max(int(w), 1), i // max(int(w), 1)


@kernel("tex_read2d", "QQiifff", "out[i] = tex2D<float>(t, (x + shift) * sx, (y + 0.5) * sy), x = i % w, y = i / w")
def _tex_read2d(ex: KernelExec, t, out, w, h, shift, sx, sy):
    i, x, y = _texel_grid(ex, w, h)
    f = np.float32
    u = (x.astype(f) + f(shift)) * f(sx)
    v = (y.astype(f) + f(0.5)) * f(sy)
    ex.array(out, len(i), np.float32)[:] = ex.texture(t).sample_2d(u, v)


@kernel("tex_fetch1d", "QQii", "out[i] = tex1Dfetch<float>(t, i + offset)")
def _tex_fetch1d(ex: KernelExec, t, out, n, offset):
    i = np.arange(ex.elements(n))
    ex.array(out, len(i), np.float32)[:] = ex.texture(t).fetch_1d(i + int(offset))


@kernel("surf_write2d", "Qiif", "surf2Dwrite(base + i, s, x * 4, y), x = i % w, y = i / w")
def _surf_write2d(ex: KernelExec, surface, w, h, base):
    i, x, y = _texel_grid(ex, w, h)
    ex.texture(surface).write_2d((np.float32(base) + i.astype(np.float32)).astype(np.float32), x * 4, y)


@kernel("iota_affine", "Qiii", "p[i] = i * mul + add (int32)")
def _iota_affine(ex: KernelExec, p, mul, add, n):
    k = ex.elements(n)
    ex.array(p, k, np.int32)[:] = np.arange(k, dtype=np.int32) * np.int32(mul) + np.int32(add)


# tests/cuda/managed.cu: managed memory's kernels (a grid-stride loop, a scale, a list walked through its pointers)
@kernel("set_condition", "QQ", "one thread: cudaGraphSetConditional(handle, *value) (unsigned)")
def _set_condition(ex: KernelExec, handle, value):
    ex.conditional(handle, int(ex.array(value, 1, np.uint32)[0]))


@kernel("count_down", "QQ", "one thread: --*left; cudaGraphSetConditional(handle, *left > 0) (int32): a WHILE "
                            "node's body runs *left times")
def _count_down(ex: KernelExec, handle, left):
    v = ex.array(left, 1, np.int32)
    v[0] -= 1
    ex.conditional(handle, int(v[0] > 0))


@kernel("managed_add", "iQQ", "y[i] = x[i] + y[i] (float32), every i < n (a grid-stride loop)")
def _managed_add(ex: KernelExec, n, x, y):
    n = max(0, n)
    ys = ex.array(y, n, np.float32)
    ys[:] = ex.array(x, n, np.float32) + ys


@kernel("managed_scale", "iQf", "v[i] *= by (float32)")
def _managed_scale(ex: KernelExec, n, v, by):
    k = ex.elements(n)
    vs = ex.array(v, k, np.float32)
    vs[:] = vs * np.float32(by)


# tests/cuda/managed_vars.cu: a kernel naming __managed__ variables of its module, not given them as parameters
@kernel("managed_tally", "i", "one thread: s = sum(seeds[0:4]); seeds[i] *= 2; tally += by + s (int32 globals)")
def _managed_tally(ex: KernelExec, by):
    seeds = ex.array(ex.symbol("seeds"), 4, np.int32)
    tally = ex.array(ex.symbol("tally"), 1, np.int32)
    s = int(seeds.sum(dtype=np.int64))
    seeds[:] = seeds * 2
    tally[0] = np.int32((int(tally[0]) + by + s + 2**31) % 2**32 - 2**31)


_NODE = struct.Struct("<i4xQ")  # struct node { int value; node *next; }


@kernel("managed_walk", "QQQ", "*sum = the values of the list at head; then spare = {1000, NULL} ends it")
def _managed_walk(ex: KernelExec, head, spare, total):
    s, last, p, seen = 0, head, head, 0
    while p:
        value, following = _NODE.unpack(bytes(ex.view(p, _NODE.size)))
        s, last, p, seen = s + value, p, following, seen + 1
        if seen > 1 << 20:  # (a cycle: a GPU would spin until the watchdog; the fake stops)
            break
    ex.view(total, 8)[:] = np.frombuffer(struct.pack("<q", s), np.uint8)
    ex.view(spare, _NODE.size)[:] = np.frombuffer(_NODE.pack(1000, 0), np.uint8)
    ex.view(last + 8, 8)[:] = np.frombuffer(struct.pack("<Q", spare), np.uint8)
