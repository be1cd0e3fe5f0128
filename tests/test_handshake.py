"""HELLO negotiation and the PSK handshake as pure state machines (no sockets)."""

from __future__ import annotations

import pytest

from rgpu.errors import AuthenticationError, CudaError, ProtocolError, Status
from rgpu.protocol import ops
from rgpu.protocol.frames import Frame, frame_bytes, parse_frame
from rgpu.protocol.handshake import PROTOCOL_MINOR, ClientHandshake, Hello, ServerHandshake, check_psk, load_psk_file

from .conftest import TEST_PSK

OTHER_PSK = bytes(range(1, 33))


def run(client_psk, server_psk, *, major=1):
    c = ClientHandshake(client_psk, major=major)
    s = ServerHandshake(server_psk, max_frame=1 << 20, session_id=9)
    reply = s.on_hello(c.hello())
    auth = c.on_hello_reply(reply)
    if auth is not None:
        c.on_auth_reply(s.on_auth(auth))
    return c, s


def test_no_psk_on_either_side():
    c, s = run(None, None)
    assert c.protector is None and s.protector is None and c.server.session_id == 9


def test_matching_psk_gives_working_protection_both_ways():
    c, s = run(TEST_PSK, TEST_PSK)
    for sender, receiver in ((c.protector, s.protector), (s.protector, c.protector)):
        for i in range(3):
            record = b"".join(sender.seal([frame_bytes(Frame(ops.NOP.code, i))]))
            frame = parse_frame(receiver.open(record[4:]))
            assert frame.request_id == i


def test_wrong_psk_fails_on_the_server_and_the_client_gets_auth_failed():
    c = ClientHandshake(OTHER_PSK)
    s = ServerHandshake(TEST_PSK, max_frame=1 << 20, session_id=1)
    auth = c.on_hello_reply(s.on_hello(c.hello()))
    reply = s.on_auth(auth)
    assert reply.status == Status.AUTH_FAILED and s.failure and s.protector is None
    with pytest.raises(AuthenticationError, match="authentication failed"):
        c.on_auth_reply(reply)


def test_client_without_key_is_told_the_server_needs_one():
    with pytest.raises(AuthenticationError, match="requires a pre-shared key"):
        run(None, TEST_PSK)


def test_client_with_key_refuses_a_server_that_skips_authentication():
    with pytest.raises(AuthenticationError, match="did not ask"):
        run(TEST_PSK, None)


def test_server_proof_from_a_different_key_is_rejected():
    c = ClientHandshake(TEST_PSK)
    s = ServerHandshake(TEST_PSK, max_frame=1 << 20, session_id=1)
    c.on_hello_reply(s.on_hello(c.hello()))
    impostor = ServerHandshake(OTHER_PSK, max_frame=1 << 20, session_id=1)
    impostor.on_hello(c._hello_frame)
    forged = Frame(ops.AUTH.code, 2, 1, args=b"\x00" * 32)
    with pytest.raises(AuthenticationError):
        c.on_auth_reply(forged)


def test_replayed_client_proof_fails_against_fresh_server_nonce():
    c, _ = run(TEST_PSK, TEST_PSK)
    # A recorded AUTH frame replayed into a new handshake: the server's new nonce changes the transcript.
    c2 = ClientHandshake(TEST_PSK)
    s1 = ServerHandshake(TEST_PSK, max_frame=1 << 20, session_id=1)
    recorded_auth = c2.on_hello_reply(s1.on_hello(c2.hello()))
    s2 = ServerHandshake(TEST_PSK, max_frame=1 << 20, session_id=2)
    s2.on_hello(c2._hello_frame)
    assert s2.on_auth(recorded_auth).status == Status.AUTH_FAILED


def test_tampered_or_reordered_record_is_rejected():
    c, s = run(TEST_PSK, TEST_PSK)
    rec = bytearray(b"".join(c.protector.seal([frame_bytes(Frame(ops.NOP.code, 1))]))[4:])
    rec[5] ^= 1
    with pytest.raises(ProtocolError, match="failed authentication"):
        s.protector.open(bytes(rec))
    c2, s2 = run(TEST_PSK, TEST_PSK)
    c2.protector.seal([b"\x14\0\0\0" + b"\0" * 20])  # record 0: sealed, never delivered
    second = b"".join(c2.protector.seal([b"\x14\0\0\0" + b"\0" * 20]))[4:]
    with pytest.raises(ProtocolError):
        s2.protector.open(second)  # out of order: counter 0 expected


def test_counters_handed_back_by_another_opener_only_move_forward():
    """The worker's C request loop opens and seals records between Python's turns and hands the counters back:
    records it took count (the next one opens with the counter after them); counters going back are refused."""
    c, s = run(TEST_PSK, TEST_PSK)
    records = [b"".join(c.protector.seal([frame_bytes(Frame(ops.NOP.code, i))]))[4:] for i in range(3)]
    assert s.protector.counters == (0, 0)
    s.protector.set_counters(2, 5)  # (as if C had opened the first two and sealed five replies)
    assert parse_frame(s.protector.open(records[2])).request_id == 2
    with pytest.raises(ProtocolError, match="went back"):
        s.protector.set_counters(1, 5)
    with pytest.raises(ProtocolError, match="went back"):
        s.protector.set_counters(3, 4)
    cipher, recv_key, send_key = s.protector.native_keys()
    assert (cipher, recv_key, send_key) == (c.protector.native_keys()[0], *c.protector.native_keys()[:0:-1])


def test_version_mismatch_is_reported_with_both_versions():
    c = ClientHandshake(None, major=2)
    s = ServerHandshake(None, max_frame=1 << 20, session_id=1)
    reply = s.on_hello(c.hello())
    assert reply.status == Status.VERSION_MISMATCH and f"client 2.{PROTOCOL_MINOR}" in s.failure
    with pytest.raises(CudaError) as e:
        c.on_hello_reply(reply)
    assert e.value.code == Status.VERSION_MISMATCH and f"server speaks 1.{PROTOCOL_MINOR}" in str(e.value)


def test_bad_magic_is_a_protocol_error():
    with pytest.raises(ProtocolError, match="magic"):
        Hello.from_frame(Frame(ops.HELLO.code, args=b"NOTRGPU!" + b"\0" * 64))


def test_short_psk_is_refused(tmp_path):
    with pytest.raises(ValueError, match="at least 32"):
        check_psk(b"password")
    path = tmp_path / "k"
    path.write_text(TEST_PSK.hex() + "\n")
    assert load_psk_file(str(path)) == TEST_PSK
