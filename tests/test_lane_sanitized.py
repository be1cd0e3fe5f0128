"""The worker's fast lane -- the C request loop that takes apart what a client sends (frames, batches, copies
streamed into the copy ring, coded copies, sealed records) -- built with AddressSanitizer and
UndefinedBehaviorSanitizer, under the tests that feed it hostile and damaged input in this process and compare it
with Python's path. Unsanitized, a read a few bytes past a record or an overflowing count that leaves both sides'
answers equal passes those tests; here any sanitizer report fails them."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from rgpu import shims

from .test_hostile_server import REPO, SANITIZE, _sanitizers_work

# In-process tests only: a C program a test starts gets the stand-ins preloaded first, where the sanitizer runtime
# must come first (the stand-ins' own sanitized runs are test_hostile_server's).
LANE_TESTS = ("tests/test_native_loop.py", "tests/test_lane_differential.py", "tests/test_lane.py", "tests/test_loop.py",
              "tests/test_coded_copies.py")
NOT_IN_PROCESS = "not stand_in_sends and not protocol_1_5"  # (test_coded_copies' runs of coded_copy_check)


def _runtime(name: str) -> str:
    return subprocess.run(["gcc", f"-print-file-name={name}"], capture_output=True, text=True, check=True).stdout.strip()


def test_the_lane_under_the_address_and_undefined_behaviour_sanitizers(tmp_path):
    if not _sanitizers_work(tmp_path):
        pytest.skip("gcc here cannot build and run with -fsanitize=address,undefined")
    cc = tmp_path / "gcc-sanitized"  # (build_lane takes one compiler word: a wrapper adds the flags)
    cc.write_text(f"#!/bin/sh\nexec gcc {' '.join(SANITIZE)} -g \"$@\"\n")
    cc.chmod(0o755)
    library = shims.build_lane(tmp_path / "lane", cc=str(cc))
    reports = tmp_path / "reports"
    reports.mkdir()
    env = dict(os.environ, RGPU_TEST_LANE_LIBRARY=str(library),
               LD_PRELOAD=f"{_runtime('libasan.so')} {_runtime('libubsan.so')}",  # (Python is not linked with them)
               PYTHONMALLOC="malloc",  # each object an allocation of its own: a read past a record's buffer is seen
               # allocator_may_return_null: a test's refused 1 GiB allocation must stay a NULL for the lane to refuse.
               # The reports go to files: pytest holds a test's stderr, and a report ends the process before it shows.
               ASAN_OPTIONS=f"detect_leaks=0:allocator_may_return_null=1:exitcode=99:log_path={reports / 'asan'}",
               UBSAN_OPTIONS=f"print_stacktrace=1:halt_on_error=1:exitcode=98:log_path={reports / 'ubsan'}")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-x", "-p", "no:cacheprovider", *LANE_TESTS,
                           "-k", NOT_IN_PROCESS], cwd=REPO, env=env, capture_output=True, text=True, timeout=1200)
    found = "".join(f.read_text(errors="replace") for f in sorted(reports.iterdir()))
    assert not found, found[:20000]
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0, text[-20000:]
    # (the run used the sanitized lane, not a lane built as usual: conftest names it in its header line)
    assert f"fast lane: {library}" in proc.stdout, proc.stdout[:2000]
