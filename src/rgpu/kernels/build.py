"""Regenerate the committed PTX next to each .cu file here: `python -m rgpu.kernels.build`.

PTX (not cubin) so the driver JITs it for whatever GPU the server has; compute_75 keeps it loadable on
every GPU a CUDA 13 driver supports. Needs nvcc only on the machine that regenerates, never at run time.
"""

from __future__ import annotations

import pathlib
import shutil
import subprocess
import sys

HERE = pathlib.Path(__file__).parent
ARCH = "compute_75"


def sources(repo: pathlib.Path | None = None) -> list[pathlib.Path]:
    """The .cu files of a source checkout (default: the one this file sits in)."""
    repo = repo or HERE.parents[2]
    return [repo / "src" / "rgpu" / "kernels" / "demo.cu", repo / "bridge" / "kernels.cu"]


def ptx_path(source: pathlib.Path) -> pathlib.Path:
    """Where a source's PTX is committed: src/rgpu/kernels/<name>.ptx (the bridge's is bridge.ptx)."""
    kernels = source.parents[1] / "src" / "rgpu" / "kernels" if source.parent.name == "bridge" else source.parent
    return kernels / ("bridge.ptx" if source.parent.name == "bridge" else source.with_suffix(".ptx").name)


def compile_ptx(source: pathlib.Path, out: pathlib.Path, nvcc: str = "nvcc") -> None:
    subprocess.run([nvcc, "-ptx", f"-arch={ARCH}", "-o", str(out), str(source)], check=True)


def main() -> int:
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        print("nvcc not found; the committed PTX stays as it is", file=sys.stderr)
        return 1
    for src in sources():
        compile_ptx(src, ptx_path(src), nvcc)
        print(f"{src} -> {ptx_path(src)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
