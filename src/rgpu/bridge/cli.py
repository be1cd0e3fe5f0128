"""Command-line wiring of the bridge, shared by `rgpu bridge` and `rgpu-server --bridge-*`."""

from __future__ import annotations

import argparse
import logging
import signal
import sys

import trio

from rgpu.bridge.daemon import BridgeConfig, V2Files, parse_window, run_bridge

log = logging.getLogger("rgpu.bridge")


def add_location_args(p: argparse.ArgumentParser, prefix: str = "") -> None:
    """Where jobs come from: v2 files (--job/--in/--out/--done) or a v1 guest RAM file (--ram ...)."""
    g = p.add_argument_group("bridge job location")
    g.add_argument(f"--{prefix}job", metavar="FILE", help="v2: CUBB2 job record file (debugfs)")
    g.add_argument(f"--{prefix}in", metavar="FILE", help="v2: input data file")
    g.add_argument(f"--{prefix}out", metavar="FILE", help="v2: output data file (pre-sized by the producer)")
    g.add_argument(f"--{prefix}done", metavar="FILE", help="v2: CBD2 done record file")
    g.add_argument(f"--{prefix}ram", metavar="FILE", help="v1: guest RAM image (CUBB/CUBD at GPAs)")
    g.add_argument(f"--{prefix}gpa-window", metavar="GPA:SIZE:OFFSET", action="append", default=[],
                   help="v1: map guest-physical [GPA, GPA+SIZE) to RAM-file OFFSET (repeatable; default: "
                        "the whole file at GPA 0)")
    g.add_argument(f"--{prefix}job-gpa", type=lambda s: int(s, 0), default=0x1000, help="v1: CUBB record GPA")
    g.add_argument(f"--{prefix}done-gpa", type=lambda s: int(s, 0), default=None,
                   help="v1: CUBD record GPA (default: right after the job record)")
    g.add_argument(f"--{prefix}poll-ms", type=float, default=2.0, help="how often the job location is read")
    g.add_argument(f"--{prefix}max-n", type=int, default=1 << 26, help="largest n accepted (TOO_LARGE above)")


def config_from_args(args, prefix: str = "", backend: str = "auto", once: bool = False) -> BridgeConfig | None:
    """A BridgeConfig, or None if no location was given; raises ValueError on an incomplete one."""
    get = lambda name: getattr(args, (prefix + name).replace("-", "_"))  # noqa: E731
    v2 = [get(n) for n in ("job", "in", "out", "done")]
    if any(v2) and not all(v2):
        raise ValueError(f"--{prefix}job, --{prefix}in, --{prefix}out and --{prefix}done go together")
    if all(v2) and get("ram"):
        raise ValueError(f"give either the v2 files or --{prefix}ram, not both")
    if not all(v2) and not get("ram"):
        return None
    return BridgeConfig(backend=backend, v2=V2Files(*v2) if all(v2) else None, ram=get("ram"),
                        windows=tuple(parse_window(w) for w in get("gpa-window")), job_gpa=get("job-gpa"),
                        done_gpa=get("done-gpa"), poll_interval=get("poll-ms") / 1000, once=once,
                        max_n=get("max-n"))


def cmd_bridge(args) -> int:
    from rgpu.bridge import selftest
    from rgpu.bridge.engine import Engine
    from rgpu.backends.factory import make_backend

    checks = [m for m in ("self_test", "mutation_test", "bench") if getattr(args, m)]
    if checks:
        engine = Engine(make_backend(args.backend), max_n=args.max_n)
        print(f'bridge checks on "{engine.device}" ({engine.backend.name} backend)')
        failed = 0
        for check in checks:
            if check == "bench":
                selftest.bench(engine)
                continue
            results = getattr(selftest, check)(engine)
            for r in results:
                print(f"{'PASS' if r.ok else 'FAIL'}  {r.name}: expected {r.expected}, got {r.got}")
            bad = sum(not r.ok for r in results)
            failed += bad
            print(f"{check.replace('_', '-')}: {len(results) - bad} passed, {bad} failed")
        engine.close()
        return 1 if failed else 0
    config = config_from_args(args, backend=args.backend, once=args.once)
    if config is None:
        print("rgpu bridge: give --job/--in/--out/--done, --ram, or a check (--self-test, --mutation-test, "
              "--bench)", file=sys.stderr)
        return 2
    trio.run(_run_until_signal, config)
    return 0


async def _run_until_signal(config: BridgeConfig) -> None:
    async with trio.open_nursery() as nursery:
        async def stop_on_signal():
            with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                async for _ in signals:
                    log.info("bridge stopping")
                    nursery.cancel_scope.cancel()

        nursery.start_soon(stop_on_signal)
        await run_bridge(config)
        nursery.cancel_scope.cancel()  # --once finished


def add_parser(sub, common) -> None:
    p = sub.add_parser("bridge", parents=[common], help="the Open-IOV CUDA bridge (jobs from files / guest RAM)")
    p.add_argument("--backend", default="auto", choices=("auto", "cuda", "fake"))
    p.add_argument("--once", action="store_true", help="handle one job record, then exit")
    p.add_argument("--self-test", action="store_true", help="every record case on temporary files")
    p.add_argument("--mutation-test", action="store_true", help="prove the device kernels ran (vadd vs vadd+1)")
    p.add_argument("--bench", action="store_true", help="kernel time (CUDA events) vs CPU, n=2^20 and 2^24")
    add_location_args(p)
    p.set_defaults(fn=cmd_bridge)
