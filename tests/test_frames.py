"""The sans-IO frame codec: round trips, incremental decoding at any split, and malformed input."""

from __future__ import annotations

import os
import random
import struct
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rgpu.errors import ProtocolError, Status
from rgpu.protocol import ops
from rgpu.protocol.frames import (
    HEADER_SIZE, Flags, Frame, RecordDecoder, encode_frame, frame_bytes, parse_frame, split_batch,
)
from rgpu.protocol.handshake import POOLED_RECORD, SEAL_PIECE, Cipher, RecordProtector

frames = st.builds(
    Frame,
    opcode=st.integers(0, 0xFFFF),
    request_id=st.integers(0, 2**32 - 1),
    flags=st.sampled_from([0, 1, 2, 4, 5]),
    status=st.integers(0, 2**32 - 1),
    deferred_status=st.integers(0, 2**32 - 1),
    args=st.binary(max_size=64),
    bulk=st.binary(max_size=300_000),
)


def decode_all(data: bytes, splits=(), decoder=None) -> list[Frame]:
    decoder = decoder or RecordDecoder()
    out, pos = [], 0
    for cut in sorted(set(splits)) + [len(data)]:
        decoder.feed(data[pos:cut])
        pos = cut
        while (rec := decoder.next_record()) is not None:
            out.append(parse_frame(rec))
    return out


def same(a: Frame, b: Frame) -> bool:
    return (a.opcode, a.request_id, a.flags, a.status, a.deferred_status, bytes(a.args), bytes(a.bulk)) == (
        b.opcode, b.request_id, b.flags, b.status, b.deferred_status, bytes(b.args), bytes(b.bulk))


@settings(max_examples=60, deadline=None)
@given(st.lists(frames, min_size=1, max_size=4), st.lists(st.integers(0, 700_000), max_size=12))
def test_any_split_decodes_the_same_frames(fs, splits):
    data = b"".join(frame_bytes(f) for f in fs)
    got = decode_all(data, [s for s in splits if s < len(data)])
    assert len(got) == len(fs)
    assert all(same(a, b) for a, b in zip(got, fs))


def test_recv_into_path_lands_large_bulk_in_one_buffer():
    bulk = bytes(range(256)) * 4096  # 1 MiB
    data = frame_bytes(Frame(ops.MEMCPY_HTOD.code, 7, args=struct.pack("<Q", 0x1000), bulk=bulk))
    dec = RecordDecoder()
    pos = 0
    while pos < len(data):
        buf = dec.get_buffer()
        assert len(buf) > 0
        n = min(len(buf), len(data) - pos, 100_000)
        buf[:n] = data[pos : pos + n]
        dec.buffer_updated(n)
        pos += n
    record = dec.next_record()
    assert isinstance(record, memoryview) and len(record) == len(data) - 4
    frame = parse_frame(record)
    assert frame.bulk.obj is record.obj  # bulk is a view into the landing buffer, not a copy
    assert bytes(frame.bulk) == bulk


def test_encode_does_not_copy_bulk():
    bulk = bytearray(b"x" * 100)
    parts = encode_frame(Frame(1, bulk=bulk))
    assert parts[1].obj is bulk


def test_oversize_record_is_refused_before_buffering():
    dec = RecordDecoder(max_record=1024)
    with pytest.raises(ProtocolError) as e:
        dec.feed(struct.pack("<I", 1025))
    assert e.value.status == Status.FRAME_TOO_LARGE


def test_http_request_is_not_taken_for_a_frame():
    dec = RecordDecoder()
    with pytest.raises(ProtocolError):
        dec.feed(b"GET / HTTP/1.1\r\n\r\n")


@pytest.mark.parametrize("payload,match", [
    (b"\x01\x00", "shorter than"),
    (struct.pack("<HHIIII", 1, 0, 0, 0, 0, 50), "declares 50 bulk bytes"),
    (struct.pack("<HHIIII", 1, 0x80, 0, 0, 0, 0), "unknown flag"),
])
def test_malformed_frames(payload, match):
    with pytest.raises(ProtocolError, match=match):
        parse_frame(payload)


def test_batch_round_trip_and_truncation():
    inner = [Frame(ops.LAUNCH_KERNEL.code, i, Flags.NO_REPLY, args=b"a" * 52, bulk=b"p" * 24) for i in range(5)]
    bulk = b"".join(frame_bytes(f) for f in inner)
    assert all(same(a, b) for a, b in zip(split_batch(bulk, 1 << 20), inner))
    with pytest.raises(ProtocolError):
        split_batch(bulk[:-3], 1 << 20)
    with pytest.raises(ProtocolError):
        split_batch(bulk[:2], 1 << 20)


def test_header_size_is_frozen():
    assert HEADER_SIZE == 20
    assert frame_bytes(Frame(0x0005, 1)) == bytes.fromhex("14000000" "0500" "0000" "01000000" + "00" * 12)


def test_opcodes_are_unique_and_stable():
    assert len({op.code for op in ops.OPS.values()}) == len(ops.OPS)
    # Spot-check codes that shims compile in: they must never move.
    assert (ops.HELLO.code, ops.BATCH.code, ops.MEM_ALLOC.code, ops.LAUNCH_KERNEL.code) == (1, 4, 0x40, 0x55)


def test_protocol_doc_embeds_the_current_opcode_table():
    import pathlib

    doc = (pathlib.Path(__file__).parents[1] / "docs" / "protocol.md").read_text()
    assert ops.markdown_table() in doc, "docs/protocol.md is stale: run `python native/codegen/gen.py`"


def test_spec_fields_name_every_byte_and_decode_to_named_tuples():
    for op in ops.OPS.values():
        assert op.request.size == sum(f.size for f in op.request_fields)
        assert op.reply.size == sum(f.size for f in op.reply_fields)
    args = ops.LAUNCH_KERNEL.pack_request(7, 1, 2, 3, 4, 5, 6, 0, 9)
    launch = ops.LAUNCH_KERNEL.decode(args)
    assert (launch.function, launch.grid_y, launch.block_z, launch.stream) == (7, 2, 6, 9)
    with pytest.raises(ProtocolError):
        ops.LAUNCH_KERNEL.decode(args[:-1])
    with pytest.raises(ValueError):
        ops.parse_fields("x:u64 x:u32")
    with pytest.raises(ValueError):
        ops.parse_fields("x:u128")


def test_registered_sink_receives_large_bulk_without_a_copy():
    from rgpu.protocol.connection import Connection

    conn = Connection()
    bulk = bytes(range(256)) * 2048  # 512 KiB
    target = memoryview(bytearray(len(bulk)))
    conn.expect_bulk(9, target)
    small = frame_bytes(Frame(ops.NOP.code, 8, Flags.REPLY))
    data = small + frame_bytes(Frame(ops.MEMCPY_DTOH.code, 9, Flags.REPLY, bulk=bulk)) + small
    pos = 0
    while pos < len(data):  # recv_into-style, in uneven pieces
        buf = conn.get_buffer()
        n = min(len(buf), len(data) - pos, 70_001)
        buf[:n] = data[pos : pos + n]
        conn.buffer_updated(n)
        pos += n
    frames = [conn.next_frame() for _ in range(3)]
    assert [f.request_id for f in frames] == [8, 9, 8]
    assert frames[1].bulk is target and bytes(target) == bulk


def test_sink_is_skipped_for_error_replies_and_other_sizes():
    from rgpu.protocol.connection import Connection

    for reply in (Frame(ops.MEMCPY_DTOH.code, 4, Flags.REPLY, status=1, bulk=b"e" * 100_000),
                  Frame(ops.MEMCPY_DTOH.code, 4, Flags.REPLY, bulk=b"x" * 100_001)):
        conn = Connection()
        target = memoryview(bytearray(100_000))
        conn.expect_bulk(4, target)
        conn.receive_data(frame_bytes(reply))
        frame = conn.next_frame()
        assert frame.bulk is not target and bytes(frame.bulk) == bytes(reply.bulk)
        assert bytes(target) == b"\0" * 100_000


def _protected_pair():
    from rgpu.protocol.connection import Connection
    from rgpu.protocol.handshake import Cipher, RecordProtector

    k1, k2 = bytes(range(32)), bytes(range(32, 64))
    client = Connection()
    server = Connection(reuse_receive_buffers=True)
    client.protect(RecordProtector(int(Cipher.AES_256_GCM), send_key=k1, recv_key=k2))
    server.protect(RecordProtector(int(Cipher.AES_256_GCM), send_key=k2, recv_key=k1))
    return client, server


def _on_the_wire(conn, frames) -> bytes:
    """What `conn` sends for `frames`, every write whole (each before the next is made)."""
    return b"".join(bytes(p) for write in conn.writes(frames) for p in write)


def _deliver(conn, writes) -> None:
    for write in writes:  # each write whole before the next is made, as the transports do
        conn.receive_data(b"".join(bytes(p) for p in write))


@pytest.mark.parametrize("protected", [False, True])
def test_server_reuses_big_receive_buffers_but_every_frame_is_whole_when_taken(protected):
    from rgpu.protocol.connection import Connection

    if protected:
        client, server = _protected_pair()
    else:
        client, server = Connection(), Connection(reuse_receive_buffers=True)
    bulks = [bytes([i]) * (300_000 + i) for i in range(1, 4)]
    frames = [Frame(ops.MEMCPY_HTOD.code, i, Flags.NO_REPLY, bulk=b) for i, b in enumerate(bulks)]
    frames.insert(1, Frame(ops.NOP.code, 9))  # a small frame between big ones
    _deliver(server, client.writes(frames))  # several big sealed records in one send
    got = []
    while (frame := server.next_frame()) is not None:
        got.append((frame.request_id, bytes(frame.bulk)))  # finished with before the next is taken
    assert got == [(0, bulks[0]), (9, b""), (1, bulks[1]), (2, bulks[2])]


def test_big_sealed_replies_reach_a_client_intact():
    client, server = _protected_pair()
    bulk = bytes(range(256)) * 4096  # 1 MiB, sealed in reused memory
    replies = [Frame(ops.MEMCPY_DTOH.code, i, Flags.REPLY, bulk=bulk[i:]) for i in range(3)]
    _deliver(client, server.writes(replies))
    got = [client.next_frame() for _ in range(3)]
    assert [bytes(f.bulk) for f in got] == [bulk[i:] for i in range(3)]  # a client's frames stay valid


@pytest.mark.parametrize("cipher", [Cipher.AES_256_GCM, Cipher.CHACHA20_POLY1305])
@pytest.mark.parametrize("bulk_len", [POOLED_RECORD - 40, POOLED_RECORD, 3 * SEAL_PIECE - 40, 3 * SEAL_PIECE - 30,
                                      3 * SEAL_PIECE + 5])
def test_sealing_in_pieces_gives_the_bytes_of_sealing_whole(cipher, bulk_len):
    """Lengths around the piece size: the tag alone in the last write, split from the ciphertext, or sharing it."""
    frame = Frame(ops.MEMCPY_DTOH.code, 7, Flags.REPLY, args=b"abc", bulk=os.urandom(bulk_len))
    whole, pieces = (RecordProtector(cipher, b"k" * 32, b"r" * 32) for _ in range(2))
    for _ in range(2):  # the second record: the counter moves on alike
        expected = b"".join(bytes(p) for p in whole.seal(encode_frame(frame)))
        got = b"".join(bytes(p) for write in pieces.seal_pieces(encode_frame(frame)) for p in write)
        assert got == expected


# (below POOLED_RECORD a reply is opened when taken, open_to_sink; above, as it arrives)
@pytest.mark.parametrize("size", [100_000, 600_000])
def test_sealed_reply_is_opened_into_its_waiting_buffer(size):
    client, server = _protected_pair()
    bulk = os.urandom(size)
    sinks = [memoryview(bytearray(len(bulk))) for _ in range(3)]
    for rid, sink in enumerate(sinks):
        client.expect_bulk(rid, sink[: len(bulk) - 1] if rid == 2 else sink)  # the third does not fit: copied
    replies = [Frame(ops.MEMCPY_DTOH.code, rid, Flags.REPLY, args=b"xy", bulk=bulk) for rid in range(3)]
    replies.insert(1, Frame(ops.MEMCPY_DTOH.code, 9, Flags.REPLY, bulk=bulk[::-1]))  # nothing waits for it
    _deliver(client, server.writes(replies))
    got = [client.next_frame() for _ in range(4)]
    assert [f.request_id for f in got] == [0, 9, 1, 2]
    assert got[0].bulk is sinks[0] and got[2].bulk is sinks[1] and bytes(got[0].args) == b"xy"
    assert got[1].bulk == bulk[::-1] and got[3].bulk == bulk and bytes(sinks[2]) == bytes(len(bulk))
    assert bytes(sinks[0]) == bytes(sinks[1]) == bulk


@pytest.mark.parametrize("size", [100_000, 500_000])
def test_tampered_sealed_reply_leaves_nothing_in_its_waiting_buffer(size):
    client, server = _protected_pair()
    sink = memoryview(bytearray(size))
    client.expect_bulk(5, sink)
    data = bytearray(_on_the_wire(server, [Frame(ops.MEMCPY_DTOH.code, 5, Flags.REPLY, bulk=b"z" * len(sink))]))
    data[size * 3 // 5] ^= 1
    client.receive_data(bytes(data))
    with pytest.raises(ProtocolError, match="authentication"):
        client.next_frame()
    assert bytes(sink) == bytes(len(sink))


def test_tampered_big_record_fails_authentication():
    client, server = _protected_pair()
    data = bytearray(_on_the_wire(client, [Frame(ops.MEMCPY_HTOD.code, 1, bulk=b"x" * 400_000)]))
    data[100_000] ^= 1
    with pytest.raises(ProtocolError, match="authentication"):
        server.receive_data(bytes(data))
        server.next_frame()


@given(st.lists(st.binary(max_size=300), min_size=1, max_size=6), st.integers(0, 40))
def test_take_raw_gives_back_the_bytes_as_they_came_and_empties_the_decoder(payloads, cut):
    """What the C request loop is handed: every buffered byte, complete records and a partial one's head, so
    that reading on from there sees the stream unchanged."""
    stream = b"".join(struct.pack("<I", len(p)) + p for p in payloads)
    cut = min(cut, len(stream))
    dec = RecordDecoder()
    dec.feed(stream[: len(stream) - cut])
    assert dec.take_raw(1 << 20) == stream[: len(stream) - cut]
    assert not dec.has_buffered_data
    assert dec.take_raw(1 << 20) == b""


def test_take_raw_gives_a_landing_large_record_s_head_and_takes_nothing_beyond_its_limit():
    """A large record landing in memory of its own is handed over as far as it came (the C loop receives the
    rest of a copy itself); a complete one, or more than `limit`, stays."""
    dec = RecordDecoder(scratch_size=4096)
    head = struct.pack("<I", 10_000) + bytes(range(100))
    dec.feed(head)  # too big for scratch: it lands in memory of its own
    assert dec.has_partial_record and dec.take_raw(50) is None and dec.has_partial_record
    assert dec.take_raw(1 << 20) == head and not dec.has_buffered_data
    dec.feed(head)
    dec.feed(bytes(9_900))
    assert dec.take_raw(1 << 20) is None and len(dec.next_record()) == 10_000
    small = RecordDecoder()
    small.feed(struct.pack("<I", 50) + bytes(50))
    assert small.take_raw(20) is None and small.next_record() == bytes(50)


def test_a_cryptography_without_aead_into_is_refused_up_front(monkeypatch):
    """cryptography 46 has no encrypt_into/decrypt_into, which big records are sealed and opened with: a server
    given a PSK refuses to start, and a protector refuses to be made, naming the version wanted, instead of a
    worker failing at its session's first big record (as one did on the GPU box)."""
    from rgpu.errors import AuthenticationError
    from rgpu.protocol import handshake
    from rgpu.serving import server

    assert handshake.missing_aead_support() is None  # (what CI installs)

    class OldAESGCM:
        def encrypt(self, nonce, data, aad):
            return b""

    monkeypatch.setattr(handshake, "AESGCM", OldAESGCM)
    assert ">= 47" in handshake.missing_aead_support()
    with pytest.raises(AuthenticationError, match="cryptography >= 47"):
        RecordProtector(int(Cipher.AES_256_GCM), b"k" * 32, b"r" * 32)
    with pytest.raises(server.ConfigError, match="cryptography >= 47"):
        server.check_config(server.ServerConfig(psk=b"p" * 32))
    server.check_config(server.ServerConfig())  # (no key: no need)


def _pieces(data: bytes, seed: int):
    rng = random.Random(seed)
    at = 0
    while at < len(data):
        n = rng.choice([1, 7, 100, 4096, 65536, 200_000])
        yield data[at : at + n]
        at += n


@pytest.mark.parametrize("seed", range(4))
def test_big_sealed_records_are_opened_as_they_arrive(monkeypatch, seed):
    """A server opens a large sealed request piece by piece while it arrives (in place), and a client a reply
    with a place waiting (into the place): neither opens a whole record once it is complete, whatever pieces the
    bytes come in, records ahead of it waiting to be taken included; a client's reply with no place waiting stays
    sealed until it is taken (its frames outlive the next record)."""
    client, server = _protected_pair()
    whole_opens = []
    for name in ("open", "open_to_sink"):
        real = getattr(RecordProtector, name)

        def spy(self, record, *a, _real=real, _name=name):
            if len(record) >= POOLED_RECORD:
                whole_opens.append(_name)
            return _real(self, record, *a)

        monkeypatch.setattr(RecordProtector, name, spy)
    bulks = [os.urandom(n) for n in (300_000, 1 << 20, 70_000 * 5 + 3)]
    requests = [Frame(ops.NOP.code, 50)] + [Frame(ops.MEMCPY_HTOD.code, i, Flags.NO_REPLY, args=b"a" * i, bulk=b)
                                            for i, b in enumerate(bulks)]
    stream = _on_the_wire(client, requests)
    for piece in _pieces(stream, seed):
        server.receive_data(piece)
    got = [server.next_frame() for _ in requests]
    assert [(f.request_id, bytes(f.args), bytes(f.bulk)) for f in got[1:]] == [
        (i, b"a" * i, b) for i, b in enumerate(bulks)] and got[0].request_id == 50
    assert whole_opens == []
    sink = memoryview(bytearray(len(bulks[1])))
    client.expect_bulk(7, sink)
    replies = [Frame(ops.MEMCPY_DTOH.code, 7, Flags.REPLY, args=b"r", bulk=bulks[1]),
               Frame(ops.MEMCPY_DTOH.code, 8, Flags.REPLY, bulk=bulks[0])]
    for piece in _pieces(_on_the_wire(server, replies), seed):
        client.receive_data(piece)
    first, second = client.next_frame(), client.next_frame()
    assert first.bulk is sink and bytes(sink) == bulks[1] and bytes(first.args) == b"r"
    assert bytes(second.bulk) == bulks[0] and whole_opens == ["open"]  # (nothing waited for it)


@pytest.mark.parametrize("where", ["bulk", "tag"])
def test_a_tampered_record_opened_as_it_arrived_is_refused_and_its_plaintext_wiped(where):
    client, server = _protected_pair()
    data = bytearray(_on_the_wire(client, [Frame(ops.MEMCPY_HTOD.code, 1, bulk=b"x" * 400_000)]))
    data[100_000 if where == "bulk" else -1] ^= 1
    for piece in _pieces(bytes(data), 1):
        server.receive_data(piece)
    record = server.decoder._ready[0]
    assert record.plaintext is None  # (opened as it came: nothing decrypted is handed on)
    with pytest.raises(ProtocolError, match="authentication"):
        server.next_frame()
    assert b"x" * 64 not in bytes(server.decoder._big_pool.get("record", len(data) - 4))


@pytest.mark.parametrize("transport", ["socket", "trio"])
def test_a_reply_cut_before_its_tag_leaves_nothing_in_its_waiting_buffer(transport):
    """Bits of AES-GCM plaintext can be flipped without the key: an attacker who then cuts the connection before
    the tag must not leave chosen bytes in the buffer a reply was being opened into (found in review)."""
    import socket as socketlib

    import trio

    from rgpu.transport import SocketFrameStream, TrioFrameStream

    client, server = _protected_pair()
    sink = memoryview(bytearray(1 << 20))
    client.expect_bulk(3, sink)
    sealed = bytearray(_on_the_wire(server, [Frame(ops.MEMCPY_DTOH.code, 3, Flags.REPLY, bulk=bytes(1 << 20))]))
    at = 4 + 24 + 1000  # (prefix, header: then the bulk's 1000th byte)
    sealed[at : at + 5] = bytes(a ^ b for a, b in zip(sealed[at : at + 5], b"EVIL!"))
    ours, theirs = socketlib.socketpair()

    def cut_before_the_tag():
        theirs.sendall(bytes(sealed[:-16]))
        theirs.close()

    sender = threading.Thread(target=cut_before_the_tag)
    sender.start()
    with pytest.raises((ConnectionError, EOFError)):
        if transport == "socket":
            SocketFrameStream(ours, client).receive_frame()
        else:
            async def receive():
                await TrioFrameStream(trio.SocketStream(trio.socket.from_stdlib_socket(ours)), client).receive_frame()

            trio.run(receive)
    sender.join(10)
    ours.close()
    assert b"EVIL!" not in bytes(sink) and bytes(sink) == bytes(len(sink))

