"""Kernel printf reaches the program (the OUTPUT feature): a session worker captures what its kernels print and
sends it ahead of the next reply; the Python client and libcuda write it to the program's stdout before that
call returns. The fake backend's printf_demo / printf_flood kernels print as a GPU's would.

tests/gpu/run_on_gpu.sh's "printf" section compares tests/cuda/printf.cu's output natively and through rgpu."""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess

import pytest

import rgpu
from rgpu import shims
from rgpu.cli import local_server
from rgpu.errors import ProtocolError
from rgpu.protocol import ops
from rgpu.protocol.frames import Flags, Frame
from rgpu.protocol.handshake import SUPPORTED_FEATURES, ClientHandshake, Feature, Hello, ServerHandshake
from rgpu.serving.output import KernelOutput, marker

REPO = pathlib.Path(__file__).parents[1]
PTX = b"""
.version 7.0
.target sm_70
.address_size 64
.visible .entry printf_demo(.param .u32 tag) { ret; }
.visible .entry printf_flood(.param .u64 n) { ret; }
"""
EXPECTED_PROGRAM_OUTPUT = """host: before the first launch
printf_demo: block 0 thread 0 tag 7
printf_demo: block 0 thread 1 tag 7
printf_demo: block 0 thread 2 tag 7
printf_demo: block 0 thread 3 tag 7
host: after the first synchronisation
printf_demo: block 0 thread 0 tag 8
printf_demo: block 0 thread 1 tag 8
printf OK
"""


@pytest.fixture(scope="module")
def server():
    with local_server("fake", ["--log-level", "warning"]) as address:
        yield address


class Collected:
    def __init__(self):
        self.chunks: list[bytes] = []

    def __call__(self, data: bytes) -> None:
        self.chunks.append(data)

    @property
    def text(self) -> str:
        return b"".join(self.chunks).decode()


def _functions(c):
    mod = c.module_load(PTX)
    return c.get_function(mod, "printf_demo"), c.get_function(mod, "printf_flood")


def test_python_client_gets_kernel_output_before_the_synchronising_call_returns(server):
    out = Collected()
    with rgpu.connect(server, output=out) as c:
        assert c.server.features & Feature.OUTPUT
        demo, _ = _functions(c)
        c.launch(demo, 2, 3, (5,))  # deferred: nothing has run yet
        assert out.chunks == []
        c.synchronize()
        expected = "".join(f"printf_demo: block {b} thread {t} tag 5\n" for b in range(2) for t in range(3))
        assert out.text == expected
        c.synchronize()  # delivered once
        assert out.text == expected


async def test_trio_client_gets_kernel_output_too(server):
    out = Collected()
    c = await rgpu.connect_async(server, output=out)
    try:
        demo = await c.get_function(await c.module_load(PTX), "printf_demo")
        await c.launch(demo, 1, 2, (4,))
        await c.synchronize()
        assert out.text == "printf_demo: block 0 thread 0 tag 4\nprintf_demo: block 0 thread 1 tag 4\n"
    finally:
        await c.aclose()


@pytest.fixture(scope="module")
def printf_program(shim_dir, tmp_path_factory):
    if shutil.which("nvcc") is None:
        pytest.skip("needs nvcc to build the CUDA test program")
    exe = tmp_path_factory.mktemp("printf") / "printf"
    subprocess.run(["nvcc", "-cudart", "shared", "-o", str(exe), str(REPO / "tests" / "cuda" / "printf.cu"),
                    f"-L{shim_dir}", "-Xlinker", f"-rpath-link={shim_dir}"], check=True, capture_output=True)
    return exe


@pytest.mark.parametrize("psk", [False, True], ids=["plain", "psk"])
def test_c_program_prints_kernel_output_in_order_with_its_own(shim_dir, printf_program, server, tmp_path, psk):
    """tests/cuda/printf.cu unchanged, stdout a pipe (so C's stdout is fully buffered): the device lines land
    between the program's own lines exactly where a local driver puts them; in clear and in sealed records."""
    env = shims.environment(shim_dir)
    if not psk:
        env["RGPU_SERVER"] = server
        proc = subprocess.run([str(printf_program)], env=env, capture_output=True, text=True, timeout=120)
    else:
        key = tmp_path / "key"
        key.write_text(os.urandom(32).hex())
        key.chmod(0o600)
        with local_server("fake", ["--log-level", "warning", "--psk-file", str(key)]) as address:
            env.update(RGPU_SERVER=address, RGPU_PSK_FILE=str(key))
            proc = subprocess.run([str(printf_program)], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout == EXPECTED_PROGRAM_OUTPUT, proc.stdout


def test_a_flood_is_cut_at_the_limit_with_a_marker_and_the_session_goes_on(server):
    out = Collected()
    with rgpu.connect(server, output=out) as c:
        demo, flood = _functions(c)
        c.launch(flood, 1, 1, (12 << 20,))
        c.synchronize()
        text = out.text
        kept, _, tail = text.partition("\n[rgpu: ")
        assert len(kept) == 4 << 20  # what came first, up to the limit
        assert tail.startswith(f"{8 << 20} bytes of kernel printf output dropped")
        assert all(line.startswith("printf_flood: ") for line in kept.splitlines()[:-1])
        out.chunks.clear()
        c.launch(demo, 1, 1, (9,))
        assert c.mem_get_info()[1] > 0  # any call with a reply brings the output ahead of it
        assert out.text == "printf_demo: block 0 thread 0 tag 9\n"


def test_a_client_without_the_feature_leaves_output_in_the_servers_stdout(capfd):
    """An older client (no OUTPUT bit in its HELLO) keeps the old behaviour: the server's stdout."""
    older = int(SUPPORTED_FEATURES & ~Feature.OUTPUT)
    with local_server("fake", ["--log-level", "warning"]) as address:
        host, port = address.rsplit(":", 1)
        import socket

        from rgpu.client import Client
        from rgpu.protocol.connection import Connection
        from rgpu.transport import SocketFrameStream

        hs = ClientHandshake(None, features=older)
        sock = socket.create_connection((host, int(port)))
        io = SocketFrameStream(sock, Connection())
        io.send_frames([hs.hello()])
        assert hs.on_hello_reply(io.receive_frame()) is None
        out = Collected()
        with Client(sock, io, hs, True, out) as c:
            assert not c.server.features & Feature.OUTPUT
            c.init()
            c.ctx_set_current(c.primary_ctx_retain(0))
            demo, _ = _functions(c)
            c.launch(demo, 1, 2, (3,))
            c.synchronize()
        assert out.chunks == []
    assert "printf_demo: block 0 thread 1 tag 3\n" in capfd.readouterr().out


def test_thread_isolation_does_not_offer_the_feature(capfd):
    """Sessions in one process share its stdout: the server cannot tell whose output is whose."""
    with local_server("fake", ["--isolation", "thread", "--log-level", "warning"]) as address:
        out = Collected()
        with rgpu.connect(address, output=out) as c:
            assert not c.server.features & Feature.OUTPUT
            demo, _ = _functions(c)
            c.launch(demo, 1, 1, (6,))
            c.synchronize()
        assert out.chunks == []
    assert "printf_demo: block 0 thread 0 tag 6\n" in capfd.readouterr().out
    hello = Hello(agent="t").to_frame(1)
    hs = ServerHandshake(None, max_frame=1 << 20, session_id=1,
                         features=int(SUPPORTED_FEATURES & ~Feature.OUTPUT))
    assert not Hello.from_frame(hs.on_hello(hello)).features & Feature.OUTPUT
    assert Hello.from_frame(ServerHandshake(None, max_frame=1 << 20, session_id=2).on_hello(hello)).features \
        & Feature.OUTPUT


# -- the worker's capture, on a spare descriptor instead of fd 1 ---------------------------------------------------
@pytest.fixture
def spare_fd(tmp_path):
    path = tmp_path / "server-stdout"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    yield fd, path
    os.close(fd)


def _write(fd: int, data: bytes) -> None:
    while data:
        data = data[os.write(fd, data):]


def test_capture_takes_what_was_written_and_chunks_it(spare_fd):
    fd, path = spare_fd
    out = KernelOutput.capture(max_chunk=10, target_fd=fd)
    try:
        _write(fd, b"0123456789abcdefghij-x")
        frames = out.frames()
        assert [bytes(f.bulk) for f in frames] == [b"0123456789", b"abcdefghij", b"-x"]
        assert all(f.opcode == ops.OUTPUT.code and f.flags == Flags.REPLY and not f.args for f in frames)
        assert out.frames() == []
        _write(fd, b"left over")
    finally:
        out.close()
    assert path.read_bytes() == b"left over"  # the client is gone: the server's stdout gets it, as before
    assert out.forwarded == 22 + 9


def test_capture_never_blocks_the_writer_and_drops_beyond_the_limit(spare_fd):
    """More than a pipe holds between two replies: the writer (the driver, mid-call) must not block."""
    fd, _ = spare_fd
    out = KernelOutput.capture(max_chunk=1 << 20, max_pending=100_000, target_fd=fd)
    try:
        _write(fd, b"a" * 1_000_000)  # blocks forever unless the thread drains the pipe
        data = out.take()
        assert data == b"a" * 100_000 + marker(900_000, 100_000)
        _write(fd, b"after")
        assert out.take() == b"after"
    finally:
        out.close()
    assert out.dropped_total == 900_000


class _Output:
    """The Python client's handling of OUTPUT frames, without a connection."""

    from rgpu.client import _Operations

    _is_output = _Operations._is_output

    def __init__(self, takes: bool):
        self._takes_output = takes
        self._output = Collected()


def test_python_client_refuses_output_it_did_not_ask_for_or_malformed():
    frame = Frame(ops.OUTPUT.code, 0, Flags.REPLY, bulk=b"hi\n")
    ok = _Output(True)
    assert ok._is_output(frame) and ok._output.text == "hi\n"
    assert not ok._is_output(Frame(ops.NOP.code, 3, Flags.REPLY))
    with pytest.raises(ProtocolError, match="did not ask for"):
        _Output(False)._is_output(frame)
    for bad in (Frame(ops.OUTPUT.code, 0, Flags.REPLY, args=b"x"), Frame(ops.OUTPUT.code, 5, Flags.REPLY),
                Frame(ops.OUTPUT.code, 0, Flags.REPLY, status=1), Frame(ops.OUTPUT.code, 0, 0)):
        with pytest.raises(ProtocolError, match="malformed OUTPUT"):
            _Output(True)._is_output(bad)
