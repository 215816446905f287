"""Derive once, then judge (issue 29): a table two analyzers read is worked out once per report, by the Profile's
Derived, and no hidden cache is back: no id()-keyed memo, nothing set on a parser's objects with
object.__setattr__. The source checks are run on planted code too, so they can fail."""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

import pytest

import diagnose
from diagnose.derive import kernel_access as kernel_access_module
from diagnose.derive import step_table as step_table_module
from diagnose.derive import sync_calls, trace_timeline
from diagnose.derive.derived import Derived
from tests.paths import FIXTURES, REPO

# the in-process runtime keys its own objects (an optimizer, a module) by id(): they live in the training process,
# are no tables and are not read by analyzers
RUNTIME = REPO / "diagnose" / "launch"


def hidden_caches(source: str, path: str = "<planted>") -> list[str]:
    """Each call to object.__setattr__ and to id() in ``source``, as 'path:line: what'."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        if isinstance(f, ast.Attribute) and f.attr == "__setattr__" and getattr(f.value, "id", None) == "object":
            found.append(f"{path}:{node.lineno}: object.__setattr__")
        if isinstance(f, ast.Name) and f.id == "id":
            found.append(f"{path}:{node.lineno}: id()")
    return found


def analysis_sources() -> list[Path]:
    roots = [REPO / "diagnose", REPO / "reports"]
    return [p for root in roots for p in sorted(root.rglob("*.py")) if RUNTIME not in p.parents]


def test_no_id_keyed_memo_nor_setattr_on_parser_objects():
    found = [hit for p in analysis_sources() for hit in hidden_caches(p.read_text(), str(p.relative_to(REPO)))]
    assert found == []


@pytest.mark.parametrize(
    "planted, expected",
    [
        ("def f(trace, out):\n    object.__setattr__(trace, '_memo', out)\n", "<planted>:2: object.__setattr__"),
        ("_MEMO = {}\ndef memo(table, f):\n    return _MEMO.setdefault(id(table), f())\n", "<planted>:3: id()"),
    ],
)
def test_the_check_finds_a_planted_hidden_cache(planted, expected):
    assert hidden_caches(planted) == [expected]


def counting(monkeypatch, module, name: str, counts: Counter, key=lambda *a, **k: None):
    real = getattr(module, name)

    def wrapper(*args, **kwargs):
        counts[(name, key(*args, **kwargs))] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, wrapper)


def test_a_run_folders_shared_tables_are_worked_out_once(monkeypatch):
    """fixtures/runs/sync_planted (H200, light mode: steps, a trace, sync records): the sync analyzer and the step
    budget both read the rank's sync calls, steps, utilization and the budget the step table, and sync, idle,
    launch and the budget the gaps. Before the Derived, the calls were worked out twice per report."""
    counts: Counter = Counter()
    counting(monkeypatch, sync_calls, "rank_calls", counts, key=lambda profile, rank, trace, th: rank)
    counting(monkeypatch, step_table_module, "step_table", counts)
    counting(monkeypatch, trace_timeline, "_gaps", counts)
    profile = diagnose.load(FIXTURES / "runs" / "sync_planted", quiet=True, workers=1)
    analysis = diagnose.analyze(profile)
    assert {f.analyzer for f in analysis.findings} >= {"sync", "step_budget"}
    assert counts == Counter({("rank_calls", 0): 1, ("step_table", None): 1, ("_gaps", None): 1})


def test_an_ncu_captures_access_table_is_worked_out_once(monkeypatch):
    """fixtures/ncu/kernel_kinds' details page (H200, ncu 2025.3, rules and source counters): memory_access judges
    by the per-kernel access table and ncu_rules compares ncu's own rules with it; it was worked out by each."""
    counts: Counter = Counter()
    counting(monkeypatch, kernel_access_module, "kernel_access", counts)
    profile = diagnose.load(FIXTURES / "ncu" / "kernel_kinds" / "details.csv.gz", quiet=True, workers=1)
    analysis = diagnose.analyze(profile)
    assert "memory_access" in analysis.results and "ncu_rules" in analysis.results
    assert len(profile.ncu_rules) and len(profile.kernels)
    assert counts == Counter({("kernel_access", None): 1})


def test_a_derived_keeps_its_tables_and_the_parsers_objects_stay_as_read():
    profile = diagnose.load(FIXTURES / "trace" / "sync_planted" / "trace.json.gz", quiet=True, workers=1)
    trace = profile.traces[min(profile.traces)]
    before = set(vars(trace))
    derived = Derived(profile)
    rank = min(derived.traces)
    view = derived.analysed(rank)
    assert derived.analysed(rank) is view  # made once
    gaps = trace_timeline.gaps(view, 5_000.0)
    assert gaps.equals(trace_timeline.gaps(view, 5_000.0))
    assert set(vars(trace)) == before  # nothing attached to the parser's Trace
    assert trace_timeline.analysed(view) is view and view.root is derived.traces[rank]
    # another Derived (another report of the same Profile) works its tables out again, for itself
    assert Derived(profile).analysed(rank) is not view
