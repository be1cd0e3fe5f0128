"""The cuDNN stand-in against the fake backend: a forward convolution through the backend (graph) API the way
cudnn-frontend drives it, and batch norm (inference, training forward and backward), checked against a CPU reference by tests/cuda/dnn_check.c;
and the server's checks on descriptors, handles and variant-pack pointers."""

from __future__ import annotations

import struct
import subprocess

import pytest

from rgpu.cli import local_server
from rgpu.client import _Request
from rgpu.errors import CudaError, Status
from rgpu.protocol import ops

from .test_runtime import PROGRAMS, REPO, run


def test_backend_graph_conv_and_batch_norm_match_a_cpu_reference(shim_dir, tmp_path):
    exe = tmp_path / "dnn_check"
    subprocess.run(["gcc", "-O1", "-Wall", f"-I{REPO / 'native' / 'gen'}", "-o", str(exe),
                    str(PROGRAMS / "dnn_check.c"), f"-L{shim_dir}", "-l:libcudart.so.13", "-l:libcudnn.so.9", "-lm",
                    f"-Wl,-rpath-link,{shim_dir}"], check=True)
    with local_server("fake", ["--log-level", "warning"]) as address:
        proc = run(shim_dir, exe, env={"RGPU_SERVER": address, "RGPU_LOG": "debug"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "conv2d fwd (backend graph API)     OK" in proc.stdout
    assert "batch norm inference (legacy API)  OK" in proc.stdout
    assert "batch norm training forward        OK" in proc.stdout
    assert "batch norm training backward       OK" in proc.stdout
    # Setters stay local: one finalize per descriptor, the heuristics' results and the plan's workspace are the
    # only remote getters.
    remote = [line for line in proc.stderr.splitlines() if "debug: get attribute" in line]
    assert len(remote) == 3, remote


def _attrs(*items):
    out = struct.pack("<H", len(items))
    for name, atype, values in items:
        out += struct.pack("<III", name, atype, len(values)) + b"".join(struct.pack("<Q", v) for v in values)
    return out


async def test_descriptors_handles_and_pointers_are_the_sessions_own(client):
    handle = await client._call(_Request(ops.DNN_CREATE))
    # A descriptor that references a handle this session does not have.
    with pytest.raises(CudaError) as e:
        await client._call(_Request(ops.DNN_FINALIZE, (15,), _attrs((800, 0, [handle + 1]))))
    assert e.value.code == Status.INVALID_HANDLE
    # Device pointers belong in a variant pack only.
    with pytest.raises(CudaError) as e:
        await client._call(_Request(ops.DNN_FINALIZE, (17,), _attrs((1001, 6, [0x1000]))))
    assert e.value.code == Status.NOT_SUPPORTED
    # A graph the fake cannot run is refused with cuDNN's own status, not an rgpu error.
    tensor, status = await client._call(_Request(ops.DNN_FINALIZE, (17,), _attrs()))
    desc, status = await client._call(_Request(ops.DNN_FINALIZE, (15,), _attrs((801, 15, [tensor]))))
    assert (desc, status) == (0, 3000)
    # Executing with a pointer outside the session's memory: refused (reported with the next reply).
    heur, _ = await client._call(_Request(ops.DNN_FINALIZE, (4,), _attrs()))
    assert heur == 0
    with pytest.raises(CudaError):
        await client._call(_Request(ops.DNN_EXECUTE, (handle, tensor, 0), _attrs((1001, 6, [0xDEAD0000]))))
    # Two workspaces: a clear refusal, not an internal error.
    with pytest.raises(CudaError) as e:
        await client._call(_Request(ops.DNN_EXECUTE, (handle, tensor, 0), _attrs((1003, 6, [0, 0]))))
    assert e.value.code == Status.INVALID_VALUE
    await client._call(_Request(ops.DNN_DESTROY, (handle,)))


def test_truncated_attributes_are_refused():
    from rgpu.protocol import dnn_wire

    for bad in (b"", b"\x01\x00", b"\x01\x00" + struct.pack("<III", 1, 3, 100000)):
        with pytest.raises(CudaError):
            dnn_wire.parse_attributes(bad)


def _by_value(*entries):
    raw = b"".join(struct.pack("<II", i, len(data)) + data for i, data in entries)
    return struct.pack("<III", 0x52470001, 24, len(raw)) + raw


def test_by_value_entries_are_checked_and_split_off():
    from rgpu.protocol import dnn_wire

    pointers = struct.pack("<III", 1001, 6, 2) + struct.pack("<QQ", 0x1000, 0x7FFF0000)
    good = struct.pack("<H", 2) + pointers + _by_value((1, struct.pack("<f", 0.125)))
    rest, values = dnn_wire.split_by_value(dnn_wire.parse_attributes(good))
    assert [a.name for a in rest] == [1001] and values == {1: struct.pack("<f", 0.125)}
    for bad in (_by_value((2, b"\0" * 4)),                      # no such data pointer
                _by_value((0, b"\0" * 17)),                     # wider than any cuDNN scalar
                _by_value((1, b"\0" * 4), (1, b"\0" * 4)),      # the same pointer twice
                struct.pack("<III", 0x52470001, 24, 3) + b"\0\0\0"):  # truncated
        with pytest.raises(CudaError) as e:
            dnn_wire.split_by_value(dnn_wire.parse_attributes(struct.pack("<H", 2) + pointers + bad))
        assert e.value.code == Status.INVALID_VALUE


async def test_a_by_value_pointer_is_not_taken_for_device_memory(client):
    handle = await client._call(_Request(ops.DNN_CREATE))
    tensor, _ = await client._call(_Request(ops.DNN_FINALIZE, (17,), _attrs()))
    pointers = struct.pack("<III", 1001, 6, 1) + struct.pack("<Q", 0xDEAD0000)
    with pytest.raises(CudaError) as e:  # without its bytes, the host pointer is refused
        await client._call(_Request(ops.DNN_EXECUTE, (handle, tensor, 0), struct.pack("<H", 1) + pointers))
    assert "not inside memory owned by this session" in e.value.message
    # With them, it is not checked, and the (fake) plan is what fails.
    with pytest.raises(CudaError) as e:
        await client._call(_Request(ops.DNN_EXECUTE, (handle, tensor, 0),
                                    struct.pack("<H", 2) + pointers + _by_value((0, b"\0\0\x80?"))))
    assert "not inside memory owned by this session" not in e.value.message
    await client._call(_Request(ops.DNN_DESTROY, (handle,)))
