"""The one build step pyproject.toml cannot declare: the C sources of the stand-ins go into the wheel.

native/src, native/gen and native/examples (and the runtime demo program from tests/cuda) are copied, whole
directories, into rgpu/_native of the built package; `rgpu build-shims` / `rgpu run` compile them on the
user's machine (see src/rgpu/shims.py). An editable install reads native/ of the checkout instead.
"""

import pathlib
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = pathlib.Path(__file__).resolve().parent
NATIVE_DIRS = ("src", "gen", "examples")
DEMO_FILES = ("tests/cuda/vector_add.cu", "tests/cuda/check.cuh")
SKIP = shutil.ignore_patterns("*.o", "*.so", "*.so.*", "*.d", "__pycache__")


class BuildPyWithNative(build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return
        dest = pathlib.Path(self.build_lib) / "rgpu" / "_native"
        if dest.exists():
            shutil.rmtree(dest)  # files deleted from native/ must not linger from an earlier build
        for sub in NATIVE_DIRS:
            shutil.copytree(ROOT / "native" / sub, dest / sub, ignore=SKIP)
        (dest / "demo").mkdir()
        for name in DEMO_FILES:
            shutil.copy2(ROOT / name, dest / "demo")


setup(cmdclass={"build_py": BuildPyWithNative})
