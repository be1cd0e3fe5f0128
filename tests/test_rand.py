"""The cuRAND stand-in against the fake backend (numpy generators): every generator type and distribution checked
by tests/cuda/rand_check.c against what the distribution must look like, its bad-input half (statuses a program
gets back, a range outside its memory refused), and the server's checks on what a generator may touch."""

from __future__ import annotations

import struct
import subprocess

import numpy as np
import pytest

from rgpu.cli import local_server
from rgpu.errors import CudaError, Status
from rgpu.protocol import ops
from rgpu.protocol.rand_wire import Draw, RandStatus, Setting

from .test_runtime import PROGRAMS, run


@pytest.fixture(scope="module")
def rand_check(shim_dir, tmp_path_factory):
    exe = tmp_path_factory.mktemp("rand") / "rand_check"
    subprocess.run(["gcc", "-O1", "-Wall", "-o", str(exe), str(PROGRAMS / "rand_check.c"), f"-L{shim_dir}",
                    "-l:libcudart.so.13", "-l:libcurand.so.10", "-lm", f"-Wl,-rpath-link,{shim_dir}"], check=True)
    return exe


@pytest.fixture(scope="module")
def fake_server():
    with local_server("fake", ["--log-level", "warning"]) as address:
        yield address


def test_every_generator_and_distribution_looks_right(shim_dir, rand_check, fake_server):
    proc = run(shim_dir, rand_check, env={"RGPU_SERVER": fake_server})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    for name in ("XORWOW", "MRG32K3A", "MTGP32", "MT19937", "PHILOX4_32_10", "SOBOL32", "SCRAMBLED_SOBOL64",
                 "host MRG32K3A", "PHILOX on a stream"):
        assert any(line.startswith(name + " ") and " OK " in line for line in lines), proc.stdout
    for check, count in (("same seed, same sequence", 5), ("drawing on continues it", 5),
                         ("another seed, another sequence", 5), ("offset 4096 moves it, repeatably", 3),
                         ("same dimensions, same points", 4), ("offset 4096, other points", 4),
                         ("the same draws on the default stream", 1)):
        assert sum(line.startswith(check + " ") and " OK " in line for line in lines) == count, (check, proc.stdout)
    assert "rand_check OK" in lines
    assert "not supported" not in proc.stderr, proc.stderr


def test_bad_input_gets_curand_statuses(shim_dir, rand_check, fake_server):
    proc = run(shim_dir, rand_check, "bad", env={"RGPU_SERVER": fake_server})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "MISMATCH" not in proc.stdout and "rand_check bad OK" in proc.stdout, proc.stdout
    assert proc.stderr.count("a host generator makes at most") == 1, proc.stderr


def test_unsupported_curand_call_logs_once(shim_dir, tmp_path, fake_server):
    src = tmp_path / "unsupported.c"
    src.write_text("""
        #include <stdio.h>
        int curandGetScrambleConstants32(unsigned **c);
        int main(void) {
            unsigned *c;
            int a = curandGetScrambleConstants32(&c), b = curandGetScrambleConstants32(&c);
            printf("%d %d\\n", a, b);
            return 0;
        }""")
    exe = tmp_path / "unsupported"
    subprocess.run(["gcc", "-o", str(exe), str(src), f"-L{shim_dir}", "-l:libcurand.so.10",
                    f"-Wl,-rpath-link,{shim_dir}"], check=True)
    proc = run(shim_dir, exe, env={"RGPU_SERVER": fake_server})
    assert proc.stdout.strip() == "999 999"  # CURAND_STATUS_INTERNAL_ERROR, both times
    assert proc.stderr.count("curandGetScrambleConstants32 is not supported") == 1


async def _create(client, rng_type=101, host=0):
    from rgpu.client import _Request

    return await client._call(_Request(ops.RAND_CREATE, (rng_type, host), decode=lambda v, b: (v.handle, v.status)))


def _generate(handle, output, count, kind=Draw.UNIFORM, stream=0, a=0.0, b=0.0):
    from rgpu.client import _Request

    return _Request(ops.RAND_GENERATE, (handle, stream, output, kind, count, a, b))


async def test_generation_is_confined_to_the_sessions_memory_and_generators(srv, client):
    from rgpu.client import _Request

    handle, status = await _create(client)
    assert status == 0 and handle
    out = await client.mem_alloc(64)
    await client._defer(_generate(handle, out, 16))
    values = np.frombuffer(await client.memcpy_dtoh(out, 64), np.float32)
    assert ((values > 0) & (values <= 1)).all() and len(set(values)) == 16
    # One float past the allocation: refused, nothing written.
    await client._defer(_generate(handle, out, 17))
    with pytest.raises(CudaError) as e:
        await client.nop()
    assert e.value.deferred and e.value.code == Status.INVALID_VALUE
    # A length cuRAND refuses, sent anyway (the stand-in answers it itself): refused as cuRAND would.
    await client._defer(_generate(handle, out, 15, kind=Draw.NORMAL, b=1.0))
    with pytest.raises(CudaError) as e:
        await client.nop()
    assert e.value.deferred and e.value.code == Status.INVALID_VALUE
    # An unknown draw.
    await client._defer(_generate(handle, out, 4, kind=77))
    with pytest.raises(CudaError) as e:
        await client.nop()
    assert e.value.code == Status.INVALID_VALUE
    # A generator of another session is an unknown handle here, for every operation.
    other = await srv.connect()
    try:
        for req in (_Request(ops.RAND_SET, (handle, Setting.SEED, 1)), _Request(ops.RAND_DESTROY, (handle,)),
                    _Request(ops.RAND_GENERATE_HOST, (handle, Draw.UNIFORM, 4, 0.0, 0.0))):
            with pytest.raises(CudaError) as e:
                await other._call(req)
            assert e.value.code == Status.INVALID_HANDLE
    finally:
        await other.aclose()
    assert await client._call(_Request(ops.RAND_SET, (handle, Setting.SEED, 1))) == 0
    with pytest.raises(CudaError) as e:
        await client._call(_Request(ops.RAND_SET, (handle, 9, 1)))
    assert e.value.code == Status.INVALID_VALUE
    await client._call(_Request(ops.RAND_DESTROY, (handle,)))
    with pytest.raises(CudaError) as e:
        await client._call(_Request(ops.RAND_DESTROY, (handle,)))
    assert e.value.code == Status.INVALID_HANDLE


async def test_host_and_device_generators_never_swap_roles(client):
    # A host generator aimed at an "address" would write the server's own memory: refused, as is the reverse.
    from rgpu.client import _Request

    host, _ = await _create(client, host=1)
    device, _ = await _create(client)
    out = await client.mem_alloc(64)
    await client._defer(_generate(host, out, 4))
    with pytest.raises(CudaError) as e:
        await client.nop()
    assert e.value.code == Status.INVALID_VALUE
    with pytest.raises(CudaError) as e:
        await client._call(_Request(ops.RAND_GENERATE_HOST, (device, Draw.UNIFORM, 4, 0.0, 0.0)))
    assert e.value.code == Status.INVALID_VALUE
    status, raw = await client._call(_Request(ops.RAND_GENERATE_HOST, (host, Draw.U32, 8, 0.0, 0.0),
                                              decode=lambda v, b: (v.status, bytes(b))))
    assert status == 0 and len(raw) == 32 and len(set(struct.unpack("<8I", raw))) == 8
    # Over the per-call limit: cuRAND's allocation failure, nothing generated.
    status, raw = await client._call(_Request(ops.RAND_GENERATE_HOST, (host, Draw.U32, (16 << 20) // 4 + 1, 0.0, 0.0),
                                              decode=lambda v, b: (v.status, bytes(b))))
    assert status == RandStatus.ALLOCATION_FAILED and raw == b""


async def test_create_and_setters_answer_with_curand_statuses(client):
    from rgpu.client import _Request

    assert (await _create(client, rng_type=7))[1] == RandStatus.TYPE_ERROR
    assert (await _create(client, rng_type=0xFFFFFFFF))[1] == RandStatus.TYPE_ERROR
    quasi, status = await _create(client, rng_type=201)
    assert status == 0
    answers = [await client._call(_Request(ops.RAND_SET, (quasi, what, value)))
               for what, value in ((Setting.SEED, 1), (Setting.DIMENSIONS, 0), (Setting.DIMENSIONS, 20000),
                                   (Setting.ORDERING, 101), (Setting.ORDERING, 201), (Setting.OFFSET, 5),
                                   (Setting.SEEDS, 0), (Setting.DIMENSIONS, 1 << 32), (Setting.ORDERING, 201 | 1 << 32))]
    assert answers == [RandStatus.TYPE_ERROR, RandStatus.OUT_OF_RANGE, 0, RandStatus.OUT_OF_RANGE, 0, 0, 0,
                       RandStatus.OUT_OF_RANGE, RandStatus.OUT_OF_RANGE]


@pytest.mark.parametrize("change", [-4, 4096])
def test_host_results_of_the_wrong_length_are_refused(shim_dir, rand_check, fake_server, change):
    """A server that sends fewer results than asked for, or more: the stand-in says so, never reads or writes past
    the program's buffer, and the call fails."""
    from .test_hostile_server import CorruptingProxy, _with

    def corrupt(frame):
        bulk = bytes(frame.bulk)
        return _with(frame, bulk=bulk[:change] if change < 0 else bulk + bytes(change))

    proxy = CorruptingProxy(fake_server, ops.RAND_GENERATE_HOST.code, corrupt)
    try:
        proc = run(shim_dir, rand_check, env={"RGPU_SERVER": proxy.address})
    finally:
        proxy.close()
    assert proxy.corrupted.is_set()
    assert proc.returncode == 1 and "reply to opcode 0x0224 is inconsistent" in proc.stderr, proc.stdout + proc.stderr
    assert "FAIL curandGenerateUniform" in proc.stdout


def test_the_fakes_rules_are_nvidias():
    """The checks the fake makes (rand_wire) against NVIDIA's libcurand itself, where the machine has it (the
    nvidia-curand wheel the codegen extra installs): its host generators run on the CPU, no GPU needed."""
    from rgpu.errors import CudaError
    from rgpu.protocol import rand_wire

    try:
        from rgpu.backends import cuda_rand

        cuda_rand.library()
    except (ImportError, CudaError) as e:
        pytest.skip(f"NVIDIA's libcurand is not loadable here ({e})")

    class Host(cuda_rand.CudaRand):
        def _use(self, ctx):
            pass

    nvidia = Host()
    for rng_type in rand_wire.RNG_TYPES:
        checked = rand_wire.RNG_TYPES[rng_type]
        gen, status = nvidia.rand_create(None, rng_type, True)
        assert status == 0
        for what, value in [(Setting.SEED, 7), (Setting.OFFSET, 3), (Setting.SEEDS, 0)] + \
                [(Setting.ORDERING, o) for o in (99, 100, 101, 102, 103, 104, 201)] + \
                [(Setting.DIMENSIONS, d) for d in (0, 1, 20000, 20001, 3)]:  # ends at 3 dimensions
            assert nvidia.rand_set(None, gen, what, value) == rand_wire.setting_status(checked, what, value), \
                (rng_type, what, value)
        dims = 3 if rand_wire.is_quasi(checked) else 1
        if checked == rand_wire.MT19937:  # its host state takes ~15 s of CPU to set up; its rules are PHILOX's
            nvidia.rand_destroy(None, gen)
            continue
        for kind in Draw:
            for count, a in ((6, 1.0), (7, 1.0), (6, 0.0), (6, 400001.0)):
                status, raw = nvidia.rand_generate_host(None, gen, kind, count, a, 1.0)
                assert status == rand_wire.generate_status(checked, dims, kind, count, a), (rng_type, kind, count, a)
                assert len(raw) == (0 if status else count * kind.size)
        nvidia.rand_destroy(None, gen)
