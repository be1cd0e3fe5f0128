"""bench/llama/call_timeline.c and timeline_summary.py (run_llama.sh's timeline section, measured on the GPU box): the
preloaded library times the calls of whatever libcudart the program loaded -- here a stand-in of the test's whose
calls take known times, one calling another -- and the summary cuts them into steps at each graph launch."""

import pathlib
import shutil
import subprocess
import sys

import pytest

from rgpu import shims

BENCH = pathlib.Path(__file__).parents[1] / "bench" / "llama"

# A libcudart of the test's: every call sleeps a known time; a copy up calls cudaStreamSynchronize inside it (as a
# stand-in may call its own entry points), which must count once, in the copy.
RUNTIME = r"""
#include <cuda_runtime_api.h>
#include <time.h>
static void wait_us(long us) { struct timespec t = {0, us * 1000}; nanosleep(&t, 0); }
cudaError_t cudaStreamSynchronize(cudaStream_t s) { (void)s; wait_us(300); return cudaSuccess; }
cudaError_t cudaGraphLaunch(cudaGraphExec_t g, cudaStream_t s) { (void)g; (void)s; wait_us(100); return cudaSuccess; }
cudaError_t cudaMemcpyAsync(void *d, const void *p, size_t n, enum cudaMemcpyKind k, cudaStream_t s)
{
    (void)d; (void)p; (void)n;
    wait_us(k == cudaMemcpyHostToDevice ? 200 : 50);
    return k == cudaMemcpyHostToDevice ? cudaStreamSynchronize(s) : cudaSuccess;
}
"""
PROGRAM = r"""
#include <cuda_runtime_api.h>
#include <time.h>
int main(void)
{
    static char buf[4096];
    for (int step = 0; step < 8; step++) {
        struct timespec t = {0, 1000 * 1000}; /* the program's own work: 1 ms */
        nanosleep(&t, 0);
        cudaMemcpyAsync(buf, buf, 4096, cudaMemcpyHostToDevice, 0);
        cudaGraphLaunch(0, 0);
        cudaMemcpyAsync(buf, buf, 16, cudaMemcpyDeviceToHost, 0);
    }
    return 0;
}
"""


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> pathlib.Path:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    d = tmp_path_factory.mktemp("timeline")
    include = f"-I{shims.cuda_include(13)}"
    (d / "rt.c").write_text(RUNTIME)
    (d / "prog.c").write_text(PROGRAM)
    for args in ([include, "-shared", "-fPIC", "-o", d / "libcudart.so", d / "rt.c"],
                 [include, "-o", d / "prog", d / "prog.c", f"-L{d}", "-lcudart", f"-Wl,-rpath,{d}"],
                 [include, "-shared", "-fPIC", "-o", d / "call_timeline.so", BENCH / "call_timeline.c", "-ldl"]):
        subprocess.run([cc, "-O2", "-Wall", "-Werror", *map(str, args)], check=True)
    return d


def test_each_step_s_calls_are_timed_once_and_the_program_s_own_time_is_what_is_left(built, tmp_path):
    env = {"LD_PRELOAD": str(built / "call_timeline.so"), "CALL_TIMELINE_FILE": str(tmp_path / "tl")}
    done = subprocess.run([str(built / "prog")], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    (written,) = tmp_path.glob("tl.*")  # (one file, named for the process)
    lines = [line.split() for line in written.read_text().splitlines()]
    names = [line[0] for line in lines]
    assert names.count("cudaGraphLaunch") == 8 and names.count("cudaStreamSynchronize") == 8, names
    copies = sorted({(line[3], line[4]) for line in lines if line[0] == "cudaMemcpyAsync"})
    assert copies == [("16", "2"), ("4096", "1")], copies  # (bytes, cudaMemcpyKind)
    out = subprocess.run([sys.executable, str(BENCH / "timeline_summary.py"), str(written), str(written),
                          "--skip", "1"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    rows = {line[:34].strip(): [float(x) for x in line[34:].split()] for line in out.stdout.splitlines()[2:]
            if line[:1] != " " and line[34:].strip() and not line.startswith("calls")}
    assert out.stdout.startswith("steps: native 6, rgpu 6"), out.stdout  # (8 launches: 7 steps, 1 skipped)
    # the synchronize inside the copy up counts in the copy, not again on its own (no row of its own)
    assert "in cudaStreamSynchronize" not in rows, rows
    assert 500 <= rows["in cudaMemcpyAsync[1]"][0] < 5000, rows
    assert 1000 <= rows["outside wrapped calls"][0] < 10000, rows
    period, outside = rows["step period"][0], rows["outside wrapped calls"][0]
    inside = sum(v[0] for k, v in rows.items() if k.startswith("in "))
    assert abs(period - outside - inside) < 5, rows
