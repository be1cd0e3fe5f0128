"""Real workloads natively and through rgpu, in the same run (issue 15): milliseconds per step, the ratio, and --
from the server's per-session counters -- blocking round trips, bytes each way and the worker's CPU time per step.

    python3 bench/workloads.py [--rtt-us 0,100,500,2000] [--only resnet18_b32,...] [--json OUT.json]

Needs a GPU host with PyTorch (torchvision for ResNet-18, JAX for jax_mlp_train). Each workload runs in its own process: natively,
then under `rgpu run` against a local rgpu-server (cuda backend, loopback). The child waits at the start and the
end of its timed steps while the harness reads its session's counters from the server (`rgpu status`), so every
per-step figure is a difference within one session: set-up costs are outside it.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]

WORKLOADS = {
    "resnet18_b1": dict(kind="resnet", batch=1, half=False),
    "resnet18_b32": dict(kind="resnet", batch=32, half=False),
    "resnet18_b32_fp16_cl": dict(kind="resnet", batch=32, half=True),
    "gpt_small_train": dict(kind="gpt", width=256, layers=4, seq=128, batch=8),
    "gpt_medium_train": dict(kind="gpt", width=512, layers=8, seq=256, batch=8),
    # What the peers are measured on: decoding one token a step from a CUDA graph, as vLLM does, and JAX.
    "gpt_decode_graph": dict(kind="decode", width=512, layers=8, ctx=256),
    "jax_mlp_train": dict(kind="jax", width=1024, layers=4, batch=256),
}


# -- the workloads themselves (run in a child process) -----------------------------------------------------------
def _resnet(cfg):
    import torch
    import torchvision

    model = torchvision.models.resnet18().cuda().eval()
    x = torch.randn(cfg["batch"], 3, 224, 224, device="cuda")
    if cfg["half"]:
        model = model.half().to(memory_format=torch.channels_last)
        x = x.half().to(memory_format=torch.channels_last)

    def step():
        with torch.no_grad():
            return model(x)

    return step


def _block(w: int):
    """A GPT block of width `w` (heads of 64); its forward attends causally over a whole sequence."""
    from torch import nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(w), nn.LayerNorm(w)
            self.qkv, self.proj = nn.Linear(w, 3 * w), nn.Linear(w, w)
            self.mlp = nn.Sequential(nn.Linear(w, 4 * w), nn.GELU(), nn.Linear(4 * w, w))

        def forward(self, x):
            b, t, _ = x.shape
            q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, w // 64, 64).permute(2, 0, 3, 1, 4)
            a = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(a.transpose(1, 2).reshape(b, t, w))
            return x + self.mlp(self.ln2(x))

    return Block()


def _gpt(cfg):
    import torch
    from torch import nn

    w, n_layers, seq, batch, vocab = cfg["width"], cfg["layers"], cfg["seq"], cfg["batch"], 4096
    model = nn.Sequential(nn.Embedding(vocab, w), *[_block(w) for _ in range(n_layers)], nn.LayerNorm(w),
                          nn.Linear(w, vocab)).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    gen = torch.Generator(device="cuda").manual_seed(0)
    data = torch.randint(0, vocab, (batch, seq + 1), device="cuda", generator=gen)

    def step():
        opt.zero_grad(set_to_none=True)
        logits = model(data[:, :-1])
        loss = nn.functional.cross_entropy(logits.reshape(-1, vocab), data[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
        return loss

    return step


def _decode(cfg):
    """A decoder's step for one token replayed from a CUDA graph, as vLLM decodes: the graph embeds the last token,
    writes its keys and values into a static cache at the current position, attends over the cache, and leaves the
    next token (the greedy choice) and position on the device; the program reads the token back each step, as a
    server does to stream it. One graph launch and one blocking copy back a token."""
    import torch
    from torch import nn

    w, n_layers, ctx, vocab = cfg["width"], cfg["layers"], cfg["ctx"], 4096
    heads, half = w // 64, torch.float16
    embed, norm, head = nn.Embedding(vocab, w), nn.LayerNorm(w), nn.Linear(w, vocab)
    blocks = nn.ModuleList(_block(w) for _ in range(n_layers))  # (their layers; the step below attends over the cache)
    for m in (embed, norm, head, blocks):
        m.to("cuda", half).eval()
    cache = torch.zeros(n_layers, 2, 1, heads, ctx, 64, device="cuda", dtype=half)
    token = torch.zeros(1, dtype=torch.long, device="cuda")
    pos = torch.zeros(1, dtype=torch.long, device="cuda")
    span = torch.arange(ctx, device="cuda")

    @torch.no_grad()
    def forward():
        x = embed(token).view(1, 1, w)
        mask = (span <= pos).view(1, 1, 1, ctx)
        for i, b in enumerate(blocks):
            q, k, v = b.qkv(b.ln1(x)).view(1, 1, 3, heads, 64).permute(2, 0, 3, 1, 4)
            cache[i, 0].index_copy_(2, pos, k)
            cache[i, 1].index_copy_(2, pos, v)
            a = nn.functional.scaled_dot_product_attention(q, cache[i, 0], cache[i, 1], attn_mask=mask)
            x = x + b.proj(a.transpose(1, 2).reshape(1, 1, w))
            x = x + b.mlp(b.ln2(x))
        token.copy_(head(norm(x)).view(vocab).argmax().view(1))
        pos.add_(1).remainder_(ctx)

    side = torch.cuda.Stream()  # (warm-up off the capture stream, as torch.cuda.graphs asks)
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            forward()
    torch.cuda.current_stream().wait_stream(side)
    cache.zero_(), token.zero_(), pos.zero_()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        forward()

    def step():
        graph.replay()
        return token.item()

    return step


def _jax(cfg):
    """A jax.jit training step of an MLP (SGD on a fixed batch); its loss is the step's output."""
    import jax
    import jax.numpy as jnp

    w, n_layers, batch = cfg["width"], cfg["layers"], cfg["batch"]
    keys = jax.random.split(jax.random.PRNGKey(0), n_layers + 2)
    params = [(jax.random.normal(k, (w, w)) / w ** 0.5, jnp.zeros(w)) for k in keys[:n_layers]]
    x, y = jax.random.normal(keys[-2], (batch, w)), jax.random.normal(keys[-1], (batch, w))

    def loss(p, x, y):
        for m, b in p[:-1]:
            x = jax.nn.gelu(x @ m + b)
        m, b = p[-1]
        return jnp.mean((x @ m + b - y) ** 2)

    @jax.jit
    def train(p, x, y):
        value, grads = jax.value_and_grad(loss)(p, x, y)
        return jax.tree_util.tree_map(lambda a, g: a - 1e-2 * g, p, grads), value

    state = {"params": params}

    def step():
        state["params"], value = train(state["params"], x, y)
        return value

    return step


def _setup(kind: str):
    """(the workload kind's builder, a function that waits for the device to finish what was queued)."""
    if kind == "jax":
        # Memory as it is asked for (not 75% of the device at the start), and XLA's algorithm choices made without
        # timing them, so that both sides run the same kernels and their losses can be compared for sameness.
        os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_gpu_autotune_level=0").strip()
        return _jax, lambda: None  # (each step depends on the last: waiting for the last output waits for all)
    import torch

    torch.manual_seed(0)
    return {"resnet": _resnet, "gpt": _gpt, "decode": _decode}[kind], torch.cuda.synchronize


def run_child(name: str, steps: int, warmup: int) -> None:
    cfg = WORKLOADS[name]
    build, synchronize = _setup(cfg["kind"])
    step = build(cfg)
    out = None
    for _ in range(warmup):
        out = step()
    _wait_for(out)
    synchronize()
    _mark("start")
    t0 = time.perf_counter()
    for _ in range(steps):
        out = step()
    _wait_for(out)
    synchronize()
    ms = (time.perf_counter() - t0) * 1e3 / steps
    _mark("end")
    # A value every step produced, so native and rgpu can be compared for sameness too.
    check = float(out.float().sum().item()) if hasattr(out, "float") else float(out)
    print("RESULT " + json.dumps({"ms": ms, "steps": steps, "check": check}))


def _wait_for(out) -> None:
    """Wait for a JAX step's output (its work is queued asynchronously; PyTorch's is waited for by synchronize)."""
    if hasattr(out, "block_until_ready"):
        out.block_until_ready()


def _mark(where: str) -> None:
    """With --marks, tell the harness where the timed steps begin and end, and wait until it has read the
    server's counters: the per-step figures are then exact differences within this one session."""
    if MARKS:
        print(f"MARK {where}", flush=True)
        sys.stdin.readline()


MARKS = False


# -- the harness --------------------------------------------------------------------------------------------------
def _child_cmd(name, steps, warmup, marks=False):
    return [sys.executable, __file__, "--child", name, "--steps", str(steps), "--warmup", str(warmup)] + \
        (["--marks"] if marks else [])


def _result(stdout: str) -> dict | None:
    m = re.search(r"^RESULT (.*)$", stdout, re.M)
    return json.loads(m.group(1)) if m else None


class Server:
    """A local rgpu-server whose live session's counters the harness reads with `rgpu status` (SERVER_STATUS)."""

    def __init__(self, rtt_us: int, backend: str = "cuda"):
        self.dir = tempfile.mkdtemp(prefix="rgpu-bench-")
        port_file = pathlib.Path(self.dir) / "port"
        args = [sys.executable, "-m", "rgpu.cli", "server", "--port", "0", "--port-file", str(port_file),
                "--backend", backend]
        if rtt_us:
            args += ["--inject-rtt-us", str(rtt_us)]
        self.log = open(pathlib.Path(self.dir) / "server.log", "w")
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT)
        for _ in range(300):
            if port_file.exists() and port_file.read_text().strip():
                break
            time.sleep(0.1)
        self.address = f"127.0.0.1:{port_file.read_text().strip()}"

    def live_counters(self) -> dict:
        """The counters of the one session running now (`rgpu status`'s "counters"), read while it runs."""
        from rgpu.client import server_status

        for _ in range(20):  # a figure caught mid-change comes back as usage_error: ask again
            sessions = server_status(self.address).get("sessions", [])
            if len(sessions) == 1 and "counters" in sessions[0]:
                return sessions[0]["counters"]
            time.sleep(0.05)
        return {}

    def close(self):
        self.proc.terminate()
        self.proc.wait(30)
        self.log.close()


def _run_marked(cmd: list[str], env: dict, server: Server) -> tuple[str, list[dict]]:
    """Run a child with --marks: the server's counters at each of its marks, and its output."""
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env)
    out, marks = [], []
    for line in proc.stdout:
        out.append(line)
        if line.startswith("MARK "):
            marks.append(server.live_counters())
            proc.stdin.write("go\n")
            proc.stdin.flush()
    err = proc.stderr.read()
    proc.wait(900)
    return "".join(out) + err, marks


def _per_step(a: dict, b: dict, key: str, steps: int, scale: float = 1.0) -> dict:
    """b[key] - a[key] per step, by operation name, largest first."""
    by_a, by_b = a.get(key, {}), b.get(key, {})
    per_op = {op: (by_b.get(op, 0) - by_a.get(op, 0)) / steps * scale for op in set(by_a) | set(by_b)}
    return {op: round(n, 2) for op, n in sorted(per_op.items(), key=lambda kv: -kv[1]) if abs(n) >= 0.01}


def measure(name: str, server: Server | None, steps: int, warmup: int, shims: str) -> dict:
    """One run of the workload; through rgpu, the server's counters read at the start and the end of the timed
    steps (the child waits at each mark), so every per-step figure is a difference within one session."""
    env = dict(os.environ)
    if not server:
        proc = subprocess.run(_child_cmd(name, steps, warmup), capture_output=True, text=True, env=env, timeout=900)
        res = _result(proc.stdout)
        return res if res else {"error": (proc.stderr or proc.stdout).strip().splitlines()[-3:]}
    prefix = [sys.executable, "-m", "rgpu.cli", "run", "--server", server.address, "--shims", shims, "--"]
    output, marks = _run_marked(prefix + _child_cmd(name, steps, warmup, marks=True), env, server)
    res = _result(output)
    if res is None or len(marks) != 2:
        return {"error": output.strip().splitlines()[-3:]}
    a, b = marks
    out = {"ms": res["ms"], "check": res["check"]}
    for key in ("blocking", "deferred", "bytes_in", "bytes_out", "cpu_s", "wait_s"):
        if key in a and key in b:
            out[f"{key}_per_step"] = (b[key] - a[key]) / steps
    out["blocking_by_op_per_step"] = _per_step(a, b, "blocking_by_op", steps)
    out["calls_by_op_per_step"] = _per_step(a, b, "calls_by_op", steps)
    out["worker_us_by_op_per_step"] = _per_step(a, b, "seconds_by_op", steps, 1e6)
    return out


def _median_round(rounds: list) -> tuple[dict, dict]:
    """The median native measurement and the median rgpu one (its counters with it), each by time."""
    def median(xs):
        return sorted(xs, key=lambda m: m["ms"])[len(xs) // 2]

    return median([n for n, _ in rounds]), median([r for _, r in rounds])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--child")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--only", default=",".join(WORKLOADS))
    ap.add_argument("--rtt-us", default="0")
    ap.add_argument("--shims", default="/tmp/rgpu-shims")
    ap.add_argument("--rounds", type=int, default=1,
                    help="native and rgpu alternately this many times per workload: medians (a small workload's "
                         "native time moved by 2x between commands on the GPU box)")
    ap.add_argument("--json")
    ap.add_argument("--marks", action="store_true", help=argparse.SUPPRESS)  # (the child: wait at the marks)
    args = ap.parse_args(argv)
    if args.child:
        global MARKS
        MARKS = args.marks
        run_child(args.child, args.steps, args.warmup)
        return 0
    if not pathlib.Path(args.shims, "libcuda.so.1").exists():
        subprocess.run([sys.executable, "-m", "rgpu.cli", "build-shims", "--out", args.shims], check=True,
                       stdout=subprocess.DEVNULL)
    results = []
    print(f"{'workload':<22} {'rtt us':>6} {'native ms':>10} {'rgpu ms':>10} {'ratio':>7} {'same':>5} "
          f"{'blocking/step':>13} {'KB in/step':>10} {'KB out/step':>11} {'srv cpu ms/step':>15}")
    for rtt in [int(x) for x in args.rtt_us.split(",")]:
        server = Server(rtt)
        try:
            for name in args.only.split(","):
                rounds = [(measure(name, None, args.steps, args.warmup, args.shims),
                           measure(name, server, args.steps, args.warmup, args.shims)) for _ in range(args.rounds)]
                row = {"workload": name, "rtt_us": rtt, "rounds": [{"native": n, "rgpu": r} for n, r in rounds]}
                results.append(row)
                failed = [x.get("error") for pair in rounds for x in pair if "error" in x]
                if failed:
                    print(f"{name:<22} {rtt:>6} error: {failed[0]}")
                    continue
                native, remote = _median_round(rounds)
                row.update(native=native, rgpu=remote)
                same = "yes" if native["check"] == remote["check"] else "no"
                print(f"{name:<22} {rtt:>6} {native['ms']:>10.2f} {remote['ms']:>10.2f} "
                      f"{remote['ms'] / native['ms']:>6.2f}x {same:>5} {remote.get('blocking_per_step', float('nan')):>13.1f} "
                      f"{remote.get('bytes_in_per_step', float('nan')) / 1e3:>10.1f} "
                      f"{remote.get('bytes_out_per_step', float('nan')) / 1e3:>11.1f} "
                      f"{remote.get('cpu_s_per_step', float('nan')) * 1e3:>15.2f}", flush=True)
                if len(rounds) > 1:
                    print(f"{'':<22} rounds (native ms, rgpu ms, ratio): " + ", ".join(
                        f"{n['ms']:.2f} {r['ms']:.2f} {r['ms'] / n['ms']:.2f}x" for n, r in rounds), flush=True)
                top = list(remote.get("blocking_by_op_per_step", {}).items())[:4]
                if top:
                    print(f"{'':<22} blocking per step: " + ", ".join(f"{op} {n:.1f}" for op, n in top), flush=True)
                top = list(remote.get("calls_by_op_per_step", {}).items())[:8]
                if top:
                    print(f"{'':<22} operations per step: " + ", ".join(f"{op} {n:.1f}" for op, n in top), flush=True)
                top = list(remote.get("worker_us_by_op_per_step", {}).items())[:8]
                if top:
                    print(f"{'':<22} worker us per step: " + ", ".join(f"{op} {n:.0f}" for op, n in top)
                          + f"; waiting for the client {remote.get('wait_s_per_step', float('nan')) * 1e6:.0f}",
                          flush=True)
        finally:
            server.close()
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
