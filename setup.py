"""The build steps pyproject.toml cannot declare: the stand-ins, prebuilt and as sources, go into the wheel.

- native/src, native/gen and native/examples (and the runtime demo program from tests/cuda) are copied, whole
  directories, into rgpu/_native of the built package: `rgpu build-shims` compiles them on a user's machine
  (development, or a platform no wheel was built for).
- The stand-ins themselves (libcuda.so.1, libcudart, libcublas(Lt), libcudnn) and the C examples are compiled
  here, with gcc and the CUDA headers of the nvidia-cuda-* build requirements, into rgpu/_shims: an installed
  wheel runs `rgpu run`, `rgpu doctor` and `rgpu demo` with no compiler and no headers. Such a wheel is tagged
  for this platform (py3-none-linux_x86_64); tools/build_wheel.py makes the release (manylinux_2_28) wheel of it
  with `auditwheel repair` (docs/packaging.md). Where they cannot be compiled (no gcc), the wheel carries their
  sources only, with a warning, and they are compiled on first use; RGPU_WHEEL_SHIMS=1 makes that an error
  (release builds, CI), RGPU_WHEEL_SHIMS=0 skips the compile.

An editable install reads native/ of the checkout instead, and builds into build/shims there.
"""

import os
import pathlib
import shutil
import sys
import tempfile

from setuptools import Distribution, setup
from setuptools.command.bdist_wheel import bdist_wheel
from setuptools.command.build_py import build_py

ROOT = pathlib.Path(__file__).resolve().parent
NATIVE_DIRS = ("src", "gen", "examples")
DEMO_FILES = ("tests/cuda/vector_add.cu", "tests/cuda/check.cuh")
SKIP = shutil.ignore_patterns("*.o", "*.so", "*.so.*", "*.d", "__pycache__")


def _shims_module():
    """rgpu.shims from this source tree: the same build the `rgpu build-shims` command runs (it needs only
    attrs besides the standard library, a build requirement)."""
    sys.path.insert(0, str(ROOT / "src"))
    try:
        from rgpu import shims
    finally:
        sys.path.pop(0)
    return shims


def build_stand_ins(dest: pathlib.Path) -> None:
    """Compile every stand-in and C example into a scratch directory; copy the finished files (no objects,
    stamps or link-time symlinks) into `dest`."""
    shims = _shims_module()
    with tempfile.TemporaryDirectory() as tmp:
        out = pathlib.Path(tmp)
        shims.build(out, progress=True)
        examples = shims.build_examples(out, progress=True)
        dest.mkdir(parents=True)
        for path in [out / lib.soname for lib in shims.libraries()] + [out / shims.LANE] + examples:
            shutil.copy2(path, dest / path.name)


class BuildPyWithNative(build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return
        package = pathlib.Path(self.build_lib) / "rgpu"
        dest = package / "_native"
        for old in (dest, package / "_shims"):
            if old.exists():
                shutil.rmtree(old)  # files deleted from native/ must not linger from an earlier build
        for sub in NATIVE_DIRS:
            shutil.copytree(ROOT / "native" / sub, dest / sub, ignore=SKIP)
        (dest / "demo").mkdir()
        for name in DEMO_FILES:
            shutil.copy2(ROOT / name, dest / "demo")
        mode = os.environ.get("RGPU_WHEEL_SHIMS", "auto")
        if mode == "0":
            return
        try:
            build_stand_ins(package / "_shims")
        except Exception as e:
            if mode != "auto":
                raise SystemExit(f"building the CUDA stand-ins for the wheel failed: {e}")
            print(f"warning: no prebuilt stand-ins in this wheel ({e}); they are compiled on first use",
                  file=sys.stderr)
            shutil.rmtree(package / "_shims", ignore_errors=True)


class NativeDistribution(Distribution):
    """The stand-ins are native code: the wheel is a platform wheel, installed as one (platlib)."""

    def has_ext_modules(self):
        return True


class PlatformWheel(bdist_wheel):
    """...but no Python extension: tag it py3-none-<platform> (any Python 3, this OS and architecture)."""

    def get_tag(self):
        _, _, platform = super().get_tag()
        return "py3", "none", platform


setup(distclass=NativeDistribution, cmdclass={"build_py": BuildPyWithNative, "bdist_wheel": PlatformWheel})
