"""The supervisor -> worker hand-off (serving/handoff.py): typed at both ends, keys never printed."""

from __future__ import annotations

import pytest

from rgpu.serving.handoff import Handoff, SessionKeys


def test_round_trip_keeps_types_and_keys():
    keys = SessionKeys(2, bytes(range(32)), bytes(range(32, 64)))
    h = Handoff(7, "127.0.0.1:5000", 1 << 20, mem_limit=1 << 30, module_cache="/tmp/c", module_cache_bytes=99,
                spin_us=12.5, keys=keys)
    back = Handoff.decode(h.encode())
    assert back == h and isinstance(back.keys.c2s, bytes)
    assert Handoff.decode(Handoff(1, "p", 4096).encode()) == Handoff(1, "p", 4096)


def test_keys_stay_out_of_reprs():
    h = Handoff(1, "p", 4096, keys=SessionKeys(1, b"\xaa" * 32, b"\xbb" * 32))
    assert "aa" not in repr(h).lower() and "bb" not in repr(h).lower() and "170" not in repr(h)


@pytest.mark.parametrize("raw", [b"", b"[]", b"{}", b'{"session_id": 1, "peer": "p"}',
                                 b'{"session_id": "1", "peer": "p", "max_frame": 4096}',
                                 b'{"session_id": 1, "peer": "p", "max_frame": 4096, "extra": 1}',
                                 b'{"session_id": 1, "peer": "p", "max_frame": 4096, "keys": {"cipher": 1}}',
                                 b'{"session_id": 1, "peer": "p", "max_frame": 4096, '
                                 b'"keys": {"cipher": 1, "c2s": "zz", "s2c": ""}}'])
def test_malformed_hand_offs_are_refused(raw):
    with pytest.raises(ValueError, match="malformed session hand-off"):
        Handoff.decode(raw)
