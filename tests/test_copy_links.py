"""Copy links (docs/protocol.md, "Copy links"; native/src/conn_links.c, native/src/lane/links.c, rgpu.session.links):
big copies' bytes over extra connections, through the C stand-in and by hand, with what a hostile or broken client
can send over them."""

from __future__ import annotations

import json
import os
import re
import secrets
import struct
import subprocess
import time

import pytest
import trio
from hypothesis import given, settings, strategies as st

from rgpu import shims
from rgpu.cli import local_server
from rgpu.errors import ProtocolError, Status
from rgpu.protocol import ops
from rgpu.protocol.frames import FLAG_NO_REPLY, HEADER_SIZE, Frame, encode_frame, frame_bytes
from rgpu.protocol.handshake import Cipher, RecordProtector
from rgpu.session.links import CopyLinks, LinksOffer, join_proof, link_key

from .conftest import TEST_PSK, running_server, wait_for
from .test_hostile_server import REPO
from .test_native import PTX, run
from .test_session import _raw_session, _read_frame

PART_MAX = 256 << 10


def _linked_copies(stats_path, sessions: int) -> list[int]:
    """MEMCPY_HTOD_LINKED's count in each of the first `sessions` sessions' --stats-file records."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        lines = stats_path.read_text().splitlines() if stats_path.exists() else []
        if len(lines) >= sessions:
            break
        time.sleep(0.05)
    records = sorted((json.loads(line) for line in lines), key=lambda r: r["session_id"])
    return [r["calls_by_op"].get("MEMCPY_HTOD_LINKED", 0) for r in records]


@pytest.mark.parametrize("links", [0, 3])
def test_a_forked_childs_calls_fail_as_the_drivers_do_and_leave_the_parents_connection_and_links_alone(
        shim_dir, links):
    """native/examples/fork_check.c forks while a thread copies 4 MiB both ways: the child's calls fail with
    CUDA_ERROR_NOT_INITIALIZED (3), as the driver fails them in such a child, and it exits through exit(), while the
    parent's copies -- over its links where it has them -- go on with the right bytes. Without conn_fork.c the
    child's frames land among the parent's and the session breaks or hangs."""
    with local_server("fake", ["--log-level", "warning"]) as address:
        env = {"RGPU_SERVER": address, "RGPU_COPY_LINKS": str(links), "RGPU_COPY_LINK_MIN_KIB": "128",
               "RGPU_LOG": "info", "RGPU_CLIENT_STATS": "1"}  # (its report at exit takes each connection's lock)
        check = run(shim_dir, "fork_check", env=env, timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "child: copy 3, alloc 3, synchronize 3" in check.stdout
    assert "parent: child exited with 0; its copies and the thread's went on, 0 wrong" in check.stdout
    assert (f"{links} copy links to {address}" in check.stderr) == bool(links)
    assert "lost" not in check.stderr
    assert check.stderr.count("rgpu client stats:") == 1  # (the parent's: the child's copy of its counts says nothing)


@pytest.mark.parametrize("held", ["memory", "connection"])
def test_a_forked_childs_calls_fail_even_where_a_parents_thread_held_one_of_libcudas_locks(shim_dir, tmp_path, held):
    """native/tests/fork_locks_check.c: a thread of the parent keeps taking memory.c's device range lock (asking
    cuPointerGetAttribute), or the connection's (round trips), while the main thread forks 200 times; each child's
    cuMemcpyHtoD takes that lock before it fails. Without those locks made afresh in the child (fork_locks.h) some
    children hang on the copy of a held lock (29-44 of 200 for memory.c's)."""
    exe = tmp_path / "fork_locks_check"
    subprocess.run(["gcc", "-O2", "-Wall", "-Wno-deprecated-declarations", f"-I{shims.cuda_include(13)}",
                    f"-I{REPO / 'native' / 'examples'}", str(REPO / "native" / "tests" / "fork_locks_check.c"),
                    f"-L{shim_dir}", "-l:libcuda.so.1", f"-Wl,-rpath,{shim_dir}", "-lpthread", "-o", str(exe)],
                   check=True)
    with local_server("fake", ["--log-level", "warning"]) as address:
        proc = subprocess.run([str(exe), "200", held], capture_output=True, text=True, timeout=120,
                              env=shims.environment(shim_dir, {**os.environ, "RGPU_SERVER": address}))
    assert proc.returncode == 0 and "children: 200 failed with 3, 0 hung, 0 other" in proc.stdout, \
        proc.stdout + proc.stderr


def test_a_forked_childs_runtime_calls_answer_3_and_never_hang_on_a_lock_a_parents_thread_held(shim_dir, tmp_path):
    """native/tests/fork_runtime_check.c: a thread of the parent keeps looking up a stream in libcudart's table
    while the main thread forks 100 times; each child looks one up too, then cudaGetDevice and cudaMalloc must
    answer cudaErrorInitializationError (3), as NVIDIA's runtime does there. Without the table's lock registered
    (fork_locks.h) a quarter of the children hung; without state.c's child handler cudaGetDevice answered 0."""
    exe = tmp_path / "fork_runtime_check"
    subprocess.run(["gcc", "-O2", "-Wall", f"-I{shims.cuda_include(13)}",
                    str(REPO / "native" / "tests" / "fork_runtime_check.c"), f"-L{shim_dir}", "-l:libcudart.so.13",
                    "-l:libcuda.so.1", f"-Wl,-rpath,{shim_dir}", "-lpthread", "-o", str(exe)], check=True)
    with local_server("fake", ["--log-level", "warning"]) as address:
        proc = subprocess.run([str(exe), "100"], capture_output=True, text=True, timeout=300,
                              env=shims.environment(shim_dir, {**os.environ, "RGPU_SERVER": address}))
    assert proc.returncode == 0 and "children: 100 answered 3, 0 hung, 0 other" in proc.stdout, \
        proc.stdout + proc.stderr


def test_every_lock_of_the_client_libraries_is_made_afresh_in_a_forked_child():
    """Each statically initialised lock of libcuda's and the stand-ins' sources is registered (RGPU_FORK_RESET,
    native/src/fork_locks.h), or is one of those reset another way: a lock added without it would hang some forked
    children (the tests above show it for one of each library). The server's fast lane (src/lane) never forks."""
    reset_otherwise = {"aead_pipe.c": 2,  # (its own pthread_atfork handler)
                       "conn_route.c": 1}  # the connections' locks, registered in a loop
    sources = [p for p in (REPO / "native" / "src").rglob("*.c") if "lane" not in p.relative_to(REPO).parts]
    assert len(sources) > 50
    for path in sources:
        text = path.read_text()
        # (a static keyed.h registry holds a lock of its own too)
        static = len(re.findall(r"PTHREAD_MUTEX_INITIALIZER|RGPU_KEYED_INIT\b", text))
        registered = len(re.findall(r"^RGPU_FORK_RESET\(", text, re.M))
        assert static == registered + reset_otherwise.get(path.name, 0), path.relative_to(REPO)


@pytest.mark.parametrize("links", [1, 3, 8])
def test_the_c_stand_in_sends_big_copies_over_its_links_and_their_bytes_arrive(shim_dir, tmp_path, links):
    stats = tmp_path / "stats.jsonl"
    with local_server("fake", ["--log-level", "warning", "--stats-file", str(stats)]) as address:
        # (vecadd's inputs step by the same amount word after word: they would go coded, not over the links)
        env = {"RGPU_SERVER": address, "RGPU_COPY_LINKS": str(links), "RGPU_COPY_LINK_MIN_KIB": "128",
               "RGPU_LOG": "info", "RGPU_CODED_COPIES": "0"}
        check = run(shim_dir, "copy_check", env=env)
        assert check.returncode == 0, check.stdout + check.stderr
        assert "13 copies, 0 wrong; copy past the end: 1" in check.stdout
        # (8 asked for, the server's default 4 given)
        assert f"{min(links, 4)} copy links to {address}" in check.stderr
        vec = run(shim_dir, "vecadd", PTX, 1_000_003, env=env)
        assert vec.returncode == 0 and "OK (0 wrong)" in vec.stdout, vec.stderr
        # copy_check: each copy of 128 KiB or more, both ways, the 5 MiB ones in two (the 4 MiB chunk, the rest),
        # and the two of 1 MiB at the end; vecadd: a and b
        assert _linked_copies(stats, 2) == [12, 2]


def test_rgpu_run_asks_for_links_with_copy_links(shim_dir):
    import subprocess
    import sys

    with local_server("fake", ["--log-level", "warning"]) as address:
        for links, expected in (("2", "2 copy links to"), ("9", "--copy-links must be between 0 and 8")):
            proc = subprocess.run([sys.executable, "-m", "rgpu.cli", "run", "--server", address, "--shims",
                                   str(shim_dir), "--copy-links", links, "--", str(shim_dir / "copy_check")],
                                  env={**os.environ, "RGPU_LOG": "info"}, capture_output=True, text=True, timeout=120)
            assert expected in proc.stderr and proc.returncode == (0 if links == "2" else 1), proc.stderr


def test_without_links_on_offer_copies_go_over_the_one_connection(shim_dir, tmp_path):
    stats = tmp_path / "stats.jsonl"
    with local_server("fake", ["--log-level", "warning", "--stats-file", str(stats), "--copy-links", "0"]) as address:
        check = run(shim_dir, "copy_check", env={"RGPU_SERVER": address, "RGPU_COPY_LINKS": "4",
                                                 "RGPU_COPY_LINK_MIN_KIB": "128", "RGPU_LOG": "info"})
        assert check.returncode == 0 and "13 copies, 0 wrong" in check.stdout, check.stderr
        assert "offers no copy links" in check.stderr
        assert _linked_copies(stats, 1) == [0]


def test_a_sealed_session_s_links_carry_sealed_records(shim_dir, tmp_path):
    stats = tmp_path / "stats.jsonl"
    key = tmp_path / "key"
    key.write_text(TEST_PSK.hex())
    key.chmod(0o600)
    server_args = ["--log-level", "warning", "--stats-file", str(stats), "--psk-file", str(key)]
    with local_server("fake", server_args) as address:
        check = run(shim_dir, "copy_check", env={"RGPU_SERVER": address, "RGPU_COPY_LINKS": "3",
                                                 "RGPU_COPY_LINK_MIN_KIB": "128",
                                                 "RGPU_PSK_FILE": str(key), "RGPU_LOG": "info"})
        assert check.returncode == 0 and "13 copies, 0 wrong; copy past the end: 1" in check.stdout, check.stderr
        assert f"3 copy links to {address} (sealed)" in check.stderr
        # (as plain: a copy the links carry goes in the 4 MiB chunks of a plain one, not in sealed 1 MiB records)
        assert _linked_copies(stats, 1) == [12]


def test_by_default_only_copies_of_2_mib_or_more_take_the_links(shim_dir, tmp_path):
    stats = tmp_path / "stats.jsonl"
    with local_server("fake", ["--log-level", "warning", "--stats-file", str(stats)]) as address:
        env = {"RGPU_SERVER": address, "RGPU_COPY_LINKS": "4", "RGPU_LOG": "info", "RGPU_CODED_COPIES": "0"}
        check = run(shim_dir, "copy_check", env=env)
        assert check.returncode == 0 and "13 copies, 0 wrong" in check.stdout, check.stderr
        assert "copies up of 2048 KiB or more go over them" in check.stderr
        # the 5 MiB copies' first 4 MiB chunk, both ways; vecadd's two 4,000,012-byte copies
        vec = run(shim_dir, "vecadd", PTX, 1_000_003, env=env)
        assert vec.returncode == 0 and "OK (0 wrong)" in vec.stdout, vec.stderr
        assert _linked_copies(stats, 2) == [2, 2]


# -- by hand: the protocol, and what a client may get wrong ---------------------------------------------------------
class _Session:
    """A plain session driven frame by frame, with its copy links."""

    def __init__(self, address: str):
        self.address = address
        self.next_id = 1
        self.links: list[trio.SocketStream] = []

    async def open(self):
        self.main = await _raw_session(self.address)
        return self

    async def call(self, op: ops.Op, *values, bulk=b"") -> Frame:
        await self.send(op, *values, bulk=bulk)
        return await _read_frame(self.main)

    async def send(self, op: ops.Op, *values, bulk=b"", flags=0) -> None:
        self.next_id += 1
        await self.main.send_all(frame_bytes(Frame(op.code, self.next_id, flags, args=op.pack_request(*values),
                                                   bulk=bulk)))

    async def context_and_memory(self, size: int) -> int:
        await self.call(ops.INIT, 0)
        ctx = ops.PRIMARY_CTX_RETAIN.decode_reply((await self.call(ops.PRIMARY_CTX_RETAIN, 0)).args).ctx
        await self.call(ops.CTX_SET_CURRENT, ctx)
        return ops.MEM_ALLOC.decode_reply((await self.call(ops.MEM_ALLOC, size)).args).dptr

    async def join(self, token: bytes, link: int, *, proof: bytes | None = None) -> Frame | None:
        """Open link `link` under `token` (or with `proof` as it is); the server's answer."""
        stream = await trio.open_tcp_stream("127.0.0.1", int(self.address.split(":")[1]))
        proof = join_proof(token, link) if proof is None else proof
        await stream.send_all(frame_bytes(Frame(ops.LINK_JOIN.code, 1, args=ops.LINK_JOIN.pack_request(proof, link))))
        reply = await _read_frame(stream)
        self.links.append(stream)
        return reply

    async def part(self, link: int, seq: int, part: int, offset: int, data: bytes, *, opcode=ops.LINK_PART.code,
                   flags=FLAG_NO_REPLY, quietly=False) -> None:
        """Send a LINK_PART; `quietly`: on links the server may have closed already (it closes them all once one
        is out of step)."""
        frame = frame_bytes(Frame(opcode, 0, flags, args=ops.LINK_PART.pack_request(seq, part, offset), bulk=data))
        try:
            await self.links[link].send_all(frame)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            if not quietly:
                raise

    async def linked_copy(self, dst: int, data: bytes, seq: int, links: int, *, sync=1) -> None:
        """MEMCPY_HTOD_LINKED (deferred), then its parts, dealt out as the C stand-in deals them."""
        size = len(data)
        part = min(PART_MAX, -(-size // links) + 4095 & ~4095)
        parts = -(-size // part)
        await self.send(ops.MEMCPY_HTOD_LINKED, dst, 0, size, seq, parts, links, sync, flags=FLAG_NO_REPLY)
        for j in range(parts):
            await self.part(j % links, seq, j, j * part, data[j * part : (j + 1) * part])

    async def read_back(self, src: int, size: int) -> Frame:
        return await self.call(ops.MEMCPY_DTOH, src, size)

    async def aclose(self):
        for s in [self.main, *self.links]:
            await s.aclose()


async def _opened(address: str, links: int) -> tuple[_Session, bytes]:
    s = await _Session(address).open()
    offer = await s.call(ops.LINKS_OPEN)
    assert offer.status == 0, bytes(offer.bulk)
    token, count, part_max = ops.LINKS_OPEN.decode_reply(offer.args)
    assert (count, part_max) == (4, PART_MAX)
    for i in range(links):
        assert (await s.join(token, i)).status == 0
    return s, token


async def test_linked_copies_by_hand_land_whole_and_in_order():
    async with running_server() as srv:
        s, _ = await _opened(srv.address, 4)
        dst = await s.context_and_memory(3 << 20)
        first, second = os.urandom((2 << 20) + 12345), os.urandom(700_001)
        await s.linked_copy(dst, first, 1, 4)
        await s.linked_copy(dst + 100, second, 2, 3, sync=0)  # (over the first three links only)
        back = await s.read_back(dst, len(first))
        assert back.status == 0 and back.deferred_status == 0
        assert bytes(back.bulk) == first[:100] + second + first[100 + len(second):]
        await s.aclose()


async def test_a_copy_that_fails_on_its_own_keeps_the_links_in_step():
    async with running_server() as srv:
        s, _ = await _opened(srv.address, 2)
        dst = await s.context_and_memory(1 << 20)
        await s.linked_copy(dst + (1 << 20) - 10, os.urandom(300_000), 1, 2)  # past the end of the allocation
        data = os.urandom(400_000)
        await s.linked_copy(dst, data, 2, 2)
        back = await s.read_back(dst, len(data))
        assert back.deferred_status == Status.INVALID_VALUE  # the first copy's error, reported with the next reply
        assert back.status == 0 and bytes(back.bulk) == data
        await s.aclose()


@pytest.mark.parametrize("mistake", ["opcode", "reply flag", "too big", "wrong seq", "wrong offset", "link gone",
                                     "frame seq", "too many links", "bulk on the frame"])
async def test_a_link_out_of_step_fails_the_copy_and_every_later_one_but_not_the_session(mistake):
    async with running_server() as srv:
        s, _ = await _opened(srv.address, 2)
        dst = await s.context_and_memory(1 << 20)
        data = os.urandom(300_000)
        seq, parts, links, bulk = 1, 2, 2, b""
        if mistake == "frame seq":
            seq = 5
        elif mistake == "too many links":
            links = 5
        elif mistake == "bulk on the frame":
            bulk = b"x"
        await s.send(ops.MEMCPY_HTOD_LINKED, dst, 0, len(data), seq, parts, links, 1, bulk=bulk, flags=FLAG_NO_REPLY)
        half = 150_000 + 4096 - 150_000 % 4096  # (the C stand-in's part: page-rounded)
        if mistake == "opcode":
            await s.part(0, 1, 0, 0, data[:half], opcode=ops.NOP.code, quietly=True)
        elif mistake == "reply flag":
            await s.part(0, 1, 0, 0, data[:half], flags=0, quietly=True)
        elif mistake == "too big":  # (its head alone: the link is failed before a byte of bulk is read)
            head = frame_bytes(Frame(ops.LINK_PART.code, 0, FLAG_NO_REPLY, args=ops.LINK_PART.pack_request(1, 0, 0),
                                     bulk=b"\0" * (PART_MAX + 1)))[:40]
            await s.links[0].send_all(head)
        elif mistake == "wrong seq":
            await s.part(0, 2, 0, 0, data[:half], quietly=True)
        elif mistake == "wrong offset":
            await s.part(0, 1, 0, 8, data[:half], quietly=True)
        elif mistake == "link gone":
            await s.links[0].aclose()
        else:
            await s.part(0, seq, 0, 0, data[:half], quietly=True)
        await s.part(1, 1, 1, half, data[half:], quietly=True)
        nop = await s.call(ops.NOP)
        assert nop.status == 0 and nop.deferred_status == Status.PROTOCOL_ERROR, mistake
        # Every later linked copy fails at once, saying why; the session's other calls go on.
        await s.send(ops.MEMCPY_HTOD_LINKED, dst, 0, len(data), 2, 1, 1, 1, flags=FLAG_NO_REPLY)
        nop = await s.call(ops.NOP)
        assert nop.deferred_status == Status.PROTOCOL_ERROR
        back = await s.read_back(dst, 16)
        assert back.status == 0 and back.deferred_status == 0
        await s.aclose()


async def test_joins_are_refused_without_the_token_twice_or_past_the_offer():
    async with running_server() as srv:
        s, token = await _opened(srv.address, 1)
        for bad_token, link, proof in ((secrets.token_bytes(32), 0, None), (token, 0, None), (token, 4, None),
                                       (token, 2**32 - 1, None), (token, 1, token), (token, 2, join_proof(token, 1))):
            reply = await s.join(bad_token, link, proof=proof)  # (the token itself, or link 1's proof for link 2)
            assert reply.status == Status.AUTH_FAILED, (link, bytes(reply.bulk))
            assert await _read_frame(s.links[-1]) is None  # and closed
        assert (await s.join(token, 3)).status == 0
        await s.aclose()
        # The token is the session's: once it ends, no link joins under it.
        await wait_for(lambda: not srv.server.sessions, 10)
        other = _Session(srv.address)
        assert (await other.join(token, 1)).status == Status.AUTH_FAILED
        await other.links[0].aclose()


async def test_a_link_frame_that_is_not_a_join_or_sent_early_closes_that_connection():
    async with running_server() as srv:
        port = int(srv.address.split(":")[1])
        s, token = await _opened(srv.address, 0)
        early = await trio.open_tcp_stream("127.0.0.1", port)
        await early.send_all(frame_bytes(Frame(ops.LINK_JOIN.code, 1, args=ops.LINK_JOIN.pack_request(
            join_proof(token, 0), 0)))
                             + frame_bytes(Frame(ops.LINK_PART.code, 0, FLAG_NO_REPLY,
                                                 args=ops.LINK_PART.pack_request(1, 0, 0), bulk=b"x")))
        err = await _read_frame(early)
        assert err.opcode == ops.PROTOCOL_ERROR.code and b"before the answer" in bytes(err.bulk)
        short = await trio.open_tcp_stream("127.0.0.1", port)
        await short.send_all(frame_bytes(Frame(ops.LINK_JOIN.code, 1, args=token)))  # no link index
        err = await _read_frame(short)
        assert err.opcode == ops.PROTOCOL_ERROR.code
        # A LINK_PART or LINK_JOIN on a session's own connection is a protocol error there.
        await s.send(ops.LINK_PART, 1, 0, 0, bulk=b"x", flags=FLAG_NO_REPLY)
        err = await _read_frame(s.main)
        assert err.opcode == ops.PROTOCOL_ERROR.code and b"not a session request" in bytes(err.bulk)
        for c in (early, short):
            await c.aclose()
        await s.aclose()


async def test_sessions_without_links_say_so():
    async with running_server(isolation="thread") as srv:
        s = await _Session(srv.address).open()
        assert (await s.call(ops.LINKS_OPEN)).status == Status.NOT_SUPPORTED
        await s.aclose()
    async with running_server(copy_links=0) as srv:
        s = await _Session(srv.address).open()
        assert (await s.call(ops.LINKS_OPEN)).status == Status.NOT_SUPPORTED
        dst = await s.context_and_memory(1 << 20)
        reply = await s.call(ops.MEMCPY_HTOD_LINKED, dst, 0, 1000, 1, 1, 1, 1)
        assert reply.status == Status.NOT_SUPPORTED and b"LINKS_OPEN" in bytes(reply.bulk)
        await s.aclose()


def test_a_handoff_never_shows_its_link_token():
    """The token is a secret, like the keys: never in a hand-off's repr (logs, tracebacks)."""
    from rgpu.serving.handoff import Handoff

    token = secrets.token_bytes(32).hex()
    handoff = Handoff(1, "peer", 1 << 20, link_token=token, copy_links=4)
    assert token not in repr(handoff) and Handoff.decode(handoff.encode()) == handoff


# -- the receiving side alone (native/src/lane/links.c through rgpu.session.links) -----------------------------------

SMALL_PART = 1024


def _link_fed(data: bytes, *, close: bool = True):
    """Links of one link (parts up to SMALL_PART bytes) whose link has sent `data` (then ended, if `close`)."""
    import socket

    links = CopyLinks(LinksOffer(b"t" * 32, 1, 0.5), part_max=SMALL_PART)
    ours, theirs = socket.socketpair()
    assert links.attach(0, theirs.detach())
    ours.sendall(data)
    if close:
        ours.shutdown(socket.SHUT_WR)
    return links, ours


@settings(max_examples=300, deadline=None)
@given(opcode=st.sampled_from([ops.LINK_PART.code, ops.NOP.code, 0xFFFF]), flags=st.sampled_from([0, 1, 2, 3, 8]),
       args_len=st.sampled_from([0, 15, 16, 17]), bulk=st.integers(0, SMALL_PART + 2), sent=st.integers(-3, 2),
       seq=st.sampled_from([1, 2]), part=st.sampled_from([0, 1]), offset=st.integers(0, 2**64 - 1))
def test_a_link_gives_exactly_the_part_that_is_due_or_fails_saying_why(opcode, flags, args_len, bulk, sent, seq, part,
                                                                      offset):
    """Whatever a link's frame head claims, the part taken is the one the frame holds, whole, or the take fails with
    a reason (never a crash, a hang, or bytes past what arrived)."""
    args = struct.pack("<IIQ", seq, part, offset)
    args = (args + b"\0")[:args_len] if args_len > 16 else args[:args_len]
    body = bytes(range(256)) * (bulk // 256 + 1)
    head = struct.pack("<IHHIIII", HEADER_SIZE + args_len + bulk, opcode, flags, 0, 0, 0, bulk)
    frame = head + args + body[:bulk]
    frame = frame[: len(frame) + sent] if sent < 0 else frame + b"\0" * sent  # cut short, or trailing bytes
    links, ours = _link_fed(frame)
    try:
        valid = (opcode == ops.LINK_PART.code and flags == FLAG_NO_REPLY and args_len == 16
                 and 1 <= bulk <= SMALL_PART and sent >= 0 and (seq, part) == (1, 0))
        if valid:
            data, got_offset = links.take(0, 1, 0)
            assert bytes(data) == body[:bulk] and got_offset == offset
            links.release(0)
        else:
            with pytest.raises(ProtocolError):
                links.take(0, 1, 0)
    finally:
        links.close()
        ours.close()


def test_parts_come_in_order_through_two_buffers_and_a_stalled_link_times_out():
    parts = [frame_bytes(Frame(ops.LINK_PART.code, 0, FLAG_NO_REPLY, args=ops.LINK_PART.pack_request(1, j, j * 700),
                               bulk=bytes([j]) * 700)) for j in range(5)]
    links, ours = _link_fed(b"".join(parts), close=False)
    try:
        for j in range(5):  # (the link's thread fills the next buffer while a part is taken)
            data, offset = links.take(0, 1, j)
            assert bytes(data) == bytes([j]) * 700 and offset == j * 700
            links.release(0)
        with pytest.raises(ProtocolError, match="did not come within"):
            links.take(0, 1, 5)
    finally:
        links.close()
        ours.close()


def test_the_link_threads_under_the_thread_sanitizer(tmp_path):
    """native/tests/links_check.c: three links' threads receive 300 copies' parts while this thread takes them in
    order (their bytes and offsets checked), a link that ends mid-part fails with a reason, and freeing the links
    ends threads waiting in recv -- under ThreadSanitizer where the compiler has it."""
    import subprocess

    from .test_hostile_server import REPO, _thread_sanitizer_works

    tsan = ["-fsanitize=thread"] if _thread_sanitizer_works(tmp_path) else []
    src, exe = REPO / "native" / "src", tmp_path / "links_check"
    sources = [REPO / "native" / "tests" / "links_check.c", src / "lane" / "links.c", src / "quiet_thread.c",
               src / "wire.c", src / "crypto.c", src / "send_iov.c"]
    subprocess.run(["gcc", "-O1", "-g", "-Wall", *tsan, f"-I{src}", f"-I{src / 'lane'}", f"-I{REPO / 'native' / 'gen'}",
                    *map(str, sources), "-o", str(exe), "-lpthread", "-ldl"], check=True)
    proc = subprocess.run([str(exe), "300"], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "TSAN_OPTIONS": "halt_on_error=1:exitcode=97"})
    assert proc.returncode == 0 and "300 rounds, no failure" in proc.stdout, proc.stdout + proc.stderr


@pytest.mark.parametrize("cipher", [Cipher.AES_256_GCM, Cipher.CHACHA20_POLY1305], ids=["aes", "chacha"])
def test_a_sealed_link_opens_its_parts_and_fails_a_replayed_misdirected_or_tampered_one(cipher):
    import socket

    token, c2s = os.urandom(32), os.urandom(32)
    links = CopyLinks(LinksOffer(token, 3, 0.5, int(cipher), c2s), part_max=SMALL_PART)
    ours = []
    for i in range(3):
        mine, theirs = socket.socketpair()
        assert links.attach(i, theirs.detach())
        ours.append(mine)

    def sealed_part(key_of: int, seq: int, part: int, data: bytes) -> bytes:
        sealer = RecordProtector(int(cipher), send_key=link_key(c2s, token, key_of), recv_key=bytes(32))
        frame = Frame(ops.LINK_PART.code, 0, FLAG_NO_REPLY, args=ops.LINK_PART.pack_request(seq, part, 0), bulk=data)
        return b"".join(bytes(b) for b in sealer.seal(encode_frame(frame)))

    try:
        good = sealed_part(0, 1, 0, b"a" * 700)
        ours[0].sendall(good)
        data, offset = links.take(0, 1, 0)
        assert bytes(data) == b"a" * 700 and offset == 0
        links.release(0)
        ours[0].sendall(good)  # the same record again: its counter is 0, the link's is 1 now
        ours[1].sendall(sealed_part(0, 1, 1, b"b" * 700))  # link 0's key on link 1
        tampered = bytearray(sealed_part(2, 1, 2, b"c" * 700))
        tampered[100] ^= 1
        ours[2].sendall(bytes(tampered))
        for link in range(3):
            with pytest.raises(ProtocolError, match="failed authentication"):
                links.take(link, 1 + (link == 0), link)
    finally:
        links.close()
        for s in ours:
            s.close()


def test_join_proofs_and_link_keys_are_the_documented_derivations():
    """join_proof and link_key against HMAC and HKDF written out (RFC 2104, RFC 5869), which the C stand-ins compute
    the same way (tests above: their links join and their sealed parts open)."""
    import hashlib
    import hmac

    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    token, c2s = bytes(range(32)), bytes(range(32, 64))
    assert join_proof(token, 3) == hmac.new(token, b"rgpu copy link\x03\0\0\0", hashlib.sha256).digest()
    expected = HKDF(hashes.SHA256(), 32, salt=token, info=b"rgpu copy link key\x03\0\0\0").derive(c2s)
    assert link_key(c2s, token, 3) == expected != link_key(c2s, token, 2)


async def test_of_eight_joins_of_one_link_at_once_one_is_answered_yes():
    async with running_server() as srv:
        s, token = await _opened(srv.address, 0)
        replies = []

        async def join():
            replies.append((await s.join(token, 0)).status)

        async with trio.open_nursery() as nursery:
            for _ in range(8):
                nursery.start_soon(join)
        assert sorted(replies) == [0] + [Status.AUTH_FAILED] * 7
        await s.aclose()


def test_links_that_cannot_get_their_buffers_fail_cleanly_and_close_nothing_of_others(tmp_path):
    """rgpu_lane_links_new out of memory (under an address-space limit): NULL, an OUT_OF_MEMORY for LINKS_OPEN, and
    no descriptor closed that the links never owned (0 among them)."""
    import subprocess
    import sys

    script = tmp_path / "oom.py"
    script.write_text(
        "import os, resource\n"
        "from rgpu.backends import lane\n"
        "from rgpu.errors import CudaError, Status\n"
        "from rgpu.session.links import CopyLinks, LinksOffer\n"
        "lane.load_from_environment()\n"
        "used = int(open('/proc/self/statm').read().split()[0]) * os.sysconf('SC_PAGE_SIZE')\n"
        "resource.setrlimit(resource.RLIMIT_AS, (used + (512 << 20), resource.RLIM_INFINITY))\n"
        "try:\n"
        "    CopyLinks(LinksOffer(b't' * 32, 8), part_max=1 << 30)\n"
        "except CudaError as e:\n"
        "    assert e.code == Status.OUT_OF_MEMORY, e\n"
        "    os.fstat(0)\n"
        "    print('refused, fd 0 open')\n")
    proc = subprocess.run([sys.executable, str(script)], stdin=subprocess.PIPE, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0 and "refused, fd 0 open" in proc.stdout, proc.stdout + proc.stderr
