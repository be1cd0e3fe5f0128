"""scaled_dot_product_attention with cuDNN attention forced, then with PyTorch's default choice: forward and
backward, fp16 and bf16, causal and not. Prints a digest of every output and gradient, so a run natively and one
through rgpu can be compared byte for byte (tests/gpu/run_on_gpu.sh sdpa). cuDNN passes the attention scale as a
pass-by-value tensor: host memory of the program, which rgpu carries along with the execution."""

import hashlib

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.functional import scaled_dot_product_attention as sdpa


def digest(t: torch.Tensor) -> str:
    return hashlib.sha256(t.detach().float().cpu().numpy().tobytes()).hexdigest()[:16]


def case(dtype, causal: bool, backends) -> str:
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 4, 128, 64, device="cuda", dtype=dtype, requires_grad=True) for _ in range(3))
    with sdpa_kernel(backends):
        out = sdpa(q, k, v, is_causal=causal)
        out.float().square().sum().backward()
    torch.cuda.synchronize()
    return " ".join(digest(t) for t in (out, q.grad, k.grad, v.grad))


for name, backends in (("cudnn", [SDPBackend.CUDNN_ATTENTION]),
                       ("default", [SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION,
                                    SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH])):
    for dtype in (torch.float16, torch.bfloat16):
        for causal in (False, True):
            try:
                result = case(dtype, causal, backends)
            except Exception as e:  # noqa: BLE001 (a probe: report and go on)
                result = f"FAILED {type(e).__name__}: {str(e).splitlines()[0][:200]}"
            print(f"{name:8s} {str(dtype):15s} causal={causal!s:5s} {result}", flush=True)
