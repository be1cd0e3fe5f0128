"""Tensors on cuda:0 and cuda:1 and copies between them (tests/gpu/run_on_gpu.sh multigpu). Through rgpu two
servers on one GPU make the two devices; natively on a one-GPU machine cuda:0 stands in for cuda:1. Inputs come
from the CPU generator, so both runs compute the same values: stdout must be identical."""

from __future__ import annotations

import sys

import torch


def digest(t: torch.Tensor) -> str:
    t = t.detach().double().cpu()
    return f"sum={t.sum().item():.6e} abs={t.abs().sum().item():.6e} first={t.flatten()[:3].tolist()}"


def main() -> int:
    count = torch.cuda.device_count()
    d0, d1 = torch.device("cuda:0"), torch.device("cuda:1" if count > 1 else "cuda:0")
    print(f"devices: {count}; using {d0} and {d1}", file=sys.stderr)
    g = torch.Generator().manual_seed(1234)
    a = torch.randn(256, 512, generator=g).to(d0)
    b = torch.randn(512, 256, generator=g).to(d1)
    bias = torch.randn(256, generator=g)

    c = a @ a.T  # device 0
    print("c on 0:", digest(c))
    c1 = c.to(d1)  # device to device
    print("c copied to 1:", digest(c1), "equal", torch.equal(c1.cpu(), c.cpu()))
    e = torch.relu(c1[:, :256] @ b.T[:256, :256] + bias.to(d1))  # device 1
    print("e on 1:", digest(e))
    back = e.to(d0, non_blocking=True)  # device 1 -> device 0, stream-ordered
    torch.cuda.synchronize(d0)
    torch.cuda.synchronize(d1)
    print("e back on 0:", digest(back), "equal", torch.equal(back.cpu(), e.cpu()))

    # A stream of device 1 waits for an event of device 0.
    with torch.cuda.device(d0):
        s0 = torch.cuda.Stream()
        done = torch.cuda.Event()
        with torch.cuda.stream(s0):
            x = torch.arange(1 << 16, dtype=torch.float32, device=d0).cumsum(0)
            done.record(s0)
    with torch.cuda.device(d1):
        s1 = torch.cuda.Stream()
        s1.wait_event(done)
        with torch.cuda.stream(s1):
            y = x.to(d1) * 0.5
        s1.synchronize()
    print("y on 1:", digest(y))

    # In place across devices, and a reduction of both.
    z = torch.zeros(4096, device=d1)
    z.copy_(torch.linspace(-1, 1, 4096, device=d0))
    total = z.sum().to(d0) + x[:4096].sum()
    print("total:", f"{total.item():.6e}")
    print("multigpu probe done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
