"""PyTorch's random numbers with fixed seeds (run natively and through `rgpu run` by tests/gpu/rand_check.sh; the
two outputs must be identical). PyTorch draws on the GPU with its own Philox kernels (cuRAND's device API), not
cuRAND's host API; this checks that those work through rgpu with rgpu's libcurand.so.10 preloaded, and says on
stderr whether the process loaded a libcurand at all."""

import hashlib

import torch


def digest(t: torch.Tensor) -> str:
    return hashlib.sha256(t.detach().cpu().contiguous().numpy().tobytes()).hexdigest()[:16]


torch.manual_seed(1234)
dev = "cuda"
draws = {
    "randn": lambda: torch.randn(4097, device=dev),
    "rand double": lambda: torch.rand(1000, dtype=torch.float64, device=dev),
    "randint": lambda: torch.randint(0, 1 << 30, (3001,), device=dev),
    "normal_": lambda: torch.empty(2048, device=dev).normal_(2.0, 0.5),
    "bernoulli": lambda: torch.bernoulli(torch.full((1000,), 0.3, device=dev)),
    "multinomial": lambda: torch.multinomial(torch.arange(1.0, 11.0, device=dev), 50, replacement=True),
    "randperm": lambda: torch.randperm(5000, device=dev),
    "dropout": lambda: torch.nn.functional.dropout(torch.ones(4096, device=dev), 0.25),
    "exponential_": lambda: torch.empty(1000, device=dev).exponential_(),
    "poisson": lambda: torch.poisson(torch.full((1000,), 4.0, device=dev)),
}
for name, draw in draws.items():
    t = draw()
    print(f"{name:14s} {digest(t)} mean {t.double().mean().item():.6f}")
with open("/proc/self/maps") as maps:
    loaded = sorted({line.split()[-1] for line in maps if "libcurand" in line})
print("libcurand loaded:", ", ".join(loaded) or "none", file=__import__("sys").stderr)
