"""How far PyTorch gets through rgpu's shims (issue 5's acceptance programs, stage by stage). Each stage runs on
its own and reports, so one failure does not hide the next. The same script runs natively for comparison:
    RGPU_SERVER=... LD_PRELOAD="<shims>/libcuda.so.1 <shims>/libcudart.so.13 <shims>/libcublasLt.so.13
    <shims>/libcublas.so.13" python3 tests/gpu/torch_probe.py
RGPU_PROBE_NO_CUDNN=1 turns cuDNN off (PyTorch then uses its own convolution and batch-norm kernels)."""

import os
import time
import traceback

import torch

if os.environ.get("RGPU_PROBE_NO_CUDNN") == "1":
    torch.backends.cudnn.enabled = False

STAGES = []


def stage(fn):
    STAGES.append(fn)
    return fn


def max_error(got, want):
    return float((got.cpu() - want).abs().max())


@stage
def available():
    return torch.cuda.is_available(), torch.cuda.device_count(), torch.cuda.get_device_name(0)


@stage
def round_trip():
    x = torch.arange(1 << 20, dtype=torch.float32)
    return bool(torch.equal(x, x.to("cuda").cpu()))


@stage
def elementwise():
    x = torch.arange(16, dtype=torch.float32, device="cuda")
    return (x * 2 + 1).sum().item()


@stage
def matmul():
    torch.manual_seed(0)
    a, b = torch.randn(256, 256), torch.randn(256, 256)
    return max_error(a.cuda() @ b.cuda(), a @ b)


@stage
def linear():
    torch.manual_seed(0)
    layer, x = torch.nn.Linear(300, 100), torch.randn(64, 300)
    want = layer(x)
    return max_error(layer.cuda()(x.cuda()), want.detach())


@stage
def conv2d():
    torch.manual_seed(0)
    x, w = torch.randn(2, 3, 32, 32), torch.randn(8, 3, 3, 3)
    return max_error(torch.nn.functional.conv2d(x.cuda(), w.cuda()), torch.nn.functional.conv2d(x, w))


@stage
def resnet18():
    import torchvision

    torch.manual_seed(0)
    model = torchvision.models.resnet18(weights=None).eval()
    x = torch.randn(8, 3, 224, 224)
    with torch.no_grad():
        want = model(x)
        gpu, xg = model.cuda(), x.cuda()
        gpu(xg)  # warm-up: modules, handles, workspaces
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(5):
            got = gpu(xg)
        torch.cuda.synchronize()
        ms = (time.perf_counter() - t0) / 5 * 1000
    return f"max error {max_error(got, want):.2e}, forward {ms:.1f} ms/batch of 8"


@stage
def mlp_train_step():
    torch.manual_seed(0)
    cpu = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    gpu = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10)).cuda()
    gpu.load_state_dict(cpu.state_dict())
    x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))
    for model, xs, ys in ((cpu, x, y), (gpu, x.cuda(), y.cuda())):
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        loss = torch.nn.functional.cross_entropy(model(xs), ys)
        loss.backward()
        opt.step()
    return max(max_error(g, c.detach()) for g, c in zip(gpu.parameters(), cpu.parameters()))


@stage
def cnn_bn_train_step():
    """Convolution + batch norm in training mode, forward and backward: cuDNN's batch-norm training calls."""
    torch.manual_seed(0)

    def net():
        return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                                   torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(8, 4))

    cpu, gpu = net(), net().cuda()
    gpu.load_state_dict(cpu.state_dict())
    x, y = torch.randn(16, 3, 16, 16), torch.randint(0, 4, (16,))
    for model, xs, ys in ((cpu, x, y), (gpu, x.cuda(), y.cuda())):
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        torch.nn.functional.cross_entropy(model(xs), ys).backward()
        opt.step()
    params = max(max_error(g, c.detach()) for g, c in zip(gpu.parameters(), cpu.parameters()))
    stats = max(max_error(g, c) for g, c in zip(gpu.buffers(), cpu.buffers()) if g.dtype.is_floating_point)
    return f"max parameter error {params:.2e}, running statistics {stats:.2e}"


for fn in STAGES:
    t0 = time.perf_counter()
    try:
        result = fn()
        print(f"{fn.__name__:15} OK   {time.perf_counter() - t0:7.2f}s  {result}", flush=True)
    except Exception as e:  # noqa: BLE001 - a probe reports every failure and goes on
        print(f"{fn.__name__:15} FAIL {time.perf_counter() - t0:7.2f}s  {type(e).__name__}: {str(e)[:300]}",
              flush=True)
        traceback.print_exc(limit=2)
