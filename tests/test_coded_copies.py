"""Coded copies (MEMCPY_HTOD_RUNS): the format's two codecs (rgpu.protocol.runs, native/src/copy_runs.c) against each
other, the C stand-ins sending llama.cpp-shaped inputs coded, and coded requests that are wrong."""

from __future__ import annotations

import json
import struct
import subprocess

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from rgpu.cli import local_server
from rgpu.errors import CudaError, Status
from rgpu.protocol import ops, runs

from .coded_shapes import mask as _mask, v_rows as _v_rows, words as _words
from .conftest import running_server, wait_for_stats_record
from .test_hostile_server import REPO, SANITIZE, CorruptingProxy, _with
from .test_native import run


@pytest.fixture(scope="module", params=["", "-DRGPU_RUNS_PLAIN"], ids=["as built", "plain loops"])
def runs_check(tmp_path_factory, request):
    """native/tests/runs_check.c with ASan and UBSan: the C codec, fed cases on stdin; as built (its AVX2 loops
    where the CPU has them) and with its plain loops only."""
    exe = tmp_path_factory.mktemp("runs") / "runs_check"
    src = REPO / "native" / "src"
    subprocess.run(["gcc", "-O1", "-g", *SANITIZE, *filter(None, [request.param]), f"-I{src}",
                    f"-I{REPO / 'native' / 'gen'}", str(REPO / "native" / "tests" / "runs_check.c"),
                    str(src / "copy_runs.c"), "-o", str(exe)], check=True)

    def c_side(cases: list[tuple[str, int, bytes]]) -> list[bytes | None]:
        """('E', cap, data) -> the C coding of data in at most cap bytes; ('D', size, coded) -> the size bytes it
        decodes to; None where the C side gives none."""
        feed = b"".join(kind.encode() + struct.pack("<II", n, len(b)) + b for kind, n, b in cases)
        out = subprocess.run([str(exe)], input=feed, capture_output=True, check=True, timeout=120).stdout.split(b"\n")[:-1]
        assert len(out) == len(cases)
        return [None if line == b"-" else bytes.fromhex(line.decode()) for line in out]

    return c_side


# Bytes with runs in them: stretches of progressions (wrapping ones too) and of noise, and a tail.
_stretch = st.one_of(
    st.tuples(st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1), st.integers(1, 40)).map(
        lambda t: _words([(t[0] + k * t[1]) % 2**64 for k in range(t[2])])),
    st.binary(min_size=1, max_size=80))
_patterned = st.tuples(st.lists(_stretch, max_size=12), st.binary(max_size=7)).map(
    lambda t: b"".join(t[0]) + t[1])


@settings(max_examples=300, deadline=None)
@given(_patterned, st.integers(2, 12))
def test_python_coding_decodes_to_the_bytes(data, min_run):
    if data:  # (a coded copy is of 1 byte or more)
        assert runs.decode(runs.encode(data, min_run), len(data)) == data


@settings(max_examples=60, deadline=None)
@given(st.lists(_patterned, min_size=1, max_size=20))
def test_the_c_and_python_codecs_agree_both_ways(runs_check, batch):
    coded_in_c = runs_check([("E", 1 << 21, data) for data in batch])
    for data, coded in zip(batch, coded_in_c):
        if len(data) < 8 * runs.MIN_RUN:
            continue  # (C codes nothing shorter than a run; Python's literal-only coding still decodes)
        assert coded is not None and runs.decode(coded, len(data)) == data
    batch = [data for data in batch if data]  # (a coded copy is of 1 byte or more)
    decoded_in_c = runs_check([("D", len(data), runs.encode(data)) for data in batch])
    assert decoded_in_c == batch


@settings(max_examples=40, deadline=None)
@given(_patterned, st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), min_size=1, max_size=4),
       st.integers(-9, 9), st.integers(-9, 9))
def test_a_damaged_coding_is_refused_or_decoded_the_same_by_both(runs_check, data, flips, cut, size_change):
    """Whatever arrives, the C decoder (under the sanitizers) and Python's agree: both refuse it, or both give the
    same bytes."""
    coded = bytearray(runs.encode(data))
    for at, value in flips if coded else ():
        coded[at % len(coded)] = value
    coded = bytes(coded[:len(coded) + cut] if cut < 0 else coded + bytes(cut))
    size = max(0, len(data) + size_change)
    try:
        expected = runs.decode(coded, size)
    except runs.CodingError:
        expected = None
    assert runs_check([("D", size, coded)]) == [expected]


@settings(max_examples=60, deadline=None)
@given(st.lists(_patterned, min_size=1, max_size=20), st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)),
                                                              max_size=3), st.integers(-9, 9))
def test_a_device_fill_plan_writes_what_decoding_gives_or_both_refuse(runs_check, batch, flips, cut):
    """The worker's other way with a coded copy of whole words (lane.c: a plan in the ring's slots that the
    rgpu_runs_fill kernel applies, runs_check applying it as the kernel does): the same bytes as decoding, every
    word written, or refused wherever decoding refuses -- damaged codings too."""
    cases = []
    for data in batch:
        data = data[: len(data) - len(data) % 8] or bytes(8)
        coded = bytearray(runs.encode(data))
        for at, value in flips:
            coded[at % len(coded)] = value
        cases.append((len(data), bytes(coded[:len(coded) + cut] if cut < 0 else coded + bytes(cut))))
    planned = runs_check([("P", n, coded) for n, coded in cases])
    assert planned == runs_check([("D", n, coded) for n, coded in cases])
    assert planned == [_python_decode(coded, n) for n, coded in cases]


def _python_decode(coded: bytes, size: int) -> bytes | None:
    try:
        return runs.decode(coded, size)
    except runs.CodingError:
        return None


def test_a_device_fill_plan_of_llama_inputs_and_of_sizes_it_leaves_to_decoding(runs_check):
    v_rows, mask32 = _v_rows(128, 1024, 256), _mask(128, 256, np.float32)
    long_run = _words(range(runs.MAX_COPY_BYTES // 8))  # (one run cut into entries of RGPU_RUNS_FILL_WORDS)
    wrapping = _words([(7 + k * (2**63 + 3)) % 2**64 for k in range(10000)])  # (cut too, its step wrapping)
    literal = np.random.default_rng(3).bytes(4096)
    cases = [("P", len(d), runs.encode(d)) for d in (v_rows, mask32, long_run, wrapping, literal)]
    cases.append(("P", 12, runs.encode(bytes(12))))  # (not whole words: decoded on the CPU instead)
    assert runs_check(cases) == [v_rows, mask32, long_run, wrapping, literal, None]


async def _bound_stream(srv):
    """A client, 256 KiB of device memory, a stream and the coded bytes Python copied first on it (the lane then
    knows the stream)."""
    c = await srv.connect()
    p = await c.mem_alloc(256 << 10)
    s = await c.stream_create()
    good = _v_rows(8, 1024, 256)
    await c.memcpy_htod_runs(p, runs.encode(good), len(good), s)
    return c, p, s, good


@pytest.mark.parametrize("fill", ["1", "0"])
async def test_coded_copies_the_fill_leaves_to_decoding_arrive_the_same(fill, monkeypatch):
    """An unaligned destination, and a coding whose plan would not fit the fake's ring (many one-word literals):
    decoded instead (the fake refuses a fill that would fault on a GPU), with the same bytes either way."""
    monkeypatch.setenv("RGPU_RUNS_FILL", fill)
    async with running_server() as srv:
        c, p, s, good = await _bound_stream(srv)
        await c.memcpy_htod_runs(p + 4, runs.encode(good), len(good), s)
        assert await c.memcpy_dtoh_async(p + 4, len(good), s) == good
        segments = [(k.to_bytes(8, "little"), 1000 * k) for k in range(2048)]
        literal_heavy = b"".join(runs.SEGMENT.pack(1, 4) + word + runs.RUN.pack(first, 3)
                                 for word, first in segments)
        expected = b"".join(word + _words([first + 3 * j for j in range(4)]) for word, first in segments)
        assert len(literal_heavy) <= runs.MAX_CODED_BYTES
        await c.memcpy_htod_runs(p, literal_heavy, len(expected), s)
        assert await c.memcpy_dtoh_async(p, len(expected), s) == expected
        await c.aclose()


def test_what_the_c_encoder_codes_and_what_it_gives_up_on(runs_check):
    noise = np.random.default_rng(5).bytes(1 << 20)
    zeros_then_noise = bytes(1 << 19) + noise[: 1 << 19]
    v_rows, mask32, mask16 = _v_rows(128, 1024, 256), _mask(128, 256, np.float32), _mask(128, 256, np.float16)
    big = bytes(runs.MAX_COPY_BYTES + 8)
    cases = [("E", len(d) // 4, d) for d in (v_rows, mask32, mask16, noise, zeros_then_noise, big)]
    cases.append(("E", 100, v_rows))  # (fits nowhere near)
    coded = runs_check(cases)
    assert coded[3:] == [None] * 4
    for data, c in zip((v_rows, mask32, mask16), coded):
        assert runs.decode(c, len(data)) == data
    # llama.cpp's inputs per 128-token prompt step at flash attention off: 1 MiB and 128 KiB, sent as 3 and 7 KiB
    assert len(coded[0]) == 128 * 24 and len(coded[1]) < 7 * 1024 and len(coded[2]) < 8 * 1024


@pytest.mark.parametrize("coded,size,why", [
    (runs.SEGMENT.pack(2, 0) + bytes(16) + b"x", 16, "after the last segment"),
    (runs.SEGMENT.pack(2, 0) + bytes(8), 16, "a literal of 2 words"),
    (runs.SEGMENT.pack(0, 0), 16, "an empty segment"),
    (runs.SEGMENT.pack(0, 3) + runs.RUN.pack(1, 1), 16, "a run of 3 words"),
    (runs.SEGMENT.pack(1, 1) + bytes(8), 16, "first word and step cut short"),
    (b"", 16, "ends after 0 of 2 words"),
    (b"", 3, "shorter than its tail"),
    (runs.SEGMENT.pack(0, 1) + runs.RUN.pack(0, 0), runs.MAX_COPY_BYTES + 8, "1 to"),
    (b"", 0, "1 to"),
    (runs.SEGMENT.pack(8193, 0) + bytes(8193 * 8), 8193 * 8, "bytes of coding"),
])
def test_python_decoder_says_what_is_wrong(coded, size, why):
    with pytest.raises(runs.CodingError, match=why):
        runs.decode(coded, size)


def test_the_most_a_coded_copy_stands_for_fits_one_copy_through_the_ring():
    """The cuda backend's fast lane decodes a coded copy into consecutive slots of its ring, at most half of them."""
    from rgpu.backends import cuda_copyring

    assert runs.MAX_COPY_BYTES <= cuda_copyring.SLOT_BYTES * (cuda_copyring.SLOTS // 2)


@pytest.mark.parametrize("lane,fill", [("1", "1"), ("1", "0"), ("0", "1")],
                         ids=["lane, filled on the device", "lane, decoded", "python"])
async def test_a_wrong_coded_copy_fails_as_invalid_value_and_the_session_goes_on(lane, fill, monkeypatch):
    """Through the fast lane (a fill planned in ring slots, or decoded into them) and Python's path alike: nothing
    reaches the device, the error comes back with the next call that waits, and the next coded copy works."""
    monkeypatch.setenv("RGPU_LANE", lane)
    monkeypatch.setenv("RGPU_RUNS_FILL", fill)
    async with running_server() as srv:
        c, p, s, good = await _bound_stream(srv)  # (the lane then decodes -- and refuses -- the wrong ones itself)
        assert await c.memcpy_dtoh_async(p, len(good), s) == good
        wrong = [(runs.encode(good)[:-8], len(good)),  # one word short
                 (runs.encode(good), len(good) + 8),  # one word more said than coded
                 (runs.encode(good) + b"\0", len(good)),  # a byte after the last segment
                 (runs.SEGMENT.pack(0, 1) + runs.RUN.pack(0, 0), runs.MAX_COPY_BYTES + 8),  # over the most
                 (b"", 0),  # nothing
                 (runs.SEGMENT.pack(8193, 0) + bytes(8193 * 8), 8193 * 8)]  # more coding than carried
        for coded, size in wrong:
            await c.memcpy_htod_runs(p, coded, size, s)
            with pytest.raises(CudaError) as e:
                await c.memcpy_dtoh_async(p, 16, s)
            assert e.value.code == Status.INVALID_VALUE and e.value.deferred
        await c.memcpy_htod_runs(p + (256 << 10) - 8, runs.encode(good), len(good), s)  # past the allocation
        with pytest.raises(CudaError) as e:
            await c.memcpy_dtoh_async(p, 16, s)
        assert e.value.code == Status.INVALID_VALUE
        await c.memcpy_htod_runs(p, runs.encode(good), len(good), s)
        assert await c.memcpy_dtoh_async(p, len(good), s) == good
        await c.aclose()


async def test_without_the_lane_library_the_worker_decodes_in_python(monkeypatch):
    """rgpu.protocol.runs.decode serves the copy where no lane library is loaded (in-process sessions here)."""
    from rgpu.backends import lane

    monkeypatch.setattr(lane, "library", lambda: None)
    decoded = []
    python_decode = runs.decode
    monkeypatch.setattr(runs, "decode", lambda coded, size: decoded.append(size) or python_decode(coded, size))
    async with running_server(isolation="thread") as srv:
        c = await srv.connect()
        p = await c.mem_alloc(256 << 10)
        s = await c.stream_create()
        good = _v_rows(16, 1024, 256) + b"\x01\x02\x03"
        await c.memcpy_htod_runs(p, runs.encode(good), len(good), s)
        assert await c.memcpy_dtoh_async(p, len(good), s) == good
        await c.memcpy_htod_runs(p, runs.encode(good)[:-4], len(good), s)
        with pytest.raises(CudaError) as e:
            await c.memcpy_dtoh_async(p, 16, s)
        assert e.value.code == Status.INVALID_VALUE and e.value.deferred
        await c.aclose()
    assert decoded == [len(good)] * 2


@pytest.mark.parametrize("server_env,client_env,coded", [
    ({}, {}, 12),  # the C request loop and the fast lane (slots), Python's path for what the fake's ring cannot take
    ({"RGPU_RUNS_FILL": "1"}, {}, 12),  # the fast lane's fills planned in slots, decoding or Python for the rest
    ({"RGPU_LANE": "0"}, {}, 12),  # Python's path only
    ({}, {"RGPU_CODED_COPIES": "0"}, 0),  # sent as they are
    ({}, {"RGPU_PSK": "yes"}, 12),  # sealed
])
def test_the_c_stand_in_sends_patterned_copies_coded_and_their_bytes_arrive(shim_dir, tmp_path, monkeypatch,
                                                                            server_env, client_env, coded):
    """native/examples/coded_copy_check.c: ten patterns queued on one stream (the host buffer scribbled on after
    each call) and read back; 12 of its copies code (the 5 MiB one in three pieces, the 3 MiB one's first 2 MiB;
    noise and a lone last byte do not)."""
    for k, v in server_env.items():
        monkeypatch.setenv(k, v)
    stats = tmp_path / "stats.jsonl"
    args = ["--log-level", "warning", "--stats-file", str(stats)]
    env = dict(client_env)
    if env.pop("RGPU_PSK", None):
        psk = tmp_path / "psk"
        psk.write_text("ab" * 32)
        psk.chmod(0o600)
        args += ["--psk-file", str(psk)]
        env["RGPU_PSK_FILE"] = str(psk)
    with local_server("fake", args) as address:
        check = run(shim_dir, "coded_copy_check", env={"RGPU_SERVER": address, **env})
        assert check.returncode == 0, check.stdout + check.stderr
        assert "11 patterns, 0 wrong; copy past the end: 1" in check.stdout
        wait_for_stats_record(stats, 10)
    record = json.loads(stats.read_text().splitlines()[0])
    assert record["calls_by_op"].get("MEMCPY_HTOD_RUNS", 0) == coded


def test_a_server_of_protocol_1_5_gets_every_copy_as_it_is(shim_dir, tmp_path):
    """The server's HELLO says 1.5 (rewritten on the way): the stand-in codes nothing, and the bytes still arrive."""
    def older(frame):
        hello = ops.HELLO.decode_reply(frame.args)._replace(minor=5)
        return _with(frame, args=ops.HELLO.pack_reply(*hello))

    stats = tmp_path / "stats.jsonl"
    with local_server("fake", ["--log-level", "warning", "--stats-file", str(stats)]) as address:
        proxy = CorruptingProxy(address, ops.HELLO.code, older)
        try:
            check = run(shim_dir, "coded_copy_check", env={"RGPU_SERVER": proxy.address})
            assert proxy.corrupted.is_set()
            assert check.returncode == 0 and "11 patterns, 0 wrong; copy past the end: 1" in check.stdout, \
                check.stdout + check.stderr
            wait_for_stats_record(stats, 10)
        finally:
            proxy.close()
    calls = json.loads(stats.read_text().splitlines()[0])["calls_by_op"]
    assert "MEMCPY_HTOD_RUNS" not in calls and calls["MEMCPY_HTOD_ASYNC"] == 13
