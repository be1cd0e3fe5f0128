"""The cuda backend's cffi paths for JIT linking and CUDA arrays, against a stand-in for the driver that records
what it is given and answers as the documentation says: this machine has no GPU, so these check the structures,
pointers and option arrays the backend builds (the box runs the real thing: tests/gpu/run_on_gpu.sh,
tests/cuda/run_on_gpu.sh)."""

from __future__ import annotations

import struct

import pytest

pytest.importorskip("cuda.bindings.driver")

from rgpu.backends import cuda_arrays, cuda_ipc, cuda_jit_link  # noqa: E402
from rgpu.backends.array_types import ARRAY, DEVICE, HOST, ArrayShape, CopyEnd, Resource, TextureDesc  # noqa: E402
from rgpu.errors import CudaError  # noqa: E402


class Probe(cuda_arrays.CudaArrays, cuda_ipc.CudaIpc, cuda_jit_link.CudaJitLink):
    def _use(self, ctx) -> None:
        pass


class FakeLinker:
    """cuLink* as the documentation has them: logs into the buffers given at creation, the wall time over the
    option's value, the image owned by the state."""

    def __init__(self):
        self.ffi = cuda_jit_link._ffi
        self.inputs = []
        self.image = self.ffi.new("char[]", b"LINKED-IMAGE")

    def _option(self, ident):
        return next(i for i in range(self.n) if self.options[i] == ident)

    def _write(self, ident, text: bytes):
        size = int(self.ffi.cast("uintptr_t", self.values[self._option(ident + 1)]))
        buf = self.ffi.cast("char *", self.values[self._option(ident)])
        self.ffi.memmove(buf, text[: size - 1] + b"\0", min(len(text) + 1, size))

    def cuLinkCreate_v2(self, n, options, values, state):
        self.n, self.options, self.values = n, options, values
        self.forwarded = [(options[i], int(self.ffi.cast("uintptr_t", values[i]))) for i in range(n)]
        state[0] = self.ffi.cast("void *", 0xABC)
        return 0

    def cuLinkAddData_v2(self, state, kind, data, size, name, n, options, values):
        assert int(self.ffi.cast("uintptr_t", state)) == 0xABC
        self.inputs.append((kind, bytes(self.ffi.buffer(data, size)), bytes(name)))  # (bytes for const char *)
        if b"bad" in self.inputs[-1][1]:
            self._write(5, b"ptxas error: bad input")
            return 218
        self._write(3, b"info: added " + bytes(name))
        return 0

    def cuLinkComplete(self, state, image, size):
        self.ffi.cast("float *", self.values + self._option(2))[0] = 1.5
        image[0], size[0] = self.image, len(self.image) - 1
        return 0

    def cuLinkDestroy(self, state):
        return 0


def _check_code(code: int) -> None:
    if code:  # (cuda_common's names the error through the driver, which this machine lacks)
        raise CudaError(code, "")


def test_a_link_through_the_driver_s_option_arrays(monkeypatch):
    fake = FakeLinker()
    monkeypatch.setattr(cuda_jit_link, "driver", lambda ffi: fake)
    monkeypatch.setattr(cuda_jit_link, "check_code", _check_code)
    probe = Probe()
    link = probe.jit_link_create(None, ((12, 1), (0, 32)), 64, 16)
    assert fake.forwarded[:2] == [(12, 1), (0, 32)]
    assert {o for o, _ in fake.forwarded[2:]} == {2, 3, 4, 5, 6}  # the logs and the wall time, the backend's own
    probe.jit_link_add(None, link, 1, b".version 9.0", "k.ptx", ())
    assert fake.inputs[0] == (1, b".version 9.0\0", b"k.ptx")  # PTX given its NUL
    assert probe.jit_link_outputs(link) == (b"info: added k.ptx\0", b"", 0.0)
    with pytest.raises(CudaError) as e:
        probe.jit_link_add(None, link, 0, b"bad cubin", "b.cubin", ())
    assert e.value.code == 218
    assert probe.jit_link_outputs(link)[1] == b"ptxas error: ba\0"  # capped at the 16 bytes asked for, with its NUL
    assert probe.jit_link_complete(None, link) == b"LINKED-IMAGE"
    assert probe.jit_link_outputs(link)[2] == 1.5
    probe.jit_link_destroy(None, link)


class FakeArrays:
    """cuArray3DCreate and cuMemcpy3D over bytearrays: arrays by address, rows `row_bytes` long."""

    def __init__(self):
        self.ffi = cuda_arrays._ffi
        self.arrays, self.device, self.calls = {}, {}, []

    def cuArray3DCreate_v2(self, array, desc):
        address = 0x1000 * (len(self.arrays) + 1)
        self.arrays[address] = (desc.Width * 4 * desc.NumChannels, bytearray(desc.Width * 4 * desc.NumChannels
                                                                             * max(desc.Height, 1)))
        array[0] = self.ffi.cast("void *", address)
        return 0

    def cuArrayDestroy(self, array):
        del self.arrays[int(self.ffi.cast("uintptr_t", array))]
        return 0

    def _rows(self, c, side, width, height):
        kind = getattr(c, f"{side}MemoryType")
        if kind == HOST:
            buf = self.ffi.buffer(getattr(c, f"{side}Host"), getattr(c, f"{side}Pitch") * (height - 1) + width)
            return buf, 0, getattr(c, f"{side}Pitch")
        if kind == DEVICE:
            return self.device[getattr(c, f"{side}Device")], 0, getattr(c, f"{side}Pitch")
        row_bytes, data = self.arrays[int(self.ffi.cast("uintptr_t", getattr(c, f"{side}Array")))]
        return data, getattr(c, f"{side}Y") * row_bytes + getattr(c, f"{side}XInBytes"), row_bytes

    def _copy(self, c):
        assert c.Depth == 1 and c.srcLOD == c.dstLOD == 0
        src, s0, sp = self._rows(c, "src", c.WidthInBytes, c.Height)
        dst, d0, dp = self._rows(c, "dst", c.WidthInBytes, c.Height)
        for y in range(c.Height):
            dst[d0 + y * dp : d0 + y * dp + c.WidthInBytes] = src[s0 + y * sp : s0 + y * sp + c.WidthInBytes]
        return 0

    def cuMemcpy3D_v2(self, c):
        self.calls.append("sync")
        return self._copy(c)

    def cuMemcpy3DAsync_v2(self, c, stream):
        self.calls.append(("async", stream))
        return self._copy(c)

    def cuTexObjectCreate(self, number, res, tex, view):
        self.res, self.tex = bytes(res), bytes(tex)  # (cffi passes bytes to a const char * parameter as they are)
        number[0] = 7
        return 0

    def cuSurfObjectCreate(self, number, res):
        number[0] = 8
        return 0


def test_array_copies_and_objects_through_the_driver_s_structures(monkeypatch):
    fake = FakeArrays()
    monkeypatch.setattr(cuda_arrays, "driver", lambda ffi: fake)
    probe = Probe()
    array = probe.array_create(None, ArrayShape(4, 3, 0, 0x20, 1, 0))  # 3 rows of 16 bytes
    rows = bytes(range(48))
    probe.array_copy(None, CopyEnd(HOST), CopyEnd(ARRAY, array), 16, 3, rows, None, False)
    assert probe.array_copy(None, CopyEnd(ARRAY, array, 4, 1), CopyEnd(HOST), 8, 2, None, None, False) == \
        rows[20:28] + rows[36:44]
    fake.device[0xD000] = bytearray(64)
    probe.array_copy(None, CopyEnd(ARRAY, array), CopyEnd(DEVICE, 0xD000, pitch=20), 16, 3, None, None, True)
    assert fake.device[0xD000][20:36] == rows[16:32] and fake.calls[-1] == ("async", 0)
    number, _ = probe.tex_object_create(None, Resource(0, array), TextureDesc((1, 1, 1), 0, 0, (0,) * 4,
                                                                              bytes(range(104))), None)
    assert number == 7 and fake.tex == bytes(range(104))
    assert struct.unpack_from("<I4xQ", fake.res) == (0, int(cuda_arrays._ffi.cast("uintptr_t", array)))
    assert probe.surf_object_create(None, Resource(0, array))[0] == 8
    probe.array_destroy(None, array)
    assert fake.arrays == {}


class FakeIpcDriver:
    """cuIpc* taking and giving the 64-byte handles by value, as the driver does."""

    def __init__(self):
        self.ffi = cuda_ipc._ffi

    def cuIpcGetMemHandle(self, h, dptr):
        self.ffi.memmove(h.reserved, dptr.to_bytes(8, "little") * 8, 64)
        return 0

    def cuIpcOpenMemHandle_v2(self, dptr, h, flags):
        self.opened = (bytes(self.ffi.buffer(h.reserved)), flags)
        dptr[0] = 0xE000
        return 0

    def cuMemGetAddressRange_v2(self, base, size, dptr):
        base[0], size[0] = dptr, 4096
        return 0

    def cuIpcGetEventHandle(self, h, event):
        self.ffi.memmove(h.reserved, b"E" * 64, 64)
        return 0

    def cuIpcOpenEventHandle(self, event, h):
        self.event_handle = bytes(self.ffi.buffer(h.reserved))
        event[0] = 0x77
        return 0


def test_ipc_handles_through_the_driver_s_structures(monkeypatch):
    fake = FakeIpcDriver()
    monkeypatch.setattr(cuda_ipc, "driver", lambda ffi: fake)
    probe = Probe()
    payload = probe.ipc_export_memory(None, 0x1234, None)
    assert payload == (0x1234).to_bytes(8, "little") * 8
    assert probe.ipc_open_memory(None, payload, 1) == (0xE000, 4096) and fake.opened == (payload, 1)
    event_payload = probe.ipc_export_event(None, cuda_ipc.cu.CUevent(5))
    assert event_payload == b"E" * 64
    assert int(probe.ipc_open_event(None, event_payload)) == 0x77 and fake.event_handle == event_payload
