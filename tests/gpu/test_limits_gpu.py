"""--session-mem-limit against module globals on the real GPU (issue 14): a cubin whose __device__ array is
far bigger than the file is charged its section sizes before the driver loads it. Skipped unless
RGPU_TEST_BACKEND=cuda (tests/gpu/run_on_gpu.sh tests)."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from rgpu.errors import CudaError, Status

from ..conftest import running_server

pytestmark = pytest.mark.skipif(os.environ.get("RGPU_TEST_BACKEND") != "cuda",
                                reason="GPU box only (RGPU_TEST_BACKEND=cuda)")

SOURCE = "__device__ char big[{n}];\n__global__ void touch(int *p) {{ p[0] = big[p[1]]; }}\n"


def _cubin(tmp_path, nbytes: int) -> bytes:
    if shutil.which("nvcc") is None:
        pytest.skip("needs nvcc")
    src = tmp_path / f"g{nbytes}.cu"
    src.write_text(SOURCE.format(n=nbytes))
    out = tmp_path / f"g{nbytes}.cubin"
    subprocess.run(["nvcc", "-cubin", "-arch=native", "-o", str(out), str(src)], check=True, timeout=300)
    return out.read_bytes()


async def test_module_globals_are_charged_before_the_driver_loads_them(tmp_path):
    big, small = _cubin(tmp_path, 512 << 20), _cubin(tmp_path, 64 << 20)
    async with running_server(isolation="process", backend="cuda", worker_pool=0,
                              session_mem_limit=100 << 20) as s:
        c = await s.connect()
        free0, _ = await c.mem_get_info()
        for _ in range(3):
            with pytest.raises(CudaError) as e:
                await c.module_load(big)
            assert e.value.code == Status.OUT_OF_MEMORY
        mod = await c.module_load(small)
        ptr, size = await c.get_global(mod, "big")
        assert size == 64 << 20
        free1, total = await c.mem_get_info()
        print(f"\n{len(big)}-byte cubin with a 512 MiB global: refused under a 100 MiB limit; 64 MiB one: "
              f"session free {free0 >> 20} -> {free1 >> 20} MiB of {total >> 20}")
        assert free0 - free1 >= 64 << 20
        with pytest.raises(CudaError):
            await c.module_load(small)  # a second 64 MiB would pass 100 MiB
        await c.module_unload(mod)
        await c.module_load(small)
        await c.aclose()
