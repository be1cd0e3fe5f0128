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
    assert "conv2d fwd again, same pack        OK" in proc.stdout  # (the second through the server's fast lane)
    assert "batch norm inference again         OK" in proc.stdout
    assert "batch norm inference (legacy API)  OK" in proc.stdout
    assert "batch norm training forward        OK" in proc.stdout
    assert "batch norm training backward       OK" in proc.stdout
    assert "batch norm + add + relu forward    OK" in proc.stdout
    assert "batch norm + add + relu backward   OK" in proc.stdout
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


# -- batch norm fused with an addition and ReLU: every operand, z / y / dz included, is the session's own ------
_HALF, _FLOAT, _RELU, _SIGMOID, _ADD_RELU, _PERSISTENT = 2, 0, 1, 0, 2, 2


def _tensor(dtype, dims, strides):
    pad = (0,) * (8 - len(dims))
    return struct.pack("<II8i8i", dtype, len(dims), *dims, *pad, *strides, *pad)


def _fused_setup():
    from .test_vmm import call, session

    s = session()
    (handle,) = call(s, ops.DNN_CREATE)
    nhwc = _tensor(_HALF, (2, 8, 4, 4), (128, 1, 32, 8))  # 256 halves
    bn = _tensor(_FLOAT, (1, 8, 1, 1), (8, 1, 1, 1))
    data = {name: call(s, ops.MEM_ALLOC, 512)[0] for name in ("x", "y", "z", "dy", "dx", "dz")}
    stats = {name: call(s, ops.MEM_ALLOC, 32)[0] for name in ("scale", "bias", "rmean", "rvar", "smean", "sinv",
                                                               "dscale", "dbias")}
    return s, handle, nhwc, bn, data, stats


def _training(handle, data, stats, **changes):
    fields = dict(handle=handle, stream=0, mode=_PERSISTENT, ops=_ADD_RELU, alpha=1.0, beta=0.0, factor=0.1,
                  epsilon=1e-5, x=data["x"], y=data["y"], scale=stats["scale"], bias=stats["bias"],
                  running_mean=stats["rmean"], running_var=stats["rvar"], saved_mean=stats["smean"],
                  saved_inv_var=stats["sinv"], workspace=0, workspace_size=0, reserve=0, reserve_size=0, z=data["z"],
                  activation_mode=_RELU, activation_nan=0, activation_coef=0.0)
    fields.update(changes)
    return ops.DNN_BN_TRAINING_EX.Request(**fields)


def _backward(handle, data, stats, **changes):
    fields = dict(handle=handle, stream=0, mode=_PERSISTENT, ops=_ADD_RELU, alpha_data=1.0, beta_data=0.0,
                  alpha_params=1.0, beta_params=0.0, epsilon=1e-5, x=data["x"], dy=data["dy"], dx=data["dx"],
                  scale=stats["scale"], dscale=stats["dscale"], dbias=stats["dbias"], saved_mean=stats["smean"],
                  saved_inv_var=stats["sinv"], workspace=0, workspace_size=0, reserve=0, reserve_size=0,
                  y=data["y"], dz=data["dz"], bias=stats["bias"], activation_mode=_RELU, activation_nan=0,
                  activation_coef=0.0)
    fields.update(changes)
    return ops.DNN_BN_BACKWARD_EX.Request(**fields)


def test_fused_batch_norm_operands_are_the_sessions_own():
    from .test_vmm import call, fails

    s, handle, nhwc, bn, data, stats = _fused_setup()
    forward_bulk, backward_bulk = nhwc * 2 + bn + nhwc, nhwc * 3 + bn + nhwc * 2
    small = call(s, ops.MEM_ALLOC, 64)[0]
    call(s, ops.DNN_BN_TRAINING_EX, *_training(handle, data, stats), bulk=forward_bulk)
    call(s, ops.DNN_BN_BACKWARD_EX, *_backward(handle, data, stats), bulk=backward_bulk)
    for bad in (dict(z=0xDEAD0000), dict(z=small), dict(z=0), dict(y=0xDEAD0000), dict(ops=0), dict(ops=7)):
        fails(Status.INVALID_VALUE, s, ops.DNN_BN_TRAINING_EX, *_training(handle, data, stats, **bad),
              bulk=forward_bulk)
    for bad in (dict(dz=0xDEAD0000), dict(dz=small), dict(y=0xDEAD0000), dict(y=0), dict(bias=0xDEAD0000),
                dict(dz=0)):
        fails(Status.INVALID_VALUE, s, ops.DNN_BN_BACKWARD_EX, *_backward(handle, data, stats, **bad),
              bulk=backward_bulk)
    # Without an addition z / dz are not operands: a stale pointer there is ignored, not read.
    call(s, ops.DNN_BN_TRAINING_EX, *_training(handle, data, stats, ops=1, z=0xDEAD0000), bulk=forward_bulk)
    call(s, ops.DNN_BN_BACKWARD_EX, *_backward(handle, data, stats, ops=1, dz=0xDEAD0000), bulk=backward_bulk)
    # The fake runs ReLU only; another activation is refused as unsupported, the size query included.
    fails(Status.NOT_SUPPORTED, s, ops.DNN_BN_TRAINING_EX, *_training(handle, data, stats, activation_mode=_SIGMOID),
          bulk=forward_bulk)
    fails(Status.NOT_SUPPORTED, s, ops.DNN_BN_SIZES_EX, handle, 0, _PERSISTENT, _ADD_RELU, _SIGMOID, 0, 0.0,
          bulk=nhwc * 5 + bn)
    assert call(s, ops.DNN_BN_SIZES_EX, handle, 2, _PERSISTENT, _ADD_RELU, _RELU, 0, 0.0, bulk=nhwc * 5 + bn) == (0,)
    fails(Status.INVALID_VALUE, s, ops.DNN_BN_SIZES_EX, handle, 0, _PERSISTENT, _ADD_RELU, _RELU, 0, 0.0,
          bulk=nhwc * 5)  # one descriptor short
