"""IPC handles (protocol 1.8) between sessions of one server, each in its worker process, on the fake backend:
memory one session exports and another opens, reads and writes; events; the handle is a capability that stops
opening once the memory is freed or its session ends; every wrong request refused with the status CUDA gives
(tests/cuda/ipc.cu does the same through the stand-ins, two processes of one program)."""

from __future__ import annotations

import os
import pathlib

import pytest

from rgpu.client import _Request
from rgpu.errors import CudaError, Status
from rgpu.protocol import ops

from .conftest import running_server

INTERPROCESS = 0x4 | 0x2  # with DISABLE_TIMING, as CUDA requires


async def _context(client):
    await client.ctx_set_current(await client.primary_ctx_retain(0))


async def _pair(srv):
    """Two clients of the server, each a session in a worker process of its own, with a context current."""
    clients = await srv.connect(), await srv.connect()
    for client in clients:
        await _context(client)
    return clients


async def export(client, ptr: int) -> bytes:
    return (await client._call(_Request(ops.IPC_GET_MEM_HANDLE, (ptr,))))


async def open_(client, handle: bytes, flags: int = 1):
    return await client._call(_Request(ops.IPC_OPEN_MEM_HANDLE, (handle, flags), decode=lambda v, b: tuple(v)))


async def close(client, ptr: int) -> int:
    return await client._call(_Request(ops.IPC_CLOSE_MEM_HANDLE, (ptr,)))


async def refused(status, call):
    with pytest.raises(CudaError) as e:
        await call
    assert e.value.code == status, e.value


async def test_memory_one_session_exports_another_opens_reads_and_writes():
    async with running_server() as srv:
        a, b = await _pair(srv)
        ptr = await a.mem_alloc(4096)
        await a.memcpy_htod(ptr, bytes(range(256)) * 16)
        handle = await export(a, ptr)
        assert len(handle) == 64 and await export(a, ptr) == handle  # one allocation, one handle
        mapped, size = await open_(b, handle)
        assert size == 4096 and await b.memcpy_dtoh(mapped, 4096) == bytes(range(256)) * 16
        await b.memcpy_htod(mapped + 100, b"written by b")
        assert (await a.memcpy_dtoh(ptr + 100, 12)) == b"written by b"
        assert await open_(b, handle) == (mapped, size)  # opened twice: one mapping, two references
        assert await close(b, mapped) == 1 and await b.memcpy_dtoh(mapped, 4) == bytes(range(4))
        assert await close(b, mapped) == 0
        await refused(Status.INVALID_VALUE, b.memcpy_dtoh(mapped, 4))  # not b's memory any more
        await refused(Status.INVALID_VALUE, close(b, mapped))
        await a.aclose()
        await b.aclose()


async def test_wrong_exports_and_opens_are_refused():
    async with running_server() as srv:
        a, b = await _pair(srv)
        ptr = await a.mem_alloc(4096)
        handle = await export(a, ptr)
        await refused(Status.INVALID_VALUE, export(a, ptr + 8))  # not an allocation's start
        await refused(Status.INVALID_VALUE, export(b, ptr))  # not b's
        await refused(Status.INVALID_CONTEXT, open_(a, handle))  # its own
        await refused(Status.INVALID_VALUE, open_(b, os.urandom(64)))  # made up
        await refused(Status.INVALID_VALUE, open_(b, handle, flags=2))
        mapped, _ = await open_(b, handle)
        await refused(Status.INVALID_VALUE, b.mem_free(mapped))  # b may use it, not free it
        await refused(Status.INVALID_VALUE, close(b, await b.mem_alloc(64)))  # not opened memory
        assert await close(b, mapped) == 0
        await a.mem_free(ptr)
        await refused(Status.INVALID_VALUE, open_(b, handle))  # freed: the handle opens nothing now
        await a.aclose()
        await b.aclose()


async def test_an_export_ends_with_its_session_and_opened_memory_counts_for_the_exporter():
    async with running_server(session_mem_limit=1 << 20) as srv:
        a, b = await _pair(srv)
        handle = await export(a, await a.mem_alloc(1 << 20))
        mapped, _ = await open_(b, handle)
        await b.mem_alloc(1 << 20)  # b's own limit is untouched by what it opened
        await a.aclose()
        assert await b.memcpy_dtoh(mapped, 4) == bytes(4)  # what b opened stays b's until it closes it
        assert await close(b, mapped) == 0
        await refused(Status.INVALID_VALUE, open_(b, handle))  # the exporter is gone: nothing opens now
        await b.aclose()


async def test_interprocess_events():
    async with running_server() as srv:
        a, b = await _pair(srv)
        timing = await a.event_create(0)
        await refused(Status.INVALID_HANDLE, a._call(_Request(ops.IPC_GET_EVENT_HANDLE, (timing,))))
        event = await a.event_create(INTERPROCESS)
        await a.event_record(event)
        handle = await a._call(_Request(ops.IPC_GET_EVENT_HANDLE, (event,)))
        await refused(Status.INVALID_CONTEXT, a._call(_Request(ops.IPC_OPEN_EVENT_HANDLE, (handle,))))
        opened = await b._call(_Request(ops.IPC_OPEN_EVENT_HANDLE, (handle,)))
        await b.stream_wait_event(0, opened)
        await b.event_synchronize(opened)
        await b.event_destroy(opened)
        await a.event_destroy(event)
        await refused(Status.INVALID_VALUE, b._call(_Request(ops.IPC_OPEN_EVENT_HANDLE, (handle,))))
        await a.aclose()
        await b.aclose()


async def test_a_server_s_stop_removes_its_registry():
    async with running_server() as srv:
        directory = srv.server.ipc.dir
        client = await srv.connect()
        await _context(client)
        await export(client, await client.mem_alloc(64))
        assert directory.is_dir() and oct(directory.stat().st_mode & 0o777) == "0o700"
        await client.aclose()
    assert not directory.exists()


async def test_freed_memory_another_session_has_open_stays_charged_until_it_is_closed():
    """Freeing exported memory that another session has mapped is undefined in CUDA: it is freed once the last
    opener has closed it, and charged to the exporter until then, so opening cannot lift the memory limit."""
    async with running_server(session_mem_limit=1 << 20) as srv:
        a, b = await _pair(srv)
        ptr = await a.mem_alloc(1 << 20)
        handle = await export(a, ptr)
        mapped, _ = await open_(b, handle)
        await a.mem_free(ptr)
        await refused(Status.INVALID_VALUE, a.memcpy_dtoh(ptr, 4))  # gone from a's address space
        await refused(Status.OUT_OF_MEMORY, a.mem_alloc(1 << 20))  # but still a's to pay for
        await refused(Status.INVALID_VALUE, open_(b, os.urandom(64)))
        assert await b.memcpy_dtoh(mapped, 4) == bytes(4)
        assert await close(b, mapped) == 0
        await a.mem_free(await a.mem_alloc(1 << 20))  # b closed it: freed for good
        await a.aclose()
        await b.aclose()


async def test_an_asynchronous_free_withdraws_an_export_too():
    async with running_server() as srv:
        a, b = await _pair(srv)
        ptr = await a.mem_alloc(4096)
        handle = await export(a, ptr)
        await a._call(_Request(ops.MEM_FREE_ASYNC, (ptr, 0)))
        await a.synchronize()
        await refused(Status.INVALID_VALUE, open_(b, handle))
        await a.aclose()
        await b.aclose()


async def test_a_killed_exporter_s_handles_stop_opening():
    import signal

    import trio

    async with running_server() as srv:
        a, b = await _pair(srv)
        handle = await export(a, await a.mem_alloc(4096))
        data = srv.server.ipc.data_path(handle)
        assert data.exists()
        # the exporter's worker is the child of this process that maps the export's file
        workers = [int(p.name) for p in pathlib.Path("/proc").iterdir() if p.name.isdigit()
                   and f"PPid:\t{os.getpid()}\n" in _read(p / "status") and str(data) in _read(p / "maps")]
        assert len(workers) == 1
        os.kill(workers[0], signal.SIGKILL)
        with trio.fail_after(10):
            while data.exists():
                await trio.sleep(0.05)
        await refused(Status.INVALID_VALUE, open_(b, handle))
        await b.aclose()


def _read(path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""
