"""Writes frames.json and handshake.json: golden vectors shared by the Python and C codecs.

Run `python tests/vectors/make_vectors.py` only when the protocol changes on purpose (and bump the version);
tests/test_vectors.py checks the committed files against the codec in both directions.
"""

from __future__ import annotations

import json
import pathlib
import struct

from rgpu.protocol import ops
from rgpu.protocol.frames import Flags, Frame, frame_bytes
from rgpu.protocol.handshake import (
    LABEL_CLIENT_PROOF, LABEL_SERVER_PROOF, Cipher, Hello, HelloFlags, RecordProtector, derive_keys, proof,
    transcript_hash,
)

HERE = pathlib.Path(__file__).parent
PSK = bytes(range(32))  # test key, not a secret
CLIENT_NONCE = bytes(range(0x40, 0x60))
SERVER_NONCE = bytes(range(0x80, 0xA0))


def frame_vectors() -> list[dict]:
    launch = Frame(ops.LAUNCH_KERNEL.code, 7, Flags.NO_REPLY,
                   args=ops.LAUNCH_KERNEL.pack_request(0x0400_0000_0000_0003, 16, 1, 1, 256, 1, 1, 0, 0),
                   bulk=struct.pack("<QQQi", 0x7F00_0000_0000, 0x7F00_0000_0400, 0x7F00_0000_0800, 4096) + b"\0" * 4)
    cases = [
        ("nop request", Frame(ops.NOP.code, 1)),
        ("nop reply", Frame(ops.NOP.code, 1, Flags.REPLY)),
        ("mem_alloc request", Frame(ops.MEM_ALLOC.code, 2, args=ops.MEM_ALLOC.pack_request(1 << 20))),
        ("mem_alloc reply", Frame(ops.MEM_ALLOC.code, 2, Flags.REPLY, args=struct.pack("<Q", 0x7F00_0000_0000))),
        ("error reply with message", Frame(ops.MEM_FREE.code, 3, Flags.REPLY, 1, bulk=b"not an allocation")),
        ("reply carrying a deferred error", Frame(ops.CTX_SYNCHRONIZE.code, 9, Flags.REPLY | Flags.DEFERRED_ERROR,
                                                  0, 400)),
        ("memcpy_htod with bulk", Frame(ops.MEMCPY_HTOD.code, 4, args=struct.pack("<Q", 0x7F00_0000_0010),
                                        bulk=bytes(range(16)))),
        ("memcpy_dtoh reply with bulk", Frame(ops.MEMCPY_DTOH.code, 5, Flags.REPLY, bulk=b"\xde\xad\xbe\xef")),
        ("deferred launch", launch),
        ("batch of two deferred calls", Frame(ops.BATCH.code, 8, Flags.NO_REPLY,
                                              bulk=frame_bytes(launch) + frame_bytes(
                                                  Frame(ops.EVENT_RECORD.code, 8, Flags.NO_REPLY,
                                                        args=struct.pack("<QQ", 0x0500_0000_0000_0001, 0))))),
        ("protocol error", Frame(ops.PROTOCOL_ERROR.code, 0, Flags.REPLY, 0x10004, bulk=b"too large")),
    ]
    return [{"name": name, "hex": frame_bytes(f).hex(),
             "opcode": f.opcode, "request_id": f.request_id, "flags": int(f.flags), "status": f.status,
             "deferred_status": f.deferred_status, "args_hex": bytes(f.args).hex(), "bulk_hex": bytes(f.bulk).hex()}
            for name, f in cases]


def handshake_vectors() -> dict:
    client_hello = Hello(ciphers=3, nonce=CLIENT_NONCE, flags=int(HelloFlags.PSK), agent="rgpu-c/0.1").to_frame(1)
    server_hello = Hello(max_frame=64 * 1024 * 1024 + 4096, ciphers=int(Cipher.AES_256_GCM), nonce=SERVER_NONCE,
                         flags=int(HelloFlags.PSK), session_id=42, agent="rgpu-server").to_frame(reply_to=client_hello)
    th = transcript_hash(client_hello, server_hello)
    c2s, s2c = derive_keys(PSK, CLIENT_NONCE, SERVER_NONCE, th)
    records = {}
    for cipher in (Cipher.AES_256_GCM, Cipher.CHACHA20_POLY1305):
        prot = RecordProtector(int(cipher), send_key=c2s, recv_key=s2c)
        records[cipher.name] = [b"".join(prot.seal([frame_bytes(Frame(ops.NOP.code, i))])).hex() for i in (2, 3)]
    return {
        "psk_hex": PSK.hex(),
        "client_hello_hex": frame_bytes(client_hello).hex(),
        "server_hello_hex": frame_bytes(server_hello).hex(),
        "transcript_hash_hex": th.hex(),
        "client_proof_hex": proof(PSK, LABEL_CLIENT_PROOF, th).hex(),
        "server_proof_hex": proof(PSK, LABEL_SERVER_PROOF, th).hex(),
        "c2s_key_hex": c2s.hex(),
        "s2c_key_hex": s2c.hex(),
        "client_records_nop_2_3": records,
    }


def main() -> None:
    (HERE / "frames.json").write_text(json.dumps(frame_vectors(), indent=1) + "\n")
    (HERE / "handshake.json").write_text(json.dumps(handshake_vectors(), indent=1) + "\n")


if __name__ == "__main__":
    main()
