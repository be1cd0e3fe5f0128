"""HELLO negotiation and the optional PSK authentication (docs/protocol.md, "Handshake").

Pure functions and two small state machines; frames in, frames out. Only primitives a C client gets from
OpenSSL libcrypto are used: SHA-256, HMAC-SHA256, HKDF-SHA256 and AES-256-GCM / ChaCha20-Poly1305.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import os
import struct

import attrs
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers import Cipher as _BlockCipher
from cryptography.hazmat.primitives.ciphers import algorithms, modes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM, ChaCha20Poly1305
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from rgpu.errors import AuthenticationError, CudaError, ProtocolError, Status
from rgpu.protocol import ops
from rgpu.protocol.frames import HEADER, HEADER_SIZE, LENGTH, BufferPool, Frame, OpenedRecord, SplitRecord

MAGIC = b"RGPUWIRE"
PROTOCOL_MAJOR = 1
PROTOCOL_MINOR = 9  # 2: VMM, stream-ordered pools, occupancy table, batched GEMM, launch attributes, graphs;
# 3: several devices (peer access and copies), cuFFT, cuRAND, cuSOLVER, cuSPARSE, cuBLAS additions, OUTPUT frames;
# 4: STREAM_SYNCHRONIZE may be deferred (a client sends it without waiting while it has no device work unfinished)
# 5: graphs with host nodes (GRAPH_INSTANTIATE_PART, STREAM_CAPTURE_EMPTY_NODE), graph memory nodes
# 6: MEMCPY_HTOD_RUNS (host-to-device copies coded as runs of 8-byte words)
# 7: STREAM_GET_INFO (a stream's flags, priority, context and id), OCCUPANCY_CLUSTERS, stream attributes
# 8: stream memory operations (STREAM_MEM_OP, STREAM_BATCH_MEM_OP: cuStreamWaitValue32/64, cuStreamWriteValue32/64,
#    cuStreamBatchMemOp), JIT linking (JIT_LINK_*), CUDA arrays and texture and surface objects, IPC handles
# 9: capture into an existing graph, enabling nodes of executable graphs, event and child-graph node setters,
#    conditional nodes, graph memory figures (STREAM_BEGIN_CAPTURE_TO_GRAPH, GRAPH_NODE_ENABLE,
#    GRAPH_EVENT_NODE_SET, GRAPH_EXEC_CHILD_SET, GRAPH_CONDITIONAL_HANDLE, GRAPH_CONDITIONAL_NODE, GRAPH_MEM)
NONCE_SIZE = 32
KEY_SIZE = 32
TAG_SIZE = 16
MIN_PSK_SIZE = 32

LABEL_TRANSCRIPT = b"rgpu-v1 transcript"
LABEL_CLIENT_PROOF = b"rgpu-v1 client proof"
LABEL_SERVER_PROOF = b"rgpu-v1 server proof"
LABEL_KEYS = b"rgpu-v1 keys"


class Feature(enum.IntFlag):
    BATCH = 0x1  # BATCH frames of NO_REPLY calls
    DEFERRED_ERRORS = 0x2  # deferred_status in replies
    PSK = 0x4  # this build can authenticate and protect frames
    STATUS = 0x8  # SERVER_STATUS queries (a HELLO with the STATUS flag)
    # OUTPUT frames: what the session's kernels print (device printf), for the client's own stdout. A server
    # that cannot attribute output to one session (thread isolation) does not announce it.
    OUTPUT = 0x10
    # Copy links (LINKS_OPEN, LINK_JOIN, LINK_PART, MEMCPY_HTOD_LINKED): a server announces it when it offers the
    # session links (sessions in worker processes, --copy-links above 0); a client that never opens them may
    # announce it all the same.
    COPY_LINKS = 0x20


SUPPORTED_FEATURES = (Feature.BATCH | Feature.DEFERRED_ERRORS | Feature.PSK | Feature.STATUS | Feature.OUTPUT
                      | Feature.COPY_LINKS)


class Cipher(enum.IntFlag):
    AES_256_GCM = 0x1
    CHACHA20_POLY1305 = 0x2


SUPPORTED_CIPHERS = Cipher.AES_256_GCM | Cipher.CHACHA20_POLY1305


class HelloFlags(enum.IntFlag):
    # In the client's hello: the client holds a PSK. In the server's: the server demands authentication.
    PSK = 0x1
    # In the client's hello: this connection asks for the server's status (SERVER_STATUS), it is no session.
    STATUS = 0x2


@attrs.frozen(slots=True)
class Hello:
    major: int = PROTOCOL_MAJOR
    minor: int = PROTOCOL_MINOR
    features: int = int(SUPPORTED_FEATURES)
    max_frame: int = 0
    ciphers: int = 0
    nonce: bytes = b"\0" * NONCE_SIZE
    flags: int = 0
    session_id: int = 0
    agent: str = ""

    def to_frame(self, request_id: int = 0, *, reply_to: Frame | None = None, status: int = 0) -> Frame:
        args = ops.HELLO.request.pack(MAGIC, self.major, self.minor, self.features, self.max_frame,
                                      self.ciphers, self.nonce, self.flags, self.session_id)
        bulk = self.agent.encode()
        if reply_to is not None:
            return reply_to.reply(status=status, args=args, bulk=bulk)
        return Frame(ops.HELLO.code, request_id, args=args, bulk=bulk)

    @classmethod
    def from_frame(cls, frame: Frame) -> "Hello":
        if frame.opcode != ops.HELLO.code:
            raise ProtocolError(f"expected HELLO, got opcode 0x{frame.opcode:04x}")
        if len(frame.args) < 12 or bytes(frame.args[:8]) != MAGIC:
            raise ProtocolError("not an rgpu peer (bad HELLO magic)")
        if len(frame.args) != ops.HELLO.request.size:
            # A different major version may lay out its hello differently; report versions, not garbage.
            major, minor = struct.unpack_from("<HH", frame.args, 8)
            return cls(major=major, minor=minor, agent=_agent(frame))
        _, major, minor, features, max_frame, ciphers, nonce, flags, sid = ops.HELLO.request.unpack(frame.args)
        return cls(major, minor, features, max_frame, ciphers, nonce, flags, sid, _agent(frame))


def _agent(frame: Frame) -> str:
    return bytes(frame.bulk).decode("utf-8", "replace")[:200]


def transcript_hash(client_hello: Frame, server_hello: Frame) -> bytes:
    h = hashlib.sha256(LABEL_TRANSCRIPT)
    for frame in (client_hello, server_hello):
        for part in (bytes(frame.args), bytes(frame.bulk)):
            h.update(LENGTH.pack(len(part)))
            h.update(part)
    return h.digest()


def proof(psk: bytes, label: bytes, th: bytes) -> bytes:
    return hmac.new(psk, label + th, hashlib.sha256).digest()


def derive_keys(psk: bytes, client_nonce: bytes, server_nonce: bytes, th: bytes) -> tuple[bytes, bytes]:
    """(client-to-server key, server-to-client key)."""
    okm = HKDF(hashes.SHA256(), 2 * KEY_SIZE, client_nonce + server_nonce, LABEL_KEYS + th).derive(psk)
    return okm[:KEY_SIZE], okm[KEY_SIZE:]


_NONCE = struct.Struct("<4xQ")  # four zero bytes, then the record counter
_COUNTER_LIMIT = 2**63


# Records at least this big are sealed and opened in memory reused from one record to the next: a fresh
# multi-megabyte buffer per record costs more in page faults than AES-GCM costs to run over it.
POOLED_RECORD = 256 * 1024
SEAL_PIECE = 256 * 1024  # what seal_pieces encrypts per write: big enough for few syscalls, small enough for L2


def missing_aead_support() -> str | None:
    """Why this `cryptography` cannot protect records (its AEADs gained encrypt_into/decrypt_into, which big
    records are sealed and opened with, in 47), or None."""
    if all(hasattr(aead, name) for aead in (AESGCM, ChaCha20Poly1305) for name in ("encrypt_into", "decrypt_into")):
        return None
    import cryptography

    return (f"a pre-shared key needs cryptography >= 47 (AEAD encrypt_into/decrypt_into); this Python has "
            f"{cryptography.__version__}: pip install -U 'cryptography>=47'")


class RecordProtector:
    """AEAD for every record after the handshake; one key and one counter per direction.

    A big record's sealed bytes (and, with `reuse_opened`, a big record's opened plaintext) live in memory
    that the next big seal (open) overwrites: write a sealed record before sealing the next one
    (Connection.writes does), and finish with an opened frame before opening the next."""

    def __init__(self, cipher: int, send_key: bytes, recv_key: bytes):
        if (missing := missing_aead_support()) is not None:  # (the first big record would fail otherwise)
            raise AuthenticationError(missing)
        aead = AESGCM if cipher == Cipher.AES_256_GCM else ChaCha20Poly1305
        self._send, self._recv = aead(send_key), aead(recv_key)
        # AES-GCM can also be sealed a piece at a time (seal_pieces); cryptography has no such interface for
        # ChaCha20-Poly1305, whose big records are sealed whole.
        self._send_aes = algorithms.AES(send_key) if cipher == Cipher.AES_256_GCM else None
        self._recv_aes = algorithms.AES(recv_key) if cipher == Cipher.AES_256_GCM else None
        self._send_counter = 0
        self._recv_counter = 0
        self._pool = BufferPool()
        self.reuse_opened = False
        self._native_keys = (int(cipher), recv_key, send_key)

    def native_keys(self) -> tuple[int, bytes, bytes]:
        """(cipher, receiving key, sending key), for a server worker's C request loop, which opens and seals this
        connection's records between turns of Python's (rgpu/serving/native_loop.py)."""
        return self._native_keys

    @property
    def counters(self) -> tuple[int, int]:
        """(receiving, sending): the next record's counter each way."""
        return self._recv_counter, self._send_counter

    def set_counters(self, recv: int, send: int) -> None:
        """Where the C request loop left them: it took that many records each way, in order."""
        if recv < self._recv_counter or send < self._send_counter:
            raise ProtocolError("record counters went back")
        self._recv_counter, self._send_counter = recv, send

    def _take_send_counter(self) -> int:
        counter = self._send_counter
        if counter >= _COUNTER_LIMIT:
            raise ProtocolError("record counter exhausted; reconnect")
        self._send_counter = counter + 1
        return counter

    def seal(self, parts: list) -> list:
        """Turn an encoded frame (length prefix + body buffers) into one protected record."""
        nonce = _NONCE.pack(self._take_send_counter())
        size = sum(len(p) for p in parts) - LENGTH.size
        aad = LENGTH.pack(size + TAG_SIZE)
        if size < POOLED_RECORD:  # a frame without bulk is encoded as one buffer: no join
            plaintext = memoryview(parts[0] if len(parts) == 1 else b"".join(parts))[LENGTH.size :]
            return [aad, self._send.encrypt(nonce, plaintext, aad)]
        plaintext = self._pool.get("seal-in", size)
        pos = 0
        for part in _bodies(parts):
            plaintext[pos : pos + len(part)] = part
            pos += len(part)
        sealed = self._pool.get("seal-out", size + TAG_SIZE)
        self._send.encrypt_into(nonce, plaintext, aad, sealed)
        return [aad, sealed]

    def seal_pieces(self, parts: list):
        """seal() for a big record, as writes (lists of buffers) to make one after another: each piece is
        encrypted while the one before it is on its way, and no copy of the whole record is made first. Each
        write must be made before the next is asked for (they share memory). The same bytes as seal()."""
        size = sum(len(p) for p in parts) - LENGTH.size
        if self._send_aes is None or size < POOLED_RECORD:
            yield self.seal(parts)
            return
        aad = LENGTH.pack(size + TAG_SIZE)
        sealer = _BlockCipher(self._send_aes, modes.GCM(_NONCE.pack(self._take_send_counter()))).encryptor()
        sealer.authenticate_additional_data(aad)
        # update_into wants room for a block beyond its input, though GCM writes exactly what it is given.
        out = self._pool.get("seal-piece", SEAL_PIECE + 16)
        out[: LENGTH.size] = aad
        used = LENGTH.size
        for view in _bodies(parts):
            while view:
                if used == SEAL_PIECE:
                    yield [out[:used]]
                    used = 0
                take = min(len(view), SEAL_PIECE - used)
                used += sealer.update_into(view[:take], out[used:])
                view = view[take:]
        sealer.finalize()
        if used + TAG_SIZE > SEAL_PIECE:
            yield [out[:used]]
            used = 0
        out[used : used + TAG_SIZE] = sealer.tag
        yield [out[: used + TAG_SIZE]]

    def open_to_sink(self, record: bytes | memoryview, sink_for) -> SplitRecord | None:
        """open() for a reply whose bulk has a place waiting (`sink_for(request_id)`, as RecordDecoder.expect_bulk):
        the bulk is decrypted straight into it, with no opened copy of the record in between. None, with nothing
        consumed, when the record is not such a reply (or the cipher cannot be opened in pieces): open() it then.
        The header is read before the tag is checked, only to find the place; when the tag then fails, the place
        is wiped and ProtocolError raised."""
        if self._recv_aes is None or len(record) < TAG_SIZE + HEADER_SIZE or self._recv_counter >= _COUNTER_LIMIT:
            return None
        record = memoryview(record).cast("B")
        # (a record opened whole is one whose every byte has arrived: the same opener, in one step)
        opening = StreamedOpen(self._recv_aes, self._recv_counter, len(record), sink_for, in_place=False)
        if not opening.advance(record, len(record)):
            return None
        opened = opening.finish(record)
        self.took_streamed(opened)  # (raises when the tag failed: the place is wiped by then)
        return opened.plaintext

    def stream_open(self, records_ahead: int, length: int, sink_for, in_place: bool) -> "StreamedOpen | None":
        """An opener for a large sealed record of `length` bytes whose bytes are arriving, the next record but
        `records_ahead` (RecordDecoder.stream_opener): it opens each piece as it lands instead of the whole
        record once it is complete, so opening overlaps receiving. None where it cannot (ChaCha20-Poly1305, whose
        records cryptography opens only whole; the counter's end)."""
        counter = self._recv_counter + records_ahead
        if self._recv_aes is None or length < POOLED_RECORD or counter >= _COUNTER_LIMIT:
            return None
        return StreamedOpen(self._recv_aes, counter, length, sink_for, in_place)

    def took_streamed(self, record: OpenedRecord) -> None:
        """`record`, opened as it arrived, is taken: it used its counter (taken in order, as open() takes them)."""
        if record.counter != self._recv_counter:
            raise ProtocolError("a record opened as it arrived was taken out of order")
        self._recv_counter += 1
        if record.plaintext is None:
            raise tampered()

    def open(self, record: bytes | memoryview) -> bytes | memoryview:
        counter = self._recv_counter
        if counter >= _COUNTER_LIMIT:
            raise ProtocolError("record counter exhausted; reconnect")
        self._recv_counter = counter + 1
        nonce, aad = _NONCE.pack(counter), LENGTH.pack(len(record))
        try:
            if self.reuse_opened and len(record) >= POOLED_RECORD:
                plaintext = self._pool.get("open", len(record) - TAG_SIZE)
                self._recv.decrypt_into(nonce, record, aad, plaintext)
                return plaintext
            return self._recv.decrypt(nonce, record, aad)
        except InvalidTag:
            raise tampered() from None


class StreamedOpen:
    """Opening one large AES-GCM record while it is received (RecordProtector.stream_open): each piece is
    decrypted as it lands -- in place (a server, whose received records live until the next is taken), or, for a
    reply whose bulk has a place waiting (Connection.expect_bulk), its bulk straight into that place. Nothing it
    decrypted is handed on before the tag has been checked, and a place it wrote is wiped when the tag fails.

    A record with no place waiting on a connection that keeps its records (a client's) is left sealed: advance
    says False before anything of it is decrypted, and it is opened whole as it is taken."""

    _PIECE = 64 * 1024  # (decrypting smaller pieces than the socket brings costs calls for nothing)
    _SCRATCH = 256 * 1024  # (the most _aside decrypts at a time)

    def __init__(self, aes, counter: int, length: int, sink_for, in_place: bool):
        self.counter = counter
        self._opener = _BlockCipher(aes, modes.GCM(_NONCE.pack(counter))).decryptor()
        self._opener.authenticate_additional_data(LENGTH.pack(length))
        self._body = length - TAG_SIZE
        self._sink_for, self._in_place = sink_for, in_place
        self._done = 0  # bytes of the body decrypted
        self._head: bytearray | None = None  # a reply landing in a place: its header and arguments
        self._sink: memoryview | None = None
        self._scratch: bytearray | None = None  # (_aside)

    def advance(self, record: bytearray, filled: int) -> bool:
        """`filled` bytes of the record have arrived: open what is new, once there is enough of it. False: the
        record stays sealed (nothing of it was decrypted where it lies)."""
        upto = min(filled, self._body)
        if self._head is None and not self._in_place:
            if upto < HEADER_SIZE:
                return True
            if not self._land_in_sink(memoryview(record)):
                return False
        if upto - self._done >= self._PIECE or (upto == self._body and upto > self._done):
            self._decrypt(memoryview(record), upto)
        return True

    def _land_in_sink(self, record: memoryview) -> bool:
        """Decrypt the header aside: a reply with status 0 whose bulk is exactly the place waiting lands there."""
        head = bytearray(HEADER_SIZE + 15)  # (update_into wants a block's room beyond its input)
        self._opener.update_into(record[:HEADER_SIZE], head)
        _op, _flags, request_id, status, _deferred, bulk_len = HEADER.unpack_from(head)
        sink = self._sink_for(request_id) if self._sink_for is not None else None
        if sink is None or status != 0 or bulk_len != len(sink) or bulk_len > self._body - HEADER_SIZE:
            return False
        self._sink = sink
        self._head = bytearray(self._body - bulk_len + 15)
        self._head[:HEADER_SIZE] = head[:HEADER_SIZE]
        self._done = HEADER_SIZE
        return True

    def _decrypt(self, record: memoryview, upto: int) -> None:
        opener = self._opener
        if self._sink is None:  # in place
            self._aside(record[self._done : upto], record[self._done : upto])
            self._done = upto
            return
        bulk_at = len(self._head) - 15
        if self._done < bulk_at:
            end = min(upto, bulk_at)
            self._done += opener.update_into(record[self._done : end], memoryview(self._head)[self._done :])
        if upto > self._done:
            at = self._done - bulk_at
            n = upto - self._done
            if len(self._sink) - at >= n + 15:
                opener.update_into(record[self._done : upto], self._sink[at:])
            else:  # (the bulk's last bytes: no room past them)
                self._aside(record[self._done : upto], self._sink[at : at + n])
            self._done = upto

    def _aside(self, src: memoryview, dst: memoryview) -> None:
        """src decrypted into dst (as long) through a scratch buffer of the opener's, a piece at a time: update_into
        wants a block's room beyond its input, which dst may not have, and refuses (cryptography 51 on) an output
        that overlaps its input, as decrypting in place does. The copy on is of memory the cache still holds."""
        if self._scratch is None:
            self._scratch = bytearray(self._SCRATCH + 15)
        scratch = memoryview(self._scratch)
        for at in range(0, len(src), self._SCRATCH):
            got = self._opener.update_into(src[at : at + self._SCRATCH], scratch)
            dst[at : at + got] = scratch[:got]

    def abort(self) -> None:
        """The record will never be complete (the connection ended): what was decrypted into a caller's place,
        never authenticated, is wiped (an attacker who cannot forge a tag can still flip bits of the plaintext,
        then cut the connection before the tag). In place, it stays in the connection's own memory."""
        if self._sink is not None:
            self._sink[:] = bytes(len(self._sink))

    def finish(self, record: memoryview) -> OpenedRecord:
        """The whole record has arrived (and been decrypted): its tag decides."""
        try:
            self._opener.finalize_with_tag(bytes(record[self._body :]))
        except InvalidTag:  # (unauthenticated bytes must not reach the caller)
            if self._sink is not None:
                self.abort()
            else:
                record[: self._body] = bytes(self._body)
            return OpenedRecord(self.counter, None)
        if self._sink is not None:
            return OpenedRecord(self.counter, SplitRecord(self._head[: len(self._head) - 15], self._sink))
        return OpenedRecord(self.counter, record[: self._body])


def _bodies(parts: list):
    """An encoded frame's buffers without its length prefix (the first buffer's first bytes), as byte views."""
    for i, part in enumerate(parts):
        yield memoryview(part).cast("B")[LENGTH.size if i == 0 else 0 :]


def tampered() -> ProtocolError:
    return ProtocolError("frame failed authentication (tampered, replayed or wrong key)")


def check_psk(psk: bytes) -> bytes:
    if len(psk) < MIN_PSK_SIZE:
        raise ValueError(f"a PSK must be at least {MIN_PSK_SIZE} bytes of random data (got {len(psk)})")
    return psk


def load_psk_file(path: str) -> bytes:
    """A PSK file holds the key as hex (64+ hex digits) or as raw bytes; surrounding whitespace is ignored."""
    with open(path, "rb") as f:
        raw = f.read()
    text = raw.strip()
    try:
        key = bytes.fromhex(text.decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        key = raw
    return check_psk(key)


def _pick_cipher(offered: int) -> int:
    for cipher in (Cipher.AES_256_GCM, Cipher.CHACHA20_POLY1305):
        if offered & cipher:
            return int(cipher)
    return 0


class ServerHandshake:
    """Server side: HELLO, then (with a PSK) AUTH. Each method returns the reply frame to send."""

    def __init__(self, psk: bytes | None, *, max_frame: int, session_id: int, agent: str = "rgpu-server",
                 features: int = int(SUPPORTED_FEATURES)):
        self.psk = psk
        self.features = features  # what this server offers; the session gets what the client offers too
        self.max_frame = max_frame
        self.session_id = session_id
        self.agent = agent
        self.client: Hello | None = None
        self.failure: str | None = None
        self.protector: RecordProtector | None = None
        self.keys: tuple[int, bytes, bytes] | None = None  # (cipher, c2s key, s2c key) once authenticated
        self._client_frame: Frame | None = None
        self._server_frame: Frame | None = None
        self._cipher = 0
        self._nonce = os.urandom(NONCE_SIZE)

    @property
    def needs_auth(self) -> bool:
        return self.psk is not None and self.failure is None

    def on_hello(self, frame: Frame) -> Frame:
        client = self.client = Hello.from_frame(frame)
        self._client_frame = frame
        ours = Hello(max_frame=self.max_frame, features=self.features & client.features,
                     nonce=self._nonce, session_id=self.session_id, agent=self.agent,
                     flags=int(HelloFlags.PSK) if self.psk else 0)
        if client.major != PROTOCOL_MAJOR:
            self.failure = (f"protocol version mismatch: server speaks {PROTOCOL_MAJOR}.{PROTOCOL_MINOR}, "
                            f"client {client.major}.{client.minor} ({client.agent or 'unknown agent'})")
            return frame.reply(status=Status.VERSION_MISMATCH, args=ours.to_frame().args,
                               bulk=self.failure.encode())
        if self.psk is not None and client.flags & HelloFlags.PSK:
            self._cipher = _pick_cipher(client.ciphers)
            if not self._cipher:
                self.failure = "client offers no cipher this server supports"
                return frame.reply(status=Status.AUTH_FAILED, bulk=self.failure.encode())
            ours = attrs.evolve(ours, ciphers=self._cipher)
        reply = self._server_frame = ours.to_frame(reply_to=frame)
        return reply

    def on_auth(self, frame: Frame) -> Frame:
        if frame.opcode != ops.AUTH.code:
            self.failure = f"expected AUTH, got opcode 0x{frame.opcode:04x}"
            return Frame(ops.AUTH.code, frame.request_id, 1, Status.AUTH_FAILED, bulk=self.failure.encode())
        if not self._cipher:
            self.failure = "client sent AUTH without announcing a key in its HELLO"
            return frame.reply(status=Status.AUTH_FAILED, bulk=b"authentication failed")
        (client_proof,) = ops.AUTH.unpack_request(frame.args)
        th = transcript_hash(self._client_frame, self._server_frame)
        if not hmac.compare_digest(client_proof, proof(self.psk, LABEL_CLIENT_PROOF, th)):
            self.failure = "authentication failed: client proof does not match this server's key"
            return frame.reply(status=Status.AUTH_FAILED, bulk=b"authentication failed")
        c2s, s2c = derive_keys(self.psk, self.client.nonce, self._nonce, th)
        self.keys = (self._cipher, c2s, s2c)
        self.protector = RecordProtector(self._cipher, send_key=s2c, recv_key=c2s)
        return frame.reply(args=ops.AUTH.reply.pack(proof(self.psk, LABEL_SERVER_PROOF, th)))


class ClientHandshake:
    """Client side. hello() -> send; on_hello_reply() -> AUTH frame to send or None; on_auth_reply()."""

    def __init__(self, psk: bytes | None, *, agent: str = "rgpu-python", major: int = PROTOCOL_MAJOR,
                 status: bool = False, features: int = int(SUPPORTED_FEATURES)):
        self.psk = psk
        self.features = features  # what this client takes (tests play older clients with fewer)
        self.status = status
        self.agent = agent
        self.major = major
        self.server: Hello | None = None
        self.protector: RecordProtector | None = None
        self._nonce = os.urandom(NONCE_SIZE)
        self._hello_frame: Frame | None = None
        self._server_frame: Frame | None = None
        self._cipher = 0

    def hello(self, request_id: int = 1) -> Frame:
        flags = (int(HelloFlags.PSK) if self.psk else 0) | (int(HelloFlags.STATUS) if self.status else 0)
        ciphers = int(SUPPORTED_CIPHERS) if self.psk else 0
        self._hello_frame = Hello(major=self.major, features=self.features, ciphers=ciphers, nonce=self._nonce,
                                  flags=flags, agent=self.agent).to_frame(request_id)
        return self._hello_frame

    def on_hello_reply(self, frame: Frame) -> Frame | None:
        if frame.status:
            message = bytes(frame.bulk).decode("utf-8", "replace")
            if frame.status == Status.AUTH_FAILED:
                raise AuthenticationError(message or "authentication failed")
            raise CudaError(frame.status, message)
        server = self.server = Hello.from_frame(frame)
        if server.major != self.major:
            raise CudaError(Status.VERSION_MISMATCH,
                            f"server speaks protocol {server.major}.{server.minor}, client {self.major}")
        self._server_frame = frame
        server_wants_auth = bool(server.flags & HelloFlags.PSK)
        if server_wants_auth and not self.psk:
            raise AuthenticationError("authentication failed: the server requires a pre-shared key "
                                      "(give --psk-file, or set RGPU_PSK_FILE)")
        if self.psk and not server_wants_auth:
            # A server (or a man in the middle) that skips authentication must not get our traffic in clear.
            raise AuthenticationError("authentication failed: the server did not ask for the pre-shared key "
                                      "(it runs without --psk-file; refusing to talk in clear)")
        if not self.psk:
            return None
        self._cipher = _pick_cipher(server.ciphers)
        if not self._cipher or self._cipher & ~int(SUPPORTED_CIPHERS):
            raise AuthenticationError("authentication failed: server chose no supported cipher")
        th = transcript_hash(self._hello_frame, frame)
        return Frame(ops.AUTH.code, frame.request_id + 1,
                     args=ops.AUTH.request.pack(proof(self.psk, LABEL_CLIENT_PROOF, th)))

    def on_auth_reply(self, frame: Frame) -> None:
        if frame.status or frame.opcode != ops.AUTH.code:
            # The server says only "authentication failed" when our proof is wrong: say what that means.
            reason = bytes(frame.bulk).decode("utf-8", "replace").removeprefix("authentication failed")
            raise AuthenticationError("authentication failed: " + (reason.lstrip(": ") or
                                      "the server does not accept our pre-shared key (not the key in its --psk-file)"))
        (server_proof,) = ops.AUTH.unpack_reply(frame.args)
        th = transcript_hash(self._hello_frame, self._server_frame)
        if not hmac.compare_digest(server_proof, proof(self.psk, LABEL_SERVER_PROOF, th)):
            raise AuthenticationError("authentication failed: the server does not hold our key")
        c2s, s2c = derive_keys(self.psk, self._nonce, self.server.nonce, th)
        self.protector = RecordProtector(self._cipher, send_key=c2s, recv_key=s2c)
