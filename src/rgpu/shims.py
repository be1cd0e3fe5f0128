"""Build and use the native stand-in libraries (`rgpu build-shims`, `rgpu run`, `rgpu doctor`).

The C sources live in native/ of a source checkout; CUDA headers come from the nvidia-cuda-runtime wheels
(`pip install 'rgpu[shims]'`), so no CUDA toolkit is needed on a client.
"""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys
import tempfile

CUDA_WHEELS = {13: ("cu13", "nvidia-cuda-runtime"), 12: ("cuda_runtime", "nvidia-cuda-runtime-cu12")}


def native_dir() -> pathlib.Path:
    candidates = [pathlib.Path(__file__).resolve().parents[2] / "native", pathlib.Path.cwd() / "native"]
    for path in candidates:
        if (path / "src" / "driver.c").exists():
            return path
    raise SystemExit("rgpu: native sources not found; run this from an rgpu source checkout")


def default_out_dir() -> pathlib.Path:
    env = os.environ.get("RGPU_SHIM_DIR")
    return pathlib.Path(env) if env else native_dir().parent / "build" / "shims"


def cuda_include(major: int) -> pathlib.Path:
    """cuda.h of CUDA `major`: $RGPU_CUDA<major>_INCLUDE, the nvidia-cuda-runtime wheel on any sys.path entry
    (another `nvidia` package, such as torch's, may shadow the namespace), then a toolkit of that version."""
    sub, wheel = CUDA_WHEELS[major]
    candidates = [os.environ.get(f"RGPU_CUDA{major}_INCLUDE", "")]
    candidates += [os.path.join(entry, "nvidia", sub, "include") for entry in sys.path if entry]
    for home in (os.environ.get("CUDA_HOME", ""), "/usr/local/cuda"):
        if home and _toolkit_major(home) == major:
            candidates.append(os.path.join(home, "include"))
    for inc in candidates:
        if inc and os.path.exists(os.path.join(inc, "cuda.h")):
            return pathlib.Path(inc)
    raise SystemExit(f"rgpu: CUDA {major} headers missing: pip install {wheel}")


def _toolkit_major(home: str) -> int | None:
    try:
        text = pathlib.Path(home, "include", "cuda.h").read_text(errors="replace")
    except OSError:
        return None
    m = re.search(r"#define CUDA_VERSION (\d+)", text)
    return int(m.group(1)) // 1000 if m else None


def crt_include() -> pathlib.Path:
    """crt/host_defines.h for cuda_runtime_api.h: the nvidia-cuda-crt wheel (it serves CUDA 12 headers too),
    or a toolkit."""
    for inc in (cuda_include(13), *(pathlib.Path(h, "include") for h in (os.environ.get("CUDA_HOME", ""),
                                                                       "/usr/local/cuda") if h)):
        if (inc / "crt" / "host_defines.h").exists():
            return inc
    raise SystemExit("rgpu: crt/host_defines.h missing: pip install nvidia-cuda-crt")


def build(out: pathlib.Path | None = None, cc: str = "gcc", verbose: bool = False) -> pathlib.Path:
    """Compile libcuda.so.1 and, for CUDA 13 and 12, libcudart, libcublasLt and libcublas into `out`; returns
    libcuda's path."""
    nat = native_dir()
    out = out or default_out_dir()
    out.mkdir(parents=True, exist_ok=True)
    src, gen = nat / "src", nat / "gen"
    flags = ["-O2", "-g", "-fPIC", "-Wall", "-Wno-deprecated-declarations", f"-I{src}", f"-I{gen}"]
    units = [([*sorted(src.glob("*.c")), gen / "forward_cuda13.c", gen / "unsupported_cuda13.c", gen / "errors.c"],
              [f"-I{cuda_include(13)}"]),
             ([gen / "forward_cuda12.c", gen / "unsupported_cuda12.c"], [f"-I{cuda_include(12)}"]),
             ([gen / "proctable.c"], [])]
    with tempfile.TemporaryDirectory() as tmp:
        objects = []
        for files, extra in units:
            for f in files:
                obj = pathlib.Path(tmp) / (f.parent.name + "_" + f.stem + ".o")
                _run([cc, *flags, *extra, "-c", str(f), "-o", str(obj)], verbose)
                objects.append(str(obj))
        lib = out / "libcuda.so.1"
        _run([cc, "-shared", "-Wl,-soname,libcuda.so.1", f"-Wl,--version-script={src / 'libcuda.map'}",
              "-o", str(lib), *objects, "-ldl", "-lpthread"], verbose)
    _symlink(out / "libcuda.so", "libcuda.so.1")
    for major in (13, 12):
        _build_library(out, f"libcudart.so.{major}", _runtime_sources(major), major, cc, flags, verbose,
                       exports="cuda*; __cuda*", includes=("src/cudart", "src/libs"), after=(crt_include(),), runtime=False)
        for name, sources in BLAS_LIBRARIES.items():
            _build_library(out, f"{name}.so.{major}", sources, major, cc, flags, verbose, exports="cublas*",
                           includes=("src/cublas", "src/libs"))
    _symlink(out / "libcudart.so", "libcudart.so.13")
    # cuDNN 9 is one soname for CUDA 12 and 13; this one runs on the CUDA 13 runtime.
    _build_library(out, "libcudnn.so.9", DNN_SOURCES, 13, cc, flags, verbose, exports="cudnn*",
                   includes=("src/cudnn", "src/libs"))
    return lib


def _runtime_sources(major: int) -> list[str]:
    """libcudart: native/src/cudart (a runtime on the driver API) + its generated stubs and error table."""
    rt = sorted(p.relative_to(native_dir()).as_posix() for p in (native_dir() / "src" / "cudart").glob("*.c"))
    return [*rt, *_STANDIN_COMMON, f"gen/cudart_unsupported{major}.c", f"gen/cudart_errors{major}.c"]


# Every stand-in beside libcuda logs as libcuda does (native/src/log.c, one implementation).
_STANDIN_COMMON = ("src/log.c", "src/libs/standin.c")
# The cuBLAS stand-ins: native/src/cublas + their generated stubs (native/gen), one build per soname.
_MATH_COMMON = (*_STANDIN_COMMON, "src/libs/remote.c")
BLAS_LIBRARIES = {"libcublasLt": (*_MATH_COMMON, "src/cublas/common.c", "src/cublas/lt.c", "gen/cublasLt_unsupported.c"),
                  "libcublas": (*_MATH_COMMON, "src/cublas/common.c", "src/cublas/blas.c", "src/cublas/batched.c",
                                "gen/cublas_unsupported.c")}
DNN_SOURCES = (*_MATH_COMMON, "src/cudnn/dnn.c", "src/cudnn/backend.c", "src/cudnn/legacy.c", "gen/cudnn_unsupported.c")


def _build_library(out, soname, sources, major, cc, flags, verbose, *, exports, includes, after=(), runtime=True):
    """One stand-in library in `out`, linked against the libcuda.so.1 there (and, unless it is the runtime
    itself, the libcudart of its CUDA version). CUDA's libraries version their symbols with the soname, and
    programs linked against them ask for that version, so the export script names it too. `after`: include
    directories searched after the CUDA headers of `major` (the shared crt/ must not shadow CUDA 12's own)."""
    nat = native_dir()
    lib = out / soname
    with tempfile.TemporaryDirectory() as tmp:
        script = pathlib.Path(tmp) / "exports.map"
        script.write_text(f"{soname} {{\n    global: {exports};\n    local: *;\n}};\n")
        _run([cc, *flags, *(f"-I{nat / i}" for i in includes), f"-I{cuda_include(major)}",
              *(f"-I{i}" for i in after), "-shared",
              f"-Wl,-soname,{soname}", f"-Wl,--version-script={script}", "-o", str(lib),
              *(str(nat / s) for s in sources), f"-L{out}", "-l:libcuda.so.1",
              *([f"-l:libcudart.so.{major}"] if runtime else []), "-lpthread"], verbose)
    return lib


def _symlink(link: pathlib.Path, target: str) -> None:
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(target)


EXAMPLES = ("rpc_smoke", "vecadd", "bench_calls")


def build_examples(out: pathlib.Path | None = None, cc: str = "gcc") -> list[pathlib.Path]:
    """The C examples in native/examples, linked against the shim in `out` (which must be built)."""
    nat = native_dir()
    out = out or default_out_dir()
    built = []
    for name in EXAMPLES:
        exe = out / name
        _run([cc, "-O2", "-Wall", "-Wno-deprecated-declarations", f"-I{cuda_include(13)}", str(nat / "examples" / f"{name}.c"), f"-L{out}",
              "-lcuda", "-o", str(exe)], False)
        built.append(exe)
    return built


def _run(cmd, verbose):
    if verbose:
        print(" ".join(cmd), file=sys.stderr)
    subprocess.run(cmd, check=True)


# Preloaded, not only found first on LD_LIBRARY_PATH: libraries such as PyTorch's carry an RPATH to their own
# copy of libcudart, and RPATH beats LD_LIBRARY_PATH -- but the loader never loads a second library with the
# soname of one already loaded. (A program that dlopens a driver by absolute path still gets that file.)
PRELOADED = ("libcuda.so.1", "libcudart.so.13", "libcublasLt.so.13", "libcublas.so.13", "libcudnn.so.9")


def environment(shim_dir: pathlib.Path, base: dict | None = None) -> dict:
    """The environment that makes a program load rgpu's libcuda.so.1 and libcudart instead of CUDA's."""
    env = dict(os.environ if base is None else base)
    env["LD_LIBRARY_PATH"] = str(shim_dir) + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    preload = [str(shim_dir / name) for name in PRELOADED if (shim_dir / name).exists()]
    if env.get("LD_PRELOAD"):
        preload.append(env["LD_PRELOAD"])
    if preload:
        env["LD_PRELOAD"] = " ".join(preload)
    env.setdefault("RGPU_SERVER", "127.0.0.1:9713")
    return env


def run(argv: list[str], shim_dir: pathlib.Path | None = None) -> int:
    shim_dir = shim_dir or default_out_dir()
    if not (shim_dir / "libcuda.so.1").exists():
        raise SystemExit(f"rgpu: no shims in {shim_dir}; run `rgpu build-shims` first")
    return subprocess.call(argv, env=environment(shim_dir))


def doctor(argv: list[str], shim_dir: pathlib.Path | None = None) -> int:
    """Run the program with the loader's trace on and report which CUDA libraries it really loaded."""
    shim_dir = shim_dir or default_out_dir()
    env = environment(shim_dir)
    env["LD_DEBUG"] = "libs"
    proc = subprocess.run(argv, env=env, capture_output=True, text=True)
    loaded = {}
    for line in proc.stderr.splitlines():
        m = re.search(r"calling init: (\S+)", line)
        if m:
            path = m.group(1)
            name = os.path.basename(path)
            if re.match(r"lib(cuda|cudart|cublas|cublasLt|cudnn)\b", name):
                loaded[name] = path
    print(f"program exited with {proc.returncode}")
    if not loaded:
        print("no CUDA library was loaded (the program may dlopen them later, or not use CUDA)")
    for name, path in sorted(loaded.items()):
        origin = "rgpu shim" if str(shim_dir) in path else "NOT rgpu: a real library"
        print(f"  {name:24} {path}  [{origin}]")
    return proc.returncode
