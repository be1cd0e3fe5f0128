"""bench/tcp_streams.c, the ceiling of sending one copy's bytes over several connections (measured on the GPU box,
gpu_check.sh section streams): it builds and answers as its header says; what it measures is the box's to say."""

import json
import pathlib
import shutil
import subprocess

import pytest

SOURCE = pathlib.Path(__file__).parents[1] / "bench" / "tcp_streams.c"


@pytest.fixture(scope="module")
def tcp_streams(tmp_path_factory) -> pathlib.Path:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    exe = tmp_path_factory.mktemp("tcp_streams") / "tcp_streams"
    subprocess.run([cc, "-O2", "-Wall", "-Werror", "-pthread", "-o", str(exe), str(SOURCE)], check=True)
    return exe


def run(exe: pathlib.Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(exe), *args], capture_output=True, text=True, env={"TCP_STREAMS_REPS": "3"},
                          timeout=60)


def test_it_gives_a_rate_for_each_stream_count_asked_for(tcp_streams):
    out = run(tcp_streams, "100003", "0300", "1", "3")  # (a size no count divides; a spin written oddly)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["size"] == 100003 and result["spin_us"] == 300 and set(result["gbps"]) == {"1", "3"}
    assert all(rate > 0 for rate in result["gbps"].values())


@pytest.mark.parametrize("args", [["4", "0", "5"], ["4", "0", "17"], ["0", "0", "1"], ["9", "0", *["1"] * 17]],
                         ids=["more streams than bytes", "more than it has", "no size", "too many counts"])
def test_it_refuses_what_it_cannot_split_and_writes_no_json(tcp_streams, args):
    refused = run(tcp_streams, *args)
    assert refused.returncode == 2 and refused.stdout == "", refused
