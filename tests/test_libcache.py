"""The server's per-handle caches of library objects (rgpu.backends.libcache) and the content key of a cuBLASLt
operation: what the cuda backend keeps between calls instead of rebuilding descriptors for each one."""

from __future__ import annotations

import struct

from rgpu.backends.libcache import ObjectCache, PerHandle
from rgpu.protocol import blas_wire


def test_least_recently_used_objects_go_first_and_are_destroyed():
    destroyed, made = [], []

    def make(name):
        made.append(name)
        return name

    cache = ObjectCache(destroyed.append, capacity=2)
    assert cache.get("a", lambda: make("A")) == "A"
    assert cache.get("b", lambda: make("B")) == "B"
    assert cache.get("a", lambda: make("A2")) == "A"  # a hit: nothing made, "a" is now the most recent
    cache.get("c", lambda: make("C"))
    assert made == ["A", "B", "C"] and destroyed == ["B"] and len(cache) == 2
    cache.clear()
    assert sorted(destroyed) == ["A", "B", "C"] and len(cache) == 0


def test_a_failed_make_keeps_nothing():
    cache = ObjectCache(lambda obj: None)

    def fail():
        raise RuntimeError("library refused")

    try:
        cache.get("k", fail)
    except RuntimeError:
        pass
    assert len(cache) == 0 and cache.get("k", lambda: 7) == 7


def test_each_handle_has_its_own_objects_and_dropping_a_handle_destroys_them():
    destroyed = []
    caches = PerHandle(destroyed.append)
    caches.of(0x1000).get("same key", lambda: "for handle 1")
    assert caches.of(0x2000).get("same key", lambda: "for handle 2") == "for handle 2"
    caches.drop(0x1000)
    assert destroyed == ["for handle 1"]
    assert caches.of(0x1000).get("same key", lambda: "new handle, same address") == "new handle, same address"


def _operation(transa: int, bias: int = 0):
    def desc(tag, fixed, attrs):
        out = struct.pack("<B", tag) + fixed + struct.pack("<H", len(attrs))
        return out + b"".join(struct.pack("<II", i, len(v)) + v for i, v in attrs.items())

    attrs = {3: struct.pack("<i", transa)}
    if bias:
        attrs.update({7: struct.pack("<i", 4), 8: struct.pack("<Q", bias)})
    layout = struct.pack("<IQQq", 0, 4, 4, 4)
    return blas_wire.parse_operation(desc(1, struct.pack("<II", 68, 0), attrs)
                                     + b"".join(desc(t, layout, {}) for t in (2, 3, 4, 5)))


def test_a_cublaslt_operation_is_keyed_by_everything_its_descriptors_are_made_of():
    assert _operation(0).key() == _operation(0).key()
    assert _operation(0).key() != _operation(1).key()
    assert _operation(0, bias=0x10000).key() != _operation(0, bias=0x20000).key()
    hash(_operation(1, bias=0x10000).key())
