"""The generated C and the protocol document are what the operation spec generates today."""

import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_regenerating_changes_nothing():
    run = subprocess.run([sys.executable, str(ROOT / "native" / "codegen" / "gen.py"), "--check"],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr

