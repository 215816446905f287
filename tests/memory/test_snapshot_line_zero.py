"""A Python frame whose line is 0 (or not a number) is named by its function, never as 'path:0'.

The input is the real mem_churn snapshot with every Python frame's line set to 0 (a mutation, as the fuzz suite's
bad_numbers makes): the allocation sites must still be named, and none as a line 0.
"""

import gzip
import json

from parsers.snapshot import read_snapshot
from tests.paths import FIXTURES

REAL = FIXTURES / "runs" / "mem_churn" / "memory" / "rank0.snapshot.json.gz"


def _zero_python_lines(o) -> int:
    n = 0
    if isinstance(o, dict):
        if str(o.get("filename", "")).endswith(".py") and "line" in o:
            o["line"] = 0
            n += 1
        for v in o.values():
            n += _zero_python_lines(v)
    elif isinstance(o, list):
        for v in o:
            n += _zero_python_lines(v)
    return n


def test_line_zero_frames_are_named_by_function(tmp_path):
    doc = json.loads(gzip.decompress(REAL.read_bytes()))
    assert _zero_python_lines(doc) > 0
    mutated = tmp_path / "line_zero_mutation.snapshot.json.gz"
    mutated.write_bytes(gzip.compress(json.dumps(doc).encode()))
    snap = read_snapshot(mutated)
    locations = set(snap.stacks["location"].dropna())
    assert locations, "the mutation should keep every allocation's Python frames"
    assert not [loc for loc in locations if loc.endswith(":0")]
    assert any("() in " in loc and loc.endswith("mem_churn.py") for loc in locations), sorted(locations)[:5]
