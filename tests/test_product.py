"""What a new user meets: configuration from the environment, one-line errors, incremental shim builds,
`rgpu doctor`, and the wheel installed outside the checkout."""

from __future__ import annotations

import os
import pathlib
import re
import shutil
import struct
import subprocess
import sys
import textwrap
import time

import pytest

import rgpu
from rgpu import config, shims
from rgpu.cli import local_server
from rgpu.config import ConfigurationError
from rgpu.errors import AuthenticationError

ROOT = pathlib.Path(__file__).resolve().parents[1]
RGPU = [sys.executable, "-m", "rgpu"]
SERVER = [sys.executable, "-m", "rgpu.cli", "server"]


def rgpu_cli(*args, env=None, cwd=None, timeout=120):
    proc = subprocess.run([*RGPU, *args], capture_output=True, text=True, timeout=timeout, cwd=cwd,
                          env={**os.environ, **(env or {})})
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def one_line_error(proc) -> str:
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode != 0 and lines, (proc.returncode, proc.stderr)
    return lines[-1]


# -- configuration -------------------------------------------------------------------------------------
@pytest.mark.parametrize("address, expected", [
    ("10.0.0.1:9000", ("10.0.0.1", 9000)), ("gpuhost", ("gpuhost", 9713)), ("[::1]:7", ("::1", 7)),
    ("[::1]", ("::1", 9713)), (" host:1 ", ("host", 1)), ("host:65535", ("host", 65535)),
])
def test_addresses_that_parse(address, expected):
    assert config.parse_address(address) == expected


@pytest.mark.parametrize("address, message", [
    ("127.0.0.1:abc", "port must be a number from 1 to 65535"), ("h:99999", "from 1 to 65535"),
    ("h:0", "from 1 to 65535"), ("h:", "from 1 to 65535"), (":9713", "no host"), ("::1", "in brackets"),
    ("[::1", "expected host:port"), ("[::1]x", "expected host:port"),
])
def test_bad_addresses_are_named(address, message):
    with pytest.raises(config.ConfigurationError, match=message) as e:
        config.parse_address(address)
    assert repr(address) in str(e.value)


def test_connect_reads_the_environment_like_the_cli(tmp_path, monkeypatch):
    key = tmp_path / "key"
    subprocess.run([*RGPU, "keygen", str(key)], check=True, capture_output=True, timeout=60)
    with local_server("fake", ["--psk-file", str(key), "--log-level", "warning"]) as address:
        monkeypatch.setenv("RGPU_SERVER", address)
        with pytest.raises(AuthenticationError, match="requires a pre-shared key"):
            rgpu.connect()
        monkeypatch.setenv("RGPU_PSK_FILE", str(key))
        with rgpu.connect() as c:
            assert c.device_count() == 1
        info = rgpu_cli("info", env={"RGPU_SERVER": address, "RGPU_PSK_FILE": str(key)})
        assert info.returncode == 0 and "rgpu fake GPU 0" in info.stdout


def test_the_blocking_client_answers_each_call_as_the_async_one():
    """rgpu.connect's Client sends a lone call without _call_many's lists (its null call's path): a queued call's
    error surfaces once, deferred, at the next synchronising call; a failed call raises its own status at once;
    results decode as they do through the async client."""
    from rgpu.errors import CudaError, Status

    from .conftest import DEMO_PTX

    with local_server("fake", ["--log-level", "warning"]) as address, rgpu.connect(address) as c:
        mod = c.module_load(DEMO_PTX)
        fill = c.get_function(mod, "fill")
        c.launch(rgpu.Function(fill.handle + 1000, "fill", fill.layout), 1, 1, (0, 1.0, 1))  # queued: no error yet
        with pytest.raises(CudaError) as e:
            c.synchronize()
        assert e.value.deferred and e.value.code == Status.INVALID_HANDLE
        c.synchronize()  # reported once, then clear
        with pytest.raises(CudaError) as e:
            c.module_unload(mod + 1000)
        assert not e.value.deferred and e.value.code
        p = c.mem_alloc(1024)
        c.launch(fill, 1, 256, (p, 2.0, 256))
        assert bytes(c.memcpy_dtoh(p, 8)) == struct.pack("<2f", 2.0, 2.0)
        assert c.device_count() == 1


def test_wrong_key_is_said_once_and_plainly(tmp_path):
    key, other = tmp_path / "key", tmp_path / "other"
    for path in (key, other):
        subprocess.run([*RGPU, "keygen", str(path)], check=True, capture_output=True, timeout=60)
    with local_server("fake", ["--psk-file", str(key), "--log-level", "warning"]) as address:
        proc = rgpu_cli("info", "--server", address, "--psk-file", str(other))
        line = one_line_error(proc)
        assert line.count("authentication failed") == 1 and "does not accept our pre-shared key" in line


def test_client_errors_are_one_line(tmp_path):
    short = tmp_path / "short"
    short.write_text("0011223344")
    short.chmod(0o600)
    cases = [
        (("info", "--server", "127.0.0.1:abc"), "bad server address '127.0.0.1:abc'"),
        (("info", "--server", "127.0.0.1:99999"), "from 1 to 65535"),
        (("info", "--server", "127.0.0.1:1"), "cannot reach rgpu-server at 127.0.0.1:1: Connection refused"),
        (("info", "--server", "127.0.0.1:1", "--psk-file", str(short)), f"PSK file {short}: a PSK must be at least 32"),
        (("info", "--psk-file", str(tmp_path / "none")), "does not exist (make one with `rgpu keygen"),
        (("info", "--log-level", "loud"), "invalid choice: 'loud'"),
        (("run",), "give a program to run after --"),
        (("run", "--server", "h:x", "--", "/bin/true"), "bad server address 'h:x'"),
    ]
    for args, text in cases:
        line = one_line_error(rgpu_cli(*args))
        assert text in line, (args, line)


def test_readable_psk_file_is_refused_unless_allowed(tmp_path):
    """As ssh with a private key: group- or world-readable is refused by the CLI, the server, the Python client
    and the stand-ins alike, with the chmod to run; --allow-readable-psk (RGPU_ALLOW_READABLE_PSK=1) uses it."""
    key = tmp_path / "key"
    key.write_text(os.urandom(32).hex())
    key.chmod(0o640)
    refused = f"PSK file {key} can be read by other users (mode 0640)"
    line = one_line_error(rgpu_cli("info", "--server", "127.0.0.1:1", "--psk-file", str(key)))
    assert refused in line and f"refusing it; run: chmod 600 {key}" in line and "--allow-readable-psk" in line
    server = subprocess.run([*SERVER, "--port", "0", "--backend", "fake", "--psk-file", str(key)],
                            capture_output=True, text=True, timeout=60)
    assert server.returncode == 2 and refused in server.stderr and "Traceback" not in server.stderr
    with pytest.raises(ConfigurationError, match="chmod 600"):
        rgpu.connect("127.0.0.1:1", psk_file=str(key))
    # Allowed: used, with a warning; the connection attempt is what fails now.
    line = one_line_error(rgpu_cli("info", "--server", "127.0.0.1:1", "--psk-file", str(key),
                                   "--allow-readable-psk"))
    assert "cannot reach rgpu-server at 127.0.0.1:1" in line
    proc = rgpu_cli("info", "--server", "127.0.0.1:1", "--psk-file", str(key), "--allow-readable-psk")
    assert "used anyway, as asked; run: chmod 600" in proc.stderr
    key.chmod(0o600)
    assert "chmod" not in rgpu_cli("info", "--server", "127.0.0.1:1", "--psk-file", str(key)).stderr


def test_readable_psk_file_is_refused_by_the_stand_ins(shim_dir, tmp_path):
    key = tmp_path / "key"
    key.write_text(os.urandom(32).hex())
    key.chmod(0o604)
    with local_server("fake", ["--psk-file", str(key), "--allow-readable-psk", "--log-level", "warning"]) as address:
        env = shims.environment(shim_dir)
        env.update(RGPU_SERVER=address, RGPU_PSK_FILE=str(key))
        env.pop("RGPU_ALLOW_READABLE_PSK", None)
        proc = subprocess.run([str(shim_dir / "rpc_smoke")], env=env, capture_output=True, text=True, timeout=60)
        assert proc.returncode != 0 and f"PSK file {key} can be read by other users (mode 0604)" in proc.stderr
        assert f"refusing it; run: chmod 600 {key}" in proc.stderr
        env["RGPU_ALLOW_READABLE_PSK"] = "1"
        proc = subprocess.run([str(shim_dir / "rpc_smoke")], env=env, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0 and "used anyway, as asked" in proc.stderr, proc.stdout + proc.stderr


def test_server_startup_errors_are_one_line():
    with local_server("fake", ["--log-level", "warning"]) as address:
        port = address.rsplit(":", 1)[1]
        cases = [
            (["--port", port], f"127.0.0.1:{port} is already in use"),
            (["--port", "99999"], "99999 is not a TCP port"),
            (["--port", "x"], "not a port number: 'x'"),
            (["--bind", "nosuchhost.invalid", "--insecure", "--port", "0"], "cannot listen on 'nosuchhost.invalid'"),
            (["--bind", "192.0.2.1", "--insecure", "--port", "0"], "cannot listen on 192.0.2.1:0"),
            (["--log-level", "loud"], "invalid choice: 'loud'"),
        ]
        for args, text in cases:
            proc = subprocess.run([*SERVER, "--backend", "fake", "--worker-pool", "1", *args], capture_output=True,
                                  text=True, timeout=120)
            assert proc.returncode == 2 and "Traceback" not in proc.stderr, (args, proc.stderr)
            assert text in one_line_error(proc), (args, proc.stderr)


def test_version_and_python_m():
    for cmd in ([*RGPU, "--version"], [*SERVER, "--version"]):
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0 and rgpu.__version__ in proc.stdout and "protocol 1." in proc.stdout


def test_shim_names_a_bad_server_address(shim_dir):
    proc = subprocess.run([str(shim_dir / "rpc_smoke")], capture_output=True, text=True, timeout=60,
                          env=shims.environment(shim_dir, {**os.environ, "RGPU_SERVER": "garbage.invalid"}))
    assert proc.returncode != 0
    assert "cannot reach rgpu-server at garbage.invalid: unknown host" in proc.stderr and "Success" not in proc.stderr


# -- incremental builds -----------------------------------------------------------------------------------
def test_build_steps_remake_only_what_is_stale(tmp_path):
    header, source = tmp_path / "a.h", tmp_path / "a.c"
    header.write_text("#define N 1\n")
    source.write_text('#include "a.h"\nint n(void) { return N; }\n')
    obj, dep = tmp_path / "out" / "a.o", tmp_path / "out" / "a.d"
    obj.parent.mkdir()

    def step(*flags):
        return shims.Step(obj, ("gcc", *flags, "-MMD", "-MF", str(dep), "-c", str(source), "-o", str(obj)),
                          (source,), dep, "CC a.c")

    assert step().stale()
    step().run()
    assert not step().stale()
    assert step("-O1").stale()  # another command line
    built = obj.stat().st_mtime_ns
    os.utime(header, ns=(built + 1, built + 1))
    assert step().stale()  # a header gcc found, though no one listed it
    step().run()
    assert not step().stale()
    obj.unlink()
    assert step().stale()


def test_missing_build_tools_are_named(monkeypatch, tmp_path):
    with pytest.raises(shims.ShimError, match="no C compiler 'no-such-cc' on PATH: building the stand-ins needs gcc"):
        shims.build(tmp_path, cc="no-such-cc")
    monkeypatch.setattr(sys, "path", [])
    monkeypatch.delenv("RGPU_CUDA12_INCLUDE", raising=False)
    monkeypatch.setenv("CUDA_HOME", str(tmp_path))
    monkeypatch.setattr(shims, "_toolkit_major", lambda home: None)
    with pytest.raises(shims.ShimError, match=r"CUDA 12 headers missing .*pip install 'rgpu\[shims\]'"):
        shims.cuda_include(12)


def test_run_and_doctor_name_a_missing_program(shim_dir):
    for command in ("run", "doctor"):
        line = one_line_error(rgpu_cli(command, "--shims", str(shim_dir), "--", "./no-such-program"))
        assert "./no-such-program" in line and ("not found" in line or "No such file" in line), line


def test_every_native_source_is_built():
    """Files added to native/src, native/gen or a library's folder are picked up without a list to edit."""
    nat = shims.native_dir()
    built = {source for lib in shims.libraries(nat) for source, _ in lib.sources}
    built |= {source for source, _ in shims.lane(nat).sources}
    every = {p.relative_to(nat).as_posix() for p in (*nat.glob("src/**/*.c"), *nat.glob("gen/*.c"))}
    assert every <= built


# -- doctor ---------------------------------------------------------------------------------------------
def test_doctor_reports_what_the_program_used(shim_dir):
    ptx = ROOT / "src" / "rgpu" / "kernels" / "demo.ptx"
    with local_server("fake", ["--log-level", "warning"]) as address:
        proc = rgpu_cli("doctor", "--server", address, "--shims", str(shim_dir), "--",
                        str(shim_dir / "vecadd"), str(ptx), "1000")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "vecadd n=1000" in proc.stdout and "OK (0 wrong)" in proc.stdout  # the program's own output
        lines = proc.stdout.splitlines()
        used = [line for line in lines if line.strip().startswith("libcuda.so.1")]
        assert len(used) == 1 and "rgpu stand-in" in used[0] and f"needed by {shim_dir / 'vecadd'}" in used[0]
        assert not any(line.strip().startswith(("libcudart", "libcublas", "libcudnn")) for line in lines)
        assert f"server {address}: answers" in proc.stdout and "rgpu fake GPU 0" in proc.stdout
        assert "no problems found" in proc.stdout

        script = 'import ctypes; ctypes.CDLL("libcudart.so.13"); print("python ok")'
        proc = rgpu_cli("doctor", "--server", address, "--shims", str(shim_dir), "--", sys.executable, "-c", script)
        assert proc.returncode == 0 and "python ok" in proc.stdout
        assert any("libcudart.so.13" in line and "dlopen" in line for line in proc.stdout.splitlines())


def test_doctor_says_what_is_wrong(shim_dir):
    proc = rgpu_cli("doctor", "--server", "127.0.0.1:1", "--shims", str(shim_dir), "--", "/bin/true")
    assert proc.returncode == 1
    assert "the program loaded no CUDA library" in proc.stdout
    assert "problem: the rgpu server at 127.0.0.1:1 does not answer" in proc.stdout
    assert not any(line.strip().startswith("libcuda") for line in proc.stdout.splitlines())


def test_doctor_flags_a_real_library_loaded_by_path(shim_dir, tmp_path):
    # A copy of a stand-in outside the stand-in directory plays NVIDIA's library, dlopened by absolute path.
    elsewhere = tmp_path / "libcuda.so.1"
    elsewhere.write_bytes((shim_dir / "libcuda.so.1").read_bytes())
    script = f'import ctypes; ctypes.CDLL("{elsewhere}")'
    proc = rgpu_cli("doctor", "--server", "127.0.0.1:1", "--shims", str(shim_dir), "--", sys.executable, "-c", script)
    assert f"libcuda.so.1 was loaded from {elsewhere}, not rgpu's stand-in" in proc.stdout


STATIC_RUNTIME_PROGRAM = textwrap.dedent("""
    #include <cstdio>
    __global__ void touch(int *p) { *p = 1; }
    int main() {
        int *p = nullptr;
        cudaError_t e = cudaMalloc(&p, sizeof *p);
        std::printf("cudaMalloc: %s\\n", cudaGetErrorName(e));
        return e == cudaSuccess ? 0 : 3;
    }
""")


def test_a_program_with_its_own_runtime_is_named_before_it_runs_and_by_doctor(shim_dir, tmp_path):
    """nvcc's default build links NVIDIA's runtime into the program, which asks the driver for private interfaces
    rgpu cannot provide: `rgpu run` says so before the program starts, its first call fails cleanly with the
    reason logged, and `rgpu doctor` names it; the same program built with -cudart shared is not flagged."""
    if shutil.which("nvcc") is None:
        pytest.skip("needs nvcc")
    source = tmp_path / "own_runtime.cu"
    source.write_text(STATIC_RUNTIME_PROGRAM)
    static, shared = tmp_path / "static_runtime", tmp_path / "shared_runtime"
    subprocess.run(["nvcc", "-o", str(static), str(source)], check=True, capture_output=True)
    subprocess.run(["nvcc", "-cudart", "shared", "-o", str(shared), str(source), f"-L{shim_dir}", "-Xlinker",
                    f"-rpath-link={shim_dir}"], check=True, capture_output=True)
    with local_server("fake", ["--log-level", "warning"]) as address:
        proc = rgpu_cli("run", "--server", address, "--shims", str(shim_dir), "--", str(static))
        assert proc.returncode == 3 and "cudaMalloc: cudaErrorNotSupported" in proc.stdout, proc.stdout + proc.stderr
        assert "static_runtime carries its own copy of NVIDIA's CUDA runtime" in proc.stderr
        assert "cuGetExportTable (the driver's private interfaces) is not supported" in proc.stderr
        assert "nvcc -cudart shared" in proc.stderr
        proc = rgpu_cli("doctor", "--server", address, "--shims", str(shim_dir), "--", str(static))
        assert "problem: static_runtime carries its own copy of NVIDIA's CUDA runtime" in proc.stdout, proc.stdout
        proc = rgpu_cli("run", "--server", address, "--shims", str(shim_dir), "--", str(shared))
        assert proc.returncode == 0 and "cudaMalloc: cudaSuccess" in proc.stdout, proc.stdout + proc.stderr
        assert "its own copy" not in proc.stderr


# -- the wheel, installed outside the checkout ------------------------------------------------------------
SMALL_PROGRAM = textwrap.dedent("""
    #include <cuda.h>
    #include <stdio.h>
    int main(void) {
        CUdevice dev; CUcontext ctx; CUdeviceptr p; char name[64]; unsigned out[4] = {0}, in[4] = {1, 2, 3, 4};
        if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDeviceGetName(name, sizeof name, dev)) return 1;
        if (cuDevicePrimaryCtxRetain(&ctx, dev) || cuCtxSetCurrent(ctx) || cuMemAlloc(&p, sizeof in)) return 2;
        if (cuMemcpyHtoD(p, in, sizeof in) || cuMemcpyDtoH(out, p, sizeof out) || cuMemFree(p)) return 3;
        printf("small program on %s: %u %u %u %u\\n", name, out[0], out[1], out[2], out[3]);
        return 0;
    }
""")


def _glibc_versions(path: pathlib.Path) -> set[tuple[int, ...]]:
    """The GLIBC_x.y symbol versions an ELF file needs (objdump -T)."""
    text = subprocess.run(["objdump", "-T", str(path)], check=True, capture_output=True, text=True).stdout
    return {tuple(map(int, v.split("."))) for v in re.findall(r"\(GLIBC_([0-9.]+)\)", text)}


@pytest.mark.skipif(shutil.which("objdump") is None, reason="needs objdump (binutils)")
def test_stand_ins_load_on_glibc_2_28(shim_dir):
    """Built on any glibc, the stand-ins and examples need no symbol version newer than 2.28 (the manylinux_2_28
    tag of the release wheel; native/src/glibc_compat.h), and find each other beside them (RUNPATH $ORIGIN)."""
    files = [shim_dir / lib.soname for lib in shims.libraries()] + [shim_dir / n for n in shims.EXAMPLES]
    for path in files:
        versions = _glibc_versions(path)
        assert versions and max(versions) <= (2, 28), (path.name, sorted(versions)[-3:])
        dynamic = subprocess.run(["readelf", "-d", str(path)], check=True, capture_output=True, text=True).stdout
        assert "Library runpath: [$ORIGIN]" in dynamic, path.name


def _auditwheel_tag(wheel: pathlib.Path) -> str | None:
    """The tag `auditwheel show` gives the wheel, or None without auditwheel."""
    try:
        import auditwheel  # noqa: F401
    except ImportError:
        return None
    shown = subprocess.run([sys.executable, "-m", "auditwheel", "show", "--json", str(wheel)], check=True,
                           capture_output=True, text=True, timeout=120)
    return __import__("json").loads(shown.stdout)["overall_tag"]


@pytest.mark.slow
def test_wheel_installed_outside_the_checkout(tmp_path):
    """Build the platform wheel (stand-ins prebuilt), install it (no dependencies: they come from this
    environment) into a fresh virtual environment, and use it from a directory that is not the checkout, with
    nothing compiled on the way: `rgpu run` and `rgpu doctor` on a driver-API program against a fake-backend
    server, `rgpu status --json`, `rgpu demo`. Then the development path: `rgpu build-shims` from the sources the
    wheel carries, into the user's cache, incrementally."""
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels), str(ROOT)],
                   check=True, capture_output=True, timeout=600, env={**os.environ, "RGPU_WHEEL_SHIMS": "1"})
    (wheel,) = wheels.glob("rgpu-*.whl")
    assert wheel.name.startswith("rgpu-") and "-py3-none-linux_" in wheel.name, wheel.name
    import zipfile

    names = set(zipfile.ZipFile(wheel).namelist())
    assert {f"rgpu/_shims/{lib.soname}" for lib in shims.libraries()} | {"rgpu/_shims/vecadd"} <= names
    assert "rgpu/_native/src/conn_io.c" in names and not any(n.endswith((".o", ".d")) for n in names)
    tag = _auditwheel_tag(wheel)  # what tools/build_wheel.py's `auditwheel repair` retags it to
    if tag is not None:
        minor = re.fullmatch(rf"manylinux_2_(\d+)_{os.uname().machine}", tag)
        assert minor and int(minor.group(1)) <= 28, tag
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    py = venv / "bin" / "python"
    # (without PYTHONPATH: a checkout's src/ on it, with the rgpu.egg-info `pip wheel` leaves there, reads to pip as
    # rgpu already installed in the venv, and it installs nothing)
    plain = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "-q", "--no-deps", "--no-index",
                    str(wheel)], check=True, capture_output=True, timeout=300, env=plain)
    # The dependencies (trio, numpy, the header wheels...) from this environment, after the venv's own rgpu.
    site = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    ours = [p for p in sys.path if p.endswith("site-packages")]
    pathlib.Path(site, "deps.pth").write_text("\n".join(ours) + "\n")

    work = tmp_path / "elsewhere"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RGPU_", "PYTHON"))}
    cache = tmp_path / "cache"
    env["XDG_CACHE_HOME"] = str(cache)
    bin_ = venv / "bin"

    def run(*args, **kw):
        proc = subprocess.run([str(bin_ / args[0]), *args[1:]], capture_output=True, text=True, cwd=work, env=env,
                              timeout=300, **kw)
        assert "Traceback" not in proc.stderr, proc.stderr
        return proc

    where = run("python", "-c", "import rgpu, rgpu.shims as s; print(rgpu.__file__); print(s.default_out_dir()); "
                                "print(s.ensure_built())")
    module, out_dir, prebuilt = where.stdout.split()
    assert module.startswith(str(venv)) and out_dir.startswith(str(cache / "rgpu"))
    assert prebuilt == str(pathlib.Path(module).parent / "_shims")

    (work / "small.c").write_text(SMALL_PROGRAM)
    include = run("python", "-c", "from rgpu import shims; print(shims.cuda_include(13))").stdout.strip()
    subprocess.run(["gcc", "-O1", f"-I{include}", "-o", "small", "small.c", f"-L{prebuilt}", "-l:libcuda.so.1"],
                   cwd=work, check=True, timeout=120)
    port_file = work / "port"
    server = subprocess.Popen([str(bin_ / "rgpu-server"), "--port", "0", "--port-file", str(port_file), "--backend",
                               "fake", "--worker-pool", "1", "--log-level", "warning"], cwd=work, env=env,
                              stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not port_file.exists():
            assert server.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        address = f"127.0.0.1:{int(port_file.read_text())}"
        ran = run("rgpu", "run", "--server", address, "--", "./small")
        assert ran.returncode == 0 and "small program on rgpu fake GPU 0: 1 2 3 4" in ran.stdout, ran.stderr
        assert "[1/" not in ran.stderr  # nothing compiled: the wheel's own stand-ins
        doctor = run("rgpu", "doctor", "--server", address, "--", "./small")
        assert doctor.returncode == 0 and "small program on" in doctor.stdout
        assert f"stand-ins from {prebuilt}" in doctor.stdout and "rgpu stand-in" in doctor.stdout
        assert "answers" in doctor.stdout
        assert "has RUNPATH" not in doctor.stdout  # the stand-ins' own, not the program's business
        status = run("rgpu", "status", "--server", address, "--json")
        assert status.returncode == 0 and __import__("json").loads(status.stdout)["server"]["backend"] == "fake"
        demo = run("rgpu", "demo", "--server", address)
        assert demo.returncode == 0 and "C program through libcuda.so.1 shim: vecadd" in demo.stdout, demo.stdout
        if shutil.which("nvcc"):  # an unmodified `nvcc -cudart shared` program, through the wheel's libcudart
            assert "nvcc program through libcudart + libcuda shims: vector_add OK" in demo.stdout, demo.stdout
        assert not list(cache.rglob("libcuda.so.1"))  # still nothing compiled
        assert run("python", "-m", "rgpu", "--version").stdout.startswith("rgpu ")
    finally:
        server.terminate()
        server.wait(30)

    built = run("rgpu", "build-shims")
    assert built.returncode == 0 and "[1/" in built.stderr and "LINK libcuda.so.1" in built.stderr, built.stderr
    assert f"stand-ins up to date in {out_dir}" in built.stdout
    again = run("rgpu", "build-shims")  # incremental: nothing to do
    assert again.returncode == 0 and "[1/" not in again.stderr, again.stderr
    assert not any(ROOT in p.parents for p in pathlib.Path(out_dir).rglob("*"))


@pytest.mark.skipif(os.path.exists("/dev/nvidia0"), reason="this host has a GPU")
def test_no_gpu_is_said_once_and_shutdown_is_clean(tmp_path):
    port_file = tmp_path / "port"
    proc = subprocess.Popen([*SERVER, "--port", "0", "--port-file", str(port_file), "--backend", "auto",
                             "--worker-pool", "2"], stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not port_file.exists():
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        address = f"127.0.0.1:{int(port_file.read_text())}"
        clients = [rgpu.connect(address) for _ in range(4)]
        for c in clients:
            c.mem_alloc(4096)
        proc.send_signal(subprocess.signal.SIGTERM)  # with live sessions and workers still starting
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    log = proc.stderr.read()
    assert log.count("NO GPU") == 1 and "falling back to the FAKE backend" in log
    assert " ERROR " not in log and "Traceback" not in log, log


# -- rgpu status --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("isolation", ["process", "thread"])
def test_status_lists_live_sessions(isolation):
    from rgpu.client import _Request
    from rgpu.protocol import ops

    with local_server("fake", ["--isolation", isolation, "--log-level", "warning",
                               "--session-mem-limit", str(64 << 20)]) as address:
        with rgpu.connect(address) as c:
            c.mem_alloc(3 << 20)
            c.mem_free(c.mem_alloc(5 << 20))
            c.mem_alloc(1 << 20)
            vmm = c._call(_Request(ops.MEM_CREATE, (2 << 20, 0, 0, 0, 0, 0)))
            c._call(_Request(ops.MEM_ALLOC_ASYNC, (4 << 20, 0, 0)))
            status = rgpu.client.server_status(address)
            assert status["backend"] == "fake" and status["isolation"] == isolation
            (row,) = status["sessions"]
            assert row["id"] == c.session_id and row["peer"].startswith("127.0.0.1:") and row["age_s"] >= 0
            # The same figures whether the session lives in a worker process or in the server's own.
            assert row["memory"] == 10 << 20 and row["memory_peak"] == 10 << 20
            assert row["memory_limit"] == 64 << 20 and row["allocations"] == 2 and row["calls"] >= 7
            assert row["memory_by_kind"] == {"alloc": 4 << 20, "virtual memory": 2 << 20, "pool memory": 4 << 20}
            assert row["objects"]["context"] == 1 and row["objects"]["vmm_allocation"] == 1
            assert row["objects"]["mem_pool"] == 1 and row["last_error"] is None
            c._call(_Request(ops.MEM_RELEASE, (vmm,)))
            assert rgpu.client.server_status(address)["sessions"][0]["memory"] == 8 << 20
            proc = rgpu_cli("status", "--server", address, "--json")
            assert proc.returncode == 0, proc.stderr
            shown = __import__("json").loads(proc.stdout)
            assert [s["id"] for s in shown["server"]["sessions"]] == [c.session_id]
            assert shown["devices"][0]["name"] == "rgpu fake GPU 0" and shown["devices"][0]["free"] > 0
            text = rgpu_cli("status", "--server", address).stdout
            assert "fake backend" in text and "sessions: 1 live" in text and row["peer"] in text
            assert "8.0 MiB of 64.0 MiB" in text and "10.0 MiB" in text and "pool memory 4.0 MiB" in text
        deadline = time.monotonic() + 30  # a worker's session is gone once the worker has exited
        while rgpu.client.server_status(address)["sessions"]:
            assert time.monotonic() < deadline, "a closed session is still listed"
            time.sleep(0.05)


def test_status_needs_the_key(tmp_path):
    key = tmp_path / "key"
    subprocess.run([*RGPU, "keygen", str(key)], check=True, capture_output=True, timeout=60)
    with local_server("fake", ["--psk-file", str(key), "--log-level", "warning"]) as address:
        with pytest.raises(AuthenticationError):
            rgpu.client.server_status(address)
        assert rgpu.client.server_status(address, psk_file=str(key))["psk"] is True
        line = one_line_error(rgpu_cli("status", "--server", address))
        assert "requires a pre-shared key" in line


# -- operating the server -------------------------------------------------------------------------------
def test_log_file_in_json_holds_server_and_worker_lines(tmp_path):
    import json

    port_file, log_file = tmp_path / "port", tmp_path / "server.log"
    proc = subprocess.Popen([*SERVER, "--port", "0", "--port-file", str(port_file), "--backend", "fake",
                             "--log-file", str(log_file), "--log-format", "json"], stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not port_file.exists():
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        with rgpu.connect(f"127.0.0.1:{int(port_file.read_text())}") as c:
            c.mem_alloc(4096)
        proc.send_signal(subprocess.signal.SIGTERM)
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.stderr.read() == ""
    entries = [json.loads(line) for line in log_file.read_text().splitlines()]
    messages = [e["message"] for e in entries]
    assert any("listening on 127.0.0.1:" in m for m in messages) and "server stopped" in messages
    assert any(e.get("pid") and "released 1 context" in e["message"] for e in entries)  # from the worker
    assert {"time", "level", "logger", "message"} <= set(entries[0])


def test_unusable_log_file_is_one_line(tmp_path):
    proc = subprocess.run([*SERVER, "--log-file", str(tmp_path / "no" / "such" / "dir.log")], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 2 and "cannot open --log-file" in one_line_error(proc)


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze")
def test_systemd_unit_verifies(tmp_path):
    unit = (ROOT / "deploy" / "rgpu-server.service").read_text()
    assert "ExecStart=/usr/local/bin/rgpu-server " in unit
    server = shutil.which("rgpu-server") or pytest.skip("rgpu-server is not on PATH")
    local = tmp_path / "rgpu-server.service"
    local.write_text(unit.replace("/usr/local/bin/rgpu-server", server))  # verify checks the program exists
    proc = subprocess.run(["systemd-analyze", "verify", str(local)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "rgpu-server.service" not in proc.stderr, proc.stderr
