"""torch.fft through whatever libcufft PyTorch loads: natively NVIDIA's, under `rgpu run` rgpu's stand-in (and NVIDIA's
cuFFT on the server). One line per check, with a hash of the result's bytes; the "fft" section of
tests/gpu/run_on_gpu.sh runs this both ways and requires the two outputs to be identical.

    python3 tests/gpu/fft_probe.py
"""

from __future__ import annotations

import hashlib

import torch


def digest(t: torch.Tensor) -> str:
    t = t.detach().cpu().contiguous()
    raw = (torch.view_as_real(t) if t.is_complex() else t).contiguous().view(torch.uint8).numpy().tobytes()
    return hashlib.sha256(raw).hexdigest()[:16]


def main() -> int:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(4, 256, generator=gen).cuda()
    cube = torch.randn(3, 16, 12, 10, generator=gen).cuda()
    z = torch.complex(x, x.flip(1))

    def backward():
        leaf = x.clone().requires_grad_()
        torch.fft.rfft(leaf).abs().sum().backward()
        return leaf.grad

    checks = {
        "fft complex64": lambda: torch.fft.fft(z),
        "ifft complex64, ortho": lambda: torch.fft.ifft(z, norm="ortho"),
        "fft of real float32": lambda: torch.fft.fft(x),
        "rfft": lambda: torch.fft.rfft(x),
        "irfft": lambda: torch.fft.irfft(torch.fft.rfft(x), n=256),
        "fft float64": lambda: torch.fft.fft(x.double()),
        "rfft float64, odd size 1001": lambda: torch.fft.rfft(torch.randn(2, 1001, generator=gen).double().cuda()),
        "fft of a strided view": lambda: torch.fft.fft(x[:, ::2]),
        "fft along dim 0": lambda: torch.fft.fft(x, dim=0),
        "fftn 3d": lambda: torch.fft.fftn(cube, dim=(1, 2, 3)),
        "rfftn 2d": lambda: torch.fft.rfftn(cube, dim=(2, 3)),
        "irfftn 3d": lambda: torch.fft.irfftn(torch.fft.rfftn(cube, dim=(1, 2, 3)), s=(16, 12, 10), dim=(1, 2, 3)),
        "fft2 complex128": lambda: torch.fft.fft2(cube.to(torch.complex128)),
        "rfft half (power of two)": lambda: torch.fft.rfft(x.half()),
        "fft prime size 997": lambda: torch.fft.fft(torch.randn(3, 997, generator=gen).cuda()),
        "stft": lambda: torch.stft(x, 64, hop_length=16, window=torch.hann_window(64, device="cuda"),
                                   return_complex=True),
        "rfft backward": backward,
    }
    failed = 0
    for name, fn in checks.items():
        try:
            y = fn()
            torch.cuda.synchronize()
            print(f"{name:32s} OK {tuple(y.shape)} {str(y.dtype).removeprefix('torch.')} {digest(y)}")
        except Exception as e:  # noqa: BLE001 -- every failure is reported, and the run goes on
            failed += 1
            print(f"{name:32s} FAIL {type(e).__name__}: {str(e).splitlines()[0][:160]}")
    print(f"fft_probe: {len(checks) - failed} of {len(checks)} OK")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
