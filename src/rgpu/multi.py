"""The devices of several servers in one program, from Python: `rgpu.connect("hostA:9713,hostB:9713")`.

Each server has its own session (one connection each, its own key if need be); the devices are numbered across
the servers in the order given, as the C stand-ins number them for RGPU_SERVER lists. Calls go to the server of
the current device (`set_device`), or of the device named; memory, modules, streams and events stay on the
server that made them. A copy between devices of one server runs on that server (MEMCPY_PEER); between
servers it goes through this host. An error or a lost connection on one server fails only the calls that go
there.
"""

from __future__ import annotations

import contextlib

from rgpu.errors import CudaError, Status


class MultiClient:
    def __init__(self, clients: list, addresses: list[str]):
        self.clients = clients
        self.addresses = addresses
        self._first = [0]
        for c in clients:
            self._first.append(self._first[-1] + c.device_count())
        self._contexts: dict[int, int] = {}  # device -> its primary context (retained by set_device)
        self._current = 0

    # -- devices -------------------------------------------------------------------------------------
    def device_count(self) -> int:
        return self._first[-1]

    def locate(self, dev: int) -> tuple[int, int]:
        """(index of the device's server, the device's ordinal there)."""
        for i in range(len(self.clients)):
            if self._first[i] <= dev < self._first[i + 1]:
                return i, dev - self._first[i]
        raise CudaError(Status.INVALID_DEVICE, f"device {dev} does not exist ({self.device_count()} devices)")

    def client(self, dev: int | None = None):
        """The session of the server that has device `dev` (default: the current device)."""
        return self.clients[self.locate(self._current if dev is None else dev)[0]]

    def set_device(self, dev: int) -> None:
        """Make `dev` current: later calls go to its server, in its (primary) context."""
        index, local = self.locate(dev)
        client = self.clients[index]
        if dev not in self._contexts:
            self._contexts[dev] = client.primary_ctx_retain(local)
        client.ctx_set_current(self._contexts[dev])
        self._current = dev

    def current_device(self) -> int:
        return self._current

    def context(self, dev: int) -> int:
        if dev not in self._contexts:
            index, local = self.locate(dev)
            self._contexts[dev] = self.clients[index].primary_ctx_retain(local)
        return self._contexts[dev]

    def _on_device(self, name: str, dev: int, *args):
        index, local = self.locate(dev)
        return getattr(self.clients[index], name)(*args, local)

    def device_name(self, dev: int = 0) -> str:
        return self._on_device("device_name", dev)

    def device_total_mem(self, dev: int = 0) -> int:
        return self._on_device("device_total_mem", dev)

    def device_uuid(self, dev: int = 0) -> bytes:
        return self._on_device("device_uuid", dev)

    def device_attributes(self, dev: int = 0) -> dict:
        return self._on_device("device_attributes", dev)

    def device_attribute(self, attrib: int, dev: int = 0) -> int:
        return self._on_device("device_attribute", dev, attrib)

    # -- between devices -----------------------------------------------------------------------------
    def device_can_access_peer(self, dev: int, peer: int) -> bool:
        (index, local), (peer_index, peer_local) = self.locate(dev), self.locate(peer)
        return index == peer_index and self.clients[index].device_can_access_peer(local, peer_local)

    def memcpy_peer(self, dst: int, dst_dev: int, src: int, src_dev: int, nbytes: int) -> None:
        """Copy between devices: on their server when they share one, else through this host (the bytes cross
        the network twice: src's server to here, here to dst's)."""
        (index, _), (src_index, _) = self.locate(dst_dev), self.locate(src_dev)
        if index == src_index:
            self.clients[index].memcpy_peer(dst, self.context(dst_dev), src, self.context(src_dev), nbytes)
            return
        self.clients[index].memcpy_htod(dst, self.clients[src_index].memcpy_dtoh(src, nbytes))

    # -- everything else: the current device's server ------------------------------------------------
    def __getattr__(self, name: str):
        return getattr(self.client(), name)

    def close(self) -> None:
        """Close every session; one whose server is gone is just dropped."""
        for c in self.clients:
            with contextlib.suppress(Exception):
                c.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def connect_many(connect, addresses: list[str], psk: bytes | None, psk_files: list[str | None], *,
                 context: bool = True, **kw) -> MultiClient:
    """A session on each server through `connect` (rgpu.client.connect: this module sits below the client)."""
    clients = []
    try:
        for address, key_file in zip(addresses, psk_files):
            clients.append(connect(address, psk, psk_file=key_file, context=False, **kw))
            clients[-1].init()
        multi = MultiClient(clients, addresses)
        if context and multi.device_count():
            multi.set_device(0)
        return multi
    except BaseException:
        for c in clients:
            with contextlib.suppress(Exception):
                c.close()
        raise
