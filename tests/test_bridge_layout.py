"""bridge/PROTOCOL.md and the cffi record definitions agree on every byte."""

from __future__ import annotations

import pathlib
import re

import pytest

from rgpu.bridge import records as R

DOC = (pathlib.Path(__file__).parents[1] / "bridge" / "PROTOCOL.md").read_text()
SECTIONS = {"cubb2_job": "## CUBB2", "cbd2_done": "## CBD2", "cubb_job": "## CUBB —", "cubd_done": "## CUBD"}


def doc_table(heading: str) -> list[tuple[int, int, str]]:
    section = DOC[DOC.index(heading):]
    section = section[: section.find("\n## ", 1)]
    return [(int(m[0]), int(m[1]), m[2]) for m in re.findall(r"^\| (\d+) \| (\d+) \| (\w+) \|", section, re.M)]


@pytest.mark.parametrize("name", list(SECTIONS))
def test_record_layout_matches_the_document(name):
    rows = doc_table(SECTIONS[name])
    fields = [f for f, _ in R.ffi.typeof(name).fields]
    assert [r[2] for r in rows] == fields
    for offset, size, field in rows:
        assert R.ffi.offsetof(name, field) == offset, field
        assert R.ffi.sizeof(R.ffi.typeof(name).fields[fields.index(field)][1].type) == size, field
    last = rows[-1]
    assert R.SIZE[name] == last[0] + last[1]
    assert f"({R.SIZE[name]} bytes" in DOC[DOC.index(SECTIONS[name]):][:120]


def test_statuses_and_ops_match_the_document():
    statuses = dict((int(v), n) for v, n in re.findall(r"^\| (\d+) \| ([A-Z_]+) \| [a-z]", DOC, re.M))
    assert statuses == {s.value: s.name for s in R.DoneStatus}
    ops = dict((int(v), n) for v, n in re.findall(r"^\| (\d) \| (MAIL|VADD\w*) \|", DOC, re.M))
    assert ops == {o.value: o.name for o in R.Op}


def test_magics_are_as_documented():
    assert R.MAGIC == {"cubb2_job": b"CUBB2\0\0\0", "cbd2_done": b"CBD2\0\0\0\0", "cubb_job": b"CUBB",
                       "cubd_done": b"CUBD"}
    rec = R.pack(R.new("cubb2_job", seq=0x0102030405060708))
    assert rec[:12] == b"CUBB2\0\0\0\x02\x00\x60\x00" and rec[16:24] == bytes(range(8, 0, -1))
