"""Light mode's phase-site run records (parsers.run_records.PHASE_SITE): read into the rank's run marks, in the
order written; a malformed one is dropped with a warning naming the file and the line, and the run is read."""

from __future__ import annotations

import json

import pytest

from parsers.events import read_event_tables
from tests.paths import FIXTURES

EVENTS = FIXTURES / "runs" / "char_gpt_sampled3_h100" / "events" / "rank0.jsonl"


def site(phase="backward", location="/home/u/train.py:88", function="<module>", library=None) -> dict:
    return {
        "kind": "run",
        "event": "phase-site",
        "rank": 0,
        "phase": phase,
        "location": location,
        "function": function,
        "library_location": library,
        "t_ns": 1,
    }


def marks_of(tmp_path, *records):
    lines = EVENTS.read_text().splitlines()
    for i, record in enumerate(records):
        lines.insert(3 + i, json.dumps(record))
    path = tmp_path / "rank0.jsonl"
    path.write_text("\n".join(lines) + "\n")
    tables = read_event_tables(path)
    (marks,) = tables.steps.attrs["run_marks"]
    return marks, tables.steps.attrs.get("warnings", [])


def test_the_sites_are_the_rank_marks_in_the_order_written(tmp_path):
    """Fake records (the real ones come from light mode: tests/launch/test_phase_sites.py) in a real H100 log."""
    marks, warned = marks_of(
        tmp_path,
        site(),
        site("optimizer", "/home/u/train.py:90", library="/venv/site-packages/accelerate/optimizer.py:170"),
    )
    assert marks.phase_sites == (
        ("backward", "/home/u/train.py:88", "<module>", None),
        ("optimizer", "/home/u/train.py:90", "<module>", "/venv/site-packages/accelerate/optimizer.py:170"),
    )
    assert warned == []


@pytest.mark.parametrize(
    "bad, said",
    [
        (site(phase="zero_grad"), "needs a phase of backward, optimizer, found 'zero_grad'"),
        (site(location="train.py"), "needs a 'file:line' location and a function, found 'train.py'"),
        (site(function=None), "needs a 'file:line' location and a function"),
        (site(library=[1]), "needs a library 'file:line' or null, found '[1]'"),
    ],
)
def test_a_malformed_site_is_dropped_with_a_warning(tmp_path, bad, said):
    """Fake: a real H100 log with one malformed phase-site record at line 4, and a good one after it."""
    with pytest.warns(UserWarning, match="phase-site record not read"):
        marks, warned = marks_of(tmp_path, bad, site())
    assert marks.phase_sites == (("backward", "/home/u/train.py:88", "<module>", None),)
    assert f"rank0.jsonl: line 4: phase-site record not read ({said}" in warned[0]
