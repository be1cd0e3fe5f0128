"""Fuzzing in CI: a fixed-seed slice of tests/fuzz/fuzz_server.py, the regression corpus, and proof that
the harness notices a crash."""

from __future__ import annotations

import pathlib

import pytest

from rgpu.dispatch import handlers
from rgpu.protocol import ops
from rgpu.protocol.frames import Frame, frame_bytes

from .fuzz import fuzz_server

CORPUS = sorted((pathlib.Path(__file__).parent / "fuzz" / "corpus").glob("*.bin"))


def test_fixed_seed_slice_has_no_crashes():
    assert fuzz_server.run(count=20_000, seed=2024) == 0


@pytest.mark.parametrize("path", CORPUS, ids=[p.name for p in CORPUS])
def test_regression_corpus(path):
    fuzz_server.Harness().feed(path.read_bytes())


def test_harness_reports_a_planted_handler_bug(monkeypatch):
    def broken(session, args, bulk):
        raise KeyError("planted")

    monkeypatch.setitem(handlers.HANDLERS, ops.NOP.code, handlers.Handler(ops.NOP, broken, False))
    harness = fuzz_server.Harness()
    with pytest.raises(RuntimeError, match="planted"):
        harness.feed(frame_bytes(Frame(ops.NOP.code, 1)))
