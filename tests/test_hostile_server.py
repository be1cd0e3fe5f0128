"""A hostile server against the C stand-ins: a proxy between a program and a real server (fake backend) rewrites
one kind of reply -- results of the wrong size, bulk lengths past the record, parameter layouts that overlap,
wrap or exceed the driver's limit, counts above what was asked for, copies shorter or longer than asked, a frame
limit of 0 or 0xFFFFFFFF. Each must end in a clean error to the program (and, for an inconsistent reply, a
closed connection), never a crash or an out-of-bounds access.

The stand-ins are built with AddressSanitizer and UndefinedBehaviorSanitizer where the compiler has them (the
programs too, so the sanitizer runtime comes first); any sanitizer report fails the test. Also here: kernel
parameters up to the driver's limit through the driver API, and one byte more refused."""

from __future__ import annotations

import contextlib
import os
import pathlib
import shutil
import socket
import struct
import subprocess
import threading

import pytest

from rgpu import shims
from rgpu.cli import local_server
from rgpu.protocol import ops
from rgpu.protocol.frames import HEADER, Flags, Frame, frame_bytes, parse_frame
from rgpu.protocol.handshake import Feature

REPO = pathlib.Path(__file__).parents[1]
PTX = REPO / "src" / "rgpu" / "kernels" / "demo.ptx"
PROGRAMS = REPO / "tests" / "cuda"
SANITIZE = ["-fsanitize=address,undefined", "-fno-sanitize-recover=undefined", "-fno-omit-frame-pointer"]
SANITIZER_ENV = {"ASAN_OPTIONS": "detect_leaks=0:exitcode=99", "UBSAN_OPTIONS": "print_stacktrace=1:exitcode=98"}

HUGE_PTX = b"""
.version 7.0
.target sm_70
.address_size 64
.visible .entry huge_params(.param .u64 out, .param .align 4 .b8 p[32756])
{
    ret;
}
"""


def _sanitizers_work(tmp: pathlib.Path) -> bool:
    src = tmp / "probe.c"
    src.write_text("int main(void) { return 0; }\n")
    probe = subprocess.run(["gcc", *SANITIZE, str(src), "-o", str(tmp / "probe")], capture_output=True)
    return probe.returncode == 0 and subprocess.run([str(tmp / "probe")], capture_output=True).returncode == 0


@pytest.fixture(scope="module")
def stand_ins(tmp_path_factory):
    """(shim dir, compiler command, sanitized): the stand-ins built with ASan+UBSan if the compiler can."""
    tmp = tmp_path_factory.mktemp("hostile")
    if _sanitizers_work(tmp):
        cc = tmp / "gcc-sanitized"  # shims.build takes one compiler word: a wrapper adds the flags
        cc.write_text(f"#!/bin/sh\nexec gcc {' '.join(SANITIZE)} \"$@\"\n")
        cc.chmod(0o755)
        sanitized = True
    else:
        cc, sanitized = pathlib.Path(shutil.which("gcc")), False
    out = tmp / "shims"
    shims.build(out, cc=str(cc))
    shims.build_examples(out, cc=str(cc))
    return out, str(cc), sanitized


def _build(stand_ins, name: str, source: pathlib.Path, *libs: str) -> pathlib.Path:
    out, cc, _ = stand_ins
    exe = out.parent / name
    subprocess.run([cc, "-O1", "-g", "-Wall", "-Wno-deprecated-declarations", f"-I{shims.cuda_include(13)}",
                    f"-I{REPO / 'native' / 'gen'}", "-o", str(exe), str(source), f"-L{out}", *libs, "-lm",
                    f"-Wl,-rpath-link,{out}"], check=True)
    return exe


@pytest.fixture(scope="module")
def programs(stand_ins):
    return {"reply_checks": _build(stand_ins, "reply_checks", REPO / "native" / "tests" / "reply_checks.c",
                                   "-l:libcuda.so.1"),
            "blas_check": _build(stand_ins, "blas_check", PROGRAMS / "blas_check.c", "-l:libcudart.so.13",
                                 "-l:libcublas.so.13", "-l:libcublasLt.so.13"),
            "dnn_check": _build(stand_ins, "dnn_check", PROGRAMS / "dnn_check.c", "-l:libcudart.so.13",
                                "-l:libcudnn.so.9"),
            "rand_check": _build(stand_ins, "rand_check", PROGRAMS / "rand_check.c", "-l:libcudart.so.13",
                                 "-l:libcurand.so.10"),
            "blas_more_check": _build(stand_ins, "blas_more_check", PROGRAMS / "blas_more_check.c",
                                      "-l:libcudart.so.13", "-l:libcublas.so.13"),
            "blas_level3_check": _build(stand_ins, "blas_level3_check", PROGRAMS / "blas_level3_check.c",
                                        "-l:libcudart.so.13", "-l:libcublas.so.13")}


@pytest.fixture(scope="module")
def server():
    with local_server("fake", ["--log-level", "warning"]) as address:
        yield address


def _run(stand_ins, exe, *args, server: str, env=None):
    out, _, _ = stand_ins
    e = shims.environment(out)
    e.pop("LD_PRELOAD")  # the sanitizer runtime must be the first library loaded: the program links the stand-ins
    e.update(SANITIZER_ENV, RGPU_SERVER=server, **(env or {}))
    return subprocess.run([str(exe), *map(str, args)], env=e, capture_output=True, text=True, timeout=120)


def _no_sanitizer_report(proc):
    text = proc.stdout + proc.stderr
    assert "AddressSanitizer" not in text and "runtime error" not in text, text
    assert proc.returncode >= 0 and proc.returncode not in (98, 99), text


# -- the proxy ----------------------------------------------------------------------------------------------------
class CorruptingProxy:
    """Forwards each connection to `upstream`; the first successful reply of opcode `opcode` (a refusal carries
    nothing to corrupt) goes to `corrupt(frame)`, which returns the bytes the client gets instead (a whole record:
    prefix, header, args, bulk -- or anything)."""

    def __init__(self, upstream: str, opcode: int, corrupt):
        self.upstream, self.opcode, self.corrupt = upstream, opcode, corrupt
        self.corrupted = threading.Event()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.listener.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            host, port = self.upstream.rsplit(":", 1)
            upstream = socket.create_connection((host, int(port)))
            threading.Thread(target=self._up, args=(client, upstream), daemon=True).start()
            threading.Thread(target=self._down, args=(upstream, client), daemon=True).start()

    @staticmethod
    def _up(client, upstream):
        try:
            while data := client.recv(1 << 16):
                upstream.sendall(data)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):  # (wakes _down's recv: close alone leaves the server's session open)
                upstream.shutdown(socket.SHUT_RDWR)
            upstream.close()

    @staticmethod
    def _exactly(sock, n):
        data = b""
        while len(data) < n:
            chunk = sock.recv(n - len(data))
            if not chunk:
                raise OSError("closed")
            data += chunk
        return data

    def _down(self, upstream, client):
        try:
            while True:
                prefix = self._exactly(upstream, 4)
                body = self._exactly(upstream, int.from_bytes(prefix, "little"))
                frame = parse_frame(body)
                if frame.opcode == self.opcode and not frame.status and not self.corrupted.is_set():
                    self.corrupted.set()
                    client.sendall(self.corrupt(frame))
                else:
                    client.sendall(prefix + body)
        except OSError:
            pass
        finally:
            client.close()

    def close(self):
        self.listener.close()


def _with(frame: Frame, **changes) -> bytes:
    fields = dict(opcode=frame.opcode, request_id=frame.request_id, flags=frame.flags, status=frame.status,
                  deferred_status=frame.deferred_status, args=bytes(frame.args), bulk=bytes(frame.bulk))
    fields.update(changes)
    return frame_bytes(Frame(**fields))


def _layout(count: int, entries) -> callable:
    def corrupt(frame):
        reply = ops.MODULE_GET_FUNCTION.decode_reply(frame.args)
        args = ops.MODULE_GET_FUNCTION.pack_reply(reply.function, count)
        return _with(frame, args=args, bulk=b"".join(struct.pack("<II", *e) for e in entries))
    return corrupt


def _items(op, count: int, nbytes: int) -> callable:
    def corrupt(frame):
        fields = op.decode_reply(frame.args)._replace(count=count)
        return _with(frame, args=op.pack_reply(*fields), bulk=bytes(nbytes))
    return corrupt


def _hello(max_frame: int) -> callable:
    def corrupt(frame):
        fields = ops.HELLO.decode_reply(frame.args)._replace(max_frame=max_frame)
        return _with(frame, args=ops.HELLO.pack_reply(*fields))
    return corrupt


def _raw_record(frame) -> bytes:
    """A header whose bulk length runs past the record."""
    head = HEADER.pack(frame.opcode, 1, frame.request_id, 0, 0, 1 << 30)
    return struct.pack("<I", len(head) + len(frame.args)) + head + bytes(frame.args)


REPLY_CASES = {
    # name: (opcode, corruption, what the program sees)
    "result of the wrong size": (ops.MEM_ALLOC.code, lambda f: _with(f, args=bytes(4)), "lost"),
    "bulk length past the record": (ops.MEM_ALLOC.code, _raw_record, "lost"),
    "record length of 4 GiB": (ops.MEM_ALLOC.code, lambda f: struct.pack("<I", 0xFFFFFFF0) + bytes(64), "lost"),
    "overlapping parameter layout": (ops.MODULE_GET_FUNCTION.code,
                                     _layout(4, [(0, 4000), (8, 8), (16, 8), (24, 4)]), "inconsistent"),
    "parameter layout wrapping u32": (ops.MODULE_GET_FUNCTION.code,
                                      _layout(4, [(0, 8), (8, 8), (16, 8), (0xFFFFFFF0, 0x14)]), "inconsistent"),
    "parameter layout past the limit": (ops.MODULE_GET_FUNCTION.code,
                                        _layout(2, [(0, 8), (8, 40000)]), "inconsistent"),
    "parameter count above the layout sent": (ops.MODULE_GET_FUNCTION.code,
                                              _layout(4, [(0, 8), (8, 8)]), "inconsistent"),
    "huge parameter count": (ops.MODULE_GET_FUNCTION.code, _layout(0x7FFFFFFF, [(0, 8)]), "inconsistent"),
    "device attributes above the count asked": (ops.DEVICE_GET_ATTRIBUTES.code,
                                                _items(ops.DEVICE_GET_ATTRIBUTES, 300, 1200), "inconsistent"),
    "device attribute bytes not the count": (ops.DEVICE_GET_ATTRIBUTES.code,
                                             _items(ops.DEVICE_GET_ATTRIBUTES, 256, 10), "inconsistent"),
    "function attributes above the count asked": (ops.FUNC_GET_ATTRIBUTES.code,
                                                  _items(ops.FUNC_GET_ATTRIBUTES, 17, 68), "inconsistent"),
    "copy shorter than asked": (ops.MEMCPY_DTOH.code, lambda f: _with(f, bulk=bytes(f.bulk)[: len(f.bulk) // 2]),
                                "inconsistent"),
    "copy longer than asked": (ops.MEMCPY_DTOH.code, lambda f: _with(f, bulk=bytes(f.bulk) * 2), "inconsistent"),
    "frame limit of 0": (ops.HELLO.code, _hello(0), "frame limit"),
    "kernel output with arguments": (ops.MEM_ALLOC.code, lambda f: _output(b"x", args=b"\1") + _with(f), "lost"),
    "kernel output as an error": (ops.MEM_ALLOC.code, lambda f: _output(b"x", status=1) + _with(f), "lost"),
    "kernel output bulk past the record": (ops.MEM_ALLOC.code,
                                           lambda f: _raw_record(Frame(ops.OUTPUT.code)) + _with(f), "lost"),
}


def _reply_checks_through(stand_ins, programs, server, *layers):
    """reply_checks through a chain of proxies, one per (opcode, corruption), the first next to the server."""
    proxies = []
    try:
        for opcode, corrupt in layers:
            proxies.append(CorruptingProxy(proxies[-1].address if proxies else server, opcode, corrupt))
        proc = _run(stand_ins, programs["reply_checks"], PTX, "vadd", server=proxies[-1].address)
    finally:
        for proxy in reversed(proxies):
            proxy.close()
    _no_sanitizer_report(proc)
    return proc


def _output(text: bytes, **changes) -> bytes:
    return _with(Frame(ops.OUTPUT.code, 0, Flags.REPLY, bulk=text), **changes)


@pytest.mark.parametrize("case", sorted(REPLY_CASES))
def test_malformed_reply_is_a_clean_error(stand_ins, programs, server, case):
    opcode, corrupt, expected = REPLY_CASES[case]
    proxy = CorruptingProxy(server, opcode, corrupt)
    try:
        proc = _run(stand_ins, programs["reply_checks"], PTX, "vadd", server=proxy.address)
    finally:
        proxy.close()
    assert proxy.corrupted.is_set(), f"the program never received a {case} reply"
    _no_sanitizer_report(proc)
    assert proc.returncode == 3, proc.stdout + proc.stderr  # a CUDA error, reported to the program
    message = {"lost": "connection to rgpu-server lost", "inconsistent": "is inconsistent",
               "frame limit": "frame limit of 0 bytes"}[expected]
    assert message in proc.stderr, proc.stderr


def test_kernel_output_is_printed_only_when_asked_for(stand_ins, programs, server):
    """OUTPUT ahead of a reply goes to the program's stdout, before its own later lines; from a server whose
    HELLO did not take the feature, the same frame is refused and the connection closed."""
    proxy = CorruptingProxy(server, ops.MEM_ALLOC.code, lambda f: _output(b"from the kernel\n") + _with(f))
    try:
        proc = _run(stand_ins, programs["reply_checks"], PTX, "vadd", server=proxy.address)
    finally:
        proxy.close()
    _no_sanitizer_report(proc)
    assert proc.returncode == 0 and proc.stdout.endswith("from the kernel\nreply_checks OK\n"), proc.stdout

    def without_output(frame):
        fields = ops.HELLO.decode_reply(frame.args)
        return _with(frame, args=ops.HELLO.pack_reply(*fields._replace(features=fields.features & ~Feature.OUTPUT)))

    proc = _reply_checks_through(stand_ins, programs, server, (ops.HELLO.code, without_output),
                                 (ops.MEM_ALLOC.code, lambda f: _output(b"unasked\n") + _with(f)))
    assert proc.returncode == 3 and "unasked" not in proc.stdout, proc.stdout + proc.stderr
    assert "kernel output that this library did not ask for" in proc.stderr, proc.stderr


def test_frame_limit_of_4_gib_is_clamped(stand_ins, programs, server):
    """max_frame 0xFFFFFFFF: the client keeps its own ceiling, works normally, and still refuses a record
    beyond that ceiling before allocating for it."""
    proxy = CorruptingProxy(server, ops.HELLO.code, _hello(0xFFFFFFFF))
    try:
        proc = _run(stand_ins, programs["reply_checks"], PTX, "vadd", server=proxy.address)
    finally:
        proxy.close()
    _no_sanitizer_report(proc)
    assert proc.returncode == 0 and "reply_checks OK" in proc.stdout, proc.stdout + proc.stderr

    # 0xFFFFFFFF announced, then a 2 GiB record: refused by its length alone.
    proc = _reply_checks_through(stand_ins, programs, server, (ops.HELLO.code, _hello(0xFFFFFFFF)),
                                 (ops.MEM_ALLOC.code, lambda f: struct.pack("<I", 0x80000000) + bytes(64)))
    assert proc.returncode == 3 and "connection to rgpu-server lost" in proc.stderr, proc.stdout + proc.stderr


def test_heuristic_count_above_the_request(stand_ins, programs, server):
    proxy = CorruptingProxy(server, ops.LT_HEURISTIC.code, _items(ops.LT_HEURISTIC, 10, 960))
    try:
        proc = _run(stand_ins, programs["blas_check"], server=proxy.address)
    finally:
        proxy.close()
    assert proxy.corrupted.is_set()
    _no_sanitizer_report(proc)
    assert proc.returncode != 0 and "reply to opcode 0x00a0 is inconsistent" in proc.stderr, proc.stdout + proc.stderr


def test_cudnn_getter_bulk_over_the_requested_elements(stand_ins, programs, server):
    def more(frame):
        return _with(frame, bulk=bytes(frame.bulk) + bytes(4096))

    proxy = CorruptingProxy(server, ops.DNN_GET_ATTRIBUTE.code, more)
    try:
        proc = _run(stand_ins, programs["dnn_check"], server=proxy.address)
    finally:
        proxy.close()
    assert proxy.corrupted.is_set()
    _no_sanitizer_report(proc)
    assert proc.returncode != 0 and "reply to opcode 0x00b3 is inconsistent" in proc.stderr, proc.stdout + proc.stderr


def test_well_behaved_server_through_the_proxy_and_sanitizers(stand_ins, programs, server):
    """The baseline: nothing corrupted (an opcode never sent), every program passes under the sanitizers."""
    proxy = CorruptingProxy(server, 0xFFFF, None)
    try:
        for name, args in (("reply_checks", (PTX, "vadd")), ("blas_check", ()), ("dnn_check", ()), ("rand_check", ()),
                           ("rand_check", ("bad",)), ("blas_more_check", ()), ("blas_more_check", ("bad",)),
                           ("blas_level3_check", ()), ("blas_level3_check", ("bad",))):
            proc = _run(stand_ins, programs[name], *args, server=proxy.address)
            _no_sanitizer_report(proc)
            assert proc.returncode == 0, name + proc.stdout + proc.stderr
    finally:
        proxy.close()


@pytest.mark.parametrize("layout_known", [True, False])
def test_kernel_parameters_up_to_the_drivers_limit(stand_ins, programs, tmp_path, monkeypatch, layout_known):
    """32764 bytes of parameters reach the kernel intact (the fake's huge_params gives every word back). Without
    a layout from the server a packed buffer is all there is: 32765 bytes of it are CUDA_ERROR_INVALID_VALUE with
    one log line, at the default log level. With a layout, only the layout's bytes of a larger buffer are sent."""
    ptx = tmp_path / "huge.ptx"
    ptx.write_bytes(HUGE_PTX)
    if not layout_known:
        monkeypatch.setenv("RGPU_FAKE_NO_PARAM_INFO", "1")  # the server's driver "predates" cuFuncGetParamInfo
    with local_server("fake", ["--log-level", "warning"]) as address:
        proc = _run(stand_ins, programs["reply_checks"], ptx, "huge_params", "limit", server=address)
    _no_sanitizer_report(proc)
    assert proc.returncode == 0 and "reply_checks OK" in proc.stdout, proc.stdout + proc.stderr
    assert ("8+32756 parameter bytes intact" in proc.stdout) == layout_known
    assert f"packed 32764 -> 0, 32765 -> {0 if layout_known else 1}, sync 0" in proc.stdout
    refusal = "32765 bytes of kernel parameters exceed the driver's limit of 32764"
    assert proc.stderr.count(refusal) == (0 if layout_known else 1), proc.stderr


def test_examples_under_the_sanitizers_plain_and_with_a_psk(stand_ins, tmp_path):
    """The native examples on the sanitized stand-ins against a well-behaved server, in clear and with record
    protection (the AEAD and handshake paths)."""
    out = stand_ins[0]
    key = tmp_path / "key"
    key.write_text(bytes(range(32)).hex())
    key.chmod(0o600)
    for psk in (False, True):
        with local_server("fake", ["--log-level", "warning", *(["--psk-file", str(key)] if psk else [])]) as address:
            env = {"RGPU_PSK_FILE": str(key)} if psk else {}
            for program, args, expected, more in (
                    ("rpc_smoke", (), "pipelined round trip of 9437189 bytes OK", {}),
                    ("vecadd", (PTX, 100_000), "OK (0 wrong)", {}),
                    ("copy_check", (), "13 copies, 0 wrong; copy past the end: 1",
                     {"RGPU_COPY_LINKS": "3", "RGPU_COPY_LINK_MIN_KIB": "128"}),
                    ("fork_check", (), "its copies and the thread's went on, 0 wrong",
                     {"RGPU_COPY_LINKS": "3", "RGPU_COPY_LINK_MIN_KIB": "128"})):
                proc = _run(stand_ins, out / program, *args, server=address, env={**env, **more})
                _no_sanitizer_report(proc)
                assert proc.returncode == 0 and expected in proc.stdout, (program, psk, proc.stdout + proc.stderr)


# -- copy links (native/src/conn_links.c) against a server that offers them wrongly or drops them -------------------
class LinkCutter(CorruptingProxy):
    """Forwards every connection; a copy link (its first frame a LINK_JOIN) is cut, both ways, once `cut` bytes of
    it have gone up."""

    def __init__(self, upstream: str, cut: int):
        self.cut, self.links_cut = cut, threading.Event()
        super().__init__(upstream, -1, None)

    def _down(self, upstream, client):  # (as it is: a sealed session's records cannot be parsed on the way)
        CorruptingProxy._up(upstream, client)

    def _up(self, client, upstream):
        sent, link = 0, None
        try:
            while data := client.recv(1 << 16):
                if link is None:
                    link = len(data) >= 6 and int.from_bytes(data[4:6], "little") == ops.LINK_JOIN.code
                if link and sent + len(data) > self.cut:
                    upstream.sendall(data[: self.cut - sent])
                    self.links_cut.set()
                    break
                upstream.sendall(data)
                sent += len(data)
        except OSError:
            pass
        finally:
            for s in (upstream, client):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()


def _links_open(**changes) -> callable:
    def corrupt(frame):
        fields = ops.LINKS_OPEN.decode_reply(frame.args)._replace(**changes)
        return _with(frame, args=ops.LINKS_OPEN.pack_reply(*fields))
    return corrupt


LINK_CASES = {
    # name: (opcode, corruption, what the program sees)
    "a part size of 1 GiB": (ops.LINKS_OPEN.code, _links_open(part_max=1 << 30), "no links"),
    "a part size of 1 KiB": (ops.LINKS_OPEN.code, _links_open(part_max=1 << 10), "no links"),
    "no links": (ops.LINKS_OPEN.code, _links_open(links=0), "no links"),
    "4 billion links": (ops.LINKS_OPEN.code, _links_open(links=0xFFFFFFFF), "links"),
    "an offer of the wrong size": (ops.LINKS_OPEN.code, lambda f: _with(f, args=bytes(8)), "lost"),
    "a refused join": (ops.LINK_JOIN.code, lambda f: _with(f, status=0x10003, bulk=b"no"), "no links"),
    "a join answered with arguments": (ops.LINK_JOIN.code, lambda f: _with(f, args=b"\1"), "no links"),
    "a join answer past its record": (ops.LINK_JOIN.code, _raw_record, "no links"),
    "a join answered for another request": (ops.LINK_JOIN.code, lambda f: _with(f, request_id=7), "no links"),
}


@pytest.mark.parametrize("case", sorted(LINK_CASES))
def test_copy_links_offered_or_answered_wrongly_fall_back_or_fail_cleanly(stand_ins, server, case):
    opcode, corrupt, expected = LINK_CASES[case]
    proxy = CorruptingProxy(server, opcode, corrupt)
    try:
        proc = _run(stand_ins, stand_ins[0] / "copy_check", server=proxy.address,
                    env={"RGPU_COPY_LINKS": "4", "RGPU_COPY_LINK_MIN_KIB": "128", "RGPU_LOG": "info"})
    finally:
        proxy.close()
    assert proxy.corrupted.is_set(), f"the program never received {case}"
    _no_sanitizer_report(proc)
    text = proc.stdout + proc.stderr
    if expected == "lost":
        assert proc.returncode == 2 and "connection to rgpu-server lost" in proc.stderr, text
        return
    assert proc.returncode == 0 and "13 copies, 0 wrong" in proc.stdout, text
    if expected == "no links":
        assert "offers no copy links" in proc.stderr or "refused or failed" in proc.stderr, text
    else:  # (no more links than the client asked for, whatever the offer)
        assert "4 copy links to" in proc.stderr, text


@pytest.mark.parametrize("psk", [False, True], ids=["plain", "sealed"])
def test_a_copy_link_cut_mid_copy_fails_that_copy_not_the_program(stand_ins, tmp_path, psk):
    """The links are cut under a copy: the program gets the copy's error (the server's PROTOCOL_ERROR, deferred) at
    its next call that waits, never a hang or a crash."""
    key = tmp_path / "key"
    key.write_text(bytes(range(32)).hex())
    key.chmod(0o600)
    with local_server("fake", ["--log-level", "warning", *(["--psk-file", str(key)] if psk else [])]) as address:
        proxy = LinkCutter(address, 300_000)
        try:
            proc = _run(stand_ins, stand_ins[0] / "copy_check", server=proxy.address,
                        env={"RGPU_COPY_LINKS": "2", "RGPU_COPY_LINK_MIN_KIB": "128",
                             **({"RGPU_PSK_FILE": str(key)} if psk else {})})
        finally:
            proxy.close()
    assert proxy.links_cut.is_set()
    _no_sanitizer_report(proc)
    assert proc.returncode == 2 and "status 0x10001 (protocol error)" in proc.stderr, proc.stdout + proc.stderr
    assert "failed: CUDA_ERROR_UNKNOWN" in proc.stderr


class RecordBitFlipper(CorruptingProxy):
    """Sealed records cannot be parsed on the way: flips one bit in the middle of the first server record of at
    least `min_len` bytes, by its length prefix alone -- or, with `cut`, passes on its first half and hangs up."""

    def __init__(self, upstream: str, min_len: int, cut: bool = False):
        super().__init__(upstream, -1, None)
        self.min_len, self.cut = min_len, cut

    def _down(self, upstream, client):
        try:
            while True:
                prefix = self._exactly(upstream, 4)
                body = bytearray(self._exactly(upstream, int.from_bytes(prefix, "little")))
                if len(body) >= self.min_len and not self.corrupted.is_set():
                    self.corrupted.set()
                    if self.cut:  # (shutdown: a close alone waits for the other thread's recv on it)
                        client.sendall(prefix + body[: len(body) // 2])
                        client.shutdown(socket.SHUT_RDWR)
                        return
                    body[len(body) // 2] ^= 0x10
                client.sendall(prefix + body)
        except OSError:
            pass
        finally:
            client.close()


@pytest.mark.parametrize("cut", [False, True], ids=["tampered", "cut short"])
def test_tampered_big_sealed_reply_reaches_no_memory(stand_ins, programs, tmp_path, cut):
    """A sealed reply is decrypted where it is going as it arrives (conn_io.c): when its tag then fails, or the
    record never ends, the copy is an error, the connection is closed, and none of the unauthenticated bytes
    stay in the program's buffer."""
    key = tmp_path / "key"
    key.write_text(bytes(range(32)).hex())
    key.chmod(0o600)
    with local_server("fake", ["--log-level", "warning", "--psk-file", str(key)]) as address:
        env = {"RGPU_PSK_FILE": str(key)}
        clean = _run(stand_ins, programs["reply_checks"], PTX, "vadd", "copyback", server=address, env=env)
        _no_sanitizer_report(clean)
        assert "copy back -> 0, pattern bytes received: 3145728" in clean.stdout, clean.stdout + clean.stderr
        proxy = RecordBitFlipper(address, 1 << 20, cut)
        try:
            proc = _run(stand_ins, programs["reply_checks"], PTX, "vadd", "copyback", server=proxy.address, env=env)
        finally:
            proxy.close()
    assert proxy.corrupted.is_set()
    _no_sanitizer_report(proc)
    assert proc.returncode == 3 and "pattern bytes received: 0" in proc.stdout, proc.stdout + proc.stderr
    assert "copy back -> 46" in proc.stdout and "connection to rgpu-server lost" in proc.stderr, proc.stderr


def _thread_sanitizer_works(tmp: pathlib.Path) -> bool:
    src = tmp / "tsan_probe.c"
    src.write_text("int main(void) { return 0; }\n")
    probe = subprocess.run(["gcc", "-fsanitize=thread", str(src), "-o", str(tmp / "tsan_probe")], capture_output=True)
    return probe.returncode == 0 and subprocess.run([str(tmp / "tsan_probe")], capture_output=True).returncode == 0


def test_the_aead_pipe_seals_and_opens_as_one_thread_does(tmp_path):
    """native/tests/aead_pipe_check.c: records sealed and opened through the AEAD pipe's second thread are the same
    bytes, tag included, as on one thread (under ThreadSanitizer where the compiler has it), through the helper's
    sleep and wake-up, a hold taken by another thread and a fork; a tampered record fails."""
    tsan = ["-fsanitize=thread"] if _thread_sanitizer_works(tmp_path) else []
    exe, src = tmp_path / "aead_pipe_check", REPO / "native" / "src"
    sources = [REPO / "native" / "tests" / "aead_pipe_check.c", src / "aead_pipe.c", src / "crypto.c",
               src / "quiet_thread.c"]
    subprocess.run(["gcc", "-O1", "-g", "-Wall", *tsan, f"-I{src}", f"-I{REPO / 'native' / 'gen'}",
                    *map(str, sources), "-o", str(exe), "-lpthread", "-ldl"], check=True)
    proc = subprocess.run([str(exe), "60"], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "TSAN_OPTIONS": "die_after_fork=0:halt_on_error=1:exitcode=97",
                               "RGPU_AEAD_PIPE": "1"})
    if proc.returncode == 2:
        pytest.skip(proc.stdout.strip())
    assert proc.returncode == 0 and "60 rounds, no failure" in proc.stdout, proc.stdout + proc.stderr
    if shutil.which("taskset"):  # on one CPU the helper could only take turns with its caller: no pipe
        one = subprocess.run(["taskset", "-c", str(min(os.sched_getaffinity(0))), str(exe), "1"], capture_output=True,
                             text=True, timeout=60, env={**os.environ, "TSAN_OPTIONS": "die_after_fork=0"})
        assert one.returncode == 2 and "no pipe here" in one.stdout, one.stdout + one.stderr


def test_reply_decoders_under_random_input(stand_ins):
    """native/tests/fuzz_replies.c without libFuzzer: the reply-array decoders and the layout check either
    refuse or stay within the capacity they are given (under the sanitizers where available)."""
    out, cc, _ = stand_ins
    exe = out.parent / "fuzz_replies"
    subprocess.run([cc, "-O1", "-g", "-Wall", "-DRGPU_FUZZ_MAIN", f"-I{REPO / 'native' / 'src'}",
                    f"-I{REPO / 'native' / 'gen'}", str(REPO / "native" / "tests" / "fuzz_replies.c"), "-o", str(exe)],
                   check=True)
    proc = subprocess.run([str(exe), "100000"], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **SANITIZER_ENV})
    _no_sanitizer_report(proc)
    assert proc.returncode == 0 and "100000 inputs, no failure" in proc.stdout, proc.stdout + proc.stderr


@pytest.mark.parametrize("program", ["jit_link", "textures", "ipc", "memcpy_batch", "legacy_launch", "managed",
                                     "managed_vars", "managed_reset", "graph_api", "mixed_contexts", "memory_3d",
                                     "graph_control"])
def test_the_newer_programs_under_the_sanitizers(stand_ins, server, tmp_path, program):
    """The protocol 1.8 and 1.9 calls' client code (linking, arrays, textures, IPC, batched and legacy copies and
    launches, graph control flow and user objects) under ASan and UBSan: nvcc builds the program against the sanitized stand-ins, and the sanitizer runtimes go
    first, since the program itself is not built with them."""
    out, _, sanitized = stand_ins
    if shutil.which("nvcc") is None or not sanitized:
        pytest.skip("needs nvcc and a compiler with the sanitizers")
    exe = tmp_path / program
    subprocess.run(["nvcc", "-cudart", "shared", "-o", str(exe), str(PROGRAMS / f"{program}.cu"), f"-L{out}", "-lcuda",
                    "-Xlinker", f"-rpath-link={out}"], check=True, capture_output=True)
    runtimes = [subprocess.run(["gcc", f"-print-file-name={lib}"], capture_output=True, text=True).stdout.strip()
                for lib in ("libasan.so", "libubsan.so")]
    proc = _run(stand_ins, exe, server=server, env={"LD_PRELOAD": ":".join(runtimes)})
    _no_sanitizer_report(proc)
    assert proc.returncode == 0 and f"{program} OK" in proc.stdout, proc.stdout + proc.stderr


def test_a_managed_variable_the_server_sizes_wrongly_is_a_clean_error(stand_ins, server, tmp_path):
    """A server that answers cuModuleGetGlobal of a __managed__ variable with another size than the program
    registered: the variables are not adopted, the program's reads see zeroed bytes of its own (not a NULL pointer),
    and the image's kernels fail with a CUDA error the program reports."""
    out, _, sanitized = stand_ins
    if shutil.which("nvcc") is None or not sanitized:
        pytest.skip("needs nvcc and a compiler with the sanitizers")
    exe = tmp_path / "managed_vars"
    subprocess.run(["nvcc", "-cudart", "shared", "-o", str(exe), str(PROGRAMS / "managed_vars.cu"), f"-L{out}",
                    "-Xlinker", f"-rpath-link={out}"], check=True, capture_output=True)
    runtimes = [subprocess.run(["gcc", f"-print-file-name={lib}"], capture_output=True, text=True).stdout.strip()
                for lib in ("libasan.so", "libubsan.so")]

    def twice_the_size(frame):
        fields = ops.MODULE_GET_GLOBAL.decode_reply(frame.args)
        return _with(frame, args=ops.MODULE_GET_GLOBAL.pack_reply(*fields._replace(size=2 * fields.size)))

    proxy = CorruptingProxy(server, ops.MODULE_GET_GLOBAL.code, twice_the_size)
    try:
        proc = _run(stand_ins, exe, server=proxy.address, env={"LD_PRELOAD": ":".join(runtimes)})
    finally:
        proxy.close()
    assert proxy.corrupted.is_set()
    _no_sanitizer_report(proc)
    assert proc.returncode == 1, proc.stdout + proc.stderr  # (its CHECK of the launch: not a signal)
    assert "initial: seeds 0 0 0 0, tally 0" in proc.stdout, proc.stdout
    assert "the driver says" in proc.stderr and "cudaGetLastError()" in proc.stderr, proc.stderr


def test_managed_memory_from_several_threads_under_the_sanitizers(stand_ins, server, tmp_path):
    """native/src/managed.c's fault handler, pins and copies through the alias under ASan and UBSan, with threads
    racing on one chunk (tests/cuda/managed_threads.c, built with the sanitizers like the stand-ins)."""
    out, cc, sanitized = stand_ins
    if not sanitized:
        pytest.skip("needs a compiler with the sanitizers")
    exe = tmp_path / "managed_threads"
    subprocess.run([str(cc), "-O1", f"-I{shims.cuda_include(13)}", "-o", str(exe),
                    str(PROGRAMS / "managed_threads.c"), f"-L{out}", "-l:libcuda.so.1", "-lpthread",
                    f"-Wl,-rpath-link,{out}"], check=True)
    proc = _run(stand_ins, exe, server=server)
    _no_sanitizer_report(proc)
    assert proc.returncode == 0 and "managed_threads OK" in proc.stdout, proc.stdout + proc.stderr
