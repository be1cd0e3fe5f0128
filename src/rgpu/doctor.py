"""`rgpu doctor -- prog`: run a program exactly as `rgpu run` would and report what it really loaded.

The loader's own trace (LD_DEBUG=libs,files, written to files rather than the program's stderr) says which
libraries each process loaded, from where, and who asked: a DT_NEEDED entry or a dlopen at run time. The
stand-ins are preloaded, so "loaded" alone means nothing; a stand-in counts as used when some loaded object
names it in DT_NEEDED (read from the ELF files themselves) or dlopens it.
"""

from __future__ import annotations

import os
import pathlib
import re
import struct
import subprocess
import sys
import tempfile

import attrs

from rgpu import shims
from rgpu.backends import ptx

# NVIDIA's user-space libraries (rgpu stands in for some; shims.libraries() says which).
NVIDIA = re.compile(r"lib(cuda|cudart|cublas|cublasLt|cudnn\w*|cufft\w*|curand|cusparse\w*|cusolver\w*|nccl|"
                    r"nvrtc\w*|nvJitLink|cupti|nvToolsExt|nvjpeg|npp\w+|nvidia-\w+|cufile\w*)\.so(\.|$)")
NO_DRIVER = ("libnvidia-ml", "libnvidia-")  # talk to a local kernel driver, which a client does not have


@attrs.frozen(slots=True)
class Elf:
    needed: tuple[str, ...]
    rpath: str | None
    runpath: str | None
    device_code: bool = False  # a .nv_fatbin section: kernels nvcc compiled into it

    @property
    def own_runtime(self) -> bool:
        """Device code and no CUDA runtime or driver among its libraries: nvcc's default build (-cudart static),
        whose copy of NVIDIA's runtime inside the program reaches the driver only through its private
        interfaces (cuGetExportTable), which rgpu cannot provide."""
        return self.device_code and not any(n.startswith(("libcudart.so", "libcuda.so")) for n in self.needed)


def _has_section(data: bytes, name: bytes) -> bool:
    try:
        table, sections = ptx.elf_sections(data)
    except (ValueError, struct.error):  # (a truncated or odd file: no such section, as far as this can tell)
        return False
    return any(table.startswith(name + b"\0", section[0]) for section in sections)


def read_elf(path: str) -> Elf | None:
    """DT_NEEDED, DT_RPATH and DT_RUNPATH of a 64-bit little-endian ELF file, and whether it carries device code;
    None if it is not one."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return None
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        return None
    device_code = _has_section(data, b".nv_fatbin")
    phoff, = struct.unpack_from("<Q", data, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
    loads, dynamic = [], None
    for i in range(phnum):
        p_type, _, p_offset, p_vaddr, _, p_filesz = struct.unpack_from("<IIQQQQ", data, phoff + i * phentsize)
        if p_type == 1:
            loads.append((p_vaddr, p_offset, p_filesz))
        elif p_type == 2:
            dynamic = (p_offset, p_filesz)
    if dynamic is None:
        return Elf((), None, None, device_code)
    entries = [struct.unpack_from("<qQ", data, off) for off in range(dynamic[0], dynamic[0] + dynamic[1], 16)]
    strtab = next((v for t, v in entries if t == 5), None)
    strtab_off = next((off + strtab - vaddr for vaddr, off, size in loads
                       if strtab is not None and vaddr <= strtab < vaddr + size), None)
    if strtab_off is None:
        return Elf((), None, None, device_code)

    def string(offset: int) -> str:
        start = strtab_off + offset
        return data[start:data.index(b"\0", start)].decode(errors="replace")

    pick = {t: [string(v) for tt, v in entries if tt == t] for t in (1, 15, 29)}
    return Elf(tuple(pick[1]), (pick[15] or [None])[0], (pick[29] or [None])[0], device_code)


OWN_RUNTIME = ("{name} carries its own copy of NVIDIA's CUDA runtime (nvcc's default, -cudart static), which "
               "reaches the driver through private interfaces rgpu cannot provide: its first CUDA call fails. "
               "Build it with `nvcc -cudart shared` (CMake: CUDA_RUNTIME_LIBRARY Shared) and rgpu's libcudart "
               "serves it")


def own_runtime_warning(argv: list[str]) -> str | None:
    """What to tell a user whose program (argv[0]) carries its own CUDA runtime, before it runs; None if not."""
    import shutil

    path = shutil.which(argv[0]) if argv else None
    elf = read_elf(path) if path else None
    return OWN_RUNTIME.format(name=os.path.basename(path)) if elf and elf.own_runtime else None


@attrs.frozen(slots=True)
class Loaded:
    path: str
    how: str  # "needed by X", "dlopen by X", "preloaded by rgpu"


@attrs.frozen(slots=True)
class Trace:
    loaded: dict  # path -> Loaded, every shared object loaded
    reopened: set  # paths dlopened again once loaded (how a preloaded stand-in is dlopened)
    objects: set  # every ELF object the trace names: the loaded ones and the program (whose init is not traced)


def parse_trace(text: str, preloaded: set[str]) -> Trace:
    """One process's LD_DEBUG=libs,files trace."""
    loaded: dict[str, Loaded] = {}
    reopened, objects = set(), set()
    asked: dict[str, str] = {}  # name as asked for -> how
    for line in text.splitlines():
        line = line.split(":", 1)[-1].strip() if re.match(r"\s*\d+:", line) else line.strip()
        if m := re.match(r"file=(\S+) \[\d+\];\s+(needed by|dynamically loaded by) (\S+)", line):
            name, verb, who = m.groups()
            objects.add(who)
            asked[name] = "preloaded by rgpu" if name in preloaded else (
                f"needed by {who}" if verb == "needed by" else f"dlopen by {who}")
        elif m := re.match(r"file=(\S+) \[\d+\];\s+generating link map", line):
            asked.setdefault(m.group(1), "")
        elif m := re.match(r"opening file=(\S+) \[\d+\]; direct_opencount", line):
            reopened.add(m.group(1))
        elif m := re.match(r"calling init: (\S+)", line):
            path = m.group(1)
            how = asked.get(path) or next((h for n, h in asked.items() if os.path.basename(path) == n), "")
            loaded[path] = Loaded(path, how or "loaded")
    return Trace(loaded, reopened, objects | set(loaded))


def _soname_base(name: str) -> str:
    return name.split(".so")[0]


def classify(name: str, path: str, shim_dir: pathlib.Path, stand_ins: set[str]) -> tuple[str, str | None]:
    """(what it is, the problem if any) for a loaded CUDA-related library."""
    in_shims = os.path.dirname(os.path.realpath(path)) == os.path.realpath(shim_dir)
    if name in stand_ins:
        if in_shims:
            return "rgpu stand-in", None
        return "NVIDIA's copy", (f"{name} was loaded from {path}, not rgpu's stand-in: its calls go to a local "
                                 "driver, not the rgpu server (a dlopen by absolute path?)")
    if any(_soname_base(name) == _soname_base(s) for s in stand_ins):
        return "no stand-in for this version", (f"{name}: rgpu stands in only for "
                                                f"{', '.join(sorted(s for s in stand_ins if _soname_base(s) == _soname_base(name)))}")
    if name.startswith(NO_DRIVER):
        return "NVIDIA driver library", (f"{name} talks to a local NVIDIA kernel driver, which rgpu does not "
                                         "provide; what the program asks it may fail")
    return "NVIDIA library, no stand-in", None


def check_server(address: str, psk_file: str | None, first: int = 0) -> tuple[bool, str, int]:
    """(answers, what to say, how many devices); the devices numbered from `first`, their place in a program
    given several servers."""
    import rgpu

    try:
        with rgpu.connect(address, psk_file=psk_file, timeout=5, context=False) as c:
            c.init()
            count = c.device_count()
            names = ", ".join(f"{first + d}: {c.device_name(d)}" for d in range(count))
            return True, (f"answers ({c.server.agent}, protocol {c.server.major}.{c.server.minor}); "
                          f"devices {names or 'none'}"), count
    except (OSError, rgpu.RgpuError, ValueError) as e:
        return False, f"does not answer: {e}", 0


def doctor(argv: list[str], shim_dir: pathlib.Path | None = None, out=sys.stdout) -> int:
    """Run the program as `rgpu run` does, its output untouched, then report. Returns the program's exit
    status, or 1 if something is wrong and the program itself succeeded."""
    shim_dir = shims.ensure_built(shim_dir)
    env = shims.environment(shim_dir)
    stand_ins = {lib.soname for lib in shims.libraries()}
    preloaded = {str(shim_dir / n) for n in shims.PRELOADED}
    with tempfile.TemporaryDirectory(prefix="rgpu-doctor-") as tmp:
        env["LD_DEBUG"] = "libs,files"
        env["LD_DEBUG_OUTPUT"] = os.path.join(tmp, "trace")
        try:
            code = subprocess.call(argv, env=env)
        except OSError as e:
            raise shims.ShimError(f"cannot run {argv[0]}: {e.strerror}") from None
        traces = sorted(pathlib.Path(tmp).glob("trace.*"), key=lambda p: int(p.suffix[1:]))
        processes = [(int(t.suffix[1:]), parse_trace(t.read_text(errors="replace"), preloaded)) for t in traces]

    problems: list[str] = []
    p = lambda text="": print(text, file=out)  # noqa: E731
    p()
    p(f"rgpu doctor: {' '.join(argv)} exited with {code}; stand-ins from {shim_dir}")
    used_any = False
    for pid, trace in processes:
        loaded = trace.loaded
        elves = {path: read_elf(path) for path in trace.objects}
        asked_for = {}  # soname -> the objects whose DT_NEEDED names it
        for path, elf in elves.items():
            for name in elf.needed if elf else ():
                asked_for.setdefault(name, []).append(path)
        rows = []
        for path, item in loaded.items():
            name = os.path.basename(path)
            if not NVIDIA.match(name):
                continue
            what, problem = classify(name, path, shim_dir, stand_ins)
            how = item.how
            if how == "preloaded by rgpu":
                users = [u for u in asked_for.get(name, []) if u not in preloaded]
                if users:
                    how = "needed by " + ", ".join(users)
                elif path in trace.reopened:
                    how = "dlopen (already preloaded)"
                else:
                    continue  # preloaded, never asked for: not the program's
            used_any = True
            rows.append((name, path, what, how))
            if problem:
                problems.append(problem)
            elif what == "NVIDIA library, no stand-in":
                problems.append(f"{name} has no rgpu stand-in: it runs here and reaches the GPU through rgpu's "
                                "libcuda.so.1; its private driver interfaces (cuGetExportTable) are not forwarded, "
                                "so some of its calls may fail")
        if rows:
            p(f"  process {pid} loaded:")
            for name, path, what, how in sorted(rows):
                p(f"    {name:22} {what:28} {path}  ({how})")
        for path, elf in elves.items():
            if elf and elf.own_runtime and not NVIDIA.match(os.path.basename(path)):  # (those: classify's note)
                problems.append(OWN_RUNTIME.format(name=os.path.basename(path)))
        for path, elf in elves.items():  # the stand-ins' own RUNPATH ($ORIGIN: each other) is rgpu's business
            if elf and (elf.rpath or elf.runpath) and stand_ins.intersection(elf.needed) \
                    and pathlib.Path(path).resolve().parent != shim_dir.resolve():
                kind, value = ("RPATH", elf.rpath) if elf.rpath else ("RUNPATH", elf.runpath)
                p(f"    note: {os.path.basename(path)} has {kind} {value}; rgpu's preload takes precedence")
    if not used_any:
        p("  the program loaded no CUDA library (it does not use CUDA, or failed before loading one)")
    from rgpu import config

    addresses = config.server_addresses(env.get("RGPU_SERVER"))
    first = 0
    for address, psk_file in zip(addresses, config.psk_files(env.get("RGPU_PSK_FILE"), len(addresses))):
        ok, text, count = check_server(address, psk_file, first)
        first += count
        p(f"  server {address}: {text}")
        if not ok:
            problems.append(f"the rgpu server at {address} does not answer: start `rgpu-server` there, or point "
                            "--server / RGPU_SERVER at one")
    for problem in dict.fromkeys(problems):
        p(f"  problem: {problem}")
    if not problems:
        p("  no problems found")
    return code if code or not problems else 1
