"""PyTorch's modern CUDA paths through rgpu (issue 13's acceptance): torch.cuda.CUDAGraph capture and replay,
torch.compile(mode="reduce-overhead") (CUDA graphs underneath), and the expandable-segments allocator (virtual
memory management; set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True before running). Every result is printed
exactly, so the native run and the run through `rgpu run` compare byte for byte. Each stage runs on its own.
"""

import os
import traceback

import torch

torch.manual_seed(0)
print("alloc conf:", os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "default"))


def digest(t: torch.Tensor) -> str:
    t = t.detach().float().cpu()
    return f"sum={t.sum().item()!r} first={t.flatten()[:3].tolist()!r}"


def cuda_graph():
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 8)).cuda()
    static_x = torch.randn(32, 64, device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            model(static_x)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        static_y = model(static_x)
    out = []
    for i in range(5):
        static_x.copy_(torch.full((32, 64), 0.1 * i, device="cuda") + torch.arange(64, device="cuda") / 64)
        g.replay()
        out.append(digest(static_y))
    return out


def compiled_reduce_overhead():
    model = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.GELU(), torch.nn.Linear(32, 4)).cuda()
    fn = torch.compile(model, mode="reduce-overhead")
    x = torch.randn(16, 32, device="cuda")
    return [digest(fn(x + i)) for i in range(6)]


def training_with_allocator():
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = torch.randn(128, 256, device="cuda"), torch.randint(0, 10, (128,), device="cuda")
    losses = []
    for _ in range(10):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(repr(loss.item()))
    big = torch.empty(300 << 20, dtype=torch.uint8, device="cuda")  # grows a segment
    del big
    return losses


for stage in (cuda_graph, compiled_reduce_overhead, training_with_allocator):
    try:
        for line in stage():
            print(stage.__name__, line)
        print(stage.__name__, "OK")
    except Exception:
        lines = traceback.format_exc().strip().splitlines()
        error = next((x for x in lines if "Error" in x and not x.startswith(" ")), lines[-1])
        print(stage.__name__, "FAIL", error)
