"""Exploratory: how far PyTorch gets through rgpu's shims (the groundwork for issue 5). Each stage is tried on
its own and reported, so one failure does not hide the next. Run as
    RGPU_SERVER=... LD_PRELOAD="$shims/libcuda.so.1 $shims/libcudart.so.13" python3 tests/gpu/torch_probe.py
"""

import time
import traceback

import torch

STAGES = []


def stage(fn):
    STAGES.append(fn)
    return fn


@stage
def available():
    return torch.cuda.is_available(), torch.cuda.device_count(), torch.cuda.get_device_name(0)


@stage
def round_trip():
    x = torch.arange(1 << 20, dtype=torch.float32)
    y = x.to("cuda").cpu()
    return bool(torch.equal(x, y))


@stage
def elementwise():
    x = torch.arange(16, dtype=torch.float32, device="cuda")
    return (x * 2 + 1).sum().item()


@stage
def matmul():
    torch.manual_seed(0)
    a, b = torch.randn(256, 256), torch.randn(256, 256)
    got = (a.cuda() @ b.cuda()).cpu()
    return float((got - a @ b).abs().max())


@stage
def conv2d():
    torch.manual_seed(0)
    x, w = torch.randn(2, 3, 32, 32), torch.randn(8, 3, 3, 3)
    got = torch.nn.functional.conv2d(x.cuda(), w.cuda()).cpu()
    return float((got - torch.nn.functional.conv2d(x, w)).abs().max())


for fn in STAGES:
    t0 = time.perf_counter()
    try:
        result = fn()
        print(f"{fn.__name__:12} OK   {time.perf_counter() - t0:7.2f}s  {result}", flush=True)
    except Exception as e:  # noqa: BLE001 - a probe reports every failure and goes on
        print(f"{fn.__name__:12} FAIL {time.perf_counter() - t0:7.2f}s  {type(e).__name__}: {str(e)[:300]}",
              flush=True)
        traceback.print_exc(limit=2)
