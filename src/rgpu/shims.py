"""Build and use the native stand-in libraries (`rgpu build-shims`, `rgpu run`, `rgpu doctor`).

The C sources live in native/ of a source checkout; an installed wheel carries the same files under
rgpu/_native. CUDA headers come from the nvidia-cuda-runtime wheels (`pip install 'rgpu[shims]'`), so no CUDA
toolkit is needed on a client. Builds are incremental (gcc's dependency files plus the recorded command line
of every output), so a stale stand-in is rebuilt and an up-to-date one costs a few stat calls.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import fcntl
import hashlib
import os
import pathlib
import re
import shutil
import subprocess
import sys

import attrs

from rgpu.errors import RgpuError

CUDA_WHEELS = {13: ("cu13", "nvidia-cuda-runtime"), 12: ("cuda_runtime", "nvidia-cuda-runtime-cu12")}
PACKAGED_NATIVE = pathlib.Path(__file__).resolve().parent / "_native"
# A platform wheel carries the stand-ins prebuilt (setup.py), so an installed rgpu needs no compiler.
PACKAGED_SHIMS = pathlib.Path(__file__).resolve().parent / "_shims"
CHECKOUT_NATIVE = pathlib.Path(__file__).resolve().parents[2] / "native"


class ShimError(RgpuError):
    """The stand-ins cannot be built or found; the message says what to install or run."""


def _is_native(path: pathlib.Path) -> bool:
    return (path / "src").is_dir() and (path / "gen").is_dir()


def native_dir() -> pathlib.Path:
    """The C sources: a source checkout's native/ (an editable install), else the copy inside the wheel."""
    for path in (CHECKOUT_NATIVE, PACKAGED_NATIVE):
        if _is_native(path):
            return path
    raise ShimError(f"the native sources are missing (looked in {CHECKOUT_NATIVE} and {PACKAGED_NATIVE}); "
                    "reinstall rgpu from a wheel or sdist built by pip, or run from a source checkout")


def _cache_home() -> pathlib.Path:
    return pathlib.Path(os.environ.get("XDG_CACHE_HOME") or pathlib.Path.home() / ".cache")


def default_out_dir() -> pathlib.Path:
    """$RGPU_SHIM_DIR; in a checkout, build/shims there; for an installed wheel, a per-user cache directory
    named after the version and the installation (two environments never share, nor overwrite, stand-ins)."""
    env = os.environ.get("RGPU_SHIM_DIR")
    if env:
        return pathlib.Path(env)
    nat = native_dir()
    if nat == CHECKOUT_NATIVE:
        return nat.parent / "build" / "shims"
    from rgpu.version import __version__

    where = hashlib.sha256(str(nat).encode()).hexdigest()[:12]
    return _cache_home() / "rgpu" / f"{__version__}-{where}"


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
    raise ShimError(f"CUDA {major} headers missing (needed to build the stand-ins): "
                    f"pip install 'rgpu[shims]' (or just {wheel}) into this environment")


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
    raise ShimError("crt/host_defines.h missing (needed to build the stand-ins): "
                    "pip install 'rgpu[shims]' (or just nvidia-cuda-crt) into this environment")


def _compiler(cc: str) -> str:
    path = shutil.which(cc)
    if path is None:
        raise ShimError(f"no C compiler {cc!r} on PATH: building the stand-ins needs gcc "
                        "(Debian/Ubuntu: apt install gcc; Fedora: dnf install gcc)")
    return cc


# -- an incremental build: the few rules of a Makefile, no make needed ------------------------------------
@attrs.frozen(slots=True)
class Step:
    """One output and the command that makes it. `inputs`: files it is made from (besides the headers gcc
    names in `depfile`)."""

    target: pathlib.Path
    command: tuple[str, ...]
    inputs: tuple[pathlib.Path, ...]
    depfile: pathlib.Path | None = None
    label: str = ""

    @property
    def stamp(self) -> pathlib.Path:
        # The command line that made the target: a changed flag or header directory rebuilds it.
        return self.target.parent / ".stamps" / (self.target.name + ".cmd")

    def stale(self) -> bool:
        try:
            built = self.target.stat().st_mtime_ns
            if self.stamp.read_text() != "\0".join(self.command):
                return True
            return any(os.stat(dep).st_mtime_ns > built for dep in (*self.inputs, *self._headers()))
        except OSError:  # a missing target, stamp or dependency
            return True

    def _headers(self) -> list[str]:
        if self.depfile is None:
            return []
        text = self.depfile.read_text().replace("\\\n", " ").replace("\\ ", "\0")
        _, _, deps = text.partition(": ")
        return [d.replace("\0", " ") for d in deps.split()]

    def run(self) -> None:
        self.stamp.parent.mkdir(parents=True, exist_ok=True)
        self.stamp.unlink(missing_ok=True)  # an interrupted run must not leave a target that looks built
        proc = subprocess.run(self.command, capture_output=True, text=True)
        if proc.returncode != 0:
            raise BuildFailed(self, proc.stdout + proc.stderr)
        if proc.stderr.strip():
            sys.stderr.write(proc.stderr)  # compiler warnings stay visible
        self.stamp.write_text("\0".join(self.command))


class BuildFailed(ShimError):
    def __init__(self, step: Step, output: str):
        self.step, self.output = step, output
        super().__init__(f"building {step.target.name} failed ({step.label}):\n{output.rstrip()}\n"
                         f"command: {' '.join(step.command)}")


class _Progress:
    def __init__(self, total: int, enabled: bool, verbose: bool):
        self.total, self.done, self.enabled, self.verbose = total, 0, enabled, verbose

    def __call__(self, step: Step) -> None:
        self.done += 1
        if self.enabled:
            print(f"[{self.done}/{self.total}] {step.label}", file=sys.stderr, flush=True)
            if self.verbose:
                print("    " + " ".join(step.command), file=sys.stderr, flush=True)


def _execute(stages: list[list[Step]], progress: bool, verbose: bool, jobs: int | None, title: str) -> int:
    """Run the stale steps, stage by stage (the steps of one stage in parallel); returns how many ran."""
    todo, remade = [], set()
    for stage in stages:  # planned in full first, so progress can count: a step whose input is remade is stale
        todo.append([s for s in stage if s.stale() or remade.intersection(s.inputs)])
        remade.update(s.target for s in todo[-1])
    report = _Progress(sum(map(len, todo)), progress, verbose)
    if progress and report.total:
        print(f"rgpu: {title}: {report.total} step(s)", file=sys.stderr, flush=True)
    with concurrent.futures.ThreadPoolExecutor(jobs or os.cpu_count() or 1) as pool:
        for stage in todo:
            futures = {pool.submit(step.run): step for step in stage}
            for future in concurrent.futures.as_completed(futures):
                future.result()
                report(futures[future])
    return report.total


@contextlib.contextmanager
def _locked(out: pathlib.Path):
    """One build at a time per output directory (two `rgpu run`s may start together)."""
    out.mkdir(parents=True, exist_ok=True)
    with open(out / ".lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


def _write_if_changed(path: pathlib.Path, text: str) -> pathlib.Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists() or path.read_text() != text:
        path.write_text(text)
    return path


# -- the stand-ins -----------------------------------------------------------------------------------------
FLAGS = ("-O2", "-g", "-fPIC", "-Wall", "-Wno-deprecated-declarations")


def _glibc_version() -> tuple[int, int] | None:
    """The build machine's glibc (Python's libc is the one gcc links against), or None for another libc."""
    try:
        name, _, version = (os.confstr("CS_GNU_LIBC_VERSION") or "").partition(" ")
    except (ValueError, OSError):
        return None
    parts = version.split(".")
    if name != "glibc" or len(parts) < 2 or not all(p.isdigit() for p in parts[:2]):
        return None
    return int(parts[0]), int(parts[1])


def glibc_compat(nat: pathlib.Path) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(compile flags, link flags) that keep the stand-ins loadable on glibc 2.28 when built on glibc >= 2.34
    (src/glibc_compat.h says how); elsewhere the plain -ldl -lpthread."""
    version = _glibc_version()
    if version is None or version < (2, 34):
        return (), ("-ldl", "-lpthread")
    # libdl.so.2 and libpthread.so.0 are (near-)empty since 2.34 but define the pinned versions before it: they
    # must stay DT_NEEDED although nothing here resolves to them.
    return (("-DRGPU_GLIBC_COMPAT", "-include", str(nat / "src" / "glibc_compat.h")),
            ("-Wl,--push-state,--no-as-needed", "-l:libdl.so.2", "-l:libpthread.so.0", "-Wl,--pop-state"))


_STAND_IN_PREFIXES = ("cudart_", "cublas", "cudnn_", "cufft_", "curand_", "cusolver_",  # generated files of the
                      "cusparse_")  # other libraries, not libcuda's


@attrs.frozen(slots=True)
class Library:
    """One stand-in (or the server's fast lane). `sources`: (path under native/, CUDA major of its headers, 0 for
    none); `links`: the stand-ins it is linked against; `exports`: the symbols it exports (None: src/libcuda.map
    decides)."""

    soname: str
    sources: tuple[tuple[str, int], ...]
    includes: tuple[str, ...] = ()
    exports: str | None = None
    links: tuple[str, ...] = ()
    crt: bool = False  # crt/ headers searched after the CUDA headers (the shared crt/ must not shadow CUDA 12's own)


def libraries(nat: pathlib.Path | None = None) -> list[Library]:
    """Every stand-in, in link order, with its sources found by directory (files added there are picked up)."""
    nat = nat or native_dir()

    def files(*patterns: str) -> list[str]:
        return sorted({p.relative_to(nat).as_posix() for pat in patterns for p in nat.glob(pat)})

    driver = [(f, 12 if pathlib.Path(f).stem.endswith("12") else 13)
              for f in files("src/*.c", "gen/*.c") if not pathlib.Path(f).name.startswith(_STAND_IN_PREFIXES)]
    libs = [Library("libcuda.so.1", tuple(driver))]
    # Every stand-in beside libcuda logs as libcuda does (src/log.c, one implementation) and keeps its own list of
    # locks a forked child makes afresh (src/fork_locks.c): libcuda exports only the driver API, so each library
    # carries its own copy of both.
    standin = ("src/log.c", "src/fork_locks.c", "src/libs/standin.c")
    math = ("src/log.c", "src/fork_locks.c", "src/libs/*.c")
    for major in (13, 12):
        libs.append(Library(f"libcudart.so.{major}",
                            tuple((f, major) for f in files("src/cudart/*.c", *standin, f"gen/cudart_*{major}.c")),
                            includes=("src/cudart", "src/libs"), exports="cuda*; __cuda*",
                            links=("libcuda.so.1",), crt=True))
        for name, parts in (("libcublasLt", ("lt",)), ("libcublas", ("blas", "batched"))):
            sources = files(*math, "src/cublas/common*.c", *(f"src/cublas/{p}*.c" for p in parts),
                            f"gen/{name.removeprefix('lib')}_*.c")
            libs.append(Library(f"{name}.so.{major}", tuple((f, major) for f in sources),
                                includes=("src/cublas", "src/libs"), exports="cublas*",
                                links=("libcuda.so.1", f"libcudart.so.{major}")))
        # cuFFT's soname is its own major version: 12 ships with CUDA 13, 11 with CUDA 12.
        libs.append(Library(f"libcufft.so.{major - 1}",
                            tuple((f, major) for f in files(*math, "src/cufft/*.c", "gen/cufft_*.c")),
                            includes=("src/cufft", "src/libs"), exports="cufft*; __cufft*",
                            links=("libcuda.so.1", f"libcudart.so.{major}")))
        # cuSOLVER's soname is 12 for CUDA 13, 11 for CUDA 12; the same sources serve both.
        libs.append(Library(f"libcusolver.so.{major - 1}",
                            tuple((f, major) for f in files(*math, "src/cusolver/*.c", "gen/cusolver_*.c")),
                            includes=("src/cusolver", "src/libs"), exports="cusolver*",
                            links=("libcuda.so.1", f"libcudart.so.{major}")))
    # cuDNN 9 is one soname for CUDA 12 and 13; this one runs on the CUDA 13 runtime.
    libs.append(Library("libcudnn.so.9", tuple((f, 13) for f in files(*math, "src/cudnn/*.c", "gen/cudnn_*.c")),
                        includes=("src/cudnn", "src/libs"), exports="cudnn*",
                        links=("libcuda.so.1", "libcudart.so.13")))
    # cuRAND's soname is libcurand.so.10 for CUDA 12 and 13 alike; this one, too, runs on the CUDA 13 runtime.
    libs.append(Library("libcurand.so.10", tuple((f, 13) for f in files(*math, "src/curand/*.c", "gen/curand_*.c")),
                        includes=("src/curand", "src/libs"), exports="curand*",
                        links=("libcuda.so.1", "libcudart.so.13")))
    # So is cuSPARSE's libcusparse.so.12.
    libs.append(Library("libcusparse.so.12",
                        tuple((f, 13) for f in files(*math, "src/cusparse/*.c", "gen/cusparse_*.c")),
                        includes=("src/cusparse", "src/libs"), exports="cusparse*",
                        links=("libcuda.so.1", "libcudart.so.13")))
    return libs


def _library_steps(lib: Library, nat: pathlib.Path, out: pathlib.Path, cc: str) -> tuple[list[Step], Step]:
    objdir = out / "obj" / lib.soname
    includes = [f"-I{nat / 'src'}", f"-I{nat / 'gen'}", *(f"-I{nat / i}" for i in lib.includes)]
    after = [f"-I{crt_include()}"] if lib.crt else []
    compat_cflags, compat_libs = glibc_compat(nat)
    compiles = []
    for source, major in lib.sources:
        obj = objdir / (source.replace("/", "_").removesuffix(".c") + ".o")
        dep = obj.with_suffix(".d")
        cuda = [f"-I{cuda_include(major)}"] if major else []  # (0: sources that need no CUDA header)
        compiles.append(Step(obj, (cc, *FLAGS, *compat_cflags, *includes, *cuda, *after,
                                   "-MMD", "-MF", str(dep), "-c", str(nat / source), "-o", str(obj)),
                             (nat / source,), dep, f"CC {lib.soname}: {source}"))
    if lib.exports is None:
        script = nat / "src" / "libcuda.map"
    else:
        script = _write_if_changed(objdir / "exports.map",
                                   f"{lib.soname} {{\n    global: {lib.exports};\n    local: *;\n}};\n")
    target = out / lib.soname
    # RUNPATH $ORIGIN: a stand-in finds the others it links against beside it (and auditwheel sees that they
    # are the wheel's own, not NVIDIA's libraries of those names to be copied in).
    link = Step(target, (cc, "-shared", f"-Wl,-soname,{lib.soname}", f"-Wl,--version-script={script}",
                         "-Wl,--enable-new-dtags,-rpath,$ORIGIN",
                         "-o", str(target), *(str(c.target) for c in compiles), f"-L{out}",
                         *(f"-l:{name}" for name in lib.links), *compat_libs),
                (*(c.target for c in compiles), script, *(out / name for name in lib.links)),
                label=f"LINK {lib.soname}")
    return compiles, link


# The server worker's fast lane (native/src/lane, rgpu.backends.lane): not a stand-in, but built, shipped and
# found beside them. It needs no CUDA headers (major 0 below); the driver's calls reach it as function pointers.
LANE = "librgpu_lane.so"


def lane(nat: pathlib.Path | None = None) -> Library:
    """The fast lane as a library to build: its folder (files added there are picked up) and the wire codec."""
    nat = nat or native_dir()
    files = ["src/wire.c", "src/log.c", "src/crypto.c", "src/aead_pipe.c", "src/send_iov.c", "src/quiet_thread.c",
             "src/copy_runs.c",
             *sorted(p.relative_to(nat).as_posix() for p in (nat / "src" / "lane").glob("*.c"))]
    return Library(LANE, tuple((f, 0) for f in files), includes=("src/lane",), exports="rgpu_lane_*")


def build_lane(out: pathlib.Path | None = None, cc: str = "gcc") -> pathlib.Path:
    """Compile (if stale) the worker's fast lane into `out`; returns its path."""
    nat = native_dir()
    out = out or default_out_dir()
    compiles, link = _library_steps(lane(nat), nat, out, _compiler(cc))
    with _locked(out):
        _execute([compiles, [link]], False, False, None, f"building the fast lane in {out}")
    return link.target


def lane_header() -> pathlib.Path:
    """lane.h: the fast lane's whole interface, which its loader declares to cffi as it is."""
    return native_dir() / "src" / "lane" / "lane.h"


def lane_library() -> pathlib.Path:
    """The fast lane a server worker loads: a platform wheel's prebuilt one, else built (what is stale) in the
    default directory. Raises ShimError when it is neither there nor buildable."""
    prebuilt = prebuilt_dir()
    if prebuilt is not None and (prebuilt / LANE).exists():
        return prebuilt / LANE
    return build_lane()


def build(out: pathlib.Path | None = None, cc: str = "gcc", verbose: bool = False, *, progress: bool = False,
          jobs: int | None = None) -> pathlib.Path:
    """Compile (what is stale of) libcuda.so.1 and, for CUDA 13 and 12, libcudart, libcublasLt, libcublas and
    libcufft, libcudnn.so.9, libcurand.so.10 and the server's fast lane into `out`; returns libcuda's path.
    `progress`: a line per step on stderr."""
    nat = native_dir()
    out = out or default_out_dir()
    cc = _compiler(cc)
    with _locked(out):
        compiles, links = [], []
        for lib in [*libraries(nat), lane(nat)]:
            c, link = _library_steps(lib, nat, out, cc)
            compiles += c
            links.append([link])  # in order: each links against those before it
        _execute([compiles, *links], progress or verbose, verbose, jobs, f"building the CUDA stand-ins in {out}")
        _symlink(out / "libcuda.so", "libcuda.so.1")
        _symlink(out / "libcudart.so", "libcudart.so.13")
    return out / "libcuda.so.1"


def _symlink(link: pathlib.Path, target: str) -> None:
    if link.is_symlink() and os.readlink(link) == target:
        return
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(target)


EXAMPLES = ("rpc_smoke", "vecadd", "bench_calls", "copy_check", "coded_copy_check", "fork_check")


def build_examples(out: pathlib.Path | None = None, cc: str = "gcc", *, progress: bool = False,
                   verbose: bool = False) -> list[pathlib.Path]:
    """The C examples in native/examples, linked against the shim in `out` (which must be built)."""
    nat = native_dir()
    out = out or default_out_dir()
    cc = _compiler(cc)
    compat_cflags, _ = glibc_compat(nat)
    if compat_cflags:  # their start code, too (src/glibc_compat.h)
        compat_cflags += ("-DRGPU_GLIBC_COMPAT_START", "-Wl,--wrap=__libc_start_main")
    steps = []
    for name in EXAMPLES:
        exe, source = out / name, nat / "examples" / f"{name}.c"
        dep = out / "obj" / "examples" / f"{name}.d"
        dep.parent.mkdir(parents=True, exist_ok=True)
        steps.append(Step(exe, (cc, "-O2", "-Wall", "-Wno-deprecated-declarations", *compat_cflags,
                                f"-I{cuda_include(13)}",
                                "-MMD", "-MF", str(dep), str(source), f"-L{out}", "-l:libcuda.so.1",
                                "-Wl,--enable-new-dtags,-rpath,$ORIGIN", "-o", str(exe)),
                          (source, out / "libcuda.so.1"), dep, f"CC+LINK example {name}"))
    with _locked(out):
        _execute([steps], progress or verbose, verbose, None, f"building the C examples in {out}")
    return [s.target for s in steps]


# Preloaded, not only found first on LD_LIBRARY_PATH: libraries such as PyTorch's carry an RPATH to their own
# copy of libcudart, and RPATH beats LD_LIBRARY_PATH -- but the loader never loads a second library with the
# soname of one already loaded. (A program that dlopens a driver by absolute path still gets that file.)
PRELOADED = ("libcuda.so.1", "libcudart.so.13", "libcublasLt.so.13", "libcublas.so.13", "libcudnn.so.9",
             "libcufft.so.12", "libcurand.so.10", "libcusolver.so.12", "libcusparse.so.12")


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


def prebuilt_dir() -> pathlib.Path | None:
    """The stand-ins an installed platform wheel carries, or None (a source checkout builds its own, from
    sources that may have changed since)."""
    if _is_native(CHECKOUT_NATIVE) or not (PACKAGED_SHIMS / "libcuda.so.1").exists():
        return None
    return PACKAGED_SHIMS


def ensure_built(shim_dir: pathlib.Path | None = None) -> pathlib.Path:
    """The directory of stand-ins a program should run with. A directory the user named (--shims,
    $RGPU_SHIM_DIR) is used as it is, and so are those an installed wheel carries; otherwise the default one
    is brought up to date first (a no-op when it is)."""
    explicit = shim_dir or (pathlib.Path(os.environ["RGPU_SHIM_DIR"]) if os.environ.get("RGPU_SHIM_DIR") else None)
    if explicit is not None:
        if not (explicit / "libcuda.so.1").exists():
            raise ShimError(f"no stand-ins in {explicit}: run `rgpu build-shims --out {explicit}`")
        return explicit
    prebuilt = prebuilt_dir()
    if prebuilt is not None:
        return prebuilt
    out = default_out_dir()
    try:
        build(out, progress=True)
    except BuildFailed:
        raise
    except ShimError as e:
        if not (out / "libcuda.so.1").exists():
            raise ShimError(f"the CUDA stand-ins are not built and cannot be: {e}") from None
        print(f"rgpu: warning: cannot check the stand-ins in {out} are up to date ({e}); using them as they are",
              file=sys.stderr)
    return out


def ensure_examples(shim_dir: pathlib.Path) -> pathlib.Path:
    """`shim_dir` with the C examples in it: a wheel's prebuilt ones, else built (what is stale) there."""
    if shim_dir != prebuilt_dir():
        build_examples(shim_dir, progress=True)
    return shim_dir


def run(argv: list[str], shim_dir: pathlib.Path | None = None) -> int:
    shim_dir = ensure_built(shim_dir)
    try:
        return subprocess.call(argv, env=environment(shim_dir))
    except FileNotFoundError:
        raise ShimError(f"program not found: {argv[0]}") from None
    except PermissionError:
        raise ShimError(f"program not executable: {argv[0]}") from None
