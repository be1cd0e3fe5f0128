"""The committed golden vectors (shared with the C codec) decode and re-encode exactly."""

from __future__ import annotations

import json
import pathlib

from rgpu.protocol.frames import Flags, Frame, RecordDecoder, frame_bytes, parse_frame, split_batch
from rgpu.protocol.handshake import (
    LABEL_CLIENT_PROOF, LABEL_SERVER_PROOF, Cipher, Hello, RecordProtector, derive_keys, proof, transcript_hash,
)

HERE = pathlib.Path(__file__).parent / "vectors"
FRAMES = json.loads((HERE / "frames.json").read_text())
HS = json.loads((HERE / "handshake.json").read_text())


def _decode_one(hexstr: str) -> Frame:
    dec = RecordDecoder()
    dec.feed(bytes.fromhex(hexstr))
    return parse_frame(dec.next_record())


def test_every_frame_vector_decodes_and_encodes_byte_for_byte():
    assert len(FRAMES) >= 10
    for v in FRAMES:
        f = _decode_one(v["hex"])
        assert (f.opcode, f.request_id, f.flags, f.status, f.deferred_status) == (
            v["opcode"], v["request_id"], v["flags"], v["status"], v["deferred_status"]), v["name"]
        assert bytes(f.args).hex() == v["args_hex"] and bytes(f.bulk).hex() == v["bulk_hex"], v["name"]
        rebuilt = Frame(v["opcode"], v["request_id"], v["flags"], v["status"], v["deferred_status"],
                        bytes.fromhex(v["args_hex"]), bytes.fromhex(v["bulk_hex"]))
        assert frame_bytes(rebuilt).hex() == v["hex"], v["name"]


def test_batch_vector_holds_two_no_reply_frames():
    v = next(v for v in FRAMES if v["name"].startswith("batch"))
    inner = split_batch(bytes.fromhex(v["bulk_hex"]), 1 << 20)
    assert [f.flags for f in inner] == [Flags.NO_REPLY] * 2


def test_handshake_vector_derivations():
    psk = bytes.fromhex(HS["psk_hex"])
    ch, sh = _decode_one(HS["client_hello_hex"]), _decode_one(HS["server_hello_hex"])
    th = transcript_hash(ch, sh)
    assert th.hex() == HS["transcript_hash_hex"]
    assert proof(psk, LABEL_CLIENT_PROOF, th).hex() == HS["client_proof_hex"]
    assert proof(psk, LABEL_SERVER_PROOF, th).hex() == HS["server_proof_hex"]
    c2s, s2c = derive_keys(psk, Hello.from_frame(ch).nonce, Hello.from_frame(sh).nonce, th)
    assert (c2s.hex(), s2c.hex()) == (HS["c2s_key_hex"], HS["s2c_key_hex"])
    for name, records in HS["client_records_nop_2_3"].items():
        server_side = RecordProtector(int(Cipher[name]), send_key=s2c, recv_key=c2s)
        got = [parse_frame(server_side.open(bytes.fromhex(r)[4:])).request_id for r in records]
        assert got == [2, 3], name
