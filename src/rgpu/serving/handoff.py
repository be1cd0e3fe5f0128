"""What the supervisor hands a worker process with a client's socket: the session's parameters and, when the
connection is authenticated, its record keys. One typed object on both sides; the bytes between them (one
JSON message on the control socket, next to the descriptor) are this module's business only."""

from __future__ import annotations

import json

import attrs


@attrs.frozen(slots=True, repr=False)
class SessionKeys:
    cipher: int  # handshake.Cipher
    c2s: bytes  # client -> server record key
    s2c: bytes

    def __repr__(self) -> str:
        return f"SessionKeys(cipher={self.cipher}, ...)"  # never the keys themselves (logs, tracebacks)


@attrs.frozen(slots=True)
class Handoff:
    session_id: int
    peer: str
    max_frame: int
    mem_limit: int | None = None
    module_cache: str | None = None  # the directory; None: no cache
    module_cache_bytes: int = 0
    ipc_dir: str | None = None  # the server's registry of IPC exports (rgpu.session.ipc)
    spin_us: float = 0
    inject_rtt_us: float = 0  # see ServerConfig
    frame_timeout: float | None = None  # seconds a started frame may take to arrive whole; None: no limit
    output: bool = False  # the client takes OUTPUT frames: kernel printf goes to it, not to the server's stdout
    # Copy links offered (rgpu.session.links): the token LINK_JOINs prove (hex), and how many may join.
    link_token: str | None = attrs.field(default=None, repr=False)  # (a secret, like the keys)
    copy_links: int = 0
    keys: SessionKeys | None = None

    def encode(self) -> bytes:
        fields = attrs.asdict(self, recurse=False)
        if self.keys is not None:
            fields["keys"] = {"cipher": self.keys.cipher, "c2s": self.keys.c2s.hex(), "s2c": self.keys.s2c.hex()}
        return json.dumps(fields).encode()

    @classmethod
    def decode(cls, raw: bytes) -> Handoff:
        """The supervisor's message; ValueError if it is not one (the worker then refuses the session)."""
        try:
            fields = json.loads(raw)
            keys = fields.pop("keys", None)
            if keys is not None:
                keys = SessionKeys(int(keys["cipher"]), bytes.fromhex(keys["c2s"]), bytes.fromhex(keys["s2c"]))
            handoff = cls(**fields, keys=keys)
        except (TypeError, KeyError, AttributeError, ValueError) as e:
            raise ValueError(f"malformed session hand-off: {type(e).__name__}: {e}") from None
        for name, kind in (("session_id", int), ("peer", str), ("max_frame", int), ("module_cache_bytes", int)):
            if not isinstance(getattr(handoff, name), kind):
                raise ValueError(f"malformed session hand-off: {name} is {type(getattr(handoff, name)).__name__}")
        return handoff
