"""RGPU_CLIENT_PROFILE (native/src/client_profile.c): the stand-ins' sampling profile of a program's CPU time names
the functions the program spends it in, once per process."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from rgpu import shims

# One function burns the CPU under another; a forked child exits normally (running the library's destructors)
# while the parent burns, and must not write the parent's samples as a profile of its own.
BURN = r"""
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
int cuInit(unsigned flags);
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec / 1e9; }
__attribute__((noinline)) double burn_the_cpu(double seconds)
{
    volatile double x = 0;
    double end = now() + seconds;
    while (now() < end)
        for (int i = 0; i < 1000; i++)
            x += i * 0.5;
    return x;
}
__attribute__((noinline)) double around_the_burn(double seconds) { return burn_the_cpu(seconds) + 1; }
int main(void)
{
    pid_t child = fork();
    if (child == 0)
        exit(0);
    double x = around_the_burn(0.6);
    waitpid(child, NULL, 0);
    printf("cuInit %d %f\n", cuInit(0), x);
    return 0;
}
"""


def _share(text: str, section: str, name: str) -> float:
    block = text.split(section, 1)[1].split("\n  ", 1)[1]
    m = re.search(rf"^\s+([\d.]+)%  {re.escape(name)}$", block, re.M)
    return float(m.group(1)) if m else 0.0


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
def test_profile_names_where_the_program_spends_its_cpu_once_per_process(shim_dir, tmp_path):
    exe = tmp_path / "burn"
    subprocess.run(["gcc", "-O1", "-rdynamic", "-o", str(exe), "-x", "c", "-", f"-L{shim_dir}", "-l:libcuda.so.1",
                    f"-Wl,-rpath,{shim_dir}"], input=BURN, text=True, check=True, capture_output=True)
    out = tmp_path / "profile.txt"
    env = shims.environment(shim_dir)
    env.update(RGPU_CLIENT_PROFILE=str(out), RGPU_SERVER="127.0.0.1:1", RGPU_LOG="off")
    res = subprocess.run([str(exe)], env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    text = out.read_text()
    assert text.count("rgpu client profile:") == 1, text  # the forked child wrote nothing
    head = re.search(r"([\d.]+) s of CPU time, (\d+) samples", text)
    assert head and float(head.group(1)) >= 0.5 and int(head.group(2)) >= 50, text
    assert _share(text, "self, by function:", "burn burn_the_cpu") >= 80, text
    assert _share(text, "self, by module:", "burn") >= 80, text
    inclusive = "inclusive (anywhere on the stack), by function:"
    assert _share(text, inclusive, "burn around_the_burn") >= 80, text
    assert _share(text, inclusive, "burn main") >= 80, text


def test_without_the_variable_nothing_is_sampled(shim_dir, tmp_path):
    # The timer is off: a program's own SIGPROF stays at its default action, and no profile appears.
    script = tmp_path / "check.py"
    script.write_text(
        "import ctypes, signal, sys\n"
        "ctypes.CDLL(sys.argv[1])\n"
        "print(signal.getsignal(signal.SIGPROF) == signal.SIG_DFL, signal.getitimer(signal.ITIMER_PROF))\n")
    env = shims.environment(shim_dir)
    env.pop("RGPU_CLIENT_PROFILE", None)
    res = subprocess.run(["python3", str(script), str(shim_dir / "libcuda.so.1")], env=env, capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "True (0.0, 0.0)"
