"""Pipeline-parallel training on two devices (tests/gpu/multigpu_check.sh): the model's first half on cuda:0, its
second half on cuda:1, activations moved with .to("cuda:1") and their gradients back, a few optimiser steps from
a fixed seed. Inputs and initial weights come from the CPU generator and cuBLAS runs deterministically, so a run
natively and one through rgpu must print the same bytes: every loss and parameter sum as float.hex. With one
device cuda:0 stands in for cuda:1 (as tests/gpu/multigpu_probe.py)."""

from __future__ import annotations

import os
import sys

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS, before torch loads it

import torch  # noqa: E402
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

STEPS, BATCH, MICRO = 6, 128, 4


def exact(x: torch.Tensor | float) -> str:
    value = float(x)
    return f"{value!r} ({value.hex()})"


def main() -> int:
    count = torch.cuda.device_count()
    d0, d1 = torch.device("cuda:0"), torch.device("cuda:1" if count > 1 else "cuda:0")
    print(f"devices: {count}; stages on {d0} and {d1}", file=sys.stderr)
    torch.use_deterministic_algorithms(True)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.manual_seed(0)  # weights are made on the CPU, then moved
    first = nn.Sequential(nn.Linear(64, 512), nn.GELU(), nn.LayerNorm(512), nn.Linear(512, 256)).to(d0)
    second = nn.Sequential(nn.ReLU(), nn.Linear(256, 128), nn.Tanh(), nn.Linear(128, 10)).to(d1)
    params = [*first.parameters(), *second.parameters()]
    # foreach=False: one kernel per parameter, on the parameter's own device (the foreach path groups by device).
    opt = torch.optim.AdamW(params, lr=3e-3, weight_decay=0.01, foreach=False)
    data = torch.Generator().manual_seed(1234)
    for step in range(STEPS):
        x = torch.randn(BATCH, 64, generator=data)
        y = torch.randint(0, 10, (BATCH,), generator=data)
        opt.zero_grad(set_to_none=True)
        total = torch.zeros((), device=d1)
        for mx, my in zip(x.chunk(MICRO), y.chunk(MICRO)):  # micro-batches through both stages, in order
            h = first(mx.to(d0))
            loss = F.cross_entropy(second(h.to(d1)), my.to(d1)) / MICRO
            loss.backward()
            total += loss.detach()
        for stage in (first, second):  # per stage (as a pipeline would): the same with one device or two
            torch.nn.utils.clip_grad_norm_(stage.parameters(), 1.0)
        opt.step()
        print(f"step {step} loss {exact(total.item())}")
    for name, stage in (("first", first), ("second", second)):
        sums = [exact(p.detach().double().sum().item()) for p in stage.parameters()]
        print(f"{name} stage on {'cuda:0' if stage is first else 'cuda:1'}: " + " ".join(sums))
    with torch.no_grad():
        probe = torch.randn(8, 64, generator=data)
        out = second(first(probe.to(d0)).to(d1))
    print("eval", exact(out.double().sum().item()), "argmax", out.argmax(1).tolist())
    print("pipeline probe done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
