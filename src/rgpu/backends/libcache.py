"""Library objects the server would otherwise build again for every call (cuBLASLt descriptors, cuDNN variant
packs and tensor descriptors), kept per library handle and looked up by the request's content.

A ResNet-18 step made ~20 variant packs and ~20 sets of tensor descriptors, a GPT step ~100 sets of cuBLASLt
descriptors, each created, set attribute by attribute through cffi, and destroyed again around one call: tens
of microseconds per operation on the server, which bounds how fast a session's queued work can run. The steady
state of a training or inference loop repeats the same shapes and, from a caching allocator, the same pointers,
so almost every lookup hits. The objects hold no GPU memory and are only read by the calls that use them."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Callable, Hashable

CAPACITY = 256  # per handle; an evicted object is destroyed at once (a session runs one call at a time)


class ObjectCache:
    """Least-recently-used objects by key; `destroy(obj)` runs on eviction and on clear()."""

    def __init__(self, destroy: Callable[[object], None], capacity: int = CAPACITY):
        self._destroy, self._capacity = destroy, capacity
        self._objects: OrderedDict[Hashable, object] = OrderedDict()

    def get(self, key: Hashable, make: Callable[[], object]) -> object:
        obj = self._objects.get(key)
        if obj is not None:
            self._objects.move_to_end(key)
            return obj
        obj = make()
        self._objects[key] = obj
        while len(self._objects) > self._capacity:
            _, old = self._objects.popitem(last=False)
            self._destroy(old)
        return obj

    def clear(self) -> None:
        while self._objects:
            _, obj = self._objects.popitem(last=False)
            self._destroy(obj)

    def __len__(self) -> int:
        return len(self._objects)


class PerHandle:
    """An ObjectCache per library handle (sessions never share handles), dropped with the handle."""

    def __init__(self, destroy: Callable[[object], None], capacity: int = CAPACITY):
        self._destroy, self._capacity = destroy, capacity
        self._caches: dict[int, ObjectCache] = {}
        self._lock = threading.Lock()

    def of(self, key: int) -> ObjectCache:
        """The cache of the handle at address `key`."""
        with self._lock:
            cache = self._caches.get(key)
            if cache is None:
                cache = self._caches[key] = ObjectCache(self._destroy, self._capacity)
            return cache

    def drop(self, key: int) -> None:
        with self._lock:
            cache = self._caches.pop(key, None)
        if cache is not None:
            cache.clear()

