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
