"""A hostile server against the stand-ins' newer replies (VMM, pools, occupancy tables, tensor maps, graph
queries and capture dependencies, a stream's description and attributes, cluster occupancy, JIT links, arrays and texture objects, IPC handles, cuFFT plans, cuSOLVER
and cuSPARSE buffer sizes): a proxy rewrites the first reply of one operation -- a result of the wrong
size, a count above the items sent or above what was asked, bytes past the items -- while an unmodified CUDA
program runs. Each must end in a clean CUDA error and a log line naming the reply, never a crash or a hang.
(tests/test_hostile_server.py does the same for the older replies, under the sanitizers.)"""

from __future__ import annotations

import shutil
import subprocess

import pytest

from rgpu import shims
from rgpu.cli import local_server
from rgpu.protocol import ops

from .math_programs import build_check
from .test_cuda_programs import LINKS, PROGRAMS
from .test_hostile_server import CorruptingProxy, _items, _with

pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc to build the CUDA test programs")


def _short(frame):
    return _with(frame, args=bytes(frame.args)[:-1])


def _first_node_deps(deps: int):
    """GRAPH_GET_NODES' first record (a GRAPH_NODE_INFO reply) claiming `deps` dependencies."""
    def corrupt(frame):
        size = ops.GRAPH_NODE_INFO.reply.size
        bulk = bytes(frame.bulk)
        fields = ops.GRAPH_NODE_INFO.decode_reply(bulk[:size])._replace(deps=deps)
        return _with(frame, bulk=ops.GRAPH_NODE_INFO.pack_reply(*fields) + bulk[size:])
    return corrupt


def _jit_reply(op, **fields):
    """A JIT link reply with some fields replaced, its logs made as long as they then claim."""
    def corrupt(frame):
        reply = op.decode_reply(bytes(frame.args))._replace(**fields)
        return _with(frame, args=op.pack_reply(*reply), bulk=bytes(reply.info_size + reply.error_size))
    return corrupt


CASES = {
    # name: (program, operation, corruption)
    "granularity of the wrong size": ("vmm", ops.MEM_GET_GRANULARITY, _short),
    "physical handle of the wrong size": ("vmm", ops.MEM_CREATE, _short),
    "allocation properties of the wrong size": ("vmm", ops.MEM_GET_ALLOCATION_PROPERTIES, _short),
    "pool pointer of the wrong size": ("pools", ops.MEM_ALLOC_ASYNC, _short),
    "tensor map of the wrong size": ("tensor_map", ops.TENSOR_MAP_ENCODE_TILED, _short),
    "occupancy table above its bytes": ("occupancy", ops.OCCUPANCY_TABLE, _items(ops.OCCUPANCY_TABLE, 4096, 8)),
    "occupancy table of a huge count": ("occupancy", ops.OCCUPANCY_TABLE,
                                        _items(ops.OCCUPANCY_TABLE, 0xFFFFFFFF, 64)),
    "graph nodes above their bytes": ("graphs", ops.GRAPH_GET_NODES, _items(ops.GRAPH_GET_NODES, 1 << 20, 16)),
    "node records with bytes past them": ("graphs", ops.GRAPH_GET_NODES,
                                          lambda f: _with(f, bulk=bytes(f.bulk) + bytes(4096))),
    "node dependencies above the bytes": ("graphs", ops.GRAPH_GET_NODES, _first_node_deps(1000)),
    "capture dependencies above their bytes": ("graphs", ops.STREAM_CAPTURE_DEPENDENCIES,
                                               _items(ops.STREAM_CAPTURE_DEPENDENCIES, 100000, 8)),
    "stream description of the wrong size": ("stream_info", ops.STREAM_GET_INFO, _short),
    "stream attribute value cut short": ("stream_attributes", ops.STREAM_GET_ATTRIBUTE,
                                         lambda f: _with(f, bulk=bytes(f.bulk)[:-1])),
    "stream attribute value with bytes past it": ("stream_attributes", ops.STREAM_GET_ATTRIBUTE,
                                                  lambda f: _with(f, bulk=bytes(f.bulk) + bytes(8))),
    "cluster occupancy of the wrong size": ("clusters", ops.OCCUPANCY_CLUSTERS, _short),
    "link handle of the wrong size": ("jit_link", ops.JIT_LINK_CREATE, _short),
    "JIT log above what was asked": ("jit_link", ops.JIT_LINK_ADD, _jit_reply(ops.JIT_LINK_ADD, info_size=9000)),
    "JIT logs with bytes past them": ("jit_link", ops.JIT_LINK_ADD,
                                      lambda f: _with(f, bulk=bytes(f.bulk) + bytes(3))),
    "linked image beyond the limit": ("jit_link", ops.JIT_LINK_COMPLETE,
                                      _jit_reply(ops.JIT_LINK_COMPLETE, image_size=ops.MAX_JIT_IMAGE + 1)),
    "part of a linked image cut short": ("jit_link", ops.JIT_LINK_READ, lambda f: _with(f, bulk=bytes(f.bulk)[:-1])),
    "array handle of the wrong size": ("textures", ops.ARRAY_CREATE, _short),
    "texture object of the wrong size": ("textures", ops.TEX_OBJECT_CREATE, _short),
    "surface object of the wrong size": ("textures", ops.SURF_OBJECT_CREATE, _short),
    "IPC handle of the wrong size": ("ipc", ops.IPC_GET_MEM_HANDLE, _short),
    "opened IPC memory of the wrong size": ("ipc", ops.IPC_OPEN_MEM_HANDLE, _short),
    "opened IPC memory wrapping around": ("ipc", ops.IPC_OPEN_MEM_HANDLE, lambda f: _with(
        f, args=ops.IPC_OPEN_MEM_HANDLE.pack_reply(1 << 63, 1 << 63))),
    "a count of opens of the wrong size": ("ipc", ops.IPC_CLOSE_MEM_HANDLE, _short),
    # the math libraries' round trips (C programs, built against the library named)
    "cuFFT plan of the wrong size": ("fft_check", ops.FFT_PLAN, _short),
    "cuSOLVER buffer size of the wrong size": ("solver_check", ops.SOLVER_BUFFER_SIZE, _short),
    "cuSPARSE buffer size of the wrong size": ("sparse_check", ops.SPARSE_BUFFER_SIZE, _short),
}
C_PROGRAMS = {"fft_check": "libcufft.so.12", "solver_check": "libcusolver.so.12", "sparse_check": "libcusparse.so.12"}


@pytest.fixture(scope="module")
def server():
    with local_server("fake", ["--log-level", "warning"]) as address:
        yield address


@pytest.fixture(scope="module")
def built(shim_dir, tmp_path_factory):
    out, cache = tmp_path_factory.mktemp("hostile-programs"), {}

    def build(name):
        if name in C_PROGRAMS and name not in cache:
            cache[name] = build_check(shim_dir, out, name, C_PROGRAMS[name])
        if name not in cache:
            exe = out / name
            subprocess.run(["nvcc", "-cudart", "shared", "-o", str(exe), str(PROGRAMS / f"{name}.cu"),
                            f"-L{shim_dir}", *LINKS.get(name, ["-lcuda"]), "-Xlinker", f"-rpath-link={shim_dir}"],
                           check=True, capture_output=True)
            cache[name] = exe
        return cache[name]
    return build


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_corrupt_modern_reply_is_a_clean_error(shim_dir, server, built, case):
    program, op, corrupt = CASES[case]
    exe = built(program)
    proxy = CorruptingProxy(server, op.code, corrupt)
    try:
        env = shims.environment(shim_dir)
        env["RGPU_SERVER"] = proxy.address
        proc = subprocess.run([str(exe)], env=env, capture_output=True, text=True, timeout=120)
    finally:
        proxy.close()
    assert proxy.corrupted.is_set(), f"{program} never received a {op.name} reply"
    text = proc.stdout + proc.stderr
    assert proc.returncode > 0, text  # an error the program reported, not a signal
    assert f"{program} OK" not in proc.stdout, text
    assert f"reply to opcode 0x{op.code:04x} is inconsistent" in proc.stderr or "connection to rgpu-server lost" \
        in proc.stderr, text


@pytest.mark.parametrize("program, first_call", [("jit_link", "cuLinkCreate"), ("textures", "cudaMallocArray")])
def test_a_server_before_protocol_1_8_refuses_its_calls_cleanly(shim_dir, server, built, program, first_call):
    """The server's HELLO says 1.7 (rewritten on the way): linking and arrays answer NOT_SUPPORTED at their first
    call, with a line naming the protocol they need, and nothing reaches the server."""
    def older(frame):
        hello = ops.HELLO.decode_reply(frame.args)._replace(minor=7)
        return _with(frame, args=ops.HELLO.pack_reply(*hello))

    proxy = CorruptingProxy(server, ops.HELLO.code, older)
    try:
        env = shims.environment(shim_dir)
        env["RGPU_SERVER"] = proxy.address
        proc = subprocess.run([str(built(program))], env=env, capture_output=True, text=True, timeout=120)
    finally:
        proxy.close()
    assert proxy.corrupted.is_set()
    assert proc.returncode == 1 and f"{program} OK" not in proc.stdout
    assert "needs a server of protocol 1.8 or later; this one speaks 1.7" in proc.stderr, proc.stderr
    assert first_call in proc.stderr and ("-> 801" in proc.stderr or "cudaErrorNotSupported" in proc.stderr), \
        proc.stderr
