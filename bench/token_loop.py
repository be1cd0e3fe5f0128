"""What one decode-shaped token costs through rgpu (bench/token_loop.cu: six small input copies, a graph launch,
the logits back, a synchronize -- llama.cpp's per-token pattern without a model), natively and through rgpu in
the same run, and where the server's time per token goes.

    python3 bench/token_loop.py --backend cuda      # on the GPU box (nvcc, the CUDA runtime)
    python3 bench/token_loop.py --backend fake      # anywhere with nvcc: through rgpu only

Per round, the program runs natively and through rgpu; it prints microseconds per token and a checksum of the
last logits, which must be the same natively and through rgpu. Through rgpu it stops at a mark before and after
its timed tokens while the server's counters of its session are read (`rgpu status`), so the server's figures
per token cover those tokens only: frames, calls and blocking round trips; the worker loop's time receiving
(waiting for the client included), running requests and replying; and the worker's time by operation.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import statistics
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from rgpu import shims  # noqa: E402
from rgpu.cli import local_server  # noqa: E402
from rgpu.client import server_status  # noqa: E402

_LINE = re.compile(r"tokens=(\d+) us_per_token=([\d.]+) checksum=(\S+)")


def native_runtime_dir() -> str | None:
    lib = pathlib.Path("/usr/local/cuda/lib64/libcudart.so.13")
    return str(lib.resolve().parent) if lib.exists() else None


def cpu_list(text: str) -> set[int]:
    """"0-3,8" -> {0, 1, 2, 3, 8} (taskset's notation)."""
    cpus = set()
    for part in filter(None, text.split(",")):
        first, _, last = part.partition("-")
        cpus.update(range(int(first), int(last or first) + 1))
    return cpus


_CLIENT_CPUS: set[int] | None = None  # (--client-cpus: the program's cores, natively and through rgpu)


def _placed():
    return (lambda: os.sched_setaffinity(0, _CLIENT_CPUS)) if _CLIENT_CPUS else None


def run(exe: pathlib.Path, tokens: int, env: dict) -> tuple[float, str]:
    res = subprocess.run([str(exe), str(tokens)], env=env, capture_output=True, text=True, timeout=600,
                         preexec_fn=_placed())
    return _result(res.returncode, res.stdout, res.stderr)


def _result(code: int, out: str, err: str) -> tuple[float, str]:
    m = _LINE.search(out)
    if code or not m:
        raise SystemExit(f"token_loop failed (rc {code}): {out[-1000:]}{err[-2000:]}")
    return float(m.group(2)), m.group(3)


def run_marked(exe: pathlib.Path, tokens: int, env: dict, address: str, psk_file: str | None):
    """Through rgpu, with the session's counters read at the program's two marks: (us per token, checksum,
    counters at the start, counters at the end)."""
    proc = subprocess.Popen([str(exe), str(tokens), "marks"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, preexec_fn=_placed())
    out, marks = [], []
    for line in proc.stdout:
        out.append(line)
        if line.startswith("MARK "):
            marks.append(live_counters(address, psk_file))
            proc.stdin.write("go\n")
            proc.stdin.flush()
    err = proc.stderr.read()
    us, checksum = _result(proc.wait(600), "".join(out), err)
    if len(marks) != 2 or not all(marks):
        raise SystemExit(f"token_loop: the session's counters were not read at both marks: {marks} (a server with "
                         "--isolation thread shows none)")
    return us, checksum, marks[0], marks[1]


def live_counters(address: str, psk_file: str | None) -> dict:
    """The counters of the one session running now (`rgpu status`)."""
    for _ in range(20):  # a figure caught mid-change comes back as usage_error: ask again
        sessions = server_status(address, psk_file=psk_file).get("sessions", [])
        if len(sessions) == 1 and "counters" in sessions[0]:
            return sessions[0]["counters"]
        time.sleep(0.05)
    return {}


def per_token(a: dict, b: dict, tokens: int) -> dict:
    """The server's figures per token between two readings of one session's counters."""
    def diff(key):
        return {k: (b[key].get(k, 0) - a[key].get(k, 0)) / tokens for k in b[key]}

    return {"frames": (b["frames"] - a["frames"]) / tokens, "calls": (b["calls"] - a["calls"]) / tokens,
            "blocking": (b["blocking"] - a["blocking"]) / tokens,
            "wait_us": (b["wait_s"] - a["wait_s"]) / tokens * 1e6,
            "loop_us": {k: v * 1e6 for k, v in diff("loop_s").items()},
            "op_us": {k: v * 1e6 for k, v in sorted(diff("seconds_by_op").items(), key=lambda kv: -kv[1])
                      if v * 1e6 >= 0.5}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", default="fake", choices=("fake", "cuda"))
    ap.add_argument("--tokens", type=int, default=1000, help="timed tokens per run")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--psk", action="store_true", help="through rgpu with a PSK (record protection)")
    ap.add_argument("--spin-us", type=float, help="polling before sleeping in recv, for the server (--spin-us) and "
                                                  "the program (RGPU_SPIN_US); default: each one's own default")
    ap.add_argument("--server-args", default="", help="more rgpu-server options")
    ap.add_argument("--shims", help="built stand-ins to use (default: build them into a temporary folder)")
    ap.add_argument("--exe", help="token_loop built already (default: build it with nvcc)")
    ap.add_argument("--prompt-bytes", type=int, default=0,
                    help="a prompt-shaped step: this many bytes of fresh input copied first (TOKEN_LOOP_PROMPT_BYTES)")
    ap.add_argument("--prompt-kind", choices=("noise", "rows"), default="noise",
                    help="the prompt input's bytes: noise (they do not code) or llama.cpp's V row indices "
                         "(TOKEN_LOOP_PROMPT_KIND; rgpu sends those coded, docs/protocol.md \"Coded copies\")")
    ap.add_argument("--host-us", type=int, default=0,
                    help="the program's own work (busy microseconds) between the graph launch and the readback "
                         "(TOKEN_LOOP_HOST_US)")
    ap.add_argument("--logits-bytes", type=int, default=0,
                    help="the logits copied back per step, in bytes (TOKEN_LOOP_LOGITS_BYTES; default 4096)")
    ap.add_argument("--server-cpus", type=cpu_list, help="the server's and its workers' cores (taskset's notation)")
    ap.add_argument("--client-cpus", type=cpu_list, help="the program's cores, natively and through rgpu")
    ap.add_argument("--json", help="also write the figures here")
    args = ap.parse_args()
    global _CLIENT_CPUS
    _CLIENT_CPUS = args.client_cpus
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        shim_dir = pathlib.Path(args.shims) if args.shims else tmp / "shims"
        shims.build(shim_dir)
        exe = pathlib.Path(args.exe) if args.exe else tmp / "token_loop"
        if not args.exe:
            subprocess.run(["nvcc", "-cudart", "shared", "-o", str(exe), str(REPO / "bench" / "token_loop.cu")],
                           check=True)
        native_env = None
        if args.backend == "cuda":
            native_env = dict(os.environ)
            if native_runtime_dir():
                native_env["LD_LIBRARY_PATH"] = native_runtime_dir()
        rgpu_env = shims.environment(shim_dir)
        for env in (rgpu_env, native_env):
            if env is not None and args.prompt_bytes:
                env["TOKEN_LOOP_PROMPT_BYTES"] = str(args.prompt_bytes)
                env["TOKEN_LOOP_PROMPT_KIND"] = args.prompt_kind
            if env is not None and args.host_us:
                env["TOKEN_LOOP_HOST_US"] = str(args.host_us)
            if env is not None and args.logits_bytes:
                env["TOKEN_LOOP_LOGITS_BYTES"] = str(args.logits_bytes)
        server_args = ["--log-level", "warning", *args.server_args.split()]
        psk_file = None
        if args.spin_us is not None:
            server_args += ["--spin-us", f"{args.spin_us:g}"]
            rgpu_env["RGPU_SPIN_US"] = f"{args.spin_us:.0f}"
        if args.psk:
            key = tmp / "key"
            key.write_text(os.urandom(32).hex())
            key.chmod(0o600)
            psk_file = str(key)
            server_args += ["--psk-file", psk_file]
            rgpu_env["RGPU_PSK_FILE"] = psk_file
        native_us, rgpu_us, figures, marks, same = [], [], [], [], True
        with local_server(args.backend, server_args, cpus=args.server_cpus) as address:
            rgpu_env["RGPU_SERVER"] = address
            for _ in range(args.rounds):
                if native_env is not None:
                    us, native_sum = run(exe, args.tokens, native_env)
                    native_us.append(us)
                us, rgpu_sum, start, end = run_marked(exe, args.tokens, rgpu_env, address, psk_file)
                rgpu_us.append(us)
                figures.append(per_token(start, end, args.tokens))
                marks.append((start, end))
                if native_env is not None:
                    same = same and native_sum == rgpu_sum
    rgpu_med = statistics.median(rgpu_us)
    print(f"token_loop, {args.rounds} rounds, {args.tokens} tokens per run{' with a PSK' if args.psk else ''}"
          f"{f', {args.prompt_bytes} bytes of prompt input ({args.prompt_kind}) per step' if args.prompt_bytes else ''}"
          f"{f', {args.logits_bytes} bytes of logits' if args.logits_bytes else ''}"
          f"{f', {args.host_us} us of host work after the launch' if args.host_us else ''}"
          f"{f', spin {args.spin_us:g} us' if args.spin_us is not None else ''} "
          f"(medians; every round: rgpu {', '.join(f'{x:.1f}' for x in rgpu_us)} us)")
    if native_us:
        native_med = statistics.median(native_us)
        print(f"  us per token: native {native_med:.1f}, rgpu {rgpu_med:.1f}, rgpu/native {rgpu_med / native_med:.2f}x,"
              f" rgpu - native {rgpu_med - native_med:.1f} us; logits checksum identical: {'yes' if same else 'NO'}")
    else:
        print(f"  us per token through rgpu ({args.backend} backend): {rgpu_med:.1f}")
    mid = figures[len(figures) // 2]
    loop = {k: round(statistics.median(f["loop_us"][k] for f in figures), 1) for k in mid["loop_us"]}
    print(f"  server per token: frames {mid['frames']:.2f}, calls {mid['calls']:.2f}, blocking {mid['blocking']:.2f};"
          f" worker loop us (median of rounds): {loop}; of it, waiting for the client's bytes (a streamed copy's"
          f" included) {statistics.median(f['wait_us'] for f in figures):.1f}")
    print(f"  worker us by operation (middle round): { {k: round(v, 1) for k, v in mid['op_us'].items()} }")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps({"native_us": native_us, "rgpu_us": rgpu_us, "same": same,
                                                        "server_per_token": figures,
                                                        "counters_at_marks": marks}, indent=1))
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
