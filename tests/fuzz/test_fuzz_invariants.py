"""The fuzz oracle analyses every input that loads into a Profile and checks the report invariants on it
(tests/fuzz/oracle.py, diagnose/checks/report_invariants.py): the wiring, with a fake invariant that always breaks."""

from __future__ import annotations

import parsers.trace  # noqa: F401 - its import looks up malloc_trim (ctypes): here, not under the oracle's audit
from diagnose.checks import report_invariants as invariants
from tests.fuzz.oracle import BROKEN_INVARIANT, OK_KINDS, run_reader
from tests.paths import FIXTURES

EVENTS = FIXTURES / "events" / "rank0_capture1_run_only.jsonl"


def fake_always_broken(doc, analysis):
    return [invariants.Violation("fake_invariant", "steps.unstable", "a title", "broken on purpose")]


def test_loaded_profiles_are_analysed_and_checked(monkeypatch):
    monkeypatch.setattr(invariants, "INVARIANTS", (fake_always_broken,))
    outcome = run_reader("load", EVENTS)
    assert outcome.kind == BROKEN_INVARIANT
    assert "[fake_invariant] steps.unstable: broken on purpose" in outcome.detail


def test_table_readers_are_not_analysed(monkeypatch):
    monkeypatch.setattr(invariants, "INVARIANTS", (fake_always_broken,))
    assert run_reader("events", EVENTS).kind in OK_KINDS
